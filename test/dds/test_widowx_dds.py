"""The embedded WidowX over real DDS (issue 18 acceptance): one AMF round through widowx_driver's runtime, and the
e-stop: it holds the simulated arm within one control period, ends a run_policy goal with ok=false naming it, and
refuses goals until released (issue 33 item 5).

The graph is that of `ros2 launch amf_ros widowx.launch.py robot:=sim_widowx` (config/sim_widowx.yaml, every node a
process), with a tiny WidowX policy (14-D state, 7-D Bridge actions) so that it starts in seconds.
"""

from __future__ import annotations

import re
import time
from pathlib import Path

import numpy as np
import pytest
from robot_testutil import Stream, loop_graph
from ros_system_util import REPO

pytest.importorskip("mujoco")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASKS = ("carrot_on_plate", "stack_cube")
CONFIG = REPO / "config" / "sim_widowx.yaml"
TELEOP_VALID_NS = 400_000_000  # the test's own teleop actions: told apart from the policy's (action_valid_for_s 0.5)


def _policy_rate_hz() -> float:
    import yaml

    doc = yaml.safe_load(CONFIG.read_text())
    return float(doc["/**/policy_server"]["ros__parameters"]["control_rate_hz"])


@pytest.fixture(scope="module")
def widowx_graph(ros_env, rclpy_context, tmp_path_factory):
    from amf_ros.bringup import graph

    run = tmp_path_factory.mktemp("widowx")
    assert {s.name: s for s in graph.sim_plan(str(CONFIG), arm="widowx")}["sim_bridge"].overrides["backend"] == "widowx"
    with loop_graph(ros_env, run, CONFIG, "widowx", TASKS, "widowx") as (client, procs, applied, states):
        yield run, client, procs, applied, states


def _alive(procs) -> None:
    assert procs.dead() == {}, {n: procs.log_tail(n) for n in procs.dead()}


def test_one_round_next_task_demonstration_fine_tune_run_policy(widowx_graph) -> None:
    """next_task -> the scripted operator's demonstration, recorded with the Bridge 7-D actions the driver ran ->
    fine_tune -> run_policy on the fine-tuned policy."""
    from amf_ros.data.store import EpisodeStore
    from amf_ros.envs.widowx_sim.suite import STATE_NAMES

    run, client, procs, _, _ = widowx_graph
    d = client.next_task()
    assert d.ok and d.task in TASKS and d.warm_start and list(d.tasks) == list(TASKS)
    client.reset(d.task, seed=7)
    ep = client.start_episode(d.task, d.instruction)
    info = client.wait_episode(ep.episode_id, timeout=120)
    assert info.success, f"the scripted operator did not solve {d.task} (steps {info.num_steps})"
    episode = EpisodeStore(run / "dataset", create=False).load(ep.episode_id, images=False)
    assert episode.meta.task == d.task and episode.meta.robot == "widowx250s"
    actions, states = np.asarray(episode.steps["action"]), np.asarray(episode.observation["state"])
    assert actions.shape == (info.num_steps, 7) and states.shape == (info.num_steps, len(STATE_NAMES))
    assert set(np.unique(actions[:, 6])) == {0.0, 1.0}  # Bridge gripper: 1 = open (approach, release), 0 = close
    assert np.abs(actions[:, :3]).max() <= 0.05 + 1e-6  # the driver's per-step translation bound
    assert states[0, 7] > 0.9 and states[:, 7].min() < 0.9  # starts open, closes on the object

    ft = client.fine_tune(steps=20, timeout=300)
    assert ft.ok, ft.message
    assert Path(ft.checkpoint).name == "round_0001"
    client.wait_for(lambda: ft.checkpoint in {c.path for c in client.seen.checkpoints}, 30, "checkpoint announced")

    client.reset(d.task, seed=8)
    n0 = len(client.seen.actions)
    res = client.run_policy(d.task, max_steps=12, timeout=120)
    assert res.ok, res.message
    assert res.steps == 12 or res.success
    sent = [m for _, m in client.seen.actions[n0:]]
    assert len(sent) == res.steps and all(len(m.translation) == 3 and len(m.rotation) == 3 for m in sent)
    _alive(procs)


def _arm_said(message: str) -> tuple[int, dict[str, int]]:
    """(applied, refused by reason) from a run_policy result ("... the arm applied 5, refused 2 (e-stop: 2)")."""
    m = re.search(r"the arm applied (\d+), refused (\d+)(?: \(([^)]*)\))?", message)
    assert m, f"no arm counts in {message!r}"
    by_reason = dict(part.rsplit(": ", 1) for part in m[3].split(", ")) if m[3] else {}
    return int(m[1]), {k: int(v) for k, v in by_reason.items()}


def test_estop_ends_the_goal_holds_the_arm_and_refuses_goals_until_released(widowx_graph) -> None:
    """widowx/estop during run_policy (issue 33 item 5): the goal ends at once with ok=false naming the e-stop and
    the policy sends nothing more; while engaged the arm applies no action (a teleop's included: its state stays
    bit-identical) and a new goal is refused; after release a goal runs again. Asserted by counts and ordering."""
    from amf_ros.msg import ArmStatus, EefDeltaAction
    from amf_ros.ros import qos
    from amf_ros.ros.arm_msgs import action_msg, arm_counts

    run, client, procs, applied, states = widowx_graph
    period = 1.0 / _policy_rate_hz()
    arm = Stream()
    client.node.create_subscription(ArmStatus, "arm/status", arm, qos.LATCHED)
    teleop = client.node.create_publisher(EefDeltaAction, "action", qos.ACTIONS)
    client.wait_for(lambda: arm.items, 30, "the arm's latched ArmStatus")
    client.reset(TASKS[0], seed=9)
    t_start, n0 = time.monotonic(), len(client.seen.actions)
    pending = client.send_run_policy(TASKS[0], max_steps=1000)
    client.wait_for(lambda: len(applied.since(t_start)) >= 5, 60, "the policy moving the arm")
    t_call = time.monotonic()
    resp = client.estop(True)
    assert "stop" in resp.message.lower(), resp.message
    # 1000 steps at 10 Hz take 100 s: a result within 30 s is the e-stop ending the goal (before the fix it ran on,
    # ok=true, "1000 steps sent, N applied")
    result = client.wait_result(pending, timeout=30)
    assert not result.ok and "e-stop" in result.message and 5 <= result.steps < 1000, result.message
    goal_applied, refused = _arm_said(result.message)
    assert set(refused) <= {"e-stop", "stale"} and goal_applied + sum(refused.values()) <= result.steps, refused

    def policy_actions() -> int:  # the teleop's below are valid for 0.4 s, the policy's for 0.5 s
        return sum(m.valid_for.nanosec != TELEOP_VALID_NS for _, m in client.seen.actions[n0:])

    client.wait_for(lambda: policy_actions() >= result.steps, 10, "the goal's actions on /amf/action")

    # engaged: the arm applies nothing, whoever sends (a teleop here: the policy has stopped)
    before = arm_counts(arm.items[-1][1])
    assert before.estop
    for _ in range(10):
        teleop.publish(action_msg([0.02, 0, 0, 0, 0, 0, 1.0], client.node.get_clock().now().to_msg(),
                                  TELEOP_VALID_NS / 1e9))
        time.sleep(period)
    client.wait_for(lambda: arm_counts(arm.items[-1][1]).refused.get("e-stop", 0) > before.refused.get("e-stop", 0),
                    10, "the arm refusing the teleop's actions")
    late = [ts - t_call for ts, _ in applied.timed(t_call + period)]
    assert late == [], f"actions reached the arm {late} s after the e-stop call"
    assert arm_counts(arm.items[-1][1]).applied == before.applied  # counted by the arm itself
    held = [np.asarray(m.values) for m in states.since(t_call + period)]
    assert held and all(np.array_equal(h, held[0]) for h in held), "the arm moved while the e-stop was engaged"
    assert policy_actions() == result.steps  # the policy sent nothing after its goal ended

    refused_goal = client.run_policy(TASKS[0], max_steps=5, timeout=60)
    assert not refused_goal.ok and refused_goal.steps == 0 and "e-stop is engaged" in refused_goal.message
    assert policy_actions() == result.steps  # refused before a single action

    client.estop(False)
    client.reset(TASKS[0], seed=10)
    t_release = time.monotonic()
    again = client.run_policy(TASKS[0], max_steps=6, timeout=120)
    assert again.ok and (again.steps == 6 or again.success), again.message
    assert _arm_said(again.message)[0] >= 1 and len(applied.since(t_release)) >= 1
    _alive(procs)
