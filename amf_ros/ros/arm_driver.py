"""The ROS side every WidowX driver shares (Interbotix wx250s: ros/nodes/widowx_driver.py; Trossen WidowX AI:
ros/nodes/wxai_driver.py): the same node name, parameters, topics and services, so every other node is indifferent
to which arm runs.

``action`` (EefDeltaAction) in, ``action/applied`` (the echo of each action that became the arm's target),
``observation/state`` (StateVector, Octo's 8-D proprio), ``stop`` (ArmStop), ``widowx/estop`` (SetBool), latched
``arm/status`` (ArmStatus: e-stop, actions applied and refused by reason; at start, after every action and e-stop
request). Every callback runs in one mutually exclusive group: the arm's runtime is stateful. What an input does is
the runtime's (``on_action``, ``stop``, ``estop``, returning :class:`~amf_ros.robots.widowx_arm.ArmCommands`); a
subclass says how its arm's commands go out (:meth:`ArmDriverNode.send`) and where its state comes from.
"""

from __future__ import annotations

from typing import Any

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from std_srvs.srv import SetBool

from amf_ros.bringup.params.widowx_driver import WidowxDriverParams
from amf_ros.msg import ArmStatus, ArmStop, EefDeltaAction, StateVector
from amf_ros.robots import widowx
from amf_ros.robots.widowx_arm import ArmCommands
from amf_ros.ros import qos
from amf_ros.ros.arm_msgs import action_fields, arm_status_msg, stamp_ns
from amf_ros.ros.params import declare


class ArmDriverNode(Node):
    """Declares the driver's parameters; :meth:`wire` (after the subclass made ``self.rt``) creates the shared
    publishers, subscriptions and the e-stop service and publishes the first ArmStatus."""

    def __init__(self) -> None:
        super().__init__("widowx_driver")
        self.p = declare(self, WidowxDriverParams)
        self.rt: Any = None
        self.group = MutuallyExclusiveCallbackGroup()

    def wire(self) -> None:
        """The shared endpoints, in one callback group (call once ``self.rt`` exists)."""
        p = self.p
        self._state_pub = self.create_publisher(StateVector, p.state_topic, qos.COMMANDS)
        self._applied_pub = (self.create_publisher(EefDeltaAction, p.applied_action_topic, qos.STREAM)
                             if p.applied_action_topic else None)
        self._status_pub = (self.create_publisher(ArmStatus, p.arm_status_topic, qos.LATCHED)
                            if p.arm_status_topic else None)
        self.create_subscription(EefDeltaAction, p.action_topic, self._on_action, qos.ACTIONS,
                                 callback_group=self.group)
        self.create_subscription(ArmStop, p.stop_topic, self._on_stop, qos.EVENTS, callback_group=self.group)
        self.create_service(SetBool, p.estop_service, self._on_estop, qos_profile=qos.SERVICES,
                            callback_group=self.group)
        self.publish_status()

    def send(self, out: ArmCommands) -> None:
        """Send the runtime's commands to the arm (a subclass's; the default sends nothing: the vendor driver was
        called by the runtime itself), then log its lines."""
        self.log_lines(out)

    def publish_state(self, proprio: Any, stamp: Any) -> None:
        """Publish the 8-D proprio as a StateVector stamped ``stamp``."""
        state = StateVector(names=list(widowx.PROPRIO_NAMES), values=[float(v) for v in proprio])
        state.header.stamp, state.header.frame_id = stamp, self.p.frame_id
        self._state_pub.publish(state)

    def publish_status(self) -> None:
        """The arm's latched ArmStatus (e-stop, actions applied and refused by reason)."""
        if self._status_pub is not None:
            self._status_pub.publish(arm_status_msg(self.rt.counts, self.get_clock().now().to_msg()))

    def log_lines(self, out: ArmCommands) -> None:
        """Log the runtime's lines (rclpy wants one severity per call site)."""
        for level, line in out.logs:
            if level == "error":
                self.get_logger().error(line)
            elif level == "warn":
                self.get_logger().warning(line)
            else:
                self.get_logger().info(line)

    def _on_action(self, msg: EefDeltaAction) -> None:
        a7, stamp, valid_for = action_fields(msg)
        out = self.rt.on_action(a7, stamp, self.get_clock().now().nanoseconds, valid_for_ns=valid_for)
        self.send(out)
        if out.applied and self._applied_pub is not None:
            self._applied_pub.publish(msg)  # after the target went out: what the recorder stores is what ran
        self.publish_status()

    def _on_stop(self, msg: ArmStop) -> None:
        self.send(self.rt.stop(stamp_ns(msg.header.stamp), self.get_clock().now().nanoseconds, msg.source,
                               msg.reason))

    def _on_estop(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        out, response.message = self.rt.estop(bool(request.data))
        response.success = True
        self.send(out)
        self.publish_status()  # before the answer: whoever engaged it can rely on the status being out
        return response
