"""Process-level ROS tests: make the helpers next to this file importable.

Every node runs as its own OS process over real DDS on loopback (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST) with a
ROS_DOMAIN_ID picked for this test session, so parallel runs on one machine never see each other. The fixtures
ros_env, rclpy_context and client_node are session-wide: test/conftest.py.
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: make the helpers importable
