"""The AMF loop on the WidowX AI in Trossen's simulator over real DDS (issue 31): next_task -> a demonstration ->
fine_tune -> run_policy -> e-stop, every action through the WidowX AI backend and Trossen's driver on loopback.

The graph is that of `ros2 launch amf_ros widowx.launch.py robot:=wxai_sim` (config/wxai_sim.yaml, every node a
process; sim_bridge hosts trossen-arm-sim), with a tiny WidowX policy (14-D state, 7-D Bridge actions: the embedded
WidowX 250's, whose observation and actions the WidowX AI shares). Physics runs in real time (one action = 0.2 s), so
episodes are short: the scripted operator's demonstration takes about 4 s, run_policy 12 actions.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from robot_testutil import loop_graph
from ros_system_util import REPO

pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASKS = ("carrot_on_plate", "stack_cube")
CONFIG = REPO / "config" / "wxai_sim.yaml"


@pytest.fixture(scope="module")
def wxai_graph(ros_env, rclpy_context, tmp_path_factory):
    from amf_ros.bringup import graph

    run = tmp_path_factory.mktemp("wxai")
    assert {s.name: s for s in graph.sim_plan(str(CONFIG), arm="wxai")}["sim_bridge"].overrides["backend"] == "wxai_sim"
    with loop_graph(ros_env, run, CONFIG, "wxai", TASKS, "wxai") as (client, procs, applied, states):
        yield run, client, procs, applied, states


def test_one_round_then_the_estop(wxai_graph) -> None:
    from amf_ros.data.store import EpisodeStore
    from amf_ros.envs.widowx_sim.suite import STATE_NAMES

    run, client, procs, applied, states = wxai_graph
    d = client.next_task()
    assert d.ok and d.task in TASKS and d.warm_start and list(d.tasks) == list(TASKS)
    client.reset(d.task, seed=0)
    ep = client.start_episode(d.task, d.instruction)
    info = client.wait_episode(ep.episode_id, timeout=120)
    assert info.success, f"the scripted operator did not solve {d.task} on the WidowX AI (steps {info.num_steps})"
    episode = EpisodeStore(run / "dataset", create=False).load(ep.episode_id, images=False)
    assert episode.meta.task == d.task and episode.meta.robot == "wxai_v0"
    actions, obs = np.asarray(episode.steps["action"]), np.asarray(episode.observation["state"])
    assert actions.shape == (info.num_steps, 7) and obs.shape == (info.num_steps, len(STATE_NAMES))
    assert set(np.unique(actions[:, 6])) == {0.0, 1.0}  # approach open, close on the object, release
    assert obs[0, 7] > 0.9 and obs[:, 7].min() < 0.9  # the vendor's gripper starts open and closes

    ft = client.fine_tune(steps=20, timeout=300)
    assert ft.ok, ft.message
    assert Path(ft.checkpoint).name == "round_0001"

    client.reset(d.task, seed=1)
    res = client.run_policy(d.task, max_steps=8, timeout=120)
    assert res.ok, res.message
    assert res.steps == 8 or res.success

    # e-stop during a goal: the goal ends naming it, nothing more reaches the arm, the arm holds
    client.reset(d.task, seed=2)
    t_start = time.monotonic()
    pending = client.send_run_policy(d.task, max_steps=1000)
    client.wait_for(lambda: len(applied.since(t_start)) >= 3, 60, "the policy moving the arm")
    t_call = time.monotonic()
    assert "stop" in client.estop(True).message.lower()
    result = client.wait_result(pending, timeout=30)
    assert not result.ok and "e-stop" in result.message and result.steps < 1000, result.message
    time.sleep(1.0)
    late = [ts - t_call for ts, _ in applied.timed(t_call + 0.4)]
    assert late == [], f"actions reached the arm {late} s after the e-stop call"
    held = [np.asarray(m.values[:3]) for m in states.since(t_call + 0.6)]
    assert held and max(np.abs(h - held[0]).max() for h in held) < 2e-3, "the arm moved while the e-stop was engaged"
    client.estop(False)
    assert procs.dead() == {}, {n: procs.log_tail(n) for n in procs.dead()}
