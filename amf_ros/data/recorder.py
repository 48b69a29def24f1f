"""EpisodeRecorder: messages in, committed episodes out. The demo_recorder node is a thin adapter on this.

The node maps its services and subscriptions onto four calls::

    rec = EpisodeRecorder(store, topics={"/amf/action": "action", "/amf/observation/state": "state",
                                         "/amf/camera/image_raw": "image_primary"}, sync=SyncConfig())
    episode_id = rec.start("carrot", "put the carrot on the plate", start_ns=now_ns)   # StartEpisode
    rec.feed(topic, stamp_ns, msg)                                                     # every subscription
    path = rec.end(success=True, discard=False)                                        # EndEpisode

The bag importer and tests use :func:`record_messages`, which runs exactly the same code on a list of
``(topic, stamp_ns, msg)``; so "bag import equals live recording" holds by construction as long as the
node feeds the same stamps (header stamps, see :func:`amf_ros.data.ros_convert.stamp_ns`).

Who acted (the per-step ``actor`` column, amf_ros/data/schema.py): once :meth:`EpisodeRecorder.control` has been
called (demo_recorder subscribes to policy_server's ``control`` topic), every step is labelled with the holder of
control at its action's stamp (:func:`actor_at`): policy_server stamps each change so that the previous holder's
actions are stamped at or before it and the new holder's after it (amf_ros/runtime/handover.py). The changes seen
during the episode go into its metadata (``extra["control"]``) with the counts (``extra["actors"]``).

A change travels on its own topic, so it may reach the recorder after the first action it precedes (another
subscription, taken in a later executor wake-up on a busy machine: CI saw a person's first action labelled as the
policy's). A labelled step is therefore held back until a message stamped ``label_hold_s`` after its action has been
fed (or until :meth:`EpisodeRecorder.end`), and only then labelled and written; :attr:`EpisodeRecorder.num_steps`
counts held steps too.
"""

from __future__ import annotations

import bisect
import logging
from collections import deque
from pathlib import Path
from typing import Any, Iterable, Mapping

from amf_ros.data.schema import ACTOR_HUMAN, ACTOR_NAMES, ACTOR_POLICY
from amf_ros.data.store import EpisodeStore, EpisodeWriter
from amf_ros.data.stream_health import StreamHealth
from amf_ros.data.sync import ACTION_STREAM, StreamSynchronizer, SyncConfig, SyncedStep

log = logging.getLogger(__name__)

MAX_CONTROL_CHANGES = 10_000
"""Control changes remembered (the oldest are forgotten; an episode needs those since its start)."""


def actor_at(changes: list[tuple[int, str]], stamp_ns: int) -> int:
    """Who sent the action stamped ``stamp_ns``: ACTOR_POLICY if the newest control change stamped strictly before it
    says ``policy``, else ACTOR_HUMAN (a person took over, or no goal runs: a plain demonstration).

    Args:
        changes: ``(stamp_ns, source)`` announced on ``control`` ("policy", "human", ""), sorted by stamp.
        stamp_ns: the action's header stamp.
    """
    i = bisect.bisect_left(changes, (int(stamp_ns),)) - 1
    return ACTOR_POLICY if i >= 0 and changes[i][1] == "policy" else ACTOR_HUMAN


DEFAULT_TOPICS: dict[str, str] = {
    "/amf/action": "action",
    "/amf/observation/state": "state",
    "/amf/camera/image_raw": "image_primary",
}


class EpisodeRecorder:
    """Synchronises message streams into steps and writes them as one episode at a time.

    Args:
        store: where episodes go.
        topics: topic -> stream name (one ``"action"``; observation keys like ``"state"``, ``"image_primary"``).
        sync: sampling rule (rate, mode); see :mod:`amf_ros.data.sync`.
        robot: written into each episode's metadata.
        min_rate_fraction, rate_window_s: the per-stream rate monitor (:mod:`amf_ros.data.stream_health`); its
            report of each episode goes into the metadata as ``extra["streams"]``.
        label_hold_s: how long (in message stamps) a labelled step waits for control changes stamped before its
            action (module docstring).
    """

    def __init__(self, store: EpisodeStore, topics: Mapping[str, str] | None = None,
                 sync: SyncConfig | None = None, robot: str = "", min_rate_fraction: float = 0.8,
                 rate_window_s: float = 2.0, label_hold_s: float = 0.5) -> None:
        if not label_hold_s >= 0:
            raise ValueError(f"label_hold_s must be >= 0, got {label_hold_s!r}")
        self.store = store
        self.topics = dict(topics or DEFAULT_TOPICS)
        self.sync_config = sync or SyncConfig()
        self.robot = robot
        self._sync = StreamSynchronizer(self.topics, self.sync_config)
        self._sync.pause()
        self.health = StreamHealth({stream: topic for topic, stream in self.topics.items()}, min_rate_fraction,
                                   rate_window_s)
        self._writer: EpisodeWriter | None = None
        self._changes: list[tuple[int, str]] = []  # (stamp, source) of control changes, sorted
        self._start_ns = 0
        self._labelled = False  # the open episode's steps carry the actor column
        self._hold_ns = int(label_hold_s * 1e9)
        self._held: deque[SyncedStep] = deque()  # decided steps waiting for late control changes, oldest first
        self._newest_ns = 0  # newest stamp fed during the open episode
        self.label_actors = False
        """True once a control change was seen: steps get the ``actor`` column."""
        self.last_stamp: dict[str, int] = {}  # topic -> stamp of its newest message (for status/topic ages)
        self.last_error = ""

    @property
    def recording(self) -> bool:
        """True while an episode is open (between start and stop)."""
        return self._writer is not None

    @property
    def episode_id(self) -> str:
        """Id of the open episode ("" when not recording)."""
        return self._writer.episode_id if self._writer else ""

    @property
    def num_steps(self) -> int:
        """Control steps recorded in the open episode so far, held ones included (0 when not recording)."""
        return self._writer.num_steps + len(self._held) if self._writer else 0

    @property
    def stats(self) -> dict[str, int]:
        """Synchroniser counters of the current/last episode (steps, skipped ticks, late messages...)."""
        return dict(self._sync.stats)

    def start(self, task: str, instruction: str, start_ns: int | None = None, operator_note: str = "") -> str:
        """Begin an episode; actions stamped before ``start_ns`` are not recorded. Returns the episode id."""
        if self._writer is not None:
            raise ValueError(f"already recording episode {self._writer.episode_id}; end it first")
        topics_meta = {stream: topic for topic, stream in self.topics.items()}
        self._writer = self.store.begin(task, instruction, robot=self.robot,
                                        control_rate_hz=self.sync_config.rate_hz, topics=topics_meta,
                                        operator_note=operator_note,
                                        extra={"sync": {"mode": self.sync_config.mode,
                                                        "aggregate": self.sync_config.aggregate}})
        self._sync.begin(start_ns)
        self._start_ns = int(start_ns or 0)
        self._held.clear()
        self._newest_ns = 0
        self.health.begin(start_ns)
        self.last_error = ""
        return self._writer.episode_id

    def feed(self, topic: str, stamp_ns: int, msg: Any) -> int:
        """Add one message (any time; between episodes it only refreshes the observation buffers).

        Returns the number of steps of the current episode (0 when idle).
        """
        if topic in self.topics:
            self.last_stamp[topic] = max(int(stamp_ns), self.last_stamp.get(topic, int(stamp_ns)))
            self.health.feed(self.topics[topic], stamp_ns)
            self._newest_ns = max(self._newest_ns, int(stamp_ns))
        try:
            steps = self._sync.feed(topic, stamp_ns, msg)
        except ValueError as exc:
            self.last_error = f"topic {topic}: {exc}"
            raise
        try:
            self._write(steps)
        except (ValueError, OSError) as exc:  # OSError: StoreWriteError (disk full) - the episode stays partial
            self.last_error = str(exc)
            raise
        return self.num_steps

    def control(self, stamp_ns: int, source: str) -> None:
        """A change of who commands the arm (ControlSource on ``control``: "policy", "human" or "" = no goal); from
        now on steps carry the ``actor`` column. Changes may arrive in any order; they are kept sorted."""
        bisect.insort(self._changes, (int(stamp_ns), str(source)))
        del self._changes[:-MAX_CONTROL_CHANGES]
        self.label_actors = True

    def end(self, success: bool | None, discard: bool = False, operator_note: str | None = None) -> Path | None:
        """Finish the episode: decide pending steps, then commit (returns its path) or discard (returns None).

        Raises ValueError (after discarding) if no step was recorded: an empty episode is never committed.
        """
        if self._writer is None:
            raise ValueError("not recording: call start() first")
        writer, self._writer = self._writer, None
        try:
            if not discard:
                self._write(self._sync.flush(), writer, hold=False)
            self._held.clear()
            self._sync.pause()
            streams = self.health.end()
            if discard:
                writer.discard()
                return None
            if writer.num_steps == 0:
                writer.discard()
                raise ValueError(f"episode {writer.episode_id}: no steps recorded (stats {self._sync.stats}); "
                                 "check that the action and observation topics are published")
            writer.meta.state_names = list(self._sync.names.get("state", []))
            extra: dict[str, Any] = {"streams": streams}
            if self._labelled:
                extra.update(self._control_meta(writer))
            return writer.commit(success, operator_note=operator_note, sync_stats=self._sync.stats, extra=extra)
        except Exception as exc:
            self.last_error = str(exc)
            raise

    def _control_meta(self, writer: EpisodeWriter) -> dict[str, Any]:
        """The episode's control changes (the one in force at its start, then those during it) and actor counts."""
        first = max(0, bisect.bisect_left(self._changes, (self._start_ns,)) - 1)
        counts = dict.fromkeys(ACTOR_NAMES.values(), 0)
        for actor in writer.actors:
            counts[ACTOR_NAMES[actor]] += 1
        return {"control": [[stamp, source] for stamp, source in self._changes[first:]], "actors": counts}

    def _write(self, steps: list[SyncedStep], writer: EpisodeWriter | None = None, hold: bool = True) -> None:
        """Write the decided ``steps``: unlabelled ones at once, labelled ones through the hold (module docstring);
        ``hold=False`` (at the end) writes every held step."""
        writer = writer or self._writer
        if writer is None:
            return
        for s in steps:
            if writer.num_steps + len(self._held) == 0:  # one episode is labelled throughout, or not at all
                self._labelled = self.label_actors
            if self._labelled:
                self._held.append(s)
            else:
                self._add(writer, s, None)
        while self._held and (not hold or self._newest_ns - self._held[0].stamps[ACTION_STREAM] >= self._hold_ns):
            s = self._held.popleft()
            self._add(writer, s, actor_at(self._changes, s.stamps[ACTION_STREAM]))

    @staticmethod
    def _add(writer: EpisodeWriter, s: SyncedStep, actor: int | None) -> None:
        stamps = {ACTION_STREAM: s.stamps[ACTION_STREAM]}
        stamps.update({k: v for k, v in s.stamps.items() if k != ACTION_STREAM})
        writer.add_step(s.observation, s.action, stamp_ns=s.stamp_ns, stamps=stamps, actor=actor)


def record_messages(store: EpisodeStore, messages: Iterable[tuple[str, int, Any]], task: str, instruction: str,
                    topics: Mapping[str, str] | None = None, sync: SyncConfig | None = None,
                    success: bool | None = True, robot: str = "", start_ns: int | None = None,
                    operator_note: str = "") -> Path:
    """Turn ``(topic, stamp_ns, msg)`` messages into one committed episode (same code path as live recording)."""
    rec = EpisodeRecorder(store, topics, sync, robot)
    rec.start(task, instruction, start_ns=start_ns, operator_note=operator_note)
    try:
        for topic, stamp, msg in messages:
            rec.feed(topic, stamp, msg)
    except BaseException:
        if rec.recording:
            rec.end(None, discard=True)
        raise
    path = rec.end(success)
    assert path is not None
    return path
