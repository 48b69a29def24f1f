"""Write rosbag2 files (sqlite3 or MCAP) with rosbags: for tests, fixtures and replaying recordings.

Messages may be rosbags dataclasses (serialised with the amf_ros typestore) or already-serialised CDR
bytes, e.g. ``rclpy.serialization.serialize_message(msg)`` of live rclpy messages, so a ROS test can
record what a node received and import it again with :func:`amf_ros.data.bag_import.import_bag`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterable

from amf_ros._optional import require
from amf_ros.data.bag_types import make_typestore


def write_bag(path: str | os.PathLike, messages: Iterable[tuple[int, str, str, Any]], storage: str = "mcap",
              typestore: Any = None) -> Path:
    """Write ``(receive_time_ns, topic, msgtype, msg_or_cdr_bytes)`` in the given order; returns the bag dir.

    Args:
        path: the bag directory to create.
        messages: ``(receive_time_ns, topic, msgtype, msg)``; msgtype is the full rosbags name, e.g.
            ``"sensor_msgs/msg/Image"``, ``"amf_ros/msg/EefDeltaAction"``; msg a rosbags message or its CDR bytes.
        storage: ``"mcap"`` or ``"sqlite3"``.
        typestore: rosbags typestore that knows every msgtype (None = :func:`make_typestore`, with amf_ros's types).
    """
    rosbag2 = require("rosbags.rosbag2", "writing rosbag2 files")
    plugins = {"mcap": rosbag2.StoragePlugin.MCAP, "sqlite3": rosbag2.StoragePlugin.SQLITE3}
    if storage not in plugins:
        raise ValueError(f"storage must be 'mcap' or 'sqlite3', got {storage=}")
    ts = typestore or make_typestore()
    path = Path(path)
    with rosbag2.Writer(path, version=9, storage_plugin=plugins[storage]) as writer:
        conns: dict[str, Any] = {}
        for t, topic, msgtype, msg in messages:
            if topic not in conns:
                conns[topic] = writer.add_connection(topic, msgtype, typestore=ts)
            data = bytes(msg) if isinstance(msg, (bytes, bytearray, memoryview)) else ts.serialize_cdr(msg, msgtype)
            writer.write(conns[topic], int(t), data)
    return path
