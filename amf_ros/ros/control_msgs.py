"""amf_ros/ControlSource both ways, and its QoS: who commands the arm during a run_policy goal (a person's
take-over, amf_ros/runtime/handover.py).

Why one home: policy_server publishes ``control``, teleop nodes publish ``control/request``, demo_recorder labels
every recorded step from ``control`` and the operator console shows it; all must agree on the QoS. Reliable and
transient_local (a late subscriber gets the current holder), with a history of :data:`DEPTH` so that a reader that
falls behind during a quick take-over and release still gets every change, in order (the recorder labels steps by
the stamps of the changes).
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from amf_ros.data.ros_convert import time_ns
from amf_ros.msg import ControlSource

DEPTH = 50
QOS = QoSProfile(depth=DEPTH, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
NS = 1_000_000_000


def control_msg(source: str, node: str, stamp_ns: int) -> ControlSource:
    """A ControlSource ``source`` ("policy", "human", "") about ``node``, stamped ``stamp_ns`` (node clock)."""
    msg = ControlSource(source=source, node=node)
    msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp_ns), NS)
    return msg


def control_fields(msg: ControlSource) -> tuple[str, str, int]:
    """(source, node, stamp ns) of a ControlSource."""
    return str(msg.source), str(msg.node), time_ns(msg.header.stamp)
