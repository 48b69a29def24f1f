"""Helpers for the robot-side ROS tests: waiting, service calls, message builders, sim parameter sets."""

from __future__ import annotations

import time
from typing import Any, Callable, Sequence

import numpy as np


def wait_for(predicate: Callable[[], Any], timeout: float, what: str, poll: float = 0.02) -> Any:
    """Poll ``predicate`` until it returns something truthy (returned) or raise AssertionError naming ``what``."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def call(node: Any, srv_type: Any, name: str, request: Any, timeout: float = 20.0) -> Any:
    """Call service ``name`` (waiting for it to appear) and return the response."""
    client = node.create_client(srv_type, name)
    try:
        if not client.wait_for_service(timeout_sec=timeout):
            raise AssertionError(f"service {name} did not appear within {timeout} s")
        future = client.call_async(request)
        wait_for(future.done, timeout, f"answer of {name}")
        return future.result()
    finally:
        node.destroy_client(client)


def stamp_msg(ns: int) -> Any:
    """builtin_interfaces/Time from nanoseconds."""
    from builtin_interfaces.msg import Time

    return Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000))


def stamp_ns(stamp: Any) -> int:
    """Nanoseconds of a builtin_interfaces/Time."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def make_action(a7: Sequence[float], ns: int) -> Any:
    """EefDeltaAction from a 7-vector, stamped ``ns``."""
    from amf_ros.msg import EefDeltaAction

    msg = EefDeltaAction(translation=[float(x) for x in a7[:3]], rotation=[float(x) for x in a7[3:6]],
                         gripper=float(a7[6]))
    msg.header.stamp = stamp_msg(ns)
    return msg


def make_state(values: Sequence[float], ns: int, names: Sequence[str] = ()) -> Any:
    """StateVector stamped ``ns``."""
    from amf_ros.msg import StateVector

    msg = StateVector(names=list(names), values=[float(v) for v in values])
    msg.header.stamp = stamp_msg(ns)
    return msg


def make_image(rgb: np.ndarray, ns: int, encoding: str = "rgb8") -> Any:
    """sensor_msgs/Image from an (H, W, C) uint8 array, stamped ``ns``."""
    from sensor_msgs.msg import Image

    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w = rgb.shape[:2]
    c = rgb.shape[2] if rgb.ndim == 3 else 1
    msg = Image(height=h, width=w, encoding=encoding, is_bigendian=0, step=w * c, data=rgb.tobytes())
    msg.header.stamp = stamp_msg(ns)
    return msg
