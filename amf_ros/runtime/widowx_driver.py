"""What widowx_driver decides, without ROS, on top of the arm's own logic: log lines throttled per kind, the
Interbotix motion-profile request, and the one-line message when the Interbotix messages are missing.

Which commands each joint state, action, stop and e-stop request gives, which actions are dropped (stale, refused,
stopped) and when a PWM-driven gripper is stopped is the arm's logic, :class:`amf_ros.robots.widowx_arm.WidowXArm`
(the embedded WidowX simulator runs the same); the maths (IK, limits, proprio) is :mod:`amf_ros.robots.widowx`.
``amf_ros/ros/nodes/widowx_driver.py`` maps messages to :class:`WidowXDriver` calls and
:class:`~amf_ros.robots.widowx_arm.ArmCommands` back to Interbotix messages. Not thread-safe: the node calls it from
one callback group.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

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
