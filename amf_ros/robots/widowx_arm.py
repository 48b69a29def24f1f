"""What a WidowX arm does with each joint state, action, stop and e-stop, without ROS: the logic every WidowX runs,
the real one behind widowx_driver and the embedded simulator alike.

Why one home: the embedded WidowX (amf_ros/envs/widowx_sim) must take every action along the real arm's path, so
both use :class:`WidowXArm`: the action gate (stale, unstamped and stopped actions: :mod:`amf_ros.robots.action_gate`),
workspace and per-step limits, IK, the joint-speed limit, the latched e-stop (:mod:`amf_ros.robots.widowx`), and
the PWM gripper (driven once per direction, PWM 0 when it reaches its end). What only the ROS node needs (the
Interbotix motion profile, the missing-package line) is in :mod:`amf_ros.runtime.widowx_driver`; its ROS
parameters (amf_ros/bringup/params/widowx_driver.py) take their defaults from :class:`WidowXArmConfig`.
Not thread-safe: call it from one thread (the node: one callback group).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, Sequence

import numpy as np

from amf_ros.robots import widowx
from amf_ros.robots.action_gate import ESTOP, INVALID, NO_IK, NO_JOINT_STATE, ActionCounts, ActionGate


@dataclass(frozen=True)
class WidowXArmConfig:
    """The settings of the arm's own logic (widowx_driver's parameters of the same names; units and ranges there)."""

    workspace_low: tuple[float, ...] = (0.1, -0.15, -0.01)
    """Lower corner of the allowed end-effector target, m (base frame; Octo's WidowX eval bounds)."""
    workspace_high: tuple[float, ...] = (0.45, 0.25, 0.25)
    """Upper corner of the allowed end-effector target, m."""
    max_translation: float = 0.05
    """Largest translation per action and axis, m."""
    max_rotation: float = 0.25
    """Largest rotation per action and Euler angle, rad."""
    max_joint_speed: float = 1.0
    """Largest commanded joint speed, rad/s; a longer step is shortened along the same joint direction."""
    control_period_s: float = 0.2
    """Duration of one action, s (BridgeData: 0.2 s = 5 Hz); sets the speed limit per step."""
    action_timeout_s: float = 0.5
    """The arm's cap on an action's age, s (0 = only the action's own valid_for)."""
    gripper_pressure: float = 0.5
    """Gripper effort in [0, 1], mapped to PWM between the two limits."""
    gripper_pwm_low: float = 150.0
    """Gripper PWM at pressure 0 (Interbotix default)."""
    gripper_pwm_high: float = 350.0
    """Gripper PWM at pressure 1 (Interbotix default)."""
    start_stopped: bool = False
    """Start with the emergency stop engaged."""


@dataclass
class ArmCommands:
    """What the arm's driver sends and logs for one input."""

    arm: list[float] | None = None
    """Arm joint targets (6,) for JointGroupCommand(name=arm_group), or None = send none."""
    gripper: float | None = None
    """Signed gripper PWM for JointSingleCommand(name=gripper_name) (+ opens, - closes, 0 = stop), or None."""
    logs: list[tuple[str, str]] = field(default_factory=list)
    """(level "info" | "warn" | "error", line) to log now (already throttled)."""
    applied: bool = False
    """The input action became this arm target (echo it on applied_action_topic: it is what the arm executes)."""


class LineThrottle(Protocol):
    """Limits how often a kind of log line is emitted (e.g. :class:`amf_ros.runtime.log_lines.ErrorThrottle`)."""

    def line(self, kind: tuple[str, str], text: str, now: float | None = None,
             period_s: float | None = None) -> str | None:
        """The line to log now, or None if it is suppressed."""
        ...


class GatedArm:
    """What every arm behind a driver node does before its own mechanics (:class:`WidowXArm`, and
    :class:`~amf_ros.robots.wxai.WXAIArm`): the action gate, the counts published as amf_ros/ArmStatus, throttled log
    lines, and the refusals an action meets before it reaches the arm (dropped by the gate, not 7 finite numbers,
    e-stopped or no state yet), each counted and logged the same way on every arm."""

    THROTTLE_S: dict[str, float] = {"stale": 2.0, "ignored": 2.0, "ik": 2.0, "refused": 0.0}
    """Least time between two log lines of one kind, s."""
    LOG_KEY = "arm"
    """First part of the throttle's key: one arm's lines never suppress another's."""

    def __init__(self, action_timeout_s: float, throttle: LineThrottle | None, stopped: bool) -> None:
        self._throttle = throttle
        self.gate = ActionGate(action_timeout_s)
        self.counts = ActionCounts()
        """Actions applied and refused by reason, and the e-stop (published as amf_ros/ArmStatus)."""
        self.counts.set_estop(bool(stopped))

    def _log(self, out: ArmCommands, level: str, kind: str, text: str, now: float | None) -> None:
        line = text if self._throttle is None else self._throttle.line((self.LOG_KEY, kind), text, now=now,
                                                                         period_s=self.THROTTLE_S[kind])
        if line is not None:
            out.logs.append((level, line))

    def _refuse(self, out: ArmCommands, reason: str, level: str, kind: str, text: str,
                now: float | None) -> ArmCommands:
        """Count a refused action under ``reason``, log ``text`` (throttled by ``kind``) and return ``out``."""
        self.counts.refuse(reason)
        self._log(out, level, kind, text, now)
        return out

    def _gate_refusal(self, out: ArmCommands, stamp_ns: int, valid_for_ns: int, now_ns: int,
                      now: float | None) -> ArmCommands | None:
        """``out`` with the gate's refusal counted and logged when the action must not be applied (unstamped,
        stale, from before the last stop: :mod:`amf_ros.robots.action_gate`), else None."""
        dropped = self.gate.refusal(stamp_ns, valid_for_ns, now_ns)
        return self._refuse(out, self.gate.last_drop, "warn", "stale", dropped, now) if dropped else None

    def _not_ready(self, out: ArmCommands, stopped: bool, no_state: str, now: float | None) -> ArmCommands:
        """``out`` with an action ignored because the e-stop is engaged or (``no_state``) no state was read yet."""
        reason = "e-stop engaged" if stopped else no_state
        return self._refuse(out, ESTOP if stopped else NO_JOINT_STATE, "warn", "ignored",
                            f"action ignored: {reason}", now)


class WidowXArm(GatedArm):
    """One WidowX's state: the adapter (target pose, limits, e-stop), the action gate and the gripper driving state.

    Args:
        config: the arm's settings.
        throttle: limits repeated log lines (the node passes one; None = every line is logged).
    """

    THROTTLE_S = {**GatedArm.THROTTLE_S, "joints": 5.0}
    """Least time between two log lines of one kind, s."""
    LOG_KEY = "widowx"

    def __init__(self, config: WidowXArmConfig, throttle: LineThrottle | None = None) -> None:
        self.config = config
        self.adapter = widowx.WidowXAdapter(widowx.limits_from_params(config))
        self.adapter.emergency_stop(bool(config.start_stopped))
        self._last_grip: bool | None = None  # direction the gripper was last driven (True = open)
        self._grip_driving = False  # a nonzero PWM is applied and the gripper has not reached its end yet
        super().__init__(config.action_timeout_s, throttle, bool(config.start_stopped))

    @property
    def stopped(self) -> bool:
        """True while the emergency stop is engaged."""
        return self.adapter.stopped

    @property
    def gripper_driving(self) -> bool:
        """True while a nonzero gripper PWM is applied (stopped with PWM 0 once the gripper reaches its end)."""
        return self._grip_driving

    def on_joint_state(self, names: Sequence[str], positions: Sequence[float],
                       now: float | None = None) -> tuple[np.ndarray | None, ArmCommands]:
        """A JointState -> (Octo's 8-D proprio to publish, or None for a message without the arm joints;
        commands: PWM 0 when a driven gripper reached the end it was driven to)."""
        out = ArmCommands()
        try:
            proprio = self.adapter.observe(list(names), list(positions))
        except ValueError as exc:
            self._log(out, "error", "joints", str(exc), now)
            return None, out
        if self._grip_driving and widowx.gripper_at_limit(bool(self._last_grip), self.adapter.gripper):
            out.gripper, self._grip_driving = 0.0, False
        return proprio, out

    def on_action(self, a7: Sequence[float], stamp_ns: int, now_ns: int, now: float | None = None,
                  valid_for_ns: int = 0) -> ArmCommands:
        """An EefDeltaAction (7,) stamped ``stamp_ns``, valid for ``valid_for_ns``, at node time ``now_ns`` -> the arm
        target and, when the gripper's direction changes, its PWM (``applied`` when the action itself became the
        target). Actions the gate drops (unstamped, stale, from before the last stop: amf_ros/robots/action_gate.py),
        refused ones (not 7 finite numbers), and actions while e-stopped or before the first joint state send
        nothing."""
        out = ArmCommands()
        if (refused := self._gate_refusal(out, stamp_ns, valid_for_ns, now_ns, now)) is not None:
            return refused
        try:
            cmd = self.adapter.apply(np.asarray(a7, dtype=np.float64))
        except ValueError as exc:
            return self._refuse(out, INVALID, "error", "refused", f"refused action: {exc}", now)
        if cmd is None:
            return self._not_ready(out, self.adapter.stopped, "no joint state yet", now)
        if not cmd.ik_ok:
            self.counts.refuse(NO_IK)
            self._log(out, "warn", "ik", "no IK solution within joint limits; holding", now)
        else:
            self.counts.applied += 1
        out.arm = [float(v) for v in cmd.arm]
        out.applied = bool(cmd.ik_ok)
        if cmd.gripper_pwm != 0.0 and cmd.gripper_open != self._last_grip:
            out.gripper = float(cmd.gripper_pwm)
            self._last_grip, self._grip_driving = cmd.gripper_open, True
        return out

    def estop(self, engage: bool) -> tuple[ArmCommands, str]:
        """Engage (the arm holds its measured joints, the gripper stops squeezing, actions are refused) or
        release (the target re-anchors at the arm) the emergency stop; returns the commands and a message."""
        self.adapter.emergency_stop(bool(engage))
        self.counts.set_estop(bool(engage))
        out = ArmCommands()
        if engage:
            hold = self.adapter.hold_command()
            if hold is not None:
                out.arm = [float(v) for v in hold.arm]
            out.gripper = 0.0
            self._last_grip, self._grip_driving = None, False
        message = "e-stop ENGAGED: arm holds, actions refused" if engage else "e-stop released"
        out.logs.append(("warn", message))
        return out, message

    def stop(self, stamp_ns: int, now_ns: int, source: str, reason: str) -> ArmCommands:
        """An ArmStop: drop the actions stamped up to it and hold the measured joints (not latched: a newer action
        moves the arm again; the e-stop is the latched stop)."""
        self.gate.stop(stamp_ns, now_ns)
        out = ArmCommands()
        hold = self.adapter.hold_command()
        if hold is not None:
            out.arm = [float(v) for v in hold.arm]
        if self._grip_driving:
            out.gripper, self._grip_driving = 0.0, False
        out.logs.append(("info", f"stop from {source or '?'} ({reason[:200] or 'no reason'}): holding"))
        return out
