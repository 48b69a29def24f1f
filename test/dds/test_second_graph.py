"""A second graph on the same machine, domain, namespace and workspace refuses to start (issue 33 item 3).

Before: every node and service was duplicated, one StartEpisode started two episodes in one dataset, and the first
graph stayed broken after the second stopped. Now (amf_ros/bringup/graph_lock.py):

* a second `amf up` with the same namespace and workspace exits with NO_RESPAWN_EXIT and one line naming the first
  (its `amf up` lock), before it starts any node;
* a second `amf up` with the same namespace but another workspace on the same ROS domain refuses the same way (the
  nodes of the same names answer in the ROS graph);
* a second demo_recorder started on its own (as `ros2 launch` would) refuses with one line naming the first
  recorder and is not respawned;
* the first graph keeps working: next_task answers, one StartEpisode makes exactly one episode.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
from amf_process import amf_command, stop
from ros_system_util import REPO, make_checkpoint

pytestmark = [pytest.mark.ros, pytest.mark.slow, pytest.mark.timeout(1200)]

TASKS = ("reach", "push")
START_BOUND_S = 300.0
"""The first graph's start-up with a tiny checkpoint (about 20 s idle; 2 cores shared with other test sessions)."""
REFUSAL_BOUND_S = 120.0
"""A refusing `amf up`: python and rclpy start-up plus the ROS graph check (~5 s idle), generously bounded."""
STEP_BOUND_S = 180.0
"""Any other single wait (a service answer, a scripted demonstration of at most 150 steps)."""


def _up(args: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
    with open(log, "wb") as out:
        return subprocess.Popen([*amf_command(), "up", str(REPO / "config" / "sim.yaml"), "--no-console", *args],
                                env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)


def _refusal(proc: subprocess.Popen, log: Path) -> str:
    """The one line a refusing `amf up` printed (it must exit with NO_RESPAWN_EXIT and start no node)."""
    from amf_ros.bringup.lifetime import NO_RESPAWN_EXIT

    try:
        code = proc.wait(timeout=REFUSAL_BOUND_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        text = log.read_text(errors="replace")[-3000:]
        raise AssertionError(f"the second `amf up` did not refuse:\n{text}") from None
    text = log.read_text(errors="replace")
    assert code == NO_RESPAWN_EXIT, f"exit code {code}:\n{text[-3000:]}"
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1 and "refusing to start" in lines[0], text[-3000:]
    assert "starting" not in text, text  # refused before any node started
    return lines[0]


def test_a_second_graph_refuses_and_the_first_keeps_working(ros_env, rclpy_context, tmp_path) -> None:
    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.lifetime import NO_RESPAWN_EXIT
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.data.store import EpisodeStore
    from amf_ros.ros.client import AMFClient

    ckpt = make_checkpoint(tmp_path / "pretrained", TASKS)
    ws = tmp_path / "ws"
    env = {**os.environ, **ros_env}
    common = ["--checkpoint", str(ckpt), "--tasks", ",".join(TASKS)]
    first_log = tmp_path / "first.log"
    first = _up([*common, "--workspace", str(ws), "--log-dir", str(tmp_path / "logs1")], env, first_log)
    client = AMFClient(f"amf_test_second_{os.getpid()}")
    try:
        client.wait_ready(timeout=START_BOUND_S)
        assert first.poll() is None, first_log.read_text(errors="replace")

        # the same namespace and workspace: the lock of the first `amf up`, named by its pid
        line = _refusal(_up([*common, "--workspace", str(ws), "--log-dir", str(tmp_path / "logs2")], env,
                            tmp_path / "second.log"), tmp_path / "second.log")
        assert f"pid {first.pid}" in line and "namespace /amf" in line, line
        assert not (tmp_path / "logs2").exists() or not list((tmp_path / "logs2").iterdir())

        # the same namespace, another workspace, the same ROS domain: its nodes answer in the graph
        line = _refusal(_up([*common, "--workspace", str(tmp_path / "ws_other")], env, tmp_path / "third.log"),
                        tmp_path / "third.log")
        assert "already answer" in line and any(f"'/amf/{n}'" in line for n in ("sim_bridge", "scripted_teleop",
                                                                                 "policy_server", "task_selector",
                                                                                 "demo_recorder")), line

        # a lone second recorder (as `ros2 launch` would start one): one line naming the first, not respawned
        spec = NodeSpec("demo_recorder", "demo_recorder", str(REPO / "config" / "sim.yaml"),
                        overrides={"workspace": str(ws)}, respawn_delay_s=0.1)
        lone = NodeProcesses([spec], log_dir=tmp_path / "lone", env=ros_env).start()
        try:
            deadline = time.monotonic() + REFUSAL_BOUND_S
            while "demo_recorder" not in lone.given_up and time.monotonic() < deadline:
                lone.supervise()
                time.sleep(0.1)
            text = lone.log_tail("demo_recorder")
            assert lone.given_up == {"demo_recorder": NO_RESPAWN_EXIT} and lone.restarts == {}, text
            refused = [ln for ln in text.splitlines() if "refusing to start" in ln]
            assert len(refused) == 1 and "/amf/demo_recorder" in refused[0] and "Traceback" not in text, text
        finally:
            lone.stop(timeout=5)

        # the first graph still works: next_task answers; one StartEpisode makes exactly one episode
        d = client.next_task(timeout=STEP_BOUND_S)
        assert d.ok and d.task in TASKS, d.message
        client.reset(d.task, seed=3, timeout=STEP_BOUND_S)
        ep = client.start_episode(d.task, d.instruction, timeout=STEP_BOUND_S)
        client.wait_episode(ep.episode_id, timeout=STEP_BOUND_S)
        time.sleep(1.0)  # a second recorder's episode would be announced by now as well (one status period)
        store = EpisodeStore(ws / "sim" / "dataset", create=False)
        assert store.episode_ids() == [ep.episode_id] and store.partial() == []
        assert [e.episode_id for e in client.seen.episodes] == [ep.episode_id]
        assert first.poll() is None and "stays down" not in first_log.read_text(errors="replace")
    finally:
        client.close()
        stop(first)
        for log in sorted(tmp_path.glob("**/*.log")):  # shown by pytest only when the test failed
            print(f"----- {log} -----\n{log.read_text(errors='replace')[-2000:]}")
    assert first.returncode == 0, first_log.read_text(errors="replace")[-3000:]
