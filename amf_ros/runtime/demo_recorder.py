"""What demo_recorder does, without ROS: the episode recorder and its store, when an episode may start, when an
ending episode has settled, what to do with partial episodes, throttled error lines and the status fields.
Unit-tested without rclpy; ``amf_ros/ros/nodes/demo_recorder.py`` maps messages and services to
:class:`DemoRecorder` calls.

The settle of EndEpisode (why it waits, and its bound). Messages published just before EndEpisode may still be in
DDS queues or waiting for the executor when the request arrives; committing at once would lose the last steps.
:meth:`DemoRecorder.end` therefore first waits until :func:`settled` holds: every recorded topic delivered a
message stamped at/after the request, or was silent for ``end_quiet_s`` since the request. It waits on a
``threading.Condition`` that :meth:`DemoRecorder.feed` notifies for every message (the node's message callbacks
run in another callback group of the MultiThreadedExecutor, so they keep running while the service callback
waits), with a timeout at the instant the quiet rule would hold: no polling, no timer. The wait never exceeds
``end_timeout_s``; EndEpisode then answers after that wait plus the commit of the remaining steps.

Partial episodes (left by a crash, or by a commit that failed) get ``on_partial`` at start and then from a
periodic sweep (:meth:`DemoRecorder.sweep_partial`), so that none waits for a restart. Whether a partial's
writer is alive is read from its writer.lock (:mod:`amf_ros.data.store`), never guessed from its age, except for
directories without that file (older layout), for which ``recover_min_age_s`` still decides.

The arm's e-stop (:meth:`DemoRecorder.observe_arm`, from its latched ArmStatus): an episode during which it engaged
is interrupted, so EndEpisode discards it (ok=false, saying why) whatever the verdict: a demonstration cut off by
the e-stop is neither a success nor a failure of the task, and stored as a failure it would teach the policy and the
task selector something false. While the e-stop is engaged no episode starts.

Who acted (:meth:`DemoRecorder.observe_control`, from policy_server's ``control`` topic): every step of an episode
carries the ``actor`` column (a person or the policy, by the stamp of its action; amf_ros/data/recorder.py), so a
run_policy goal recorded as an episode while a person took over keeps both, and fine-tuning uses the person's
steps (amf_ros/data/transitions.py). Without that topic no column is written (the episode counts as all-human).
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

from amf_ros.data import ros_convert
from amf_ros.data.recorder import EpisodeRecorder
from amf_ros.data.schema import text_limit_problem
from amf_ros.data.store import WRITER_ALIVE, WRITER_UNKNOWN, EpisodeStore, PartialEpisode, StoreConfig
from amf_ros.data.sync import SyncConfig
from amf_ros.data.tasks import check_task_keys
from amf_ros.runtime import recorder_inputs as inputs
from amf_ros.runtime.log_lines import ErrorThrottle

if TYPE_CHECKING:
    from amf_ros.bringup.params.demo_recorder import DemoRecorderParams


def stream_topics(action_topic: str, state_topic: str, image_topics: Sequence[str],
                  image_keys: Sequence[str] = ()) -> dict[str, str]:
    """topic -> stream name for the synchroniser: "action", "state" (if ``state_topic``), one image key per camera
    (default ``image_primary``, ``image_1``, ...)."""
    keys = list(image_keys) or ["image_primary", *(f"image_{i}" for i in range(1, len(image_topics)))]
    keys = keys[:len(image_topics)] if not image_keys else keys
    if len(keys) != len(image_topics) or not all(k.startswith("image") for k in keys):
        raise ValueError(f"image_keys must name every image topic with a key starting with 'image', got "
                         f"{list(image_keys)} for {list(image_topics)}")
    topics = {action_topic: "action", **dict(zip(image_topics, keys, strict=True))}
    if state_topic:
        topics[state_topic] = "state"
    if len(topics) != 1 + len(image_topics) + bool(state_topic):
        raise ValueError(f"every recorded topic must be distinct, got {action_topic=}, {state_topic=}, "
                         f"{list(image_topics)}")
    return topics


def start_problem(received: Mapping[str, float], now: float, timeout_s: float, action_topic: str,
                  action_publishers: int) -> str:
    """Why an episode cannot start ("" = it can).

    Args:
        received: topic -> monotonic time its newest message arrived (-1 = never).
        now: monotonic time now.
        timeout_s: an observation topic silent for longer is considered dead.
        action_topic: the teleop topic; it only needs a publisher (teleop starts when the episode does).
        action_publishers: number of publishers on the action topic.
    """
    problems = [f"no message on {topic} yet" if r < 0 else f"no message on {topic} for {timeout_s} s"
                for topic, r in received.items() if topic != action_topic and (r < 0 or now - r > timeout_s)]
    if action_publishers == 0:
        problems.append(f"no publisher on the action topic {action_topic}")
    return "; ".join(problems)


def settled(last_stamp: Mapping[str, int], received: Mapping[str, float], t_end_ns: int, since: float,
            now: float, quiet_s: float) -> bool:
    """True when every topic delivered a message stamped at/after ``t_end_ns``, or nothing arrived on it for
    ``quiet_s`` counted from ``since`` (the request) at the earliest, so that messages already queued when the
    request came in get taken first.

    Args:
        last_stamp: topic -> header stamp (ns) of its newest message (missing = none).
        received: topic -> monotonic receive time of its newest message (-1 = never).
        t_end_ns: when EndEpisode was requested (node clock, ns).
        since: when EndEpisode was requested (monotonic).
        now: monotonic time now.
        quiet_s: silence that counts as "nothing more in flight".
    """
    return now >= quiet_at(last_stamp, received, t_end_ns, since, quiet_s)


def quiet_at(last_stamp: Mapping[str, int], received: Mapping[str, float], t_end_ns: int, since: float,
             quiet_s: float) -> float:
    """The monotonic time at which :func:`settled` becomes true if no further message arrives (arguments as
    there): the latest ``max(received, since) + quiet_s`` over the topics not yet stamped at/after ``t_end_ns``;
    ``-inf`` when every topic is. A waiter sleeps until then, or until a message changes the answer."""
    return max((max(r, since) + quiet_s for topic, r in received.items()
                if last_stamp.get(topic, -1) < t_end_ns), default=float("-inf"))


ON_PARTIAL = ("recover", "ignore", "discard")


def partial_action(store: EpisodeStore, part: PartialEpisode, policy: str, min_age_s: float) -> tuple[bool, str]:
    """Apply ``policy`` to one partial episode; returns (whether it was recovered or discarded, a log line).

    A partial whose writer is alive (writer.lock held, e.g. this recorder's own open episode) is never touched;
    one whose lock is free is dead for sure, so it is handled at any age; one without writer.lock (older layout)
    only once untouched for ``min_age_s``.
    """
    what = f"partial episode {part.episode_id} ({part.num_steps} steps in complete chunks)"
    if policy == "ignore":
        return False, f"{what}: left as is (on_partial=ignore, age {part.age_s:.1f} s)"
    if part.writer == WRITER_ALIVE:
        return False, f"{what}: left as is (writer alive (lock held))"
    if part.writer == WRITER_UNKNOWN and part.age_s < min_age_s:
        return False, f"{what}: left as is (no writer.lock, age {part.age_s:.1f} s < {min_age_s} s)"
    if policy == "discard":
        store.discard_partial(part.episode_id)
        return True, f"{what}: discarded"
    res = store.recover(part.episode_id, min_age_s)
    return res.action == "recovered", f"{what}: {res.action} ({res.reason})"


def handle_partial(store: EpisodeStore, policy: str, min_age_s: float) -> list[str]:
    """At start: recover, ignore or discard the episodes a crash left partial (:func:`partial_action`); returns
    one line per partial episode saying what was done with it.

    Args:
        store: the episode store to clean up.
        policy: "recover" (commit the complete chunks; meta.recovered = true), "ignore" or "discard".
        min_age_s: a partial episode without writer.lock modified more recently may belong to a live recorder.
    """
    if policy not in ON_PARTIAL:
        raise ValueError(f"policy must be recover, ignore or discard, got {policy=}")
    return [partial_action(store, part, policy, min_age_s)[1] for part in store.partial()]


def sweep_partial(store: EpisodeStore, policy: str, min_age_s: float, own_episode: str = "") -> list[str]:
    """The periodic sweep: :func:`partial_action` on every partial episode but ``own_episode`` (the recorder's
    open one). Returns one line per episode recovered or discarded, or whose handling failed (it is tried again
    next sweep); none for those left as is, which would repeat every period."""
    if policy not in ON_PARTIAL:
        raise ValueError(f"policy must be recover, ignore or discard, got {policy=}")
    lines = []
    for part in store.partial():
        if part.episode_id == own_episode:
            continue
        try:
            acted, line = partial_action(store, part, policy, min_age_s)
        except (OSError, ValueError) as exc:  # e.g. disk still full, or gone meanwhile: next sweep tries again
            acted, line = True, f"partial episode {part.episode_id}: {policy} failed: {type(exc).__name__}: {exc}"
        if acted:
            lines.append(line)
    return lines


@dataclass
class StartResult:
    """StartEpisode's response fields."""

    ok: bool
    message: str
    episode_id: str = ""


@dataclass
class EndResult:
    """EndEpisode's response fields, how the settle went, and the committed episode to announce (EpisodeInfo)."""

    ok: bool
    message: str
    num_steps: int = 0
    path: str = ""
    waited_s: float = 0.0
    """Time spent waiting for messages in flight (at most ``end_timeout_s``)."""
    settled: bool = True
    """False when ``end_timeout_s`` ran out (or the node shut down) before every topic settled."""
    announce: dict[str, Any] | None = None
    """EpisodeInfo fields (episode_id, task, instruction, path, num_steps, success) of a committed episode."""


@dataclass
class Status:
    """RecorderStatus fields (msg/RecorderStatus.msg), a snapshot taken under the recorder's lock."""

    recording: bool
    episode_id: str
    num_steps: int
    control_rate_hz: float
    episodes_in_store: int
    last_error: str
    task: str = ""
    instruction: str = ""
    topics: list[str] = field(default_factory=list)
    topic_age_s: list[float] = field(default_factory=list)
    """Seconds since each topic's newest message, -1 = never."""
    not_ready_reason: str = ""
    """Why a StartEpisode would be refused now ("" = it would be accepted; clients wait on it after bring-up)."""
    topic_rate_hz: list[float] = field(default_factory=list)
    """Per topic (order of ``topics``), this episode: rate over the last rate_window_s, nominal rate (0 = not
    known yet), samples estimated dropped, duplicated stamps; zeros between episodes."""
    topic_nominal_hz: list[float] = field(default_factory=list)
    topic_dropped: list[int] = field(default_factory=list)
    topic_duplicated: list[int] = field(default_factory=list)
    rate_warnings: list[str] = field(default_factory=list)
    """One line per stream below min_rate_fraction of its nominal rate now."""


def converters(p: DemoRecorderParams) -> dict[str, inputs.Converter]:
    """topic -> input converter (amf_ros.runtime.recorder_inputs) for the action, state and image topics."""
    conv = {p.action_topic: inputs.ACTION_CONVERTERS[p.action_type](1.0 / p.control_rate_hz, p.twist_gripper)}
    if p.state_topic:
        conv[p.state_topic] = inputs.STATE_CONVERTERS[p.state_type]
    conv.update({topic: inputs.image for topic in p.image_topics})
    return conv


class DemoRecorder:
    """demo_recorder's state: the store, the episode recorder, per-topic receive times, the current episode.

    Thread-safe: every method takes one lock (a ``threading.Condition``), so that message callbacks, the
    services and the status timer may run on different executor threads. :meth:`end` releases the lock while it
    waits for messages in flight (module docstring).

    Args:
        p: demo_recorder's parameters (amf_ros/bringup/params/demo_recorder.py; ``dataset_dir`` already absolute).
    """

    def __init__(self, p: DemoRecorderParams) -> None:
        self.p = p
        self.instructions: dict[str, str] = {}
        if p.tasks_file:
            from amf_ros.data.task_set import load_task_set

            self.instructions = load_task_set(p.tasks_file).instructions
        self.topics = stream_topics(p.action_topic, p.state_topic, p.image_topics, p.image_keys)
        self.converters = converters(p)
        self.store = EpisodeStore(p.dataset_dir, StoreConfig(image_codec=p.image_codec,
                                  jpeg_quality=p.jpeg_quality, video_crf=p.video_crf, chunk_steps=p.chunk_steps))
        self.partial_report = handle_partial(self.store, p.on_partial, p.recover_min_age_s)
        """One line per partial episode found at start (what was done with it), for the node's log; later ones
        are handled by :meth:`sweep_partial`."""
        sync = SyncConfig(rate_hz=p.control_rate_hz, mode=p.sync_mode, aggregate=p.aggregate,
                          max_obs_age_s=p.max_obs_age_s, max_delay_s=p.max_delay_s)
        self.rec = EpisodeRecorder(self.store, self.topics, sync, robot=p.robot,
                                   min_rate_fraction=p.min_rate_fraction, rate_window_s=p.rate_window_s,
                                   label_hold_s=p.label_hold_s)
        self.received: dict[str, float] = {t: -1.0 for t in self.topics}  # topic -> monotonic receive time
        self.last_error = ""
        self.episodes_in_store = len(self.store)
        self._episode_meta = ("", "")  # (task, instruction) of the current episode
        self._throttle = ErrorThrottle(period_s=1.0)
        self._arm: tuple[bool, int] | None = None  # the arm's (e-stop engaged, times engaged), None = not heard
        self._estops_at_start: int | None = None  # times engaged when the current episode started
        self._interrupted = ""  # why the current episode will be discarded ("" = it will not)
        self._cond = threading.Condition(threading.RLock())  # guards everything above; notified per message
        self._closed = False

    # -- messages ------------------------------------------------------------------------------------------
    def feed(self, topic: str, msg: Any) -> str | None:
        """Take one message of a recorded topic (converted, checked, stamped by its ``header.stamp``).

        Returns an error line to log (throttled per topic and kind of problem) when the message was refused,
        else None. A refused message never reaches the store; it is kept as ``last_error``.
        """
        with self._cond:
            self.received[topic] = time.monotonic()
            try:
                stamp = ros_convert.stamp_ns(msg)
                if stamp <= 0:
                    raise ValueError("header.stamp is zero: the publisher must stamp its messages (the recorder "
                                     "pairs streams by their own stamps)")
                self.rec.feed(topic, stamp, self.converters[topic](msg))
            except ValueError as exc:
                return self._error(f"topic {topic}: {exc}; message refused", (topic, str(exc).split(":")[0]))
            except Exception as exc:
                return self._error(f"topic {topic}: recording failed: {type(exc).__name__}: {exc}",
                                   (topic, type(exc).__name__))
            finally:
                self._cond.notify_all()  # an EndEpisode waiting for messages in flight re-checks settled()
        return None

    def observe_control(self, source: str, stamp_ns: int) -> None:
        """A ControlSource on ``control``: who commands the arm from ``stamp_ns`` on ("policy", "human", "" = no
        goal); the recorded steps are labelled by it."""
        with self._cond:
            self.rec.control(stamp_ns, source)

    def observe_arm(self, engaged: bool, engagements: int) -> str | None:
        """The arm's e-stop (engaged now, times engaged since the arm started). Returns a line to log (warn) when it
        interrupts the episode being recorded: that episode is discarded at EndEpisode."""
        with self._cond:
            self._arm = (bool(engaged), int(engagements))
            started = self._estops_at_start
            if not self.rec.recording or self._interrupted or not (
                    engaged or (started is not None and engagements != started)):
                return None
            self._interrupted = (f"the arm's e-stop was engaged during episode {self.rec.episode_id} (after "
                                 f"{self.rec.num_steps} recorded steps)")
            self.last_error = f"{self._interrupted}: it will be discarded at EndEpisode"
            return self.last_error

    def rate_events(self) -> list[tuple[str, str]]:
        """(level, line) for each recorded stream that fell below ``min_rate_fraction`` of its nominal rate or
        recovered since the last call (amf_ros/data/stream_health.py), for the node's log."""
        with self._cond:
            return [(level, f"episode {self.rec.episode_id}: {line}") for level, line in self.rec.health.events()]

    def _error(self, text: str, kind: tuple[str, str]) -> str | None:
        self.last_error = text
        return self._throttle.line(kind, text)

    # -- episodes ------------------------------------------------------------------------------------------
    def start(self, task: str, instruction: str, note: str, now_ns: int, action_publishers: int) -> StartResult:
        """Begin an episode of ``task`` (an empty ``instruction`` comes from the tasks file).

        Args:
            task: key of the task to record (one of the tasks file's).
            instruction: the language instruction ("" = the tasks file's for ``task``).
            note: the operator's note, kept in the episode's metadata.
            now_ns: node clock now; actions stamped earlier are not recorded.
            action_publishers: publishers on the action topic (teleop must be there; it starts with the episode).
        """
        return self._reported(self._start, task, instruction, note, now_ns, action_publishers)

    def _reported(self, op: Callable[..., StartResult], *args: Any) -> StartResult:
        """Run a start-like operation under the lock; its refusal becomes ``last_error``, its success clears it."""
        with self._cond:
            res = op(*args)
            self._report(res.ok, res.message)
            return res

    def _start(self, task: str, instruction: str, note: str, now_ns: int, action_publishers: int) -> StartResult:
        instruction = instruction or self.instructions.get(task, "")
        why = self._refusal(task, instruction, action_publishers, while_recording=False, note=note)
        return StartResult(False, why) if why else self._begin(task, instruction, note, now_ns)

    def _refusal(self, task: str, instruction: str, action_publishers: int, while_recording: bool,
                 note: str = "") -> str:
        """Why an episode of ``task`` cannot start now ("" = it can); ``while_recording``: for a re-record. Free
        text longer than the store keeps (amf_ros/data/schema.py TEXT_LIMITS) is refused with the limit."""
        stale = start_problem(self.received, time.monotonic(), self.p.topic_timeout_s, self.p.action_topic,
                              action_publishers)
        if self._closed:
            return "shutting down"
        if self.rec.recording and not while_recording:
            return f"already recording episode {self.rec.episode_id}; end it first"
        if self._arm is not None and self._arm[0]:
            return "the arm's e-stop is engaged: release it (e.g. widowx/estop false) before recording"
        try:
            check_task_keys([task], sorted(self.instructions))
        except ValueError as exc:
            return str(exc)
        if not instruction:
            return f"no instruction for task {task!r} (set tasks_file or pass one)"
        too_long = text_limit_problem(instruction=instruction, operator_note=note)
        if too_long:
            return too_long
        return stale

    def _begin(self, task: str, instruction: str, note: str, now_ns: int) -> StartResult:
        try:
            episode_id = self.rec.start(task, instruction, start_ns=now_ns, operator_note=note)
        except (ValueError, OSError) as exc:  # e.g. the dataset directory is not writable
            return StartResult(False, f"cannot start an episode: {type(exc).__name__}: {exc}")
        self._episode_meta = (task, instruction)
        self._interrupted, self._estops_at_start = "", (self._arm[1] if self._arm is not None else None)
        return StartResult(True, f"recording {task!r}", episode_id)

    def rerecord(self, task: str, instruction: str, note: str, now_ns: int, action_publishers: int) -> StartResult:
        """Discard the episode being recorded and start a new one in one call (what an operator presses after a
        botched demonstration). An empty ``task`` keeps the current one (and its instruction); a request that
        could not start is refused before anything is discarded."""
        return self._reported(self._rerecord, task, instruction, note, now_ns, action_publishers)

    def _rerecord(self, task: str, instruction: str, note: str, now_ns: int, action_publishers: int) -> StartResult:
        if not self.rec.recording:
            return StartResult(False, "not recording: nothing to re-record (StartEpisode starts an episode)")
        old, (old_task, old_instruction) = self.rec.episode_id, self._episode_meta
        task = task or old_task
        instruction = instruction or (old_instruction if task == old_task else self.instructions.get(task, ""))
        why = self._refusal(task, instruction, action_publishers, while_recording=True, note=note)
        if why:
            return StartResult(False, f"{why}; still recording {old}")
        try:
            self.rec.end(None, discard=True)
        except Exception as exc:
            return StartResult(False, f"could not discard {old}: {type(exc).__name__}: {exc}")
        res = self._begin(task, instruction, note, now_ns)
        if res.ok:
            res.message = f"discarded {old}; recording {task!r} again"
        return res

    def end(self, episode_id: str, success: bool, discard: bool, now_ns: int) -> EndResult:
        """End the current episode: wait for messages in flight (at most ``end_timeout_s``; module docstring),
        then commit it (or discard it). Blocks the calling thread only; feed() keeps running on others.

        Args:
            episode_id: must be the current episode.
            success: the operator's verdict, stored with the episode.
            discard: drop the episode instead of committing it.
            now_ns: node clock at the request: a topic whose newest message is stamped at/after it has settled.
        """
        with self._cond:
            waited, done = 0.0, True
            if self.rec.recording and episode_id == self.rec.episode_id:
                start = time.monotonic()
                done = self._settle(now_ns, start)
                waited = time.monotonic() - start
            res = self._end(episode_id, success, discard)
            res.waited_s, res.settled = waited, done
            self._report(res.ok, res.message)
            return res

    def _settle(self, t_end_ns: int, since: float) -> bool:
        """Wait (lock released) until settled() holds; False if ``end_timeout_s`` ran out or close() came first.

        Each feed() notifies; without messages the wait times out exactly when the quiet rule would hold, so
        the loop runs once per message received plus once per deadline: no polling.
        """
        deadline = since + self.p.end_timeout_s
        while not self._closed:
            wake = quiet_at(self.rec.last_stamp, self.received, t_end_ns, since, self.p.end_quiet_s)
            now = time.monotonic()
            if now >= wake:
                return True
            if now >= deadline:
                return False
            self._cond.wait(min(wake, deadline) - now)
        return False

    def _end(self, episode_id: str, success: bool, discard: bool) -> EndResult:
        if not self.rec.recording:
            return EndResult(False, f"not recording (EndEpisode for {episode_id!r})")
        if episode_id != self.rec.episode_id:
            return EndResult(False, f"episode id {episode_id!r} is not the current episode {self.rec.episode_id!r}")
        interrupted, self._interrupted = self._interrupted, ""
        if interrupted and not discard:
            try:
                self.rec.end(success=False, discard=True)
            except Exception as exc:
                return EndResult(False, f"{interrupted}; discarding it failed: {type(exc).__name__}: {exc}")
            return EndResult(False, f"{interrupted}: discarded, nothing saved (an interrupted demonstration is never "
                                    "stored); record it again")
        try:
            path = self.rec.end(success=success, discard=discard)
        except Exception as exc:
            return EndResult(False, f"episode {episode_id} not saved: {type(exc).__name__}: {exc}")
        if path is None:
            return EndResult(True, "discarded")
        num_steps = self.store.meta(episode_id).num_steps
        self.episodes_in_store += 1
        task, instruction = self._episode_meta
        return EndResult(True, f"saved {num_steps} steps", num_steps=num_steps, path=str(path),
                         announce={"episode_id": episode_id, "task": task, "instruction": instruction,
                                   "path": str(path), "num_steps": num_steps, "success": bool(success)})

    def _report(self, ok: bool, message: str) -> None:
        self.last_error = "" if ok else message

    def sweep_partial(self) -> list[str]:
        """The periodic recovery sweep (every ``recover_sweep_period_s``): ``on_partial`` applied to partial episodes
        other than the open one, e.g. one whose commit failed or whose recorder died after this one started.
        Returns one line per episode acted on. Runs without the recorder's lock (only reading the open episode's
        id takes it), so that a recovery's I/O never delays feed(); a writer started meanwhile holds its
        writer.lock and is left alone."""
        with self._cond:
            if self._closed:
                return []
            own = self.rec.episode_id
        lines = sweep_partial(self.store, self.p.on_partial, self.p.recover_min_age_s, own)
        if lines:
            with self._cond:
                self.episodes_in_store = len(self.store)
        return lines

    # -- status and shutdown -------------------------------------------------------------------------------
    def status(self, action_publishers: int) -> Status:
        """The current RecorderStatus fields (``action_publishers``: publishers on the action topic now)."""
        with self._cond:
            now = time.monotonic()
            recording = self.rec.recording
            task, instruction = self._episode_meta if recording else ("", "")
            by_stream = self.rec.health.reports()
            reports = [by_stream[self.topics[t]] for t in self.received]
            blocker = ("recording" if recording else "shutting down" if self._closed else
                       "the arm's e-stop is engaged" if self._arm is not None and self._arm[0] else
                       start_problem(self.received, now, self.p.topic_timeout_s, self.p.action_topic,
                                     action_publishers))
            return Status(recording=recording, episode_id=self.rec.episode_id, num_steps=self.rec.num_steps,
                          control_rate_hz=float(self.p.control_rate_hz), episodes_in_store=self.episodes_in_store,
                          last_error=self.last_error, task=task, instruction=instruction,
                          topics=list(self.received),
                          topic_age_s=[now - r if r >= 0 else -1.0 for r in self.received.values()],
                          not_ready_reason=blocker,
                          topic_rate_hz=[r.recent_hz for r in reports],
                          topic_nominal_hz=[r.nominal_hz for r in reports],
                          topic_dropped=[r.dropped for r in reports], topic_duplicated=[r.duplicated for r in reports],
                          rate_warnings=self.rec.health.warnings() if recording else [])

    def close(self) -> None:
        """Shutdown: an EndEpisode waiting for messages stops waiting and commits what it has; no new episode
        starts. Idempotent, returns at once. An episode still open stays partial (its lock is released when the
        process exits; the next start or another recorder's sweep recovers it)."""
        with self._cond:
            self._closed = True
            self._cond.notify_all()
