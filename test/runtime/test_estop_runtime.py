"""The e-stop as policy_server and the arms see it, without rclpy: the embedded WidowX's counts (sim_bridge's runtime)
and policy_server's runtime ending, refusing and accounting run_policy goals (issue 33 item 5).

policy_server is real (a tiny WidowX checkpoint, the control thread); the arm is a fake that answers every action on
the control thread itself, as sim_bridge would: a new observation and an ArmStatus (applied, or refused while the
e-stop is engaged). Every bound is asserted by counting actions, never by time.
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from amf_ros.robots.action_gate import ESTOP, ActionCounts

pytest.importorskip("mujoco")

TASK = "carrot_on_plate"


# -- sim_bridge: the embedded WidowX counts what it does and says when the e-stop changes -------------------------
def test_embedded_widowx_counts_applied_and_refused_actions_and_reports_the_estop():
    from amf_ros.envs.suites import get_suite
    from amf_ros.runtime.sim_bridge import SimBridge

    reports: list[ActionCounts] = []
    bridge = SimBridge(get_suite("widowx").backend(), lambda frame: None, initial_task=TASK, seed=3,
                       arm_status=reports.append)
    assert not bridge.arm_counts().estop
    a = np.array([0.01, 0, 0, 0, 0, 0, 1.0])
    assert bridge.step(a) == ""
    bridge.estop(True)
    assert reports[-1].estop and reports[-1].estop_engagements == 1  # reported at once, before any action
    assert "e-stop" in bridge.step(a) and "e-stop" in bridge.step(a)
    assert bridge.step([np.nan] * 7).startswith("refused action")
    assert bridge.step(a, admit=lambda: ("stale", "stale action dropped")) == "stale action dropped"  # the gate's
    bridge.estop(False)
    assert bridge.step(a) == ""
    counts = bridge.arm_counts()
    assert (counts.applied, counts.refused) == (2, {ESTOP: 2, "invalid": 1, "stale": 1})
    assert not counts.estop and counts.estop_engagements == 1
    assert reports[-1] == counts and len(reports) == 8  # one report per action and per e-stop change
    assert reports[0] is not reports[-1]  # snapshots, not the live object


def test_action_counts_since_a_snapshot_and_the_summary():
    before = ActionCounts(applied=5, refused={"stale": 1})
    now = ActionCounts(applied=9, refused={"stale": 1, ESTOP: 3}, estop=True, estop_engagements=1)
    assert now.since(before) == (4, {ESTOP: 3})
    assert now.summary(before, sent=8) == "the arm applied 4, refused 3 (e-stop: 3), 1 not reported by the arm " \
                                          "(superseded in its queue or in flight)"
    assert ActionCounts(applied=2).since(before) == (2, {})  # the arm restarted: counted from zero


# -- policy_server ----------------------------------------------------------------------------------------------
class FakeArm:
    """Answers each action on the publishing thread: refused while the e-stop is engaged, else applied with a new
    observation; an ArmStatus after each. ``engage_at``: engage the e-stop right after that many actions."""

    def __init__(self, server_box: list, engage_at: int = 0) -> None:
        self.box, self.engage_at = server_box, engage_at
        self.counts = ActionCounts()
        self.actions: list[np.ndarray] = []
        self.lock = threading.Lock()

    @property
    def server(self):
        return self.box[0]

    def publish(self, action: np.ndarray) -> None:
        with self.lock:
            self.actions.append(np.asarray(action))
            if self.counts.estop:
                self.counts.refuse(ESTOP)
            else:
                self.counts.applied += 1
                self.server.observe_state(np.full(14, len(self.actions), np.float32))
            self.server.observe_arm(self.counts.copy())
            if self.engage_at and len(self.actions) == self.engage_at:
                self.estop(True)

    def estop(self, engage: bool) -> None:
        self.counts.set_estop(engage)
        self.server.observe_arm(self.counts.copy())


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    from amf_ros.bench.tiny_checkpoint import tiny_widowx_checkpoint

    return tiny_widowx_checkpoint(tmp_path_factory.mktemp("estop") / "pretrained", (TASK, "stack_cube"))


@pytest.fixture
def served(checkpoint, tmp_path):
    """(server, arm): a PolicyServer at 50 Hz, max 40 steps, acting through the fake arm."""
    from amf_ros.bringup.params import load
    from amf_ros.bringup.params.policy_server import PolicyServerParams
    from amf_ros.runtime.policy_server import PolicyServer

    p = load(PolicyServerParams, {"checkpoint": str(checkpoint), "checkpoint_dir": str(tmp_path / "ckpts"),
                                  "dataset_dir": str(tmp_path / "ds"), "action_space": "eef7",
                                  "task_status_topic": "", "control_rate_hz": 50.0, "max_steps": 40,
                                  "observation_stale_periods": 1000.0})
    box: list = []
    arm = FakeArm(box)
    server = PolicyServer(p, arm.publish)
    box.append(server)
    server.observe_state(np.zeros(14, np.float32))
    server.observe_arm(arm.counts.copy())
    yield server, arm
    server.close()


def _run(server, max_steps: int = 0):
    assert server.reserve_run()
    return server.run(TASK, max_steps)


def test_estop_mid_goal_ends_it_at_once_naming_the_estop(served):
    server, arm = served
    arm.engage_at = 5
    res = _run(server)
    # The e-stop engaged right after the 5th action (its ArmStatus reached the server before the 6th was computed):
    # not one more action is published, whatever the machine's load (the control thread is woken and checks the
    # stop before every publish).
    assert len(arm.actions) == 5 == res.steps
    assert not res.ok and not res.cancelled
    assert "e-stop" in res.message and "stopped after 5 steps" in res.message, res.message
    assert "the arm applied 5, refused 0" in res.message, res.message


def test_goals_are_refused_while_engaged_and_work_after_release(served):
    server, arm = served
    arm.estop(True)
    for _ in range(2):
        res = _run(server)
        assert not res.ok and res.steps == 0 and "e-stop is engaged" in res.message, res.message
    assert arm.actions == []  # refused before the control thread started
    arm.estop(False)
    res = _run(server, max_steps=6)
    assert res.ok and res.steps == 6 == len(arm.actions), res.message
    assert res.message.endswith("the arm applied 6, refused 0"), res.message


def test_an_engage_and_release_missed_between_two_statuses_still_ends_the_goal(served):
    server, arm = served

    def engage_and_release_unseen(action):  # the arm's status is depth 1: the engaged one was overwritten
        FakeArm.publish(arm, action)
        if len(arm.actions) == 3:
            arm.counts.set_estop(True)
            arm.counts.set_estop(False)
            server.observe_arm(arm.counts.copy())

    arm.publish = engage_and_release_unseen
    server.publish = engage_and_release_unseen
    res = _run(server)
    assert res.steps == 3 and not res.ok and "e-stop" in res.message, res.message


def test_actions_refused_by_the_arm_are_counted_by_reason(served):
    server, arm = served

    def refuse_some(action):  # the 2nd and 3rd arrive stale (the arm's gate drops them: no new observation)
        n = len(arm.actions) + 1
        if n in (2, 3):
            arm.actions.append(action)
            arm.counts.refuse("stale")
            server.observe_arm(arm.counts.copy())
            server.observe_state(np.full(14, -n, np.float32))  # the arm's next joint state (it held)
        else:
            FakeArm.publish(arm, action)

    server.publish = refuse_some
    res = _run(server, max_steps=6)
    assert res.ok and res.steps == 6, res.message
    assert res.message.endswith("the arm applied 4, refused 2 (stale: 2)"), res.message
