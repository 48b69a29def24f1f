"""widowx_driver: EefDeltaAction -> Interbotix wx250s joint commands; joint states -> Octo's 8-D proprio.

A thin adapter around :class:`amf_ros.runtime.widowx_driver.WidowXDriver` (decisions) and
:mod:`amf_ros.robots.widowx` (IK, workspace/speed limits, gripper, e-stop). It talks to the Interbotix xs_sdk
(``interbotix_xsarm_control``) through its ROS 2 interface: publishes ``interbotix_xs_msgs/JointGroupCommand``
(arm group, position mode) and ``JointSingleCommand`` (gripper, PWM), reads ``sensor_msgs/JointState``. Each action
received is applied at once (one BridgeData step; the xs_sdk moves to the target over ``control_period_s`` with a
time-based profile set once at start, before spinning, together with the gripper's PWM mode). At start, before the
node spins, it waits up to ``sdk_wait_s`` for xs_sdk (its joint states' publisher and the operating-modes service),
logging what it misses every few seconds: started before xs_sdk, it connects once xs_sdk is up; if xs_sdk never
comes, it ends with one line naming what it missed (exit 1, restarted by launch and `amf up`). amf_ros/ArmStatus on
``arm_status_topic`` (latched; at start, after every action and e-stop request) counts the actions applied and
refused by reason and says whether the e-stop is engaged. Without ``interbotix_xs_msgs`` the process prints one
line naming the package to install and exits with status 78 (NO_RESPAWN_EXIT: no restart installs a package;
`amf up` and the launch files leave it down). Run against Interbotix's own xs_sdk_sim: test/dds/test_interbotix_sim.py.
"""

from __future__ import annotations

import os

import rclpy
from sensor_msgs.msg import JointState

from amf_ros.bringup.lifetime import NoRespawnError
from amf_ros.robots.widowx_arm import ArmCommands
from amf_ros.ros import qos
from amf_ros.ros.arm_driver import ArmDriverNode
from amf_ros.ros.logs import log_fn
from amf_ros.ros.spin import StartupError, spin
from amf_ros.runtime.widowx_driver import WidowXDriver, missing_interbotix_line, sdk_missing_line, wait_for_sdk


def _interbotix_msgs() -> tuple:
    """(JointGroupCommand, JointSingleCommand, OperatingModes); ImportError without interbotix_xs_msgs."""
    from interbotix_xs_msgs.msg import JointGroupCommand, JointSingleCommand
    from interbotix_xs_msgs.srv import OperatingModes

    return JointGroupCommand, JointSingleCommand, OperatingModes


class WidowXDriverNode(ArmDriverNode):
    """See the module docstring (the shared endpoints: amf_ros/ros/arm_driver.py)."""

    def __init__(self, interbotix: tuple) -> None:
        super().__init__()
        if self.p.backend != "interbotix":  # the WidowX AI's driver is its own executable (robot:=wxai)
            raise NoRespawnError(f"widowx_driver drives backend 'interbotix'; backend {self.p.backend!r} runs as "
                                 "executable wxai_driver (robot:=wxai)")
        self._JointGroup, self._JointSingle, OperatingModes = interbotix
        self.rt = WidowXDriver(self.p)
        self._arm_pub = self.create_publisher(self._JointGroup, self.p.joint_group_topic, qos.COMMANDS)
        self._grip_pub = self.create_publisher(self._JointSingle, self.p.joint_single_topic, qos.COMMANDS)
        self.create_subscription(JointState, self.p.joint_states_topic, self._on_joints, qos.COMMANDS,
                                 callback_group=self.group)
        self._modes = (self.create_client(OperatingModes, self.p.operating_modes_service, qos_profile=qos.SERVICES)
                       if self.p.operating_modes_service else None)
        self.wire()

    def sdk_missing(self) -> list[str]:
        """What of xs_sdk this node does not see yet (graph queries only: nothing is sent, nothing spins)."""
        gone = []
        if self.count_publishers(self.p.joint_states_topic) == 0:
            gone.append(f"no publisher on {self.p.joint_states_topic}")
        if self._modes is not None and not self._modes.service_is_ready():
            gone.append(f"service {self.p.operating_modes_service} not available")
        return gone

    def connect_sdk(self, timeout_s: float = 5.0) -> None:
        """Wait up to ``sdk_wait_s`` for xs_sdk (logged; raises StartupError naming what is missing after it), then ask
        it for a time-based arm profile of ``control_period_s`` and the gripper's PWM mode. Once, at construction,
        before the node joins spin()'s executor (spinning inside a callback is refused); each answer is awaited at most
        ``timeout_s``."""
        if self.executor is not None:
            raise RuntimeError("connect_sdk() runs before spinning, never from a callback")
        gone = wait_for_sdk(self.sdk_missing, self.p.sdk_wait_s, log_fn(self, "info"))
        if gone:
            raise StartupError(sdk_missing_line(gone, self.p.sdk_wait_s))
        self.get_logger().info("xs_sdk is up")
        requests = [r for r in (self.rt.profile_request(), self.rt.gripper_mode_request()) if r is not None]
        if self._modes is not None and requests:
            try:
                for request in requests:
                    future = self._modes.call_async(self._modes.srv_type.Request(**request))
                    rclpy.spin_until_future_complete(self, future, timeout_sec=timeout_s)
                    if not future.done():
                        self.get_logger().warning(f"{self.p.operating_modes_service} did not answer in {timeout_s} s; "
                                                  f"{request['name']} mode may be unchanged")
            finally:
                self.executor = None  # leave the global executor: spin() adds the node to its own
        self.get_logger().info(f"ready: {self.p.action_topic} -> {self.p.joint_group_topic}; "
                               f"e-stop {'ENGAGED' if self.rt.stopped else 'released'}")

    def _on_joints(self, msg: JointState) -> None:
        proprio, out = self.rt.on_joint_state(msg.name, msg.position)
        if proprio is not None:
            self.publish_state(proprio, msg.header.stamp)
        self.send(out)

    def send(self, out: ArmCommands) -> None:
        """Publish the runtime's joint commands to xs_sdk, then log its lines."""
        if out.arm is not None:
            self._arm_pub.publish(self._JointGroup(name=self.p.arm_group, cmd=out.arm))
        if out.gripper is not None:
            self._grip_pub.publish(self._JointSingle(name=self.p.gripper_name, cmd=out.gripper))
        self.log_lines(out)


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/widowx_driver``; without interbotix_xs_msgs: one line on stderr, exit 78."""

    def make() -> WidowXDriverNode:
        try:
            interbotix = _interbotix_msgs()
        except ImportError:
            raise NoRespawnError(missing_interbotix_line(os.environ.get("ROS_DISTRO"))) from None
        node = WidowXDriverNode(interbotix)
        node.connect_sdk()
        return node

    spin(make, args, executor="single")


if __name__ == "__main__":
    main()
