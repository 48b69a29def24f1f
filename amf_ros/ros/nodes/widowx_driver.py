"""widowx_driver: EefDeltaAction -> Interbotix wx250s joint commands; joint states -> Octo's 8-D proprio.

A thin adapter around :class:`amf_ros.robots.widowx.WidowXAdapter` (IK, workspace/speed limits, gripper,
e-stop). It talks to the Interbotix xs_sdk (``interbotix_xsarm_control``) through its ROS 2 interface:
publishes ``interbotix_xs_msgs/JointGroupCommand`` (arm group, position mode) and ``JointSingleCommand``
(gripper, PWM), reads ``sensor_msgs/JointState``. Each action received is applied at once (one BridgeData
step; the xs_sdk moves to the target over ``control_period_s`` with a time-based profile set at start).
"""

from __future__ import annotations

import numpy as np
import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import JointState
from std_srvs.srv import SetBool

from amf_ros.msg import EefDeltaAction, StateVector
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.robots import widowx

_INSTALL = ("interbotix_xs_msgs is needed for robot:=real. On ROS 2 Humble: `sudo apt install "
            "ros-humble-interbotix-xs-msgs` if available, otherwise build Interbotix/interbotix_ros_core "
            "(branch humble/jazzy) in your colcon workspace; see README 'Deploying with Octo'.")


def _interbotix_msgs():
    try:
        from interbotix_xs_msgs.msg import JointGroupCommand, JointSingleCommand
        from interbotix_xs_msgs.srv import OperatingModes
    except ImportError as exc:
        raise ImportError(f"{exc}. {_INSTALL}") from exc
    return JointGroupCommand, JointSingleCommand, OperatingModes


class WidowXDriver(Node):
    """See the module docstring; every callback runs in one mutually exclusive group (the adapter is stateful)."""

    def __init__(self) -> None:
        super().__init__("widowx_driver")
        self.p = declare(self, "widowx_driver")
        self._JointGroup, self._JointSingle, OperatingModes = _interbotix_msgs()
        self.adapter = widowx.WidowXAdapter(widowx.limits_from_params(self.p))
        self.adapter.emergency_stop(bool(self.p.start_stopped))
        group = MutuallyExclusiveCallbackGroup()
        reliable = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
        self._arm_pub = self.create_publisher(self._JointGroup, self.p.joint_group_topic, reliable)
        self._grip_pub = self.create_publisher(self._JointSingle, self.p.joint_single_topic, reliable)
        self._state_pub = self.create_publisher(StateVector, self.p.state_topic, reliable)
        self.create_subscription(JointState, self.p.joint_states_topic, self._on_joints, reliable,
                                 callback_group=group)
        self.create_subscription(EefDeltaAction, self.p.action_topic, self._on_action, reliable,
                                 callback_group=group)
        self.create_service(SetBool, self.p.estop_service, self._on_estop, callback_group=group)
        self._modes = (self.create_client(OperatingModes, self.p.operating_modes_service)
                       if self.p.operating_modes_service else None)
        self._last_grip: bool | None = None
        self._grip_driving = False
        self.get_logger().info(f"ready: {self.p.action_topic} -> {self.p.joint_group_topic}; "
                               f"e-stop {'ENGAGED' if self.adapter.stopped else 'released'}")

    def set_profile(self, timeout_s: float = 5.0) -> None:
        """Ask xs_sdk for a time-based profile of ``control_period_s`` on the arm (called once, before spinning)."""
        if self._modes is None:
            return
        if not self._modes.wait_for_service(timeout_sec=timeout_s):
            self.get_logger().warn(f"{self.p.operating_modes_service} not available; motion profile unchanged")
            return
        period_ms = int(round(self.p.control_period_s * 1000))
        req = self._modes.srv_type.Request(cmd_type="group", name=self.p.arm_group, mode="position",
                                           profile_type="time", profile_velocity=period_ms,
                                           profile_acceleration=max(period_ms // 4, 1))
        future = self._modes.call_async(req)
        rclpy.spin_until_future_complete(self, future, timeout_sec=timeout_s)

    def _on_joints(self, msg: JointState) -> None:
        try:
            proprio = self.adapter.observe(list(msg.name), list(msg.position))
        except ValueError as exc:
            self.get_logger().error(str(exc), throttle_duration_sec=5.0)
            return
        out = StateVector(names=list(widowx.PROPRIO_NAMES), values=[float(v) for v in proprio])
        out.header.stamp, out.header.frame_id = msg.header.stamp, self.p.frame_id
        self._state_pub.publish(out)
        if self._grip_driving and widowx.gripper_at_limit(bool(self._last_grip), self.adapter.gripper):
            self._grip_pub.publish(self._JointSingle(name=self.p.gripper_name, cmd=0.0))
            self._grip_driving = False

    def _on_action(self, msg: EefDeltaAction) -> None:
        stamp_ns = int(msg.header.stamp.sec) * 1_000_000_000 + int(msg.header.stamp.nanosec)
        if widowx.action_is_stale(stamp_ns, self.get_clock().now().nanoseconds, self.p.action_timeout_s):
            self.get_logger().warn("stale action dropped", throttle_duration_sec=2.0)
            return
        a7 = np.array([*msg.translation, *msg.rotation, msg.gripper], dtype=np.float64)
        try:
            cmd = self.adapter.apply(a7)
        except ValueError as exc:
            self.get_logger().error(f"refused action: {exc}")
            return
        if cmd is None:
            reason = "e-stop engaged" if self.adapter.stopped else "no joint state yet"
            self.get_logger().warn(f"action ignored: {reason}", throttle_duration_sec=2.0)
            return
        if not cmd.ik_ok:
            self.get_logger().warn("no IK solution within joint limits; holding", throttle_duration_sec=2.0)
        self._publish(cmd)

    def _publish(self, cmd: widowx.JointCommand) -> None:
        self._arm_pub.publish(self._JointGroup(name=self.p.arm_group, cmd=[float(v) for v in cmd.arm]))
        if cmd.gripper_pwm != 0.0 and cmd.gripper_open != self._last_grip:
            self._grip_pub.publish(self._JointSingle(name=self.p.gripper_name, cmd=float(cmd.gripper_pwm)))
            self._last_grip, self._grip_driving = cmd.gripper_open, True

    def _on_estop(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        self.adapter.emergency_stop(bool(request.data))
        if request.data:
            hold = self.adapter.hold_command()
            if hold is not None:
                self._arm_pub.publish(self._JointGroup(name=self.p.arm_group, cmd=[float(v) for v in hold.arm]))
            self._grip_pub.publish(self._JointSingle(name=self.p.gripper_name, cmd=0.0))  # stop squeezing
            self._last_grip, self._grip_driving = None, False
        response.success = True
        response.message = "e-stop ENGAGED: arm holds, actions refused" if request.data else "e-stop released"
        self.get_logger().warn(response.message)
        return response


def _make_driver() -> "WidowXDriver":
    node = WidowXDriver()
    node.set_profile()
    return node


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/widowx_driver``."""
    spin(_make_driver, args, num_threads=1)

if __name__ == "__main__":
    main()
