"""Helpers shared by every process-level ROS test folder: skip only without ROS, waits, a spinning client node
(the DDS domain of a session: amf_ros.bringup.ros_env)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from build_products import missing_build_product

from amf_ros._optional import has

REPO = Path(__file__).resolve().parents[2]
INSTALL_LIB = REPO / "install" / "amf_ros" / "lib" / "amf_ros"


def require_ros() -> None:
    """Skip (fail with CI=true: build_products) when rclpy or the colcon install is absent (`bash scripts/setup.sh`
    builds both)."""
    if not has("rclpy"):
        missing_build_product("rclpy is not importable: run `bash scripts/setup.sh` and `source scripts/env.sh`")
    if not INSTALL_LIB.is_dir():
        missing_build_product(f"no colcon install at {INSTALL_LIB}: run `bash scripts/setup.sh`")


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, poll: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned) or raise AssertionError naming ``what``
    (launch_testing's assertWaitFor)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def wait_future(future: Any, timeout: float, what: str = "call") -> Any:
    """Result of an rclpy future completed by a background executor, or AssertionError after ``timeout`` s."""
    wait_for(future.done, timeout, f"{what}: an answer", poll=0.01)
    return future.result()


def call(node: Any, srv_type: Any, name: str, request: Any, timeout: float = 20.0) -> Any:
    """Call service ``name`` (waiting for it to appear) and return the response. The client is fresh, so its first
    answer can be dropped by a server that has not discovered it yet: the request is resent until one answer
    arrives (amf_ros.ros.client.call_resending). Only for requests safe to repeat: a recorder call that must run
    once goes through recorder_call."""
    from amf_ros.ros.client import ROSCallError, call_resending

    client = node.create_client(srv_type, name)
    try:
        if not client.wait_for_service(timeout_sec=timeout):
            raise AssertionError(f"service {name} did not appear within {timeout} s")
        try:
            return call_resending(client, request, timeout)
        except ROSCallError as exc:
            raise AssertionError(f"service {name}: {exc}") from None
    finally:
        node.destroy_client(client)


def recorder_call(node: Any, srv_type: Any, name: str, request: Any, timeout: float = 20.0) -> Any:
    """Call a recorder service that must run exactly once (StartEpisode, EndEpisode, rerecord): never resent, so
    its one answer must not be dropped. The handshake of AMFClient: after the fresh client, subscribe to the
    recorder's latched ``status`` beside the service; a status arriving proves the recorder has matched that
    subscription and so (endpoints are announced in order) the client's response reader created before it."""
    from amf_ros.msg import RecorderStatus
    from amf_ros.ros import qos
    from amf_ros.ros.client import ROSCallError, call_resending

    client = node.create_client(srv_type, name)
    heard = threading.Event()
    sub = node.create_subscription(RecorderStatus, name.rsplit("/", 1)[0] + "/status", lambda _m: heard.set(),
                                   qos.LATCHED)
    try:
        if not client.wait_for_service(timeout_sec=timeout):
            raise AssertionError(f"service {name} did not appear within {timeout} s")
        if not heard.wait(timeout):
            raise AssertionError(f"no latched recorder status beside {name} within {timeout} s (the handshake)")
        try:
            return call_resending(client, request, timeout, resend=False)
        except ROSCallError as exc:
            raise AssertionError(f"service {name}: {exc}") from None
    finally:
        node.destroy_subscription(sub)
        node.destroy_client(client)


@contextmanager
def spinning_node(name: str) -> Iterator[Any]:
    """An rclpy node (rclpy already initialised) spun by a background executor with 2 threads, so futures complete
    while the caller waits; executor, thread and node are torn down on exit. The nodes' own PooledExecutor
    (amf_ros/ros/spin.py), not rclpy 9.1.2's MultiThreadedExecutor: that one busy-loops holding the GIL while a
    callback waits for a pool thread (ros2/rclpy#1452), starving the test's own threads (a pad publishing at 20 Hz
    fell silent for 0.79 s in one CI run; a service answer went unread for 20 s in another)."""
    from rclpy.node import Node

    from amf_ros.ros.spin import make_executor

    node = Node(name)
    executor = make_executor("multi", num_threads=2)
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    try:
        yield node
    finally:
        executor.shutdown(timeout_sec=2.0)
        thread.join(timeout=5.0)
        node.destroy_node()
