"""Session fixtures shared by every ROS test folder.

Why here: rclpy has one global context per process, and its domain id is fixed when it is initialised. Every
test that talks to nodes (test/dds, test/ros) must therefore share ONE session
domain and ONE context when pytest runs them together.
"""

from __future__ import annotations

import os
import random
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, Iterator

import pytest

# --import-mode=importlib: make the shared helpers in test/support importable (`from ros_testing import ...`). Not
# test/ itself: its folders (core, data, ...) would become importable namespace packages of those names.
sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))

from ros_testing import require_ros, spinning_node

from amf_ros.bringup.ros_env import free_domain_id, isolated_ros_env

# Nodes resolve relative data folders under the workspace (amf_ros.paths, read at call time): never the user's
# ~/.ros/amf in tests. One of our own is removed when the session ends (pytest_sessionfinish), not left in /tmp.
_OWN_WORKSPACE = "" if "AMF_WORKSPACE" in os.environ else tempfile.mkdtemp(prefix="amf_test_workspace_")
os.environ.setdefault("AMF_WORKSPACE", _OWN_WORKSPACE)


@pytest.fixture(scope="session")
def ros_env() -> dict[str, str]:
    """Environment of node processes and of the in-test rclpy context: a domain of our own, loopback only."""
    require_ros()
    # the in-test rclpy context uses the same domain (isolated_ros_env sets os.environ)
    env = {**isolated_ros_env(os.environ.get("AMF_TEST_DOMAIN_ID") or free_domain_id()), "PYTHONUNBUFFERED": "1"}
    os.environ["PYTHONUNBUFFERED"] = "1"
    os.environ.pop("RMW_IMPLEMENTATION", None)
    return env


@pytest.fixture(scope="session")
def rclpy_context(ros_env):
    """rclpy initialised once for the whole session (after ROS_DOMAIN_ID is set)."""
    import rclpy

    rclpy.init()
    yield rclpy
    rclpy.try_shutdown()


@pytest.fixture(scope="session")
def rclpy_session(rclpy_context):
    """Alias of :func:`rclpy_context` (the name test/ros_robot uses)."""
    return rclpy_context


@pytest.fixture
def client_node(rclpy_context) -> Iterator[Any]:
    """A fresh rclpy node spun by a background executor (ros_testing.spinning_node: futures complete while the test
    waits)."""
    with spinning_node(f"amf_test_client_{os.getpid()}_{random.randint(0, 1_000_000)}") as node:
        yield node


# The skip ledger of .ci/run: with AMF_SKIP_LOG=<file>, every skipped test, and every module skipped at collection
# (importorskip), is appended to that file as "<node id> | <reason>", one line each; .ci/run compares the lines with
# .ci/expected_skips.txt, so a skip that appears or disappears fails CI instead of passing unnoticed.
def _log_skip(report: pytest.CollectReport | pytest.TestReport) -> None:
    path = os.environ.get("AMF_SKIP_LOG")
    if not path or not report.skipped or hasattr(report, "wasxfail"):
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    reason = " ".join(str(reason).removeprefix("Skipped: ").split())  # one line
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{report.nodeid} | {reason}\n")


def pytest_collectreport(report: pytest.CollectReport) -> None:
    """Record a module skipped at collection (see _log_skip)."""
    _log_skip(report)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Record a skipped test (see _log_skip)."""
    _log_skip(report)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Remove the session's own workspace (not one the caller set with AMF_WORKSPACE)."""
    if _OWN_WORKSPACE:
        shutil.rmtree(_OWN_WORKSPACE, ignore_errors=True)
