"""Faults of the arm side over real DDS, every node its own process (issue 11 acceptance): a simulator killed or
frozen mid-goal ends the goal with ok=false within its documented bound and the next goal works; SIGINT while a
run_policy goal and a fine-tune are both active ends every node within 3 s with exit code 0.

Bound of a lost arm once acting (amf_ros/runtime/control_loop.py): ``observation_stale_periods`` (1.5) control
periods after the last observation, plus one period (0.25 s at 10 Hz); checked here with 3 s of slack for process
scheduling on a loaded 2-core machine (amf bench faults measures the time itself).
"""

from __future__ import annotations

import signal
import time

import pytest

from ros_system_util import REPO, call_after_restart, make_checkpoint

pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASKS = ("reach", "push")
OBS_TIMEOUT_S = 2.0  # config/sim.yaml, policy_server observation_timeout_s (asserted below)
STALE_BOUND_S = 2.5 / 10.0  # (observation_stale_periods + 1) / control_rate_hz of config/sim.yaml


@pytest.fixture(scope="module")
def graph(ros_env, rclpy_context, tmp_path_factory):
    """The sim graph (launch/sim.launch.py's plan and YAML) with a tiny checkpoint, and a client."""
    import yaml

    from amf_ros.bringup import graph as plan
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.loop.run import LoopConfig, node_overrides
    from amf_ros.ros.client import AMFClient

    config = REPO / "config" / "sim.yaml"
    ps = yaml.safe_load(config.read_text())["/**/policy_server"]["ros__parameters"]
    assert ps["observation_timeout_s"] == OBS_TIMEOUT_S and ps["control_rate_hz"] == 10.0
    run = tmp_path_factory.mktemp("faults")
    ckpt = make_checkpoint(run / "pretrained", TASKS)
    extra = node_overrides(run, LoopConfig(selector="round_robin"))
    extra["task_selector"] += ["-p", f"tasks:=[{', '.join(TASKS)}]"]
    procs = NodeProcesses(plan.sim_plan(str(config), checkpoint=str(ckpt)), log_dir=run / "logs", env=ros_env,
                          extra_args=extra).start()
    client = AMFClient(f"amf_test_faults_{int(time.time() * 1e3) % 100000}", record_actions=True)
    try:
        client.wait_ready(timeout=120)
        yield run, client, procs
    finally:
        client.close()
        procs.stop()


def _logs(procs) -> str:
    return "\n".join(f"--- {n}\n{procs.log_tail(n, 1500)}" for n in procs.procs)


def _start_goal(client, task: str, steps: int = 400) -> tuple:
    """A run_policy goal that has produced at least 5 actions; returns (result future, feedback list)."""
    fb: list = []
    client.reset(task, seed=7)
    future = client.send_run_policy(task, max_steps=steps, feedback=fb.append)
    client.wait_for(lambda: len(fb) >= 5, 60, "run_policy feedback")
    return future, fb


def _second_goal_works(client, procs) -> None:
    client.wait_ready(timeout=60)
    call_after_restart(lambda: client.reset("reach", seed=8, timeout=5))
    res = client.run_policy("reach", max_steps=10, timeout=60)
    assert res.ok and res.steps >= 1, f"{res.message}\n{_logs(procs)}"


def test_killed_simulator_ends_the_goal_in_bound_and_the_next_goal_works(graph) -> None:
    _, client, procs = graph
    future, _ = _start_goal(client, "push")
    procs.procs["sim_bridge"].send_signal(signal.SIGKILL)
    t_kill = time.monotonic()
    result = client.wait_result(future, timeout=60)
    waited = time.monotonic() - t_kill
    assert not result.ok and "observation stale" in result.message, result.message
    assert waited <= STALE_BOUND_S + 3.0, f"goal ended {waited:.1f} s after the kill: {result.message}"
    assert procs.procs["policy_server"].poll() is None
    procs.procs["sim_bridge"].wait(timeout=10)
    procs.restart("sim_bridge")
    # the killed process's endpoints linger in discovery until their lease expires, so "service available" is no
    # sign of the new one: wait for its own start-up line
    client.wait_for(lambda: procs.log_tail("sim_bridge", 100_000).count("]: backend ") >= 2, 120,
                    "the restarted sim_bridge")
    _second_goal_works(client, procs)


def test_frozen_simulator_for_10_s_does_not_wedge(graph) -> None:
    _, client, procs = graph
    future, _ = _start_goal(client, "push")
    sim = procs.procs["sim_bridge"]
    sim.send_signal(signal.SIGSTOP)
    t_stop = time.monotonic()
    try:
        result = client.wait_result(future, timeout=60)
        waited = time.monotonic() - t_stop
        assert not result.ok and "observation stale" in result.message, result.message
        assert waited <= STALE_BOUND_S + 3.0, f"goal ended {waited:.1f} s after SIGSTOP"
        time.sleep(max(0.0, 10.0 - (time.monotonic() - t_stop)))
    finally:
        sim.send_signal(signal.SIGCONT)
    _second_goal_works(client, procs)


def test_sigint_during_run_policy_and_fine_tune_ends_every_node_within_3_s(graph) -> None:
    run, client, procs = graph
    # one recorded episode, so that a fine-tune has data to train on
    client.reset("reach", seed=9)
    ep = client.start_episode("reach", "reach the goal")
    client.wait_episode(ep.episode_id, timeout=120)
    progress: list = []
    client.send_fine_tune(steps=1_000_000, feedback=progress.append)
    client.wait_for(lambda: len(progress) > 0, 120, "fine-tune feedback")
    _start_goal(client, "push")
    t0 = time.monotonic()
    for p in procs.procs.values():
        p.send_signal(signal.SIGINT)
    exits: dict[str, tuple[float, int | None]] = {}
    deadline = t0 + 10.0
    while len(exits) < len(procs.procs) and time.monotonic() < deadline:
        for name, p in procs.procs.items():
            if name not in exits and p.poll() is not None:
                exits[name] = (time.monotonic() - t0, p.returncode)
        time.sleep(0.02)
    assert set(exits) == set(procs.procs), f"still running 10 s after SIGINT: {set(procs.procs) - set(exits)}"
    slow = {n: round(t, 2) for n, (t, _) in exits.items() if t > 3.0}
    failed = {n: code for n, (_, code) in exits.items() if code != 0}
    assert not slow and not failed, f"exit times {exits}\n{_logs(procs)}"
    assert not list((run / "checkpoints").glob("round_*")), "an interrupted fine-tune left a checkpoint behind"
