"""Demonstration data: episode schema, crash-safe episode store, RLDS export, rosbag2 import.

Public API (numpy only; rosbags, opencv and tensorflow are imported where needed)::

    from amf_ros.data import EpisodeStore, StoreConfig, EpisodeRecorder, record_messages, load_transitions
    from amf_ros.data import StreamSynchronizer, SyncConfig

Modules: ``schema`` (arrays + metadata, validation), ``store`` (one directory per episode, atomic commit,
recovery), ``sync`` (message streams -> control steps; shared by the recorder node and bag import),
``ros_convert`` (duck-typed message conversion), ``recorder`` (EpisodeRecorder), ``transitions``
(transitions dict for fine-tuning), ``rlds`` (TFDS/RLDS export), ``bag_import`` (rosbag2 import).
"""

from amf_ros.data.recorder import DEFAULT_TOPICS, EpisodeRecorder, record_messages
from amf_ros.data.schema import SCHEMA_VERSION, EpisodeMeta, EpisodeValidationError
from amf_ros.data.store import Episode, EpisodeStore, EpisodeWriter, StoreConfig, StoreWriteError
from amf_ros.data.sync import StreamSynchronizer, SyncConfig, SyncedStep
from amf_ros.data.transitions import load_transitions

__all__ = [
    "DEFAULT_TOPICS", "Episode", "EpisodeMeta", "EpisodeRecorder", "EpisodeStore", "EpisodeValidationError",
    "EpisodeWriter", "SCHEMA_VERSION", "StoreConfig", "StoreWriteError", "StreamSynchronizer", "SyncConfig",
    "SyncedStep", "load_transitions", "record_messages",
]
