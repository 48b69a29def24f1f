"""The WidowX AI backend (amf_ros/robots/wxai.py) against Trossen's own controller simulator, over the real protocol.

trossen-arm-sim's server speaks the controller's TCP/UDP protocol on 127.0.0.1 and the unmodified ``trossen_arm``
driver connects to it; both are pinned in requirements/base.txt, so these tests run (never skip) in CI. Physics runs
in real time: every wait here is a few control periods, and the checks are on positions after the arm settled, with
tolerances from the move sizes (a settled position loop is within a millimetre; the tests ask for 5 mm), never on time.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import numpy as np
import pytest

from amf_ros.envs.wxai_sim.scene import TabletopHost
from amf_ros.robots.action_gate import BEFORE_STOP, ESTOP, NO_IK, STALE, UNSTAMPED
from amf_ros.robots.widowx import PROPRIO_NAMES, state_to_pose
from amf_ros.robots.wxai import NEUTRAL_POSE, WXAIArm, WXAIConfig, matrix_to_pose6, pose6_to_matrix

PERIOD_S = 0.2
SETTLE_S = 3 * PERIOD_S
"""Wait after a command before its effect is checked: the goal time (one period) and two periods to settle."""
MOVE_TOL_M = 0.005


@pytest.fixture(scope="module")
def arm() -> Iterator[tuple[WXAIArm, TabletopHost]]:
    """The simulated controller with an empty table and the backend connected to it, at the start pose."""
    host = TabletopHost((), camera=False)
    rt = WXAIArm(WXAIConfig(ip=host.host, control_period_s=PERIOD_S))
    try:
        rt.connect()
        import trossen_arm as ta

        pose = matrix_to_pose6(state_to_pose([*NEUTRAL_POSE, 0.0, 0.0, 0.0]))
        rt.driver.set_cartesian_positions(pose, ta.InterpolationSpace.joint, 1.0, True)
        rt.driver.set_gripper_position(rt.config.gripper_open_m, 0.5, True)  # the simulator starts it closed
        # the blocking calls return at their goal time; the real-time physics may still be moving under load (one
        # CI-like run read the gripper 0.88 open): wait, bounded, until the start pose is reached
        _wait_until(lambda: rt.observe()[7] > 0.95 and np.allclose(rt.observe()[:3], NEUTRAL_POSE, atol=MOVE_TOL_M),
                    10.0, "the start pose (gripper open, end effector at NEUTRAL_POSE)")
        yield rt, host
    finally:
        rt.close()
        host.close()


def _wait_until(ready, timeout_s: float, what: str) -> None:
    """Poll ``ready()`` every control period until it holds; fail naming ``what`` after ``timeout_s`` (a bound on a
    wait, not a timing assertion)."""
    deadline = time.monotonic() + timeout_s
    while not ready():
        if time.monotonic() > deadline:
            pytest.fail(f"{what} not reached within {timeout_s} s")
        time.sleep(PERIOD_S)


def _fresh(rt: WXAIArm) -> np.ndarray:
    """Release the e-stop if engaged, re-read and re-anchor the target; the proprio (8,)."""
    if rt.stopped:
        rt.estop(False)
    p = rt.observe()
    rt.reset()
    return p


def _act(rt: WXAIArm, a7: list[float], age_s: float = 0.0):
    now = time.time_ns()
    return rt.on_action(a7, now - int(age_s * 1e9), now)


def test_pose_conversion_round_trip() -> None:
    T = state_to_pose([0.3, -0.05, 0.1, 0.2, -0.1, 0.3])
    np.testing.assert_allclose(pose6_to_matrix(matrix_to_pose6(T)), T, atol=1e-12)
    with pytest.raises(ValueError, match="6 numbers"):
        pose6_to_matrix([0.0] * 5)


def test_connects_and_reads_the_vendor_state(arm: tuple[WXAIArm, TabletopHost]) -> None:
    rt, host = arm
    p = _fresh(rt)
    assert p.shape == (len(PROPRIO_NAMES),) and np.all(np.isfinite(p))
    # the driver's forward kinematics (the controller's link parameters) agrees with the simulator's own end effector
    np.testing.assert_allclose(p[:3], host.ee_position(), atol=2e-3)
    np.testing.assert_allclose(p[:3], NEUTRAL_POSE, atol=MOVE_TOL_M)
    np.testing.assert_allclose(p[3:6], 0.0, atol=0.02)  # gripper pointing down: BridgeData's zero rotation
    assert p[7] > 0.9  # the gripper starts open


def test_an_action_moves_the_end_effector_by_its_translation(arm: tuple[WXAIArm, TabletopHost]) -> None:
    rt, _ = arm
    before = _fresh(rt)
    applied = rt.counts.applied
    out = _act(rt, [0.03, -0.02, -0.01, 0.0, 0.0, 0.0, 1.0])
    assert out.applied and rt.counts.applied == applied + 1
    time.sleep(SETTLE_S)
    after = rt.observe()
    np.testing.assert_allclose(after[:3] - before[:3], [0.03, -0.02, -0.01], atol=MOVE_TOL_M)
    np.testing.assert_allclose(after[3:6], before[3:6], atol=0.02)


def test_the_gripper_closes_and_opens(arm: tuple[WXAIArm, TabletopHost]) -> None:
    rt, _ = arm
    _fresh(rt)
    assert _act(rt, [0.0] * 6 + [0.0]).applied
    time.sleep(SETTLE_S)
    assert rt.observe()[7] < 0.1
    assert _act(rt, [0.0] * 6 + [1.0]).applied
    time.sleep(SETTLE_S)
    assert rt.observe()[7] > 0.9


def test_the_estop_holds_and_refuses_until_released(arm: tuple[WXAIArm, TabletopHost]) -> None:
    rt, _ = arm
    _fresh(rt)
    assert _act(rt, [0.0, 0.03, 0.0, 0.0, 0.0, 0.0, 1.0]).applied  # moving when the e-stop engages
    _, message = rt.estop(True)
    assert "ENGAGED" in message and rt.counts.estop and rt.stopped
    held = rt.observe()
    refused = rt.counts.refused.get(ESTOP, 0)
    for _ in range(3):
        assert not _act(rt, [0.0, -0.05, 0.0, 0.0, 0.0, 0.0, 0.0]).applied
        time.sleep(PERIOD_S)
    assert rt.counts.refused[ESTOP] == refused + 3
    now = rt.observe()
    np.testing.assert_allclose(now[:3], held[:3], atol=2e-3)  # held where it was (a hold, not a move)
    assert now[7] > 0.9  # the gripper was not closed by the refused actions
    rt.estop(False)
    assert not rt.counts.estop
    before = rt.observe()
    assert _act(rt, [0.0, -0.03, 0.0, 0.0, 0.0, 0.0, 1.0]).applied
    time.sleep(SETTLE_S)
    assert rt.observe()[1] - before[1] == pytest.approx(-0.03, abs=MOVE_TOL_M)


def test_stale_unstamped_and_stopped_actions_are_never_executed(arm: tuple[WXAIArm, TabletopHost]) -> None:
    rt, _ = arm
    before = _fresh(rt)
    target = rt.target
    assert not _act(rt, [0.04, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], age_s=1.0).applied  # older than action_timeout_s
    assert rt.counts.refused.get(STALE, 0) >= 1
    assert not rt.on_action([0.04, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 0, time.time_ns()).applied
    assert rt.counts.refused.get(UNSTAMPED, 0) >= 1
    stamp = time.time_ns()
    rt.stop(0, time.time_ns(), "test", "goal ended")  # an ArmStop: actions stamped before it are dropped
    assert not rt.on_action([0.04, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0], stamp, time.time_ns()).applied
    assert rt.counts.refused.get(BEFORE_STOP, 0) >= 1
    time.sleep(SETTLE_S)
    np.testing.assert_allclose(rt.target[:3, 3], target[:3, 3], atol=2e-3)
    after = rt.observe()
    np.testing.assert_allclose(after[:3], before[:3], atol=2e-3)
    assert after[7] > 0.9  # no refused action closed the gripper


def test_an_unreachable_target_is_refused_by_the_vendor_ik_and_the_driver_stays_usable(
        arm: tuple[WXAIArm, TabletopHost]) -> None:
    rt, _ = arm
    _fresh(rt)
    wide = WXAIArm(WXAIConfig(ip=rt.config.ip, workspace_high=(3.0, 3.0, 3.0), max_translation=2.0,
                              control_period_s=PERIOD_S), driver=rt.driver)
    wide.observe()
    out = _act(wide, [1.5, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])  # 1.75 m out: the arm reaches about 0.7 m
    assert not out.applied and wide.counts.refused == {NO_IK: 1}
    assert any("IK" in line for _, line in out.logs)
    before = rt.observe()
    assert _act(rt, [0.0, 0.0, -0.02, 0.0, 0.0, 0.0, 1.0]).applied  # the same driver still moves the arm
    time.sleep(SETTLE_S)
    assert rt.observe()[2] - before[2] == pytest.approx(-0.02, abs=MOVE_TOL_M)


def test_invalid_actions_and_actions_before_the_first_state_are_refused() -> None:
    rt = WXAIArm(WXAIConfig())
    assert not rt.on_action([0.0] * 7, time.time_ns(), time.time_ns()).applied  # no driver, no state
    assert rt.counts.refused == {"no joint state": 1}
    assert not rt.on_action([float("nan")] * 7, time.time_ns(), time.time_ns()).applied
    assert rt.counts.refused["invalid"] == 1
    with pytest.raises(ValueError, match="end_effector"):
        WXAIConfig(end_effector="nope")
    with pytest.raises(ValueError, match="gripper_open_m"):
        WXAIConfig(gripper_open_m=0.1)


def test_a_second_simulator_takes_the_next_loopback_address(arm: tuple[WXAIArm, TabletopHost]) -> None:
    _, host = arm
    second = TabletopHost((), camera=False)  # the controller's ports are fixed: 127.0.0.1's are held by the first
    other = WXAIArm(WXAIConfig(ip=second.host))
    try:
        assert second.host != host.host and second.host.startswith("127.0.0.")
        other.connect()
        p = other.observe()
        np.testing.assert_allclose(p[:3], second.ee_position(), atol=2e-3)  # this driver reads the second simulator
    finally:
        other.close()
        second.close()


def test_no_address_and_an_address_that_does_not_answer_are_refused_with_one_message() -> None:
    from amf_ros.robots.wxai import NO_IP_LINE, ConnectError

    with pytest.raises(ValueError, match="IP address is not set") as err:
        WXAIArm(WXAIConfig()).connect()
    assert str(err.value) == NO_IP_LINE and "--wxai-ip" in NO_IP_LINE and "wxai_ip:=" in NO_IP_LINE
    # TEST-NET-1 (RFC 5737): nothing answers there; the vendor's connect is bounded by the timeout given
    silent = WXAIArm(WXAIConfig(ip="192.0.2.1", connect_timeout_s=0.5))
    with pytest.raises(ConnectError, match=r"no WidowX AI at 192\.0\.2\.1: gave up after [0-9.]+ s "
                                           r"\(wxai_connect_timeout_s = 0\.5 s\)"):
        silent.connect()
    assert silent.pose is None  # nothing was read
