"""The only folder that imports rclpy: node adapters (``nodes/<node>.py``), the spin lifecycle, QoS profiles,
names, parameter declaration and the Python client. Everything a node decides lives in ``amf_ros.runtime``.

Importing anything here needs rclpy and the generated interfaces (a colcon build of this package); without them
the import fails here with a message that says what to do.
"""

from amf_ros._optional import has as _has
from amf_ros._optional import require as _require

if not _has("rclpy"):
    _require("rclpy", feature="the amf_ros ROS 2 nodes (amf_ros.ros.*)")
