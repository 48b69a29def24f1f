"""`amf run` stopped mid-round by Ctrl-C or a supervisor's SIGTERM: it ends within seconds, with exit status 130,
no traceback, the finished rounds in results.json and none of its nodes left running.

Session 35 found an `amf run` that outlived SIGINT and SIGTERM: rclpy's own signal handlers shut its context down,
the client's spin thread died, and the main thread went on waiting for answers that could no longer come while the
five nodes kept running (amf_ros/ros/client.py: _init_rclpy)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

TASKS = ("carrot_on_plate", "stack_cube")


def _node_pids(run_dir: Path) -> list[int]:
    """PIDs of processes whose command line names ``run_dir`` (the nodes of that run)."""
    pids = []
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            cmdline = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if str(run_dir) in cmdline:
            pids.append(int(proc.name))
    return pids


@pytest.mark.ros
@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_amf_run_stops_mid_round_on_a_signal_and_keeps_the_rounds_so_far(ros_env, tmp_path: Path, sig) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("mujoco")
    from amf_ros.bench.tiny_checkpoint import tiny_widowx_checkpoint

    ckpt = tiny_widowx_checkpoint(tmp_path / "ckpt", TASKS)
    out = tmp_path / "runs"
    cmd = [sys.executable, "-m", "amf_ros.cli", "run", "--arm", "widowx", "--checkpoint", str(ckpt),
           "--rounds", "6", "--eval-episodes", "1", "--eval-max-steps", "6", "--fine-tune-steps", "5",
           "--out", str(out)]
    log = tmp_path / "amf_run.log"
    with open(log, "w") as f:
        # SIGINT as a terminal's Ctrl-C delivers it: a new session, so the test's own process group is not hit
        proc = subprocess.Popen(cmd, env={**os.environ, **ros_env}, stdout=f, stderr=subprocess.STDOUT,
                                cwd=tmp_path, start_new_session=True)
    try:
        deadline = time.monotonic() + 300
        while "round 0:" not in log.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, "round 0 did not finish within 300 s:\n" + log.read_text()[-3000:]
            time.sleep(0.5)
        assert proc.poll() is None, log.read_text()[-3000:]
        time.sleep(2.0)  # inside round 1 now: its demonstration or fine-tune is in flight
        run_dir = next(out.iterdir())
        assert _node_pids(run_dir), "the run's nodes should be running before the signal"
        if sig == signal.SIGINT:
            os.killpg(proc.pid, sig)  # Ctrl-C: the terminal signals the whole foreground group
        else:
            proc.send_signal(sig)  # a supervisor stops the program itself
        code = proc.wait(timeout=60)  # the node shutdown is bounded (~10 s each, in parallel)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    text = log.read_text()
    assert code == 130, text[-3000:]
    assert "interrupted" in text and "Traceback" not in text, text[-3000:]
    results = json.loads((run_dir / "results.json").read_text())
    assert results["rounds"] and results["rounds"][0]["round"] == 0 and "KeyboardInterrupt" in results["error"]
    deadline = time.monotonic() + 15
    while _node_pids(run_dir) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _node_pids(run_dir), "nodes of the run outlived it"
