"""A scripted teleoperation session as rosbag2 messages (rosbags' typestore): joint states, camera, actions.

Used by the bag import tests (test/data/test_bag_import.py) and `amf import bag` (test/data/test_cli.py).
"""

from __future__ import annotations

import numpy as np
from rosbags.rosbag2 import StoragePlugin

from amf_ros.data.bag_types import make_typestore
from amf_ros.data.bag_write import write_bag as _write_bag
from amf_ros.data.codec import encode_image

MS = 1_000_000
TS = make_typestore()
T = TS.types
NO_HORIZON = T["builtin_interfaces/msg/Duration"](sec=0, nanosec=0)  # EefDeltaAction.valid_for 0: the arm's cap


def header(t: int):
    """std_msgs/Header stamped t ns."""
    return T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=t // 10**9, nanosec=t % 10**9),
                                    frame_id="")


def image_for(k: int) -> np.ndarray:
    """A 24x32 RGB image distinct per k."""
    yy, xx = np.mgrid[0:24, 0:32]
    return np.stack([xx * 4 + k, yy * 6, np.full_like(xx, 10 * k)], axis=2).astype(np.uint8)


def session(n: int, state_topic: str, image_topic: str, compressed: bool = False):
    """A teleop session as (receive_time, topic, msgtype, msg): joint states and images at 10 Hz, actions at
    5 Hz computed 30 ms after the state they react to; images arrive 40 ms after their stamp."""
    out = []
    for k in range(n):
        t = k * 100 * MS
        js = T["sensor_msgs/msg/JointState"](header=header(t), name=["waist", "shoulder", "gripper"],
                                             position=np.array([k, -k, 0.5], np.float64),
                                             velocity=np.zeros(0), effort=np.zeros(0))
        out.append((t + 1 * MS, state_topic, "sensor_msgs/msg/JointState", js))
        if compressed:
            img = T["sensor_msgs/msg/CompressedImage"](header=header(t), format="png",
                                                       data=np.frombuffer(encode_image(image_for(k), "png"), np.uint8))
            out.append((t + 40 * MS, image_topic, "sensor_msgs/msg/CompressedImage", img))
        else:
            bgr = np.ascontiguousarray(image_for(k)[:, :, ::-1])
            img = T["sensor_msgs/msg/Image"](header=header(t), height=24, width=32, encoding="bgr8", is_bigendian=0,
                                             step=96, data=bgr.reshape(-1))
            out.append((t + 40 * MS, image_topic, "sensor_msgs/msg/Image", img))
        if k % 2 == 0:
            ta = t + 30 * MS
            act = T["amf_ros/msg/EefDeltaAction"](header=header(ta), translation=np.array([k, 0, 0], np.float32),
                                                  rotation=np.zeros(3, np.float32), gripper=1.0, valid_for=NO_HORIZON)
            out.append((ta + 2 * MS, "/amf/action", "amf_ros/msg/EefDeltaAction", act))
    out.sort(key=lambda m: m[0])
    return out


def write_bag(path, messages, plugin):
    """Write (receive_time, topic, msgtype, msg) tuples to a bag of the given storage plugin."""
    return _write_bag(path, messages, "mcap" if plugin == StoragePlugin.MCAP else "sqlite3", TS)
