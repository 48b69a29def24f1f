"""Fixtures for process-level ROS tests: a DDS domain of our own, node processes, an in-test rclpy client node.

Every node runs as its own OS process over real DDS on loopback (ROS_AUTOMATIC_DISCOVERY_RANGE=LOCALHOST) with a
ROS_DOMAIN_ID picked for this test session, so parallel runs on one machine never see each other.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))  # --import-mode=importlib: make the helpers importable

from ros_system_util import pick_domain_id, require_ros  # noqa: E402


@pytest.fixture(scope="session")
def ros_env() -> dict[str, str]:
    """Environment for node processes and the in-test client: own domain, loopback only."""
    require_ros()
    domain = os.environ.get("AMF_TEST_DOMAIN_ID") or str(pick_domain_id())
    env = {"ROS_DOMAIN_ID": domain, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "PYTHONUNBUFFERED": "1"}
    os.environ.update(env)  # the in-test rclpy context uses the same domain
    os.environ.pop("RMW_IMPLEMENTATION", None)
    return env


@pytest.fixture(scope="session")
def rclpy_context(ros_env):
    """rclpy initialised once for the session (after ROS_DOMAIN_ID is set)."""
    import rclpy

    rclpy.init()
    yield rclpy
    rclpy.try_shutdown()


@pytest.fixture
def client_node(rclpy_context):
    """A fresh rclpy node with a background MultiThreadedExecutor (futures complete while the test waits)."""
    import threading

    from rclpy.executors import MultiThreadedExecutor
    from rclpy.node import Node

    node = Node(f"amf_test_client_{os.getpid()}_{random.randint(0, 1_000_000)}")
    executor = MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    yield node
    executor.shutdown()
    node.destroy_node()
    thread.join(timeout=5)
