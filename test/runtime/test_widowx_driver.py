"""widowx_driver's runtime without rclpy: what is published for joint states, actions and e-stop requests, which
actions are dropped, when the gripper's PWM is stopped, the motion-profile request, the missing-Interbotix line, the
bounded wait for xs_sdk at start."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from amf_ros.bringup.params import load
from amf_ros.bringup.params.widowx_driver import WidowxDriverParams
from amf_ros.robots import widowx, wx250s
from amf_ros.runtime.widowx_driver import (
    WidowXDriver,
    missing_interbotix_line,
    sdk_missing_line,
    wait_for_sdk,
)

NAMES = ["waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper", "left_finger",
         "right_finger"]
SEC = 1_000_000_000


def joints(x: float = 0.3, finger: float = 0.037) -> list[float]:
    """Joint positions of the wx250s at [x, 0, 0.15] pointing down, with the given finger position."""
    q = wx250s.ik(widowx.state_to_pose([x, 0.0, 0.15, 0, 0, 0]), guess=wx250s.NEUTRAL_JOINTS).q
    return [*q, 0.0, finger, -finger]


def driver(**over) -> WidowXDriver:
    return WidowXDriver(load(WidowxDriverParams, over))


def test_joint_states_give_proprio_and_bad_ones_are_logged_throttled():
    rt = driver()
    proprio, out = rt.on_joint_state(NAMES, joints())
    np.testing.assert_allclose(proprio, [0.3, 0.0, 0.15, 0, 0, 0, 0, 1.0], atol=2e-3)
    assert (out.arm, out.gripper, out.logs) == (None, None, [])
    proprio, out = rt.on_joint_state(["x"], [0.0], now=100.0)
    assert proprio is None and out.logs[0][0] == "error" and "lacks arm joints" in out.logs[0][1]
    assert rt.on_joint_state(["x"], [0.0], now=103.0)[1].logs == []  # 5 s throttle
    assert "1 similar" in rt.on_joint_state(["x"], [0.0], now=105.5)[1].logs[0][1]


def test_actions_before_joints_stale_or_bad_publish_nothing():
    rt = driver()
    out = rt.on_action(np.zeros(7), stamp_ns=SEC, now_ns=SEC, now=0.0)
    assert out.arm is None and out.logs == [("warn", "action ignored: no joint state yet")] and not out.applied
    rt.on_joint_state(NAMES, joints())
    out = rt.on_action([0, 0, 0, 0, 0, 0, 1.0], stamp_ns=SEC, now_ns=SEC + 600_000_000, now=0.0)
    assert out.arm is None and out.logs == [("warn", "stale action dropped: 600 ms old, valid for 500 ms")]
    assert not out.applied  # not echoed on applied_action_topic: the recorder never sees it
    out = rt.on_action([0, 0, 0, 0, 0, 0, 1.0], stamp_ns=0, now_ns=SEC, now=10.0)
    assert out.arm is None and "unstamped" in out.logs[0][1]  # as the recorder: never applied, never recorded
    out = rt.on_action([0.0, float("nan"), 0, 0, 0, 0, 1.0], stamp_ns=SEC, now_ns=SEC, now=0.0)
    assert out.arm is None and out.logs[0][0] == "error" and "7 finite numbers" in out.logs[0][1]
    out = rt.on_action([0.0, float("nan"), 0, 0, 0, 0, 1.0], stamp_ns=SEC, now_ns=SEC, now=0.1)
    assert len(out.logs) == 1  # refused actions are never throttled
    fresh = driver(action_timeout_s=0.0)
    fresh.on_joint_state(NAMES, joints())
    assert fresh.on_action([0, 0, 0, 0, 0, 0, 1.0], stamp_ns=SEC, now_ns=100 * SEC).arm is not None  # 0 = no check


def test_actions_move_the_arm_and_drive_the_gripper_once_per_direction_until_it_arrives():
    rt = driver()
    rt.on_joint_state(NAMES, joints(finger=0.037))  # fully open
    out = rt.on_action([0.0, 0.01, 0.0, 0, 0, 0, 1.0], stamp_ns=SEC, now_ns=SEC)
    assert len(out.arm) == 6 and out.gripper == pytest.approx(250.0) and out.logs == [] and out.applied
    np.testing.assert_allclose(wx250s.fk(np.array(out.arm))[:3, 3], [0.3, 0.01, 0.15], atol=2e-3)
    assert rt.gripper_driving
    assert rt.on_action([0, 0, 0, 0, 0, 0, 1.0], SEC, SEC).gripper is None  # same direction: no new PWM
    assert rt.on_joint_state(NAMES, joints(finger=0.037))[1].gripper == 0.0  # at the open end: PWM 0
    assert not rt.gripper_driving and rt.on_joint_state(NAMES, joints())[1].gripper is None
    out = rt.on_action([0, 0, 0, 0, 0, 0, 0.0], SEC, SEC)
    assert out.gripper == pytest.approx(-250.0) and rt.gripper_driving  # closing
    assert rt.on_joint_state(NAMES, joints(finger=0.03))[1].gripper is None  # still on its way


def test_estop_holds_stops_the_gripper_refuses_actions_and_release_reanchors():
    rt = driver()
    rt.on_joint_state(NAMES, joints())
    rt.on_action([0, 0, 0, 0, 0, 0, 0.0], SEC, SEC)
    out, message = rt.estop(True)
    np.testing.assert_allclose(out.arm, joints()[:6])
    assert out.gripper == 0.0 and rt.stopped and "ENGAGED" in message and out.logs == [("warn", message)]
    assert rt.on_action([0, 0, 0, 0, 0, 0, 1.0], SEC, SEC, now=0.0).logs == [("warn", "action ignored: e-stop engaged")]
    out, message = rt.estop(False)
    assert (out.arm, out.gripper, message) == (None, None, "e-stop released") and not rt.stopped
    out = rt.on_action([0, 0, 0, 0, 0, 0, 0.0], SEC, SEC)
    assert out.arm is not None and out.gripper == pytest.approx(-250.0)  # direction forgotten at the stop
    assert driver(start_stopped=True).stopped


def test_arm_stop_holds_and_drops_the_actions_stamped_before_it_but_not_later_ones():
    rt = driver()
    rt.on_joint_state(NAMES, joints())
    rt.on_action([0, 0, 0, 0, 0, 0, 0.0], SEC, SEC)  # gripper closing
    out = rt.stop(stamp_ns=2 * SEC, now_ns=2 * SEC, source="/amf/policy_server", reason="run_policy push ended")
    np.testing.assert_allclose(out.arm, joints()[:6])
    assert out.gripper == 0.0 and "holding" in out.logs[0][1] and not rt.stopped  # not latched
    late = rt.on_action([0, 0.01, 0, 0, 0, 0, 0.0], 2 * SEC - 1, 2 * SEC + 1000)  # of the ended goal, in flight
    assert late.arm is None and "before the last stop" in late.logs[0][1]
    assert rt.on_action([0, 0.01, 0, 0, 0, 0, 0.0], 2 * SEC + 1, 2 * SEC + 1000).arm is not None  # a new goal's


def test_profile_request_and_missing_interbotix_line():
    req = driver(control_period_s=0.2).profile_request()
    assert req == {"cmd_type": "group", "name": "arm", "mode": "position", "profile_type": "time",
                   "profile_velocity": 200, "profile_acceleration": 50}
    assert WidowXDriver(replace(load(WidowxDriverParams, {}), operating_modes_service="")).profile_request() is None
    # the gripper's signed PWM commands need PWM mode: set, not assumed from the SDK's mode config
    grip = driver(gripper_name="gripper").gripper_mode_request()
    assert grip is not None and (grip["cmd_type"], grip["name"], grip["mode"]) == ("single", "gripper", "pwm")
    no_service = WidowXDriver(replace(load(WidowxDriverParams, {}), operating_modes_service=""))
    assert no_service.gripper_mode_request() is None
    line = missing_interbotix_line("humble")
    assert "\n" not in line and "interbotix_xs_msgs" in line and "ros-humble-interbotix-xs-msgs" in line
    assert "ROS 2 humble" in line
    assert missing_interbotix_line(None) == missing_interbotix_line("")
    assert "your ROS 2 distribution" in missing_interbotix_line(None)


def test_counts_of_applied_and_refused_actions_and_the_estop_for_arm_status():
    """What widowx_driver publishes as its latched ArmStatus: actions applied, refused by reason, and the e-stop."""
    rt = driver()
    a = [0.01, 0, 0, 0, 0, 0, 1.0]
    rt.on_action(a, stamp_ns=SEC, now_ns=SEC)  # before the first joint state
    rt.on_joint_state(NAMES, joints())
    assert rt.on_action(a, stamp_ns=SEC, now_ns=SEC).applied
    rt.on_action(a, stamp_ns=SEC, now_ns=2 * SEC)  # stale
    rt.on_action([np.nan] * 7, stamp_ns=2 * SEC, now_ns=2 * SEC)
    rt.estop(True)
    assert (rt.counts.estop, rt.counts.estop_engagements) == (True, 1)
    rt.on_action(a, stamp_ns=3 * SEC, now_ns=3 * SEC)
    rt.estop(True)  # already engaged: not a new engagement
    rt.estop(False)
    assert rt.on_action(a, stamp_ns=4 * SEC, now_ns=4 * SEC).applied
    assert (rt.counts.applied, rt.counts.estop, rt.counts.estop_engagements) == (2, False, 1)
    assert rt.counts.refused == {"no joint state": 1, "stale": 1, "invalid": 1, "e-stop": 1}
    assert driver(start_stopped=True).counts.estop


class FakeClock:
    """A monotonic clock that moves only when the code under test sleeps."""

    def __init__(self) -> None:
        self.t = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.t

    def sleep(self, dt: float) -> None:
        assert dt >= 0.0
        self.sleeps.append(dt)
        self.t += dt


def test_a_driver_started_before_xs_sdk_waits_for_it_and_says_what_it_misses():
    clock, logs = FakeClock(), []
    up_at = clock.t + 12.0  # xs_sdk's joint states appear 12 s after the driver looked first, its service 1 s later

    def missing() -> list[str]:
        return [name for name, t in (("no publisher on /wx250s/joint_states", up_at),
                                     ("service /wx250s/set_operating_modes not available", up_at + 1.0))
                if clock.t < t]

    assert wait_for_sdk(missing, 60.0, logs.append, poll_s=0.1, log_every_s=5.0, clock=clock, sleep=clock.sleep) == []
    assert 13.0 <= clock.t - 100.0 < 13.0 + 0.1 + 1e-9  # stopped at the first poll that saw everything
    assert max(clock.sleeps) <= 0.1
    # said at once, then every 5 s, each line naming what was still missing
    assert len(logs) == 3, logs
    assert all("waiting for xs_sdk" in line and "sdk_wait_s 60 s" in line for line in logs)
    assert all("/wx250s/joint_states" in line for line in logs)


def test_a_driver_that_never_sees_xs_sdk_gives_up_at_the_bound_with_one_line():
    clock, logs = FakeClock(), []
    gone = ["no publisher on /wx250s/joint_states"]
    assert wait_for_sdk(lambda: list(gone), 7.5, logs.append, poll_s=0.1, log_every_s=5.0, clock=clock,
                        sleep=clock.sleep) == gone
    assert 7.5 <= clock.t - 100.0 <= 7.5 + 1e-6  # the last sleep is cut to the bound: never past it
    assert len(logs) == 2  # at 0 s and 5 s
    line = sdk_missing_line(gone, 7.5)
    assert "\n" not in line and "sdk_wait_s = 7.5 s" in line and "/wx250s/joint_states" in line
    assert "xsarm_control.launch.py" in line
    # 0 = look once, never sleep
    clock0 = FakeClock()
    assert wait_for_sdk(lambda: list(gone), 0.0, logs.append, clock=clock0, sleep=clock0.sleep) == gone
    assert clock0.sleeps == []
    with pytest.raises(ValueError, match="bound_s"):
        wait_for_sdk(lambda: [], -1.0, logs.append)
    assert load(WidowxDriverParams, {}).sdk_wait_s > 0  # by default a driver does wait
