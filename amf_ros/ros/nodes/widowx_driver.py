"""widowx_driver: EefDeltaAction -> Interbotix wx250s joint commands; joint states -> Octo's 8-D proprio.

A thin adapter around :class:`amf_ros.runtime.widowx_driver.WidowXDriver` (decisions) and
:mod:`amf_ros.robots.widowx` (IK, workspace/speed limits, gripper, e-stop). It talks to the Interbotix xs_sdk
(``interbotix_xsarm_control``) through its ROS 2 interface: publishes ``interbotix_xs_msgs/JointGroupCommand``
(arm group, position mode) and ``JointSingleCommand`` (gripper, PWM), reads ``sensor_msgs/JointState``. Each action
received is applied at once (one BridgeData step; the xs_sdk moves to the target over ``control_period_s`` with a
time-based profile set once at start, before spinning). amf_ros/ArmStatus on ``arm_status_topic`` (latched; at start,
after every action and e-stop request) counts the actions applied and refused by reason and says whether the e-stop
is engaged. Without ``interbotix_xs_msgs`` the process prints one line naming the package to install and exits with
status 78 (NO_RESPAWN_EXIT: no restart installs a package; `amf up` and the launch files leave it down).
"""

from __future__ import annotations

import os

import rclpy
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import JointState
from std_srvs.srv import SetBool

from amf_ros.bringup.lifetime import NoRespawnError
from amf_ros.bringup.params.widowx_driver import WidowxDriverParams
from amf_ros.msg import ArmStatus, ArmStop, EefDeltaAction, StateVector
from amf_ros.robots import widowx
from amf_ros.robots.widowx_arm import ArmCommands
from amf_ros.ros import qos
from amf_ros.ros.arm_msgs import action_fields, arm_status_msg, stamp_ns
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.runtime.widowx_driver import WidowXDriver, missing_interbotix_line


def _interbotix_msgs() -> tuple:
    """(JointGroupCommand, JointSingleCommand, OperatingModes); ImportError without interbotix_xs_msgs."""
    from interbotix_xs_msgs.msg import JointGroupCommand, JointSingleCommand
    from interbotix_xs_msgs.srv import OperatingModes

    return JointGroupCommand, JointSingleCommand, OperatingModes


class WidowXDriverNode(Node):
    """See the module docstring; every callback runs in one mutually exclusive group (the runtime is stateful)."""

    def __init__(self, interbotix: tuple) -> None:
        super().__init__("widowx_driver")
        self.p = declare(self, WidowxDriverParams)
        self._JointGroup, self._JointSingle, OperatingModes = interbotix
        self.rt = WidowXDriver(self.p)
        group = MutuallyExclusiveCallbackGroup()
        self._arm_pub = self.create_publisher(self._JointGroup, self.p.joint_group_topic, qos.COMMANDS)
        self._grip_pub = self.create_publisher(self._JointSingle, self.p.joint_single_topic, qos.COMMANDS)
        self._state_pub = self.create_publisher(StateVector, self.p.state_topic, qos.COMMANDS)
        self._applied_pub = (self.create_publisher(EefDeltaAction, self.p.applied_action_topic, qos.STREAM)
                             if self.p.applied_action_topic else None)
        self._arm_pub = (self.create_publisher(ArmStatus, self.p.arm_status_topic, qos.LATCHED)
                         if self.p.arm_status_topic else None)
        self.create_subscription(JointState, self.p.joint_states_topic, self._on_joints, qos.COMMANDS,
                                 callback_group=group)
        self.create_subscription(EefDeltaAction, self.p.action_topic, self._on_action, qos.ACTIONS,
                                 callback_group=group)
        self.create_subscription(ArmStop, self.p.stop_topic, self._on_stop, qos.EVENTS, callback_group=group)
        self.create_service(SetBool, self.p.estop_service, self._on_estop, qos_profile=qos.SERVICES,
                            callback_group=group)
        self._modes = (self.create_client(OperatingModes, self.p.operating_modes_service, qos_profile=qos.SERVICES)
                       if self.p.operating_modes_service else None)
        self._publish_arm()
        self.get_logger().info(f"ready: {self.p.action_topic} -> {self.p.joint_group_topic}; "
                               f"e-stop {'ENGAGED' if self.rt.stopped else 'released'}")

    def _publish_arm(self) -> None:
        """The arm's latched ArmStatus (e-stop, actions applied and refused by reason)."""
        if self._arm_pub is not None:
            self._arm_pub.publish(arm_status_msg(self.rt.counts, self.get_clock().now().to_msg()))

    def set_profile(self, timeout_s: float = 5.0) -> None:
        """Ask xs_sdk for a time-based arm profile of ``control_period_s``: once, at construction, before the node
        joins spin()'s executor (spinning inside a callback is refused); every wait bounded by ``timeout_s``."""
        request = self.rt.profile_request()
        if self._modes is None or request is None:
            return
        if self.executor is not None:
            raise RuntimeError("set_profile() runs before spinning, never from a callback")
        if not self._modes.wait_for_service(timeout_sec=timeout_s):
            self.get_logger().warning(f"{self.p.operating_modes_service} not available; motion profile unchanged")
            return
        future = self._modes.call_async(self._modes.srv_type.Request(**request))
        try:
            rclpy.spin_until_future_complete(self, future, timeout_sec=timeout_s)
        finally:
            self.executor = None  # leave the global executor: spin() adds the node to its own
        if not future.done():
            self.get_logger().warning(f"{self.p.operating_modes_service} did not answer in {timeout_s} s; "
                                   "motion profile may be unchanged")

    def _on_joints(self, msg: JointState) -> None:
        proprio, out = self.rt.on_joint_state(msg.name, msg.position)
        if proprio is not None:
            state = StateVector(names=list(widowx.PROPRIO_NAMES), values=[float(v) for v in proprio])
            state.header.stamp, state.header.frame_id = msg.header.stamp, self.p.frame_id
            self._state_pub.publish(state)
        self._send(out)

    def _on_action(self, msg: EefDeltaAction) -> None:
        a7, stamp, valid_for = action_fields(msg)
        out = self.rt.on_action(a7, stamp, self.get_clock().now().nanoseconds, valid_for_ns=valid_for)
        self._send(out)
        if out.applied and self._applied_pub is not None:
            self._applied_pub.publish(msg)  # after the target went out: what the recorder stores is what ran
        self._publish_arm()

    def _on_stop(self, msg: ArmStop) -> None:
        self._send(self.rt.stop(stamp_ns(msg.header.stamp), self.get_clock().now().nanoseconds, msg.source,
                                msg.reason))

    def _on_estop(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        out, response.message = self.rt.estop(bool(request.data))
        response.success = True
        self._send(out)
        self._publish_arm()  # before the answer: whoever engaged it can rely on the status being out
        return response

    def _send(self, out: ArmCommands) -> None:
        """Publish the runtime's commands and log its lines (rclpy wants one severity per call site)."""
        if out.arm is not None:
            self._arm_pub.publish(self._JointGroup(name=self.p.arm_group, cmd=out.arm))
        if out.gripper is not None:
            self._grip_pub.publish(self._JointSingle(name=self.p.gripper_name, cmd=out.gripper))
        for level, line in out.logs:
            if level == "error":
                self.get_logger().error(line)
            elif level == "warn":
                self.get_logger().warning(line)
            else:
                self.get_logger().info(line)


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/widowx_driver``; without interbotix_xs_msgs: one line on stderr, exit 78."""

    def make() -> WidowXDriverNode:
        try:
            interbotix = _interbotix_msgs()
        except ImportError:
            raise NoRespawnError(missing_interbotix_line(os.environ.get("ROS_DISTRO"))) from None
        node = WidowXDriverNode(interbotix)
        node.set_profile()
        return node

    spin(make, args, executor="single")


if __name__ == "__main__":
    main()
