"""What widowx_driver decides, without ROS: which commands to publish for each joint state, action and e-stop
request, which actions are dropped (stale, refused, stopped), when a PWM-driven gripper is stopped, and the
one-line message when the Interbotix messages are missing.

The maths (IK, limits, proprio) is :mod:`amf_ros.robots.widowx`; ``amf_ros/ros/nodes/widowx_driver.py`` maps
messages to :class:`WidowXDriver` calls and :class:`Commands` back to Interbotix messages. Not thread-safe: the
node calls it from one callback group.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from amf_ros.robots import widowx
from amf_ros.robots.action_gate import ActionGate
from amf_ros.runtime.log_lines import ErrorThrottle

if TYPE_CHECKING:
    from amf_ros.bringup.params.widowx_driver import WidowxDriverParams

INTERBOTIX_PACKAGE = "interbotix_xs_msgs"
"""The ROS package widowx_driver needs for robot:=real (JointGroupCommand, JointSingleCommand, OperatingModes)."""


def missing_interbotix_line(distro: str | None) -> str:
    """The one line widowx_driver prints when ``interbotix_xs_msgs`` cannot be imported.

    Args:
        distro: the ROS 2 distribution in use (``$ROS_DISTRO``, e.g. "humble"); empty/None when unknown.
    """
    if distro:
        return (f"widowx_driver: {INTERBOTIX_PACKAGE} is not installed; install ros-{distro}-interbotix-xs-msgs "
                f"(Interbotix xsarm_control for ROS 2 {distro})")
    return (f"widowx_driver: {INTERBOTIX_PACKAGE} is not installed; install ros-<distro>-interbotix-xs-msgs "
            "(Interbotix xsarm_control for your ROS 2 distribution)")


@dataclass
class Commands:
    """What the node publishes and logs for one input."""

    arm: list[float] | None = None
    """Arm joint targets (6,) for JointGroupCommand(name=arm_group), or None = publish none."""
    gripper: float | None = None
    """Signed gripper PWM for JointSingleCommand(name=gripper_name) (+ opens, - closes, 0 = stop), or None."""
    logs: list[tuple[str, str]] = field(default_factory=list)
    """(level "info" | "warn" | "error", line) to log now (already throttled)."""
    applied: bool = False
    """The input action became this arm target (echo it on applied_action_topic: it is what the arm executes)."""


class WidowXDriver:
    """widowx_driver's state: the WidowX adapter (target pose, limits, e-stop) and the gripper driving state.

    Args:
        p: widowx_driver's parameters (amf_ros/bringup/params/widowx_driver.py).
    """

    THROTTLE_S = {"joints": 5.0, "stale": 2.0, "ignored": 2.0, "ik": 2.0, "refused": 0.0}
    """Least time between two log lines of one kind, s."""

    def __init__(self, p: WidowxDriverParams) -> None:
        self.p = p
        self.adapter = widowx.WidowXAdapter(widowx.limits_from_params(p))
        self.adapter.emergency_stop(bool(p.start_stopped))
        self._last_grip: bool | None = None  # direction the gripper was last driven (True = open)
        self._grip_driving = False  # a nonzero PWM is applied and the gripper has not reached its end yet
        self._throttle = ErrorThrottle()
        self.gate = ActionGate(p.action_timeout_s)

    @property
    def stopped(self) -> bool:
        """True while the emergency stop is engaged."""
        return self.adapter.stopped

    @property
    def gripper_driving(self) -> bool:
        """True while a nonzero gripper PWM is applied (stopped with PWM 0 once the gripper reaches its end)."""
        return self._grip_driving

    def _log(self, out: Commands, level: str, kind: str, text: str, now: float | None) -> None:
        line = self._throttle.line(("widowx", kind), text, now=now, period_s=self.THROTTLE_S[kind])
        if line is not None:
            out.logs.append((level, line))

    def on_joint_state(self, names: Sequence[str], positions: Sequence[float],
                       now: float | None = None) -> tuple[np.ndarray | None, Commands]:
        """A JointState -> (Octo's 8-D proprio to publish, or None for a message without the arm joints;
        commands: PWM 0 when a driven gripper reached the end it was driven to)."""
        out = Commands()
        try:
            proprio = self.adapter.observe(list(names), list(positions))
        except ValueError as exc:
            self._log(out, "error", "joints", str(exc), now)
            return None, out
        if self._grip_driving and widowx.gripper_at_limit(bool(self._last_grip), self.adapter.gripper):
            out.gripper, self._grip_driving = 0.0, False
        return proprio, out

    def on_action(self, a7: Sequence[float], stamp_ns: int, now_ns: int, now: float | None = None,
                  valid_for_ns: int = 0) -> Commands:
        """An EefDeltaAction (7,) stamped ``stamp_ns``, valid for ``valid_for_ns``, at node time ``now_ns`` -> the arm
        target and, when the gripper's direction changes, its PWM (``applied`` when the action itself became the target).
        Actions the gate drops (unstamped, stale, from
        before the last stop: amf_ros/robots/action_gate.py), refused ones (not 7 finite numbers), and actions while
        e-stopped or before the first joint state publish nothing."""
        out = Commands()
        dropped = self.gate.refusal(stamp_ns, valid_for_ns, now_ns)
        if dropped:
            self._log(out, "warn", "stale", dropped, now)
            return out
        try:
            cmd = self.adapter.apply(np.asarray(a7, dtype=np.float64))
        except ValueError as exc:
            self._log(out, "error", "refused", f"refused action: {exc}", now)
            return out
        if cmd is None:
            reason = "e-stop engaged" if self.adapter.stopped else "no joint state yet"
            self._log(out, "warn", "ignored", f"action ignored: {reason}", now)
            return out
        if not cmd.ik_ok:
            self._log(out, "warn", "ik", "no IK solution within joint limits; holding", now)
        out.arm = [float(v) for v in cmd.arm]
        out.applied = bool(cmd.ik_ok)
        if cmd.gripper_pwm != 0.0 and cmd.gripper_open != self._last_grip:
            out.gripper = float(cmd.gripper_pwm)
            self._last_grip, self._grip_driving = cmd.gripper_open, True
        return out

    def estop(self, engage: bool) -> tuple[Commands, str]:
        """Engage (the arm holds its measured joints, the gripper stops squeezing, actions are refused) or
        release (the target re-anchors at the arm) the emergency stop; returns the commands and a message."""
        self.adapter.emergency_stop(bool(engage))
        out = Commands()
        if engage:
            hold = self.adapter.hold_command()
            if hold is not None:
                out.arm = [float(v) for v in hold.arm]
            out.gripper = 0.0
            self._last_grip, self._grip_driving = None, False
        message = "e-stop ENGAGED: arm holds, actions refused" if engage else "e-stop released"
        out.logs.append(("warn", message))
        return out, message

    def stop(self, stamp_ns: int, now_ns: int, source: str, reason: str) -> Commands:
        """An ArmStop: drop the actions stamped up to it and hold the measured joints (not latched: a newer action
        moves the arm again; the e-stop is the latched stop)."""
        self.gate.stop(stamp_ns, now_ns)
        out = Commands()
        hold = self.adapter.hold_command()
        if hold is not None:
            out.arm = [float(v) for v in hold.arm]
        if self._grip_driving:
            out.gripper, self._grip_driving = 0.0, False
        out.logs.append(("info", f"stop from {source or '?'} ({reason[:200] or 'no reason'}): holding"))
        return out

    def profile_request(self) -> dict[str, Any] | None:
        """OperatingModes request fields for a time-based arm profile of ``control_period_s`` (None: no
        operating_modes_service configured, leave the profile as is)."""
        if not self.p.operating_modes_service:
            return None
        period_ms = int(round(self.p.control_period_s * 1000))
        return {"cmd_type": "group", "name": self.p.arm_group, "mode": "position", "profile_type": "time",
                "profile_velocity": period_ms, "profile_acceleration": max(period_ms // 4, 1)}
