"""`amf up` as a process supervisor (issue 12, finding 4): SIGKILL of one node brings that node back while the
others keep running (same pids), the respawned node serves again, and SIGTERM then stops every node with exit 0."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from ros_system_util import REPO, call_after_restart, make_checkpoint

pytestmark = [pytest.mark.ros, pytest.mark.slow]


def _children(pid: int) -> dict[str, int]:
    """Node name -> pid of the direct children of ``pid`` (from /proc)."""
    out = {}
    for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
        try:
            cmd = Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        exe = Path(cmd[1].decode()).name if len(cmd) > 1 else ""
        out[exe] = int(child)
    return out


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_a_killed_node_is_respawned_and_sigterm_stops_all(ros_env, rclpy_context, tmp_path) -> None:
    from amf_ros.ros.client import AMFClient

    ckpt = make_checkpoint(tmp_path / "pretrained", ("reach", "push"))
    log = tmp_path / "amf_up.log"
    env = {**os.environ, **ros_env, "AMF_WORKSPACE": str(tmp_path / "ws")}
    with open(log, "wb") as out:
        up = subprocess.Popen([sys.executable, "-m", "amf_ros.cli", "up", str(REPO / "config" / "sim.yaml"),
                               "--checkpoint", str(ckpt), "--tasks", "reach,push"],
                              env=env, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    client = AMFClient(f"amf_test_up_{int(time.time() * 1e3) % 100000}")
    before: dict[str, int] = {}
    try:
        client.wait_ready(timeout=180)
        before = _children(up.pid)
        assert set(before) == {"policy_server", "task_selector", "demo_recorder", "sim_bridge", "scripted_teleop"}
        os.kill(before["demo_recorder"], signal.SIGKILL)
        _wait(lambda: "demo_recorder respawned (1/3)" in log.read_text(), 30, "the respawn")
        after = _children(up.pid)
        assert after["demo_recorder"] != before["demo_recorder"]
        assert {n: p for n, p in after.items() if n != "demo_recorder"} == \
            {n: p for n, p in before.items() if n != "demo_recorder"}, "another node was restarted"
        # the respawned recorder records again (the scripted operator ends the episode itself)
        client.reset("reach", seed=1)
        ep = call_after_restart(lambda: client.start_episode("reach", "reach", require_ok=False, timeout=5))
        assert ep.ok, ep
        client.wait_episode(ep.episode_id, timeout=120)
    finally:
        client.close()
        if up.poll() is None:
            up.send_signal(signal.SIGTERM)
        code = up.wait(timeout=30)
    assert code == 0, log.read_text()[-3000:]
    assert _children_gone(before), "a node outlived amf up"


def _children_gone(pids: dict[str, int]) -> bool:
    return not any(Path(f"/proc/{p}").exists() and b"amf_ros" in Path(f"/proc/{p}/cmdline").read_bytes()
                   for p in pids.values())
