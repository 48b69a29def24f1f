"""What widowx_driver decides, without ROS, on top of the arm's own logic: log lines throttled per kind, the
Interbotix motion-profile request, the bounded wait for xs_sdk at start, and the one-line message when the Interbotix
messages are missing.

Which commands each joint state, action, stop and e-stop request gives, which actions are dropped (stale, refused,
stopped) and when a PWM-driven gripper is stopped is the arm's logic, :class:`amf_ros.robots.widowx_arm.WidowXArm`
(the embedded WidowX simulator runs the same); the maths (IK, limits, proprio) is :mod:`amf_ros.robots.widowx`.
``amf_ros/ros/nodes/widowx_driver.py`` maps messages to :class:`WidowXDriver` calls and
:class:`~amf_ros.robots.widowx_arm.ArmCommands` back to Interbotix messages. Not thread-safe: the node calls it from
one callback group.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Callable

from amf_ros.robots.widowx_arm import WidowXArm
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


XS_SDK_START = "ros2 launch interbotix_xsarm_control xsarm_control.launch.py robot_model:=wx250s"
"""How Interbotix starts xs_sdk for a WidowX 250 6DOF (named in the line of a driver that gave up waiting)."""
SDK_POLL_S = 0.1
"""How often the driver looks for xs_sdk while it waits (a graph query each time, nothing sent)."""
SDK_LOG_EVERY_S = 5.0
"""How often a waiting driver says what it still misses."""


def wait_for_sdk(missing: Callable[[], list[str]], bound_s: float, log: Callable[[str], None],
                 poll_s: float = SDK_POLL_S, log_every_s: float = SDK_LOG_EVERY_S,
                 clock: Callable[[], float] = time.monotonic, sleep: Callable[[float], None] = time.sleep) -> list[str]:
    """Wait, at most ``bound_s``, until xs_sdk is up: call ``missing()`` (what of xs_sdk is not seen yet, e.g. ["no
    publisher on /wx250s/joint_states"]; it must not block) every ``poll_s`` until it returns [], and ``log`` what is
    still missing every ``log_every_s``. Why: the driver may start before xs_sdk (launch starts both at once; xs_sdk
    pings every motor first) and must then still connect, while one that never sees it must end, not hang.

    Returns:
        [] once everything was seen, else what was still missing when the bound passed (``missing()`` is called once
        more at the bound, so ``bound_s`` = 0 checks exactly once).
    """
    if bound_s < 0:
        raise ValueError(f"bound_s must be >= 0, got {bound_s=}")
    start = clock()
    next_log = start  # say at once what is missing, then every log_every_s
    while True:
        gone = missing()
        now = clock()
        if not gone or now - start >= bound_s:
            return gone
        if now >= next_log:
            log(f"waiting for xs_sdk ({now - start:.0f} s of sdk_wait_s {bound_s:g} s): {'; '.join(gone)}")
            next_log += log_every_s
        sleep(min(poll_s, max(bound_s - (now - start), 0.0)))


def sdk_missing_line(gone: list[str], bound_s: float) -> str:
    """The one line a driver that never saw xs_sdk ends with."""
    return (f"widowx_driver: the Interbotix xs_sdk did not come up within sdk_wait_s = {bound_s:g} s "
            f"({'; '.join(gone)}); start it first ({XS_SDK_START}) or raise sdk_wait_s")


class WidowXDriver(WidowXArm):
    """widowx_driver's state: the arm's logic (:class:`~amf_ros.robots.widowx_arm.WidowXArm`) with throttled log
    lines, and the node's own settings.

    Args:
        p: widowx_driver's parameters (amf_ros/bringup/params/widowx_driver.py).
    """

    def __init__(self, p: WidowxDriverParams) -> None:
        super().__init__(p.arm_config(), throttle=ErrorThrottle())
        self.p = p

    def profile_request(self) -> dict[str, Any] | None:
        """OperatingModes request fields for a time-based arm profile of ``control_period_s`` (None: no
        operating_modes_service configured, leave the profile as is)."""
        if not self.p.operating_modes_service:
            return None
        period_ms = int(round(self.p.control_period_s * 1000))
        return {"cmd_type": "group", "name": self.p.arm_group, "mode": "position", "profile_type": "time",
                "profile_velocity": period_ms, "profile_acceleration": max(period_ms // 4, 1)}

    def gripper_mode_request(self) -> dict[str, Any] | None:
        """OperatingModes request fields that put the gripper in PWM mode, the mode its signed PWM commands need
        (None: no operating_modes_service configured).

        Why: xs_sdk reads a JointSingleCommand in the gripper's current mode; a mode config with the gripper in
        ``position`` or ``current_based_position`` would take PWM 250 as 250 rad. Interbotix's modes.yaml sets
        ``pwm`` and its gripper interface only warns when it is not (xs_robot/gripper.py); the driver sets it.
        Profile fields as xs_sdk's defaults for a single without them (velocity, 0, 0; unused in PWM mode)."""
        if not self.p.operating_modes_service:
            return None
        return {"cmd_type": "single", "name": self.p.gripper_name, "mode": "pwm", "profile_type": "velocity",
                "profile_velocity": 0, "profile_acceleration": 0}
