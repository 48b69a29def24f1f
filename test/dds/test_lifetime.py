"""A node started with AMF_DIE_WITH_PARENT=1 (as the launch files start them) stops cleanly when the process that
started it dies, even by SIGKILL (`ros2 launch` exits on SIGTERM without stopping its nodes: launch_service.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from ros_system_util import INSTALL_LIB

from amf_ros.bringup.lifetime import alive

REPO = Path(__file__).resolve().parents[2]
pytestmark = [pytest.mark.ros]

PARENT = """
import subprocess, sys, time
child = subprocess.Popen(sys.argv[1:], stdout=open(sys.argv[0] + ".log", "wb"), stderr=subprocess.STDOUT)
print(child.pid, flush=True)
time.sleep(600)
"""


@pytest.mark.parametrize("ask", [True, False])
def test_a_node_does_not_outlive_the_process_that_started_it_when_asked(ros_env, tmp_path, ask) -> None:
    script = tmp_path / "parent.py"
    script.write_text(PARENT)
    env = {**os.environ, **ros_env, "AMF_DIE_WITH_PARENT": "1" if ask else "0"}
    node = [str(INSTALL_LIB / "sim_bridge"), "--ros-args", "-r", "__ns:=/amf_lifetime", "-p", "render:=false"]
    parent = subprocess.Popen([sys.executable, str(script), *node], env=env, stdout=subprocess.PIPE, text=True)
    child = int(parent.stdout.readline())
    log = Path(str(script) + ".log")
    try:
        deadline = time.monotonic() + 60
        while "]: backend " not in (log.read_text(errors="replace") if log.exists() else ""):
            assert time.monotonic() < deadline and alive(child), log.read_text(errors="replace")[-2000:]
            time.sleep(0.1)
        parent.send_signal(signal.SIGKILL)
        parent.wait(timeout=10)
        # ask: the kernel sends SIGTERM at once (PR_SET_PDEATHSIG) and spin stops the node; 20 s only bounds a node
        # that ignores it (how fast a loaded machine runs the shutdown is no property of the code). Not ask: the
        # node is still running after 5 s.
        limit = 20.0 if ask else 5.0
        t0 = time.monotonic()
        while alive(child) and time.monotonic() - t0 < limit:
            time.sleep(0.02)
        gone = not alive(child)
        if ask:
            assert gone, f"the node outlived its parent by {limit} s"
            assert "Traceback" not in log.read_text(errors="replace")
        else:
            assert not gone, "without the variable a node keeps running (a shell's background job)"
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


def test_repeated_ctrl_c_ends_a_node_with_code_0_and_no_traceback(ros_env, tmp_path) -> None:
    """Ctrl-C in the terminal of `ros2 launch` reaches every node twice (from the terminal and forwarded by launch),
    and users press it again: the later interrupts must not break the node's clean shutdown."""
    log = tmp_path / "node.log"
    node = [str(INSTALL_LIB / "task_selector"), "--ros-args", "-r", "__ns:=/amf_ctrl_c", "-p",
            f"tasks_file:={REPO / 'config/tasks/metaworld.yaml'}"]
    with open(log, "wb") as out:
        proc = subprocess.Popen(node, env={**os.environ, **ros_env}, stdout=out, stderr=subprocess.STDOUT)
    try:
        deadline = time.monotonic() + 60
        while "]: ready" not in log.read_text(errors="replace"):
            assert time.monotonic() < deadline and proc.poll() is None, log.read_text(errors="replace")[-2000:]
            time.sleep(0.1)
        for _ in range(8):
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)
            time.sleep(0.02)
        assert proc.wait(timeout=10) == 0, log.read_text(errors="replace")[-3000:]
        assert "Traceback" not in log.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
