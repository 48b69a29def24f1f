"""A node's latched ``~/status`` line: "ready: ..." or "not ready: <reason and what to do>", logged once per change.

Why one home: policy_server and task_selector both announce readiness the same way (a launch file, the console and
AMFClient read the latched topic; the log says it once), so the publisher and the logging live here.
"""

from __future__ import annotations

from rclpy.node import Node
from std_msgs.msg import String

from amf_ros.ros import qos


class StatusLine:
    """The latched ``~/status`` publisher of ``node``."""

    def __init__(self, node: Node) -> None:
        self._node = node
        self._pub = node.create_publisher(String, "~/status", qos.LATCHED)

    def ready(self, line: str) -> None:
        """Publish and log (info) a "ready: ..." line."""
        self._pub.publish(String(data=line))
        self._node.get_logger().info(line)

    def not_ready(self, line: str) -> None:
        """Publish and log (warning) a "not ready: ..." line."""
        self._node.get_logger().warning(line)
        self._pub.publish(String(data=line))
