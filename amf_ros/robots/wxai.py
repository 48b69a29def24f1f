"""A WidowX AI (Trossen) behind the WidowX interfaces: EefDeltaAction in, Octo's 8-D proprio out, through Trossen's own
driver (``trossen_arm``, the Python wrapper of libtrossen_arm; pinned in requirements/base.txt).

Why the vendor's Cartesian command in *joint* interpolation space: ``TrossenArmDriver.set_cartesian_positions`` takes an
end-effector pose [x, y, z, angle-axis] in the base frame and solves it with the vendor's own kinematics (the link and
joint parameters the controller holds), so the package carries no kinematic model of this arm. With
``InterpolationSpace.joint`` the inverse kinematics is solved once, when the call is made: an unreachable target raises
at once (measured against trossen-arm-sim: 0.4 ms) and the driver stays usable, so the action is refused as ``no IK
solution`` and the arm holds. With ``InterpolationSpace.cartesian`` the IK runs inside the driver's daemon along the
path; a failure there is rethrown by every later call (also measured), which leaves the arm unusable until it is
configured again: not acceptable for a stream of actions a policy computes. One 0.2 s BridgeData step is a short move
(at most ``max_translation`` per axis), so the joint-space path stays close to the straight line.

The BridgeData conventions are the WidowX 250's (:mod:`amf_ros.robots.widowx`): the vendor's end-effector frame has x
along the gripper (as Interbotix's ``ee_gripper_link``), so the state's rotation is measured relative to
``DEFAULT_ROTATION`` (gripper pointing down) and an action rotates about the measured end-effector position and
translates in the base frame, applied to the previous target. The action gate, the per-step bounds, the workspace box
and the counts are the shared ones (:mod:`amf_ros.robots.action_gate`, :class:`~amf_ros.policies.postprocess.
WorkspaceBounds`). The gripper is a position-controlled carriage (metres); the proprio's gripper entry is its opening
over ``gripper_open_m`` in [0, 1] (1 = open).

E-stop: engaging commands the measured joints and gripper position (the arm holds where it is) and refuses every
action until released; releasing re-anchors the target at the measured pose. An ArmStop holds the same way without
latching. Not thread-safe: call it from one thread (the node: one callback group; the simulator: its step lock).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from amf_ros.policies.postprocess import WorkspaceBounds
from amf_ros.robots.action_gate import INVALID, NO_IK
from amf_ros.robots.kinematics import exp3, log3
from amf_ros.robots.widowx import delta_transform, proprio
from amf_ros.robots.widowx_arm import ArmCommands, GatedArm, LineThrottle, WidowXArmConfig

_ARM = WidowXArmConfig()
MODEL = "wxai_v0"
"""``trossen_arm.Model`` of the WidowX AI."""
END_EFFECTORS = ("wxai_v0_follower", "wxai_v0_leader", "wxai_v0_base")
"""``trossen_arm.StandardEndEffector`` variants of the WidowX AI (the follower carries the gripper and the camera)."""
INSTALL_HINT = "pip install trossen-arm==1.11.0 trossen-arm-sim==0.2.3 (or pip install 'amf_ros[wxai]')"
NEUTRAL_POSE = (0.25, 0.0, 0.12)
"""End-effector position (m, base frame) of the start pose, gripper pointing down (BridgeData's neutral pose is
about here on the WidowX 250)."""


NO_IP_LINE = ("the WidowX AI's IP address is not set: pass it (launch: wxai_ip:=ADDR, amf up: --wxai-ip ADDR) or set "
              "widowx_driver's wxai_ip in the params file (config/wxai.yaml ships Trossen's factory address)")
"""The one line a WidowX AI without an address is refused with (the driver node, :meth:`WXAIArm.connect`)."""


class ConnectError(RuntimeError):
    """The arm's controller did not answer at ``WXAIConfig.ip`` within the connect timeout (or refused to be
    configured); the message names the address and the bound."""


def require_trossen_arm() -> Any:
    """The ``trossen_arm`` module, or an ImportError that says what to install."""
    try:
        import trossen_arm
    except ImportError as exc:
        raise ImportError(f"the WidowX AI needs Trossen's driver `trossen_arm` ({exc}); install: {INSTALL_HINT}") \
            from exc
    return trossen_arm


@dataclass(frozen=True)
class WXAIConfig:
    """Settings of a WidowX AI (wxai backend of widowx_driver: its parameters of the same names; the shared ones take
    their defaults from :class:`~amf_ros.robots.widowx_arm.WidowXArmConfig`)."""

    ip: str = ""
    """IPv4 address of the arm's controller; required by :meth:`WXAIArm.connect` (config/wxai.yaml ships Trossen's
    factory address; trossen-arm-sim listens on 127.0.0.1)."""
    end_effector: str = "wxai_v0_follower"
    """``trossen_arm.StandardEndEffector`` variant (:data:`END_EFFECTORS`)."""
    connect_timeout_s: float = 20.0
    """Bound on ``TrossenArmDriver.configure`` (the driver's own default), s."""
    workspace_low: tuple[float, ...] = _ARM.workspace_low
    """Lower corner of the allowed end-effector target, m (base frame)."""
    workspace_high: tuple[float, ...] = (0.45, 0.25, 0.15)
    """Upper corner of the allowed end-effector target, m. With the gripper pointing down the vendor's IK reaches
    z = 0.15 m over x 0.15-0.35 m and nothing at z = 0.2 m (scanned on trossen-arm-sim); targets it cannot reach are
    refused (the arm holds)."""
    max_translation: float = _ARM.max_translation
    """Largest translation per action and axis, m."""
    max_rotation: float = _ARM.max_rotation
    """Largest rotation per action and Euler angle, rad."""
    control_period_s: float = _ARM.control_period_s
    """Duration of one action, s: the goal time of each vendor command (BridgeData: 0.2 s = 5 Hz)."""
    action_timeout_s: float = _ARM.action_timeout_s
    """The arm's cap on an action's age, s (0 = only the action's own valid_for)."""
    gripper_open_m: float = 0.04
    """Carriage position of the open gripper, m (the controller's limit is 0.044); closed is 0."""
    start_stopped: bool = _ARM.start_stopped
    """Start with the emergency stop engaged."""

    def __post_init__(self) -> None:
        if self.end_effector not in END_EFFECTORS:
            raise ValueError(f"end_effector must be one of {END_EFFECTORS}, got {self.end_effector=}")
        if not 0.0 < self.gripper_open_m <= 0.044:
            raise ValueError(f"gripper_open_m must be in (0, 0.044] m, got {self.gripper_open_m=}")
        if self.control_period_s <= 0:
            raise ValueError(f"control_period_s must be > 0, got {self.control_period_s=}")

    @property
    def workspace(self) -> WorkspaceBounds:
        """The target box and per-step bounds."""
        return WorkspaceBounds(low=tuple(float(v) for v in self.workspace_low),
                               high=tuple(float(v) for v in self.workspace_high),
                               max_translation=float(self.max_translation), max_rotation=float(self.max_rotation))


def pose6_to_matrix(pose: Sequence[float]) -> np.ndarray:
    """The vendor's Cartesian pose [x, y, z, angle-axis (3)] (m, rad) -> (4, 4)."""
    p = np.asarray(pose, dtype=np.float64)
    if p.shape != (6,):
        raise ValueError(f"a Cartesian pose is 6 numbers [xyz, angle-axis], got shape {p.shape}")
    T = np.eye(4)
    T[:3, :3] = exp3(p[3:])
    T[:3, 3] = p[:3]
    return T


def matrix_to_pose6(T: np.ndarray) -> list[float]:
    """(4, 4) -> the vendor's Cartesian pose [x, y, z, angle-axis (3)]."""
    T = np.asarray(T, dtype=np.float64)
    return [float(v) for v in np.concatenate([T[:3, 3], log3(T[:3, :3])])]


class WXAIArm(GatedArm):
    """One WidowX AI through ``trossen_arm``: the same calls as :class:`~amf_ros.robots.widowx_arm.WidowXArm`
    (``on_action``, ``estop``, ``stop``, ``counts``, ``stopped``) plus :meth:`observe` (the arm is polled, it
    publishes no joint states) and :meth:`connect` / :meth:`close`.

    Args:
        config: the arm's settings.
        throttle: limits repeated log lines (None = every line is logged).
        driver: a ``trossen_arm.TrossenArmDriver`` (None = made by :meth:`connect`).
    """

    LOG_KEY = "wxai"

    def __init__(self, config: WXAIConfig, throttle: LineThrottle | None = None, driver: Any = None) -> None:
        self.config = config
        self.workspace = config.workspace
        self.driver = driver
        self._ta: Any = None
        super().__init__(config.action_timeout_s, throttle, bool(config.start_stopped))
        self._stopped = bool(config.start_stopped)
        self.pose: np.ndarray | None = None
        """Last measured end-effector pose (4, 4), base frame (the vendor's forward kinematics)."""
        self.gripper = 1.0
        """Last measured gripper opening in [0, 1]."""
        self._target: np.ndarray | None = None
        self._grip_open: bool | None = None  # the gripper's last commanded direction (True = open)

    # -- connection ------------------------------------------------------------------------------------------------
    def connect(self) -> None:
        """Configure the driver for the controller at ``config.ip`` (clearing a latched controller error), put every
        joint in position mode, read the state and anchor the target there.

        Raises:
            ValueError: ``config.ip`` is empty (no address given).
            ConnectError: the controller did not answer within ``config.connect_timeout_s`` or refused the
                configuration (the vendor's message, first line, with the address and the bound).
        """
        if not self.config.ip:
            raise ValueError(NO_IP_LINE)
        ta = self._ta = require_trossen_arm()
        if self.driver is None:
            self.driver = ta.TrossenArmDriver()
        start = time.monotonic()
        try:
            self.driver.configure(ta.Model.wxai_v0, getattr(ta.StandardEndEffector, self.config.end_effector),
                                  self.config.ip, True, float(self.config.connect_timeout_s))
        except ta.RuntimeError as exc:  # the vendor's own bounded connect: it never waits longer than the timeout
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            raise ConnectError(f"no WidowX AI at {self.config.ip}: gave up after {time.monotonic() - start:.1f} s "
                               f"(wxai_connect_timeout_s = {self.config.connect_timeout_s:g} s): {first}; check that "
                               "the arm is powered and on this network and that wxai_ip is its controller's "
                               "address") from exc
        self.driver.set_all_modes(ta.Mode.position)
        self.observe()
        self.reset()

    def close(self) -> None:
        """Release the driver (its controller goes idle, as ``TrossenArmDriver.cleanup`` does)."""
        if self.driver is not None:
            self.driver.cleanup()

    # -- state ------------------------------------------------------------------------------------------------------
    @property
    def stopped(self) -> bool:
        """True while the emergency stop is engaged."""
        return self._stopped

    def observe(self) -> np.ndarray:
        """Read the arm (the vendor's forward kinematics and the gripper carriage); Octo's 8-D proprio
        [x, y, z, roll, pitch, yaw, 0, gripper]."""
        if self.driver is None:
            raise RuntimeError("connect() first")
        self.pose = pose6_to_matrix(list(self.driver.get_cartesian_positions()))
        self.gripper = float(np.clip(self.driver.get_gripper_position() / self.config.gripper_open_m, 0.0, 1.0))
        if self._target is None:
            self.reset()
        return proprio(self.pose, self.gripper)

    def reset(self) -> None:
        """Re-anchor the target at the measured pose (after homing, a release of the e-stop, a new episode)."""
        if self.pose is None:
            raise RuntimeError("no state read yet: call observe() first")
        self._target = self.pose.copy()
        self._grip_open = None

    @property
    def target(self) -> np.ndarray | None:
        """The end-effector target (4, 4) the last applied action set (None before the first state)."""
        return None if self._target is None else self._target.copy()

    # -- actions ----------------------------------------------------------------------------------------------------
    def on_action(self, a7: Sequence[float], stamp_ns: int, now_ns: int, now: float | None = None,
                  valid_for_ns: int = 0) -> ArmCommands:
        """An EefDeltaAction (7,) stamped ``stamp_ns``, valid for ``valid_for_ns``, at node time ``now_ns`` -> one
        vendor Cartesian command (goal time ``control_period_s``, not blocking) and, when the gripper's direction
        changes, one gripper position command. ``applied`` when the action became the arm's target; dropped (gate),
        invalid, e-stopped, before-the-first-state and unreachable actions send nothing (an unreachable one is refused
        by the vendor's IK: the arm holds its previous target). A driver error other than the IK's (the controller
        lost, in an error state) is raised: the node exits and is restarted, which configures the driver again."""
        out = ArmCommands()
        if (refused := self._gate_refusal(out, stamp_ns, valid_for_ns, now_ns, now)) is not None:
            return refused
        a = np.asarray(a7, dtype=np.float64)
        if a.shape != (7,) or not np.all(np.isfinite(a)):
            return self._refuse(out, INVALID, "error", "refused",
                                f"refused action: must be 7 finite numbers, got {a!r}", now)
        if self._stopped or self._target is None or self.pose is None:
            return self._not_ready(out, self._stopped, "no state read yet", now)
        a = self.workspace.clip_delta(a)
        target = delta_transform(a, self.pose[:3, 3]) @ self._target
        target[:3, 3] = self.workspace.clip_position(target[:3, 3])
        ta, period = self._ta or require_trossen_arm(), float(self.config.control_period_s)
        try:
            self.driver.set_cartesian_positions(matrix_to_pose6(target), ta.InterpolationSpace.joint, period, False)
        except ta.LogicError as exc:  # the vendor's IK (a lost connection is a trossen_arm.RuntimeError: raised)
            return self._refuse(out, NO_IK, "warn", "ik",
                                f"the vendor's IK refused the target; holding ({str(exc).splitlines()[0]})", now)
        self._target = target
        self.counts.applied += 1
        out.applied = True
        open_ = bool(a[6] >= 0.5)
        if open_ != self._grip_open:
            self.driver.set_gripper_position(self.config.gripper_open_m if open_ else 0.0, period, False)
            self._grip_open = open_
        return out

    def hold(self) -> None:
        """Command the measured joints and gripper position: the arm stays where it is (not blocking)."""
        if self.driver is None:
            return
        positions = list(self.driver.get_all_positions())
        self.driver.set_all_positions(positions, float(self.config.control_period_s), False)
        self._grip_open = None

    def estop(self, engage: bool) -> tuple[ArmCommands, str]:
        """Engage (hold the measured joints and gripper, refuse every action) or release (re-anchor the target at the
        measured pose) the emergency stop; returns (log lines, the driver sent the commands itself) and a message."""
        self._stopped = bool(engage)
        self.counts.set_estop(self._stopped)
        out = ArmCommands()
        if engage:
            self.hold()
        elif self.driver is not None:
            self.observe()
            self.reset()
        message = "e-stop ENGAGED: arm holds, actions refused" if engage else "e-stop released"
        out.logs.append(("warn", message))
        return out, message

    def stop(self, stamp_ns: int, now_ns: int, source: str, reason: str) -> ArmCommands:
        """An ArmStop: drop the actions stamped up to it and hold the measured joints (not latched: a newer action
        moves the arm again, from the measured pose)."""
        self.gate.stop(stamp_ns, now_ns)
        out = ArmCommands()
        if self.driver is not None:
            self.hold()
            self.observe()
            self.reset()
        out.logs.append(("info", f"stop from {source or '?'} ({reason[:200] or 'no reason'}): holding"))
        return out
