"""EefDeltaAction -> wx250s joint commands, joint states -> Octo's 8-D proprio, limits and emergency stop.

Why: the real arm is driven the way BridgeData V2 was collected (``bridge_data_robot``'s ``widowx_envs``), so
that Octo's actions mean the same thing here as in its training data:

- state = [x, y, z, roll, pitch, yaw, gripper] with the rotation measured relative to ``DEFAULT_ROTATION`` (the
  gripper pointing down), extrinsic x-y-z Euler angles (``transformation_utils.transform2state``);
- an action rotates about the *current* end-effector position with base-aligned axes and translates in the base
  frame, applied to the previous *target* pose (``action2transform_local``, ``RobotBaseEnv._next_qpos``);
- the target xyz is clipped to the workspace box (``action_clipping='xyz'``);
- Octo's proprio is ``[x, y, z, roll, pitch, yaw, 0, gripper]`` (Octo ``examples/envs/widowx_env.py``).

On top of that the adapter enforces per-step action bounds, joint limits (IK solutions outside are refused)
and a joint speed limit (a step that would exceed it is shortened along the same joint direction), and has a
latched emergency stop: while engaged, :meth:`WidowXAdapter.apply` returns no command at all.
No rclpy here; ``amf_ros/robots/widowx_arm.py`` decides what the arm sends with these calls (for widowx_driver and
the embedded simulator alike), and ``amf_ros/ros/nodes/widowx_driver.py`` maps messages to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from amf_ros.policies.postprocess import WorkspaceBounds, matrix_to_rpy, rpy_to_matrix
from amf_ros.robots import wx250s

DEFAULT_ROTATION = np.array([[0.0, 0.0, 1.0], [0.0, 1.0, 0.0], [-1.0, 0.0, 0.0]])
"""End-effector orientation with zero roll/pitch/yaw in BridgeData's state: gripper pointing straight down."""
PROPRIO_NAMES = ("x", "y", "z", "roll", "pitch", "yaw", "pad", "gripper")
"""Names of the 8-D proprio vector Octo's WidowX setup uses (``pad`` is always 0)."""


def pose_to_state(T: np.ndarray, gripper: float) -> np.ndarray:
    """Pose (4, 4) + gripper opening -> BridgeData state (7,) [xyz, rpy relative to DEFAULT_ROTATION, gripper]."""
    T = np.asarray(T, dtype=float)
    rpy = matrix_to_rpy(T[:3, :3] @ DEFAULT_ROTATION.T)
    return np.concatenate([T[:3, 3], rpy, [float(gripper)]])


def state_to_pose(state: Sequence[float]) -> np.ndarray:
    """Inverse of :func:`pose_to_state` (the gripper entry is ignored), (4, 4)."""
    s = np.asarray(state, dtype=float)
    if s.shape[0] < 6:
        raise ValueError(f"state needs at least xyz + rpy, got {s.shape=}")
    T = np.eye(4)
    T[:3, :3] = rpy_to_matrix(s[3:6]) @ DEFAULT_ROTATION
    T[:3, 3] = s[:3]
    return T


def proprio(T: np.ndarray, gripper: float) -> np.ndarray:
    """Octo's 8-D WidowX proprio [x, y, z, roll, pitch, yaw, 0, gripper] from a pose (4, 4) and gripper in [0, 1]."""
    s = pose_to_state(T, gripper)
    return np.concatenate([s[:6], [0.0], s[6:]])


def delta_transform(action: Sequence[float], eef_position: Sequence[float]) -> np.ndarray:
    """The (4, 4) transform that applies a 7-D action's xyz/rpy about ``eef_position`` (base-aligned axes).

    T = Teef @ [R(rpy), xyz] @ Teef^-1 with Teef a pure translation to the end effector
    (bridge_data_robot ``action2transform_local``); the new target is ``T @ previous_target``.
    """
    a = np.asarray(action, dtype=float)
    Teef = np.eye(4)
    Teef[:3, 3] = np.asarray(eef_position, dtype=float)
    D = np.eye(4)
    D[:3, :3] = rpy_to_matrix(a[3:6])
    D[:3, 3] = a[:3]
    Tinv = np.eye(4)
    Tinv[:3, 3] = -Teef[:3, 3]
    return Teef @ D @ Tinv


@dataclass
class WidowXLimits:
    """Safety limits and gripper settings of the real-arm adapter."""

    workspace: WorkspaceBounds = field(default_factory=WorkspaceBounds)
    """Target-position box and per-step delta bounds (defaults: Octo's WidowX eval bounds)."""
    max_joint_speed: float = 1.0
    """Largest joint speed commanded, rad/s (URDF limit: pi); longer steps are shortened."""
    period_s: float = 0.2
    """Control period the speed limit refers to, s (BridgeData: 0.2 s = 5 Hz)."""
    gripper_pressure: float = 0.5
    """Gripper effort in [0, 1] (Interbotix gripper_pressure) mapped to PWM between the two limits below."""
    gripper_pwm_limits: tuple[float, float] = (150.0, 350.0)
    """PWM at pressure 0 and 1 (Interbotix gripper_pressure_lower_limit / upper_limit)."""

    def __post_init__(self) -> None:
        if not 0 < self.max_joint_speed <= float(wx250s.JOINT_VELOCITY_LIMIT.min()):
            raise ValueError(f"max_joint_speed must be in (0, pi] rad/s, got {self.max_joint_speed=}")
        if self.period_s <= 0:
            raise ValueError(f"period_s must be > 0, got {self.period_s=}")
        if not 0.0 <= self.gripper_pressure <= 1.0:
            raise ValueError(f"gripper_pressure must be in [0, 1], got {self.gripper_pressure=}")

    @property
    def gripper_pwm(self) -> float:
        """Gripper PWM for ``gripper_pressure``, linear between the two PWM limits."""
        lo, hi = self.gripper_pwm_limits
        return lo + self.gripper_pressure * (hi - lo)


@dataclass
class JointCommand:
    """What the driver publishes for one action: arm joints (6,) and the gripper's signed PWM."""

    arm: np.ndarray
    gripper_open: bool
    gripper_pwm: float
    """Signed effort for JointSingleCommand('gripper'): +pwm opens, -pwm closes."""
    workspace_clipped: bool = False
    speed_limited: bool = False
    ik_ok: bool = True
    """False if no IK solution within joint limits existed: ``arm`` then repeats the last command (hold)."""


def parse_joint_state(names: Sequence[str], positions: Sequence[float]) -> tuple[np.ndarray, float]:
    """sensor_msgs/JointState fields -> (arm joints (6,) in ARM_JOINTS order, gripper opening in [0, 1]).

    Raises:
        ValueError: an arm joint is missing (e.g. a message from another robot).
    """
    lookup = dict(zip(names, positions, strict=False))
    missing = [j for j in wx250s.ARM_JOINTS if j not in lookup]
    if missing:
        raise ValueError(f"joint_states lacks arm joints {missing}; got names {list(names)}")
    q = np.array([lookup[j] for j in wx250s.ARM_JOINTS], dtype=float)
    grip = wx250s.finger_to_gripper(lookup[wx250s.FINGER_JOINT]) if wx250s.FINGER_JOINT in lookup else 1.0
    return q, grip


class WidowXAdapter:
    """Turns a stream of 7-D end-effector deltas into wx250s joint targets (one instance per arm)."""

    def __init__(self, limits: WidowXLimits | None = None) -> None:
        self.limits = limits or WidowXLimits()
        self.q: np.ndarray | None = None
        """Last measured arm joints (6,)."""
        self.gripper = 1.0
        """Last measured gripper opening in [0, 1]."""
        self._target: np.ndarray | None = None
        self._last_cmd: np.ndarray | None = None
        self._stopped = False

    # -- state ---------------------------------------------------------------------------------------------
    def observe(self, names: Sequence[str], positions: Sequence[float]) -> np.ndarray:
        """Take a joint_states message; returns Octo's 8-D proprio. The first call also sets the target pose."""
        self.q, self.gripper = parse_joint_state(names, positions)
        if self._target is None:
            self.reset()
        return proprio(wx250s.fk(self.q), self.gripper)

    def reset(self) -> None:
        """Re-anchor the target pose at the measured pose (call after homing, or before a new episode)."""
        if self.q is None:
            raise RuntimeError("no joint state received yet")
        self._target = wx250s.fk(self.q)
        self._last_cmd = self.q.copy()

    @property
    def target_state(self) -> np.ndarray:
        """Current target in BridgeData state form (7,) (gripper entry = measured opening)."""
        if self._target is None:
            raise RuntimeError("no joint state received yet")
        return pose_to_state(self._target, self.gripper)

    # -- emergency stop ------------------------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        """True while the emergency stop is engaged."""
        return self._stopped

    def emergency_stop(self, engage: bool = True) -> None:
        """Engage (no further commands) or release the stop; releasing re-anchors the target at the arm."""
        self._stopped = bool(engage)
        if not engage and self.q is not None:
            self.reset()

    def hold_command(self) -> JointCommand | None:
        """A command that keeps the arm where it is now (what the driver publishes when the stop engages)."""
        if self.q is None:
            return None
        return JointCommand(arm=self.q.copy(), gripper_open=self.gripper >= 0.5, gripper_pwm=0.0)

    # -- actions -------------------------------------------------------------------------------------------
    def apply(self, action: Sequence[float]) -> JointCommand | None:
        """One 7-D EefDeltaAction -> joint command, or None while stopped or before the first joint state."""
        if self._stopped or self.q is None or self._target is None or self._last_cmd is None:
            return None
        a = np.asarray(action, dtype=float)
        if a.shape != (7,) or not np.all(np.isfinite(a)):
            raise ValueError(f"action must be 7 finite numbers, got {a!r}")
        lim = self.limits
        a = lim.workspace.clip_delta(a)
        target = delta_transform(a, wx250s.fk(self.q)[:3, 3]) @ self._target
        clipped_xyz = lim.workspace.clip_position(target[:3, 3])
        workspace_clipped = bool(np.any(np.abs(clipped_xyz - target[:3, 3]) > 1e-12))
        target[:3, 3] = clipped_xyz
        open_ = bool(a[6] >= 0.5)
        pwm = lim.gripper_pwm if open_ else -lim.gripper_pwm
        sol = wx250s.ik(target, guess=self._last_cmd)
        if not sol.ok:
            return JointCommand(arm=self._last_cmd.copy(), gripper_open=open_, gripper_pwm=pwm,
                                workspace_clipped=workspace_clipped, ik_ok=False)
        dq = sol.q - self._last_cmd
        max_step = lim.max_joint_speed * lim.period_s
        worst = float(np.max(np.abs(dq)))
        speed_limited = worst > max_step
        q_cmd = self._last_cmd + dq * (max_step / worst) if speed_limited else sol.q
        self._target = wx250s.fk(q_cmd) if speed_limited else target
        self._last_cmd = q_cmd
        return JointCommand(arm=q_cmd.copy(), gripper_open=open_, gripper_pwm=pwm,
                            workspace_clipped=workspace_clipped, speed_limited=speed_limited)


def limits_from_params(p: Any) -> WidowXLimits:
    """WidowXLimits from the arm's settings: a :class:`~amf_ros.robots.widowx_arm.WidowXArmConfig`, or anything with
    its field names (widowx_driver's parameters, amf_ros/bringup/params/widowx_driver.py)."""
    low, high = tuple(float(v) for v in p.workspace_low), tuple(float(v) for v in p.workspace_high)
    workspace = WorkspaceBounds(low=low, high=high, max_translation=float(p.max_translation),
                                max_rotation=float(p.max_rotation))
    if p.gripper_pwm_low > p.gripper_pwm_high:
        raise ValueError(f"gripper_pwm_low must be <= gripper_pwm_high, got {p.gripper_pwm_low=} "
                         f"{p.gripper_pwm_high=}")
    return WidowXLimits(workspace=workspace, max_joint_speed=float(p.max_joint_speed),
                        period_s=float(p.control_period_s), gripper_pressure=float(p.gripper_pressure),
                        gripper_pwm_limits=(float(p.gripper_pwm_low), float(p.gripper_pwm_high)))


def gripper_at_limit(opening: bool, gripper: float, margin: float = 0.02) -> bool:
    """True when a PWM-driven gripper reached the end it is driven to (measured opening ``gripper`` in [0, 1]):
    the driver then sends PWM 0, as Interbotix's gripper interface does, so the motor does not stall at the stop."""
    return gripper >= 1.0 - margin if opening else gripper <= margin
