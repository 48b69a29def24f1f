"""Import rosbag2 recordings (sqlite3 ``.db3`` or MCAP) as episodes, with the recorder's own synchroniser.

A teleop session recorded with ``ros2 bag record /amf/action /amf/observation/state /amf/camera/image_raw``
becomes one episode: messages are read in bag (receive) order, stamped with their ``header.stamp`` (as the
live recorder node does) and fed to :func:`amf_ros.data.recorder.record_messages`. So an imported bag
equals what the demo_recorder node records from the same messages played live.

A bag has no notion of episodes: one bag (or the ``--start``/``--end`` window of it) is one episode.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Mapping

from amf_ros._optional import require
from amf_ros.data.bag_types import make_typestore
from amf_ros.data.cdr_fixup import lenient_deserialize
from amf_ros.data.recorder import DEFAULT_TOPICS, record_messages
from amf_ros.data.ros_convert import stamp_ns as header_stamp_ns
from amf_ros.data.store import EpisodeStore
from amf_ros.data.sync import SyncConfig

log = logging.getLogger(__name__)

ACTION_TYPES = ("amf_ros/msg/EefDeltaAction",)
STATE_TYPES = ("amf_ros/msg/StateVector", "sensor_msgs/msg/JointState")
IMAGE_TYPES = ("sensor_msgs/msg/Image", "sensor_msgs/msg/CompressedImage")


@dataclass
class BagImportResult:
    """What one import did."""

    path: Path  # the committed episode directory
    num_steps: int
    topics: dict[str, str]  # topic -> stream used
    stats: dict[str, int]  # synchroniser counters (skipped steps, late messages, ...)
    messages_read: int


def bag_topics(bag: str | os.PathLike) -> dict[str, str]:
    """Topic -> message type of every connection in the bag."""
    highlevel = require("rosbags.highlevel", "rosbag2 import")
    with highlevel.AnyReader([Path(bag)], default_typestore=make_typestore()) as reader:
        return {c.topic: c.msgtype for c in reader.connections}


def resolve_topics(available: Mapping[str, str], action: str | None = None, state: str | None = None,
                   images: Mapping[str, str] | None = None) -> dict[str, str]:
    """Choose the topic of each stream: explicit names first, then the contract defaults, then by type.

    Args:
        available: topic -> msgtype in the bag.
        action: topic name of the action stream (None = the default topic if present, else the only topic of a
            fitting type).
        state: topic name of the state stream (None = chosen as for ``action``).
        images: stream name -> topic (e.g. ``{"image_primary": "/blue/image_raw"}``); None = default/by type;
            an empty dict records no image.
    Returns:
        topic -> stream name, as :class:`~amf_ros.data.sync.StreamSynchronizer` takes it.
    Raises:
        ValueError: a named topic is missing, or a stream cannot be chosen unambiguously.
    """
    defaults = {stream: topic for topic, stream in DEFAULT_TOPICS.items()}

    def pick(stream: str, explicit: str | None, types: tuple[str, ...], required: bool) -> str | None:
        if explicit is not None:
            if explicit not in available:
                raise ValueError(f"topic {explicit!r} for {stream} is not in the bag (topics: {sorted(available)})")
            if available[explicit] not in types:
                raise ValueError(f"topic {explicit!r} for {stream} has type {available[explicit]}, expected "
                                 f"one of {types}")
            return explicit
        if defaults.get(stream) in available and available[defaults[stream]] in types:
            return defaults[stream]
        fitting = sorted(t for t, ty in available.items() if ty in types)
        if len(fitting) == 1:
            return fitting[0]
        if not fitting and not required:
            return None
        what = "no topic" if not fitting else f"several topics {fitting}"
        raise ValueError(f"{stream}: {what} of type {' or '.join(types)} in the bag; name one with "
                         f"--{stream.replace('_', '-')}-topic")

    topics = {pick("action", action, ACTION_TYPES, True): "action"}
    state_topic = pick("state", state, STATE_TYPES, False)
    if state_topic:
        topics[state_topic] = "state"
    if images is None:
        image_topic = pick("image_primary", None, IMAGE_TYPES, False)
        images = {"image_primary": image_topic} if image_topic else {}
    for name, topic in images.items():
        if not name.startswith("image"):
            raise ValueError(f"image stream names must start with 'image', got {name!r}")
        topics[pick(name, topic, IMAGE_TYPES, True)] = name
    if len(topics) < 2:
        raise ValueError(f"need the action and at least one observation topic; bag has {sorted(available)}")
    return topics


def iter_bag_messages(bag: str | os.PathLike, topics: Mapping[str, str], stamp: str = "header",
                      start_ns: int | None = None, end_ns: int | None = None) -> Iterator[tuple[str, int, Any]]:
    """Yield ``(topic, stamp_ns, msg)`` in bag order for the given topics (deserialised rosbags dataclasses).

    Args:
        bag: the rosbag2 directory.
        topics: topic -> stream name; messages of other topics are skipped.
        stamp: ``"header"`` (``header.stamp``, what the live recorder uses) or ``"receive"`` (bag time).
        start_ns: only messages whose chosen stamp is >= start_ns (None = from the start).
        end_ns: only messages whose chosen stamp is <= end_ns (None = to the end).
    """
    if stamp not in ("header", "receive"):
        raise ValueError(f"stamp must be 'header' or 'receive', got {stamp=}")
    highlevel = require("rosbags.highlevel", "rosbag2 import")
    with highlevel.AnyReader([Path(bag)], default_typestore=make_typestore()) as reader:
        conns = [c for c in reader.connections if c.topic in topics]
        lenient = 0
        for conn, t_receive, raw in reader.messages(connections=conns):
            try:
                msg = reader.deserialize(raw, conn.msgtype)
            except Exception as exc:  # rosbags' AnyReaderError; see amf_ros.data.cdr_fixup
                if "size mismatch" not in str(exc):
                    raise ValueError(f"{bag}: topic {conn.topic}: {exc}") from exc
                msg = lenient_deserialize(raw, conn.msgtype, reader.typestore)
                lenient += 1
                if lenient == 1:
                    log.info("%s: %s messages carry trailing bytes (rmw_fastrtps); read leniently",
                             bag, conn.msgtype)
            t = header_stamp_ns(msg) if stamp == "header" else int(t_receive)
            if (start_ns is not None and t < start_ns) or (end_ns is not None and t > end_ns):
                continue
            yield conn.topic, t, msg


def import_bag(bag: str | os.PathLike, store: EpisodeStore, task: str, instruction: str, *,
               topics: Mapping[str, str] | None = None, sync: SyncConfig | None = None,
               success: bool | None = True, robot: str = "", stamp: str = "header",
               start_ns: int | None = None, end_ns: int | None = None, operator_note: str = "") -> BagImportResult:
    """Import one bag as one episode (see the module docstring)."""
    bag = Path(bag)
    if not bag.exists():
        raise FileNotFoundError(f"no bag at {bag}")
    topics = dict(topics) if topics is not None else resolve_topics(bag_topics(bag))
    count = 0

    def counted() -> Iterator[tuple[str, int, Any]]:
        nonlocal count
        for m in iter_bag_messages(bag, topics, stamp, start_ns, end_ns):
            count += 1
            yield m

    note = operator_note or f"imported from {bag.name}"
    path = record_messages(store, counted(), task, instruction, topics, sync, success=success, robot=robot,
                           start_ns=start_ns, operator_note=note)
    meta = store.meta(path.name)
    log.info("imported %s: %d steps from %d messages -> %s", bag, meta.num_steps, count, path)
    return BagImportResult(path, meta.num_steps, dict(topics), dict(meta.sync_stats), count)
