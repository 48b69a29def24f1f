"""A person takes over from the policy (intervention, HG-DAgger) on the embedded WidowX over real DDS, each node its own
process: sim_bridge (every action through widowx_driver's runtime), policy_server, demo_recorder and teleop (input
joy). The test records a run_policy goal as an episode, takes over twice mid-goal with a synthetic sensor_msgs/Joy
stream (an Xbox pad as joy_linux reports it), moves the arm and releases. Checked: no action the arm applied while
the person held control came from the policy, none after a release from the person; the stored episode's per-step
``actor`` says who acted at every step; the fine-tuning data are the person's steps (each take-over its own
demonstration) and a fine-tune round runs on them. The hand-over latencies (deadman press -> first applied action
of the person, release -> first applied action of the policy) are printed, not asserted (a loaded CI machine).
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
from robot_testutil import Device, Stream, call, recorder_call, stamp_ns, wait_for

pytest.importorskip("mujoco")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASK = "carrot_on_plate"
DEADMAN = 5  # config/teleop/xbox.yaml: RB held; the left stick's vertical axis (1) is x
PERSON = np.array([0.05 * 0.4, 0, 0, 0, 0, 0, 1.0], np.float32)  # full stick forward, coarse, gripper open
TAKEOVERS = int(os.environ.get("AMF_TEST_TAKEOVERS", "2"))
"""Take-overs per goal; more for a latency measurement (at most 4: the arm's episode ends after 60 steps)."""
POLICY_STEPS = 8 * TAKEOVERS  # the goal's max_steps (the policy's actions only)


class Pad:
    """A joy driver on ``topic`` (robot_testutil.Device: 20 Hz autorepeat, at once on a change): the Xbox mapping's
    left stick forward and its RB deadman."""

    def __init__(self, node: Any, topic: str) -> None:
        from sensor_msgs.msg import Joy

        def make(value: tuple[float, bool], stamp: Any) -> Joy:
            forward, deadman = value
            axes, buttons = [0.0] * 8, [0] * 11
            axes[1], buttons[DEADMAN] = forward, int(deadman)
            msg = Joy(axes=axes, buttons=buttons)
            msg.header.stamp = stamp
            return msg

        self._device = Device(node, node.create_publisher(Joy, topic, 10).publish, make)

    def set(self, forward: float, deadman: bool) -> float:
        """Move the stick and press or let go of the deadman; returns the monotonic time just before publishing."""
        t = time.monotonic()
        self._device.set((forward, deadman))
        return t

    def close(self) -> None:
        self._device.close()


def _is_person(a7: np.ndarray) -> bool:
    return bool(np.array_equal(np.asarray(a7, np.float32), PERSON))


def test_taking_over_mid_goal_records_who_acted_and_fine_tunes_on_the_persons_steps(start_nodes, client_node,
                                                                                    tmp_path) -> None:
    from amf_ros.data.schema import ACTOR_HUMAN, ACTOR_POLICY, actors
    from amf_ros.data.store import EpisodeStore
    from amf_ros.data.transitions import load_transitions
    from amf_ros.ros.client import AMFClient
    from amf_ros.srv import EndEpisode, ResetTask, StartEpisode

    procs, dataset = _start(start_nodes, tmp_path, "intervention")
    applied, control, stops, teleop = _watch(client_node)
    pad = Pad(client_node, "/amf/test/joy")
    client = AMFClient("amf_test_intervention")
    takeover_s, resume_s = [], []
    try:
        wait_for(lambda: teleop.msgs(), 60, "teleop's latched state")
        wait_for(lambda: any(m.source == "" for m in control.msgs()), 60, "policy_server's latched control")
        pad.set(1.0, False)  # stick forward, deadman released: arms the deadman, moves nothing
        wait_for(lambda: json.loads(teleop.msgs()[-1].data)["armed"], 10, "teleop armed")
        assert call(client_node, ResetTask, "/amf/sim/reset", ResetTask.Request(task=TASK, seed=3), 60).ok

        def started():
            res = recorder_call(client_node, StartEpisode, "/amf/recorder/start_episode",
                                StartEpisode.Request(task=TASK))
            return res if res.ok else None
        ep = wait_for(started, 60, "StartEpisode (topics alive)", poll=0.5)
        n0 = len(applied.msgs())
        goal = client.send_run_policy(TASK, max_steps=POLICY_STEPS)

        def count(after: int, person: bool) -> int:
            return sum(_is_person(_a7(m)) == person for m in applied.msgs()[after:])

        for _ in range(TAKEOVERS):
            mark = len(applied.msgs())
            wait_for(lambda m=mark: count(m, False) >= 4, 60, "4 applied actions of the policy")
            mark = len(applied.msgs())
            t_press = pad.set(1.0, True)
            wait_for(lambda m=mark: count(m, True) >= 4, 30, "4 applied actions of the person")
            takeover_s.append(_first_after(applied, t_press, person=True) - t_press)
            mark = len(applied.msgs())
            t_release = pad.set(1.0, False)
            wait_for(lambda m=mark: count(m, False) >= 1, 30, "the policy's first action after the release")
            resume_s.append(_first_after(applied, t_release, person=False) - t_release)
        res = client.wait_result(goal, 120)
        assert res.ok, res.message
        assert f"{TAKEOVERS} takeover(s)" in res.message, res.message
        wait_for(lambda: control.msgs() and control.msgs()[-1].source == "", 10, "the goal's end on control")
        # every applied action recorded before EndEpisode (its settle bounds messages in flight at 0.3 s; a loaded
        # machine can take longer)
        wait_for(lambda: client.seen.status is not None and client.seen.status.num_steps >= len(applied.msgs()) - n0,
                 30, "the recorder's steps")
        end = recorder_call(client_node, EndEpisode, "/amf/recorder/end_episode",
                            EndEpisode.Request(episode_id=ep.episode_id, success=False), 30)
        assert end.ok, end.message
    finally:
        pad.close()

    # who held control, by policy_server's stamps: policy, (human, policy) x TAKEOVERS, nobody
    changes = [(m.source, stamp_ns(m.header.stamp)) for m in control.msgs()]
    goal_changes = changes[[s for s, _ in changes].index("policy"):]
    assert [s for s, _ in goal_changes] == ["policy"] + ["human", "policy"] * TAKEOVERS + [""], goal_changes
    held = [(goal_changes[i][1], goal_changes[i + 1][1]) for i in range(1, 2 * TAKEOVERS, 2)]  # (grant, resume]
    msgs = applied.msgs()[n0:]
    stamps = np.array([stamp_ns(m.header.stamp) for m in msgs])
    a7 = np.stack([_a7(m) for m in msgs])
    during = np.zeros(len(msgs), bool)
    for grant, resume in held:
        during |= (stamps > grant) & (stamps <= resume)
    person = np.array([_is_person(a) for a in a7])
    assert person[during].all(), "an action of the policy applied while the person held control"
    assert not person[~during].any(), "an action of the person applied outside the take-over"
    # every action of the policy was applied but at most one per hand-over: the one in flight when the hand-over's
    # ArmStop reached the arm is dropped (stamped before it), as it must be
    assert person.sum() >= 4 * TAKEOVERS and POLICY_STEPS - TAKEOVERS <= (~person).sum() <= POLICY_STEPS
    # each hand-over's ArmStop (policy_server's at the grant, the teleop's at the release) bounds its segment
    stop_stamps = {stamp_ns(m.header.stamp) for m in stops.msgs()}
    assert all(grant in stop_stamps for grant, _ in held)

    episode = EpisodeStore(dataset, create=False).load(ep.episode_id, images=False)
    want = np.where(person, ACTOR_HUMAN, ACTOR_POLICY)
    assert end.num_steps == len(msgs), (f"{end.num_steps} steps recorded, {len(msgs)} applied since StartEpisode; "
                                        f"recorded x {np.asarray(episode.steps['action'])[:, 0].tolist()}, "
                                        f"applied x {a7[:, 0].tolist()}")
    np.testing.assert_array_equal(np.asarray(episode.steps["action"]), a7)  # the arm's echo, step for step
    np.testing.assert_array_equal(actors(episode.steps), want)
    assert episode.meta.extra["actors"] == {"human": int(person.sum()), "policy": int((~person).sum())}

    data = load_transitions(dataset)
    assert len(data["action"]) == person.sum() and all(_is_person(a) for a in data["action"])
    assert len(set(data["episode_index"].tolist())) == TAKEOVERS  # each take-over its own demonstration
    tuned = client.fine_tune(steps=5, timeout=300)
    client.close()
    assert tuned.ok, tuned.message
    assert procs.dead() == {}
    stats = {"takeover_s": [round(t, 4) for t in takeover_s], "resume_s": [round(t, 4) for t in resume_s]}
    print(f"hand-over latency (press -> first applied action of the person; release -> the policy's): "
          f"{json.dumps(stats)}")


def _a7(m: Any) -> np.ndarray:
    return np.array([*m.translation, *m.rotation, m.gripper], np.float32)


def _first_after(stream: Stream, t: float, person: bool) -> float:
    """Arrival (monotonic) of the first applied action after ``t`` sent by the person (or by the policy)."""
    return min(at for at, m in stream.timed() if at >= t and _is_person(_a7(m)) == person)


def _start(start_nodes: Any, tmp_path: Any, name: str) -> tuple[Any, Any]:
    """sim_bridge (embedded WidowX), demo_recorder, policy_server (a tiny policy) and teleop (input joy on
    /amf/test/joy), each its own process; returns (processes, dataset directory)."""
    from amf_ros.bench.tiny_checkpoint import tiny_widowx_checkpoint
    from amf_ros.bringup.graph import node_section

    cfg = "config/sim_widowx.yaml"
    dataset = tmp_path / "dataset"
    ckpt = tiny_widowx_checkpoint(tmp_path / "ckpt", (TASK, "stack_cube"))
    procs = start_nodes({
        "sim_bridge": {**node_section(cfg, "sim_bridge"), "render": False, "initial_task": TASK},
        "demo_recorder": {**node_section(cfg, "demo_recorder"), "dataset_dir": str(dataset)},
        "policy_server": {**node_section(cfg, "policy_server"), "checkpoint": str(ckpt), "pretrain_if_missing": False,
                          "checkpoint_dir": str(tmp_path / "ckpts"), "dataset_dir": str(dataset),
                          "fine_tune_steps": 5, "fine_tune_batch_size": 8, "alpha_steps": 2},
        "teleop": {"input": "joy", "joy_topic": "test/joy", "control_rate_hz": 5.0},
    }, name=name)
    return procs, dataset


def _watch(node: Any) -> tuple[Stream, Stream, Stream, Stream]:
    """The arm's applied actions, policy_server's control, every ArmStop and the teleop's state, as they arrive."""
    from std_msgs.msg import String

    from amf_ros.msg import ArmStop, ControlSource, EefDeltaAction
    from amf_ros.ros import qos
    from amf_ros.ros.control_msgs import QOS as CONTROL_QOS

    applied, control, stops, teleop = Stream(), Stream(), Stream(), Stream()
    node.create_subscription(EefDeltaAction, "/amf/action/applied", applied, qos.STREAM)
    node.create_subscription(ControlSource, "/amf/control", control, CONTROL_QOS)
    node.create_subscription(ArmStop, "/amf/stop", stops, qos.EVENTS)
    node.create_subscription(String, "/amf/teleop/state", teleop, qos.LATCHED)
    return applied, control, stops, teleop


@dataclass
class TakenOver:
    """A run_policy goal on the embedded WidowX in which the test's pad has taken over and the person's actions are
    being applied (the deadman stays held)."""

    procs: Any
    applied: Stream
    control: Stream
    teleop: Stream
    client: Any
    goal: Any
    mark: int
    """Applied actions before the goal."""


@contextmanager
def _taken_over(start_nodes: Any, client_node: Any, tmp_path: Any, name: str, seed: int,
                max_steps: int) -> Iterator[TakenOver]:
    """Start the graph, let the policy act 3 times, press the deadman, wait for 2 of the person's actions."""
    from amf_ros.ros.client import AMFClient
    from amf_ros.srv import ResetTask

    procs, _ = _start(start_nodes, tmp_path, name)
    applied, control, _stops, teleop = _watch(client_node)
    pad = Pad(client_node, "/amf/test/joy")
    client = AMFClient(f"amf_test_{name}")
    try:
        wait_for(lambda: teleop.msgs(), 60, "teleop's latched state")
        wait_for(lambda: any(m.source == "" for m in control.msgs()), 60, "policy_server's latched control")
        pad.set(1.0, False)
        wait_for(lambda: json.loads(teleop.msgs()[-1].data)["armed"], 10, "teleop armed")
        assert call(client_node, ResetTask, "/amf/sim/reset", ResetTask.Request(task=TASK, seed=seed), 60).ok
        mark = len(applied.msgs())
        goal = client.send_run_policy(TASK, max_steps=max_steps)
        wait_for(lambda: sum(not _is_person(_a7(m)) for m in applied.msgs()[mark:]) >= 3, 60, "3 policy actions")
        pad.set(1.0, True)
        wait_for(lambda: control.msgs()[-1].source == "human", 10, "the hand-over to the person")
        wait_for(lambda: sum(_is_person(_a7(m)) for m in applied.msgs()[mark:]) >= 2, 30, "2 actions of the person")
        yield TakenOver(procs, applied, control, teleop, client, goal, mark)
    finally:
        pad.close()
        client.close()


def test_an_operator_stop_while_the_person_holds_control_ends_the_goal_and_stops_the_person(start_nodes, client_node,
                                                                                           tmp_path) -> None:
    """The e-stop path in take-over mode: an ArmStop from anyone but the person holding control ends the goal; the
    person's teleop stops too (another node's stop), so nothing moves the arm afterwards although the deadman stays
    held."""
    with _taken_over(start_nodes, client_node, tmp_path, "intervention_stop", seed=5, max_steps=50) as run:
        applied, control, teleop = run.applied, run.control, run.teleop
        t_stop = client_node.get_clock().now().nanoseconds
        run.client.stop("test: operator stop during a take-over")
        res = run.client.wait_result(run.goal, 60)
        assert not res.ok and "stop from operator" in res.message, res.message
        wait_for(lambda: control.msgs()[-1].source == "", 10, "the goal's end on control")
        state = wait_for(lambda: (lambda s: s if not s["driving"] else None)(json.loads(teleop.msgs()[-1].data)), 10,
                         "the teleop stopped driving")
        # whichever came first: the operator's ArmStop, or the goal's end while the person held control
        assert state["deadman"] and ("stop from operator" in state["last_stop"] or "goal ended" in state["last_stop"])
        n = len(applied.msgs())
        time.sleep(5 * 0.2)  # five teleop periods with the deadman still held
        assert len(applied.msgs()) == n, "the arm moved after the operator's stop"
        late = [stamp_ns(m.header.stamp) - t_stop for m in applied.msgs() if stamp_ns(m.header.stamp) > t_stop]
        assert all(d <= 200_000_000 for d in late), f"applied actions stamped {late} ns after the stop"
    assert run.procs.dead() == {}


def test_a_teleop_killed_while_the_person_holds_control_ends_the_goal(start_nodes, client_node, tmp_path) -> None:
    """A teleop node SIGKILLed mid take-over never sends its release: policy_server sees it leave the ROS graph
    (two 1 s checks) and ends the goal, instead of waiting for the goal's time bound or letting the policy resume on
    its own; nothing moves the arm after the kill."""
    with _taken_over(start_nodes, client_node, tmp_path, "intervention_kill", seed=6, max_steps=200) as run:
        os.kill(run.procs.procs["teleop"].pid, signal.SIGKILL)
        res = run.client.wait_result(run.goal, 60)
        assert not res.ok and "left the ROS graph" in res.message, res.message
        wait_for(lambda: run.control.msgs()[-1].source == "", 10, "the goal's end on control")
        n = len(run.applied.msgs())
        time.sleep(1.0)
        assert len(run.applied.msgs()) == n, "the arm moved after the goal ended"
        after = run.applied.msgs()[run.mark:]
        person = [_is_person(_a7(m)) for m in after]
        resumed = [i for i, is_person in enumerate(person) if not is_person and any(person[:i])]
        assert not resumed, "the policy resumed after the person's teleop was killed"
    assert run.procs.dead() == {"teleop": -signal.SIGKILL}
