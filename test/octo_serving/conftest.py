"""Make the helpers (fake_octo, test/octo's octo_testlib, test/ros_system's ros helpers) importable."""

import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
for d in (_HERE, _HERE.parent / "octo", _HERE.parent / "ros_system"):
    if str(d) not in sys.path:
        sys.path.insert(0, str(d))

import os  # noqa: E402

import pytest  # noqa: E402


@pytest.fixture(scope="session")
def ros_env() -> dict[str, str]:
    """Environment for node processes and the in-test client: a DDS domain of our own, loopback only."""
    from ros_system_util import pick_domain_id, require_ros

    require_ros()
    domain = os.environ.get("AMF_TEST_DOMAIN_ID") or str(pick_domain_id())
    env = {"ROS_DOMAIN_ID": domain, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "PYTHONUNBUFFERED": "1"}
    os.environ.update(env)
    os.environ.pop("RMW_IMPLEMENTATION", None)
    return env


@pytest.fixture(scope="session")
def rclpy_context(ros_env):
    import rclpy

    rclpy.init()
    yield rclpy
    rclpy.try_shutdown()
