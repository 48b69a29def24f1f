"""teleop: a person drives the arm with a gamepad, a SpaceMouse or the operator console (logic:
amf_ros/runtime/teleop.py; parameters: amf_ros/bringup/params/teleop.py).

Input ``input``: ``joy`` (sensor_msgs/Joy on ``joy_topic``), ``twist`` (geometry_msgs/Twist or TwistStamped on
``twist_topic``, buttons from the sensor_msgs/Joy on ``buttons_topic``: spacenav), ``spacemouse`` (pyspacemouse on a
thread of its own) or ``console`` (sensor_msgs/Joy on ``console_topic`` from operator_console). Each message becomes
controls through the mapping (config/teleop/<name>.yaml); while the deadman is held, one EefDeltaAction per control
period goes to ``action_topic``, stamped and valid for ``action_valid_for_s`` as policy_server's; releasing the
deadman, or an input silent for ``silence_periods``, publishes an ArmStop on ``stop_topic``. The latched
``state_topic`` (std_msgs/String, JSON) says what the console shows.

Take-over (amf_ros/runtime/handover.py): each press and release also goes to ``control_request_topic``
(amf_ros/ControlSource); during a run_policy goal (policy_server's ``control_topic``) a press drives only once
policy_server has handed control to this node, and the release hands it back to the policy.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from builtin_interfaces.msg import Time
from geometry_msgs.msg import Twist, TwistStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import Joy
from std_msgs.msg import String

from amf_ros.bringup.lifetime import NoRespawnError
from amf_ros.bringup.params.teleop import TeleopParams
from amf_ros.msg import ArmStop, ControlSource, EefDeltaAction
from amf_ros.ros import qos
from amf_ros.ros.arm_msgs import action_msg, stamp_ns, stop_msg
from amf_ros.ros.control_msgs import QOS as CONTROL_QOS
from amf_ros.ros.control_msgs import control_fields, control_msg
from amf_ros.ros.logs import log_at
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.runtime.teleop import (
    JoyDecoder,
    SpaceMouseReader,
    Teleop,
    TeleopConfig,
    TeleopLoop,
    load_mapping,
    state_json,
    twist_axes,
)

_CONFIG_FIELDS = ("control_rate_hz", "max_translation", "max_rotation", "coarse_scale", "fine_scale", "start_fine",
                  "dead_zone", "frame", "view_yaw_deg", "initial_gripper", "silence_periods", "state_period_s")


def _time(ns: int) -> Time:
    return Time(sec=int(ns) // 1_000_000_000, nanosec=int(ns) % 1_000_000_000)


class TeleopNode(Node):
    """Operator input -> EefDeltaAction while the deadman is held; see the module docstring."""

    executor_kind = "single"
    """Its input callbacks share one mutually exclusive group and only decode: a single-threaded executor runs each
    input as it arrives, where a pool could hold a deadman release back until its next wake-up (sim_bridge's
    executor_kind says what that cost there)."""

    def __init__(self) -> None:
        super().__init__("teleop")
        p = self.p = declare(self, TeleopParams)
        try:
            mapping = load_mapping(p.mapping, p.input)
        except (ValueError, OSError) as exc:  # a missing or malformed mapping: a restart cannot fix it
            raise NoRespawnError(f"teleop: mapping {p.mapping or '(default)'!r}: {exc}") from None
        self._action_pub = self.create_publisher(EefDeltaAction, p.action_topic, qos.ACTIONS)
        self._stop_pub = self.create_publisher(ArmStop, p.stop_topic, qos.EVENTS)
        self._state_pub = self.create_publisher(String, p.state_topic, qos.LATCHED)
        self._request_pub = (self.create_publisher(ControlSource, p.control_request_topic, CONTROL_QOS)
                             if p.control_request_topic else None)
        config = TeleopConfig(**{k: getattr(p, k) for k in _CONFIG_FIELDS})
        self.teleop = Teleop(config, mapping, self, lambda: self.get_clock().now().nanoseconds, p.input,
                             node_name=self.get_fully_qualified_name())
        self.decoder = JoyDecoder(mapping)
        group = MutuallyExclusiveCallbackGroup()  # one input at a time: the decoder keeps the latest axes/buttons
        self._reader: SpaceMouseReader | None = None
        if p.input in ("joy", "console"):
            topic = p.joy_topic if p.input == "joy" else p.console_topic
            self.create_subscription(Joy, topic, self._on_joy, qos.EVENTS, callback_group=group)
            source = topic
        elif p.input == "twist":
            kind = TwistStamped if p.twist_stamped else Twist
            self.create_subscription(kind, p.twist_topic, self._on_twist, qos.EVENTS, callback_group=group)
            if p.buttons_topic:
                self.create_subscription(Joy, p.buttons_topic, self._on_buttons, qos.EVENTS, callback_group=group)
            else:
                self.get_logger().warning("input 'twist' without buttons_topic: no deadman, nothing will be published")
            source = f"{p.twist_topic} + buttons {p.buttons_topic or '(none)'}"
        else:
            self._reader = SpaceMouseReader(self._on_spacemouse, self._on_device, p.spacemouse_device)
            source = "pyspacemouse"
        self.create_subscription(ArmStop, p.stop_topic, self._on_stop, qos.EVENTS, callback_group=group)
        if p.control_topic:
            self.create_subscription(ControlSource, p.control_topic, self._on_control, CONTROL_QOS,
                                     callback_group=group)
        self.send_request("", self.get_clock().now().nanoseconds)  # a press of a previous run of this node is over
        self.loop = TeleopLoop(self.teleop).start()
        if self._reader is not None:
            self._reader.start()
        self.get_logger().info(f"ready: input {p.input} ({source}), mapping {mapping.name}, "
                               f"{p.control_rate_hz:g} Hz, actions on {p.action_topic}; hold the deadman to drive")

    # ---- inputs (each callback only decodes and hands over) ----------------------------------------------------
    def _on_joy(self, msg: Joy) -> None:
        self.teleop.on_controls(self.decoder.joy(msg.axes, msg.buttons))

    def _on_buttons(self, msg: Joy) -> None:
        self.teleop.on_controls(self.decoder.buttons(msg.buttons))

    def _on_twist(self, msg: Any) -> None:
        t = msg.twist if isinstance(msg, TwistStamped) else msg
        axes = twist_axes((t.linear.x, t.linear.y, t.linear.z), (t.angular.x, t.angular.y, t.angular.z),
                          self.p.twist_full_scale)
        self.teleop.on_controls(self.decoder.motion(axes))

    def _on_spacemouse(self, axes: list[float], buttons: list[int]) -> None:  # the reader's thread
        self.teleop.on_controls(self.decoder.joy(axes, buttons))

    def _on_device(self, level: str, text: str) -> None:
        log_at(self, level, text)
        self.teleop.set_device(text)

    def _on_stop(self, msg: ArmStop) -> None:
        if msg.source != self.get_fully_qualified_name():
            self.teleop.on_foreign_stop(msg.source, msg.reason, stamp_ns(msg.header.stamp))

    def _on_control(self, msg: ControlSource) -> None:
        self.teleop.on_control(*control_fields(msg))

    # ---- TeleopOutputs ------------------------------------------------------------------------------------------
    def send_action(self, a7: np.ndarray, stamp_ns: int) -> None:
        """Publish one action stamped ``stamp_ns`` and valid for ``action_valid_for_s`` (as policy_server)."""
        self._action_pub.publish(action_msg(a7, _time(stamp_ns), self.p.action_valid_for_s))

    def send_stop(self, stamp_ns: int, reason: str) -> None:
        """Publish an ArmStop: the arm drops every action stamped up to ``stamp_ns`` and holds."""
        self._stop_pub.publish(stop_msg(_time(stamp_ns), self.get_fully_qualified_name(), reason))
        self.get_logger().info(f"stop: {reason}")

    def send_request(self, source: str, stamp_ns: int) -> None:
        """Publish a take-over request ("human") or its release ("") on control_request_topic."""
        if self._request_pub is not None:
            self._request_pub.publish(control_msg(source, self.get_fully_qualified_name(), stamp_ns))

    def send_state(self, state: dict[str, Any]) -> None:
        """Publish the latched state line (JSON)."""
        self._state_pub.publish(String(data=state_json(state)))

    def close(self) -> None:
        """Called by spin() at shutdown: stop the tick thread and the SpaceMouse reader (bounded)."""
        self.loop.close()
        if self._reader is not None:
            self._reader.close()
        self.teleop.release("teleop shutting down")


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/teleop``."""
    spin(TeleopNode, args)


if __name__ == "__main__":
    main()
