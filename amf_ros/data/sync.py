"""Stream synchronisation: turn timestamped messages of several topics into control steps.

One implementation, two front-ends: the demo_recorder node feeds messages live, the bag importer feeds
them from a rosbag2 file; both call :meth:`StreamSynchronizer.feed` with ``(topic, stamp_ns, msg)``.

The pairing rule (the pitfall this module exists for)
-----------------------------------------------------
An action is computed *from* an observation and published *after* it. Pairing "the latest of each stream
at the tick" is wrong: when the observation and action rates align, the newest observation at the tick
is already the one produced *after* the action was applied (the next state), so every step would pair an
action with its consequence. The rule here is:

* A step is anchored on an **action**. Its observation, for each observation stream, is the **newest
  message with stamp <= the action's stamp** (the observation the action could have been computed from).
* ``mode="on_action"``: one step per action message (the action publisher is the clock; the step time is
  the action stamp).
* ``mode="tick"`` (default, 5 Hz): ticks ``t_k = t_0 + k / rate_hz`` from the first action; at each tick,
  the newest action with stamp in ``(t_{k-1}, t_k]`` (``aggregate="latest"``), or for faster teleop the
  sum of the deltas in that interval with the newest gripper (``aggregate="sum_delta"``); no new action
  in the interval -> the tick is skipped and counted. The step time is ``t_k``.

Each step keeps every stream's own timestamp (``stamps``). A step is skipped (and counted) when some
observation stream has no message at or before the action stamp, or only one older than
``max_obs_age_s``. Messages of one topic are assumed to arrive in stamp order; a message older than a
step already decided for it is counted as ``late_messages`` and ignored.

Live vs offline: a step is decided as soon as every observation stream has a message at or past the
action stamp, or once any stream is ``max_delay_s`` past it (a dead or lagging stream does not stall the
recorder). :meth:`flush` decides everything left (end of episode / end of bag).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

import numpy as np

from amf_ros.data import ros_convert

ACTION_STREAM = "action"
_S = 1_000_000_000


@dataclass
class SyncConfig:
    """How streams are sampled into steps (shared by the recorder node and the bag importer)."""

    rate_hz: float = 5.0  # control rate of mode "tick" (BridgeData: 5 Hz)
    mode: str = "tick"  # "tick" | "on_action"
    aggregate: str = "latest"  # tick mode: "latest" action in the interval, or "sum_delta" (sum dims 0-5)
    max_obs_age_s: float = 1.0  # an observation older than this before its action makes the step incomplete
    max_delay_s: float = 0.5  # live: wait at most this long (in stream time) for late messages of a stream

    def __post_init__(self) -> None:
        if self.mode not in ("tick", "on_action"):
            raise ValueError(f"mode must be 'tick' or 'on_action', got {self.mode=}")
        if self.aggregate not in ("latest", "sum_delta"):
            raise ValueError(f"aggregate must be 'latest' or 'sum_delta', got {self.aggregate=}")
        if not self.rate_hz > 0:
            raise ValueError(f"rate_hz must be > 0, got {self.rate_hz=}")
        if not self.max_obs_age_s > 0 or not self.max_delay_s >= 0:
            raise ValueError(f"need max_obs_age_s > 0 and max_delay_s >= 0, got {self.max_obs_age_s=}, "
                             f"{self.max_delay_s=}")


@dataclass
class SyncedStep:
    """One control step: an action and the observations it was computed from."""

    stamp_ns: int  # tick time (tick mode) or action stamp (on_action mode)
    action: np.ndarray  # float32 (A,)
    observation: dict[str, np.ndarray]  # stream name -> array, e.g. {"state": (S,), "image_primary": (H, W, 3)}
    stamps: dict[str, int]  # "action" and "observation/<stream>" -> that message's own stamp


@dataclass
class _Stream:
    stamps: list[int] = field(default_factory=list)
    msgs: list[Any] = field(default_factory=list)
    latest: int = -1  # newest stamp ever seen
    decided_until: int = -1  # stamps <= this have been used for a decision; older arrivals are late


class StreamSynchronizer:
    """Feeds ``(topic, stamp_ns, message)``, yields :class:`SyncedStep` at the control rate.

    Args:
        topics: topic -> stream name. Exactly one stream must be ``"action"``; the others are observation
            keys (``"state"``, ``"image_primary"``, ...).
        config: sampling rule.
        converters: optional stream name -> ``msg -> np.ndarray``; default: :func:`ros_convert.to_array`
            (state streams are reordered to the first message's joint/entry names).
    """

    def __init__(self, topics: Mapping[str, str], config: SyncConfig | None = None,
                 converters: Mapping[str, Callable[[Any], np.ndarray]] | None = None) -> None:
        if list(topics.values()).count(ACTION_STREAM) != 1:
            raise ValueError(f"topics must map exactly one topic to the 'action' stream, got {dict(topics)}")
        self.topics = dict(topics)
        self.config = config or SyncConfig()
        self.converters = dict(converters or {})
        self.obs_streams = sorted(s for s in self.topics.values() if s != ACTION_STREAM)
        self._streams = {name: _Stream() for name in self.topics.values()}
        self.names: dict[str, list[str]] = {}  # stream -> entry names (state streams), from the first message
        self.stats: dict[str, int] = {"messages": 0, "steps": 0, "skipped_no_observation": 0,
                                      "skipped_stale_observation": 0, "skipped_no_new_action": 0,
                                      "skipped_duplicate_stamp": 0, "late_messages": 0, "ignored_before_start": 0,
                                      "unknown_topic": 0}
        self._period = int(round(_S / self.config.rate_hz))
        self._max_age = int(self.config.max_obs_age_s * _S)
        self._max_delay = int(self.config.max_delay_s * _S)
        self._high_water = -1
        self._active = True
        self._start_ns: int | None = None
        self._next_tick: int | None = None  # tick mode: next tick time to decide
        self._last_step_time = -1  # steps must have strictly increasing times

    # -- control -------------------------------------------------------------------------------------------
    def begin(self, start_ns: int | None = None) -> None:
        """Start producing steps for actions stamped at or after ``start_ns`` (None = any); resets counters."""
        self._active = True
        self._start_ns = start_ns
        self._next_tick = None
        self._last_step_time = -1
        act = self._streams[ACTION_STREAM]
        act.latest = -1
        keep = [i for i, s in enumerate(act.stamps) if start_ns is None or s >= start_ns]
        act.stamps = [act.stamps[i] for i in keep]
        act.msgs = [act.msgs[i] for i in keep]
        for key in self.stats:
            self.stats[key] = 0

    def pause(self) -> None:
        """Stop producing steps (between episodes); observation buffers keep only what a next step may need."""
        self._active = False
        act = self._streams[ACTION_STREAM]
        act.stamps, act.msgs = [], []
        self._prune()

    # -- input ---------------------------------------------------------------------------------------------
    def feed(self, topic: str, stamp_ns: int, msg: Any) -> list[SyncedStep]:
        """Add one message; returns the steps this message completed (often none)."""
        stream = self.topics.get(topic)
        if stream is None:
            self.stats["unknown_topic"] += 1
            return []
        st = self._streams[stream]
        stamp_ns = int(stamp_ns)
        self.stats["messages"] += 1
        if stamp_ns <= st.decided_until:
            self.stats["late_messages"] += 1
            return []
        if stream == ACTION_STREAM:
            if not self._active:
                return []
            if self._start_ns is not None and stamp_ns < self._start_ns:
                self.stats["ignored_before_start"] += 1
                return []
        i = bisect.bisect_right(st.stamps, stamp_ns)
        st.stamps.insert(i, stamp_ns)
        st.msgs.insert(i, msg)
        st.latest = max(st.latest, stamp_ns)
        self._high_water = max(self._high_water, stamp_ns)
        steps = self._decide(final=False) if self._active else []
        self._prune()
        return steps

    def flush(self) -> list[SyncedStep]:
        """Decide every pending step with the messages available (end of an episode or of a bag)."""
        steps = self._decide(final=True) if self._active else []
        self._prune()
        return steps

    # -- decisions -----------------------------------------------------------------------------------------
    def _obs_ready(self, a_stamp: int, final: bool) -> bool:
        if final or self._high_water - a_stamp >= self._max_delay:
            return True
        return all(self._streams[o].latest >= a_stamp for o in self.obs_streams)

    def _decide(self, final: bool) -> list[SyncedStep]:
        out: list[SyncedStep] = []
        act = self._streams[ACTION_STREAM]
        while act.stamps:
            if self.config.mode == "on_action":
                a_stamp = act.stamps[0]
                if not self._obs_ready(a_stamp, final):
                    break
                msgs = [act.msgs[0]]
                del act.stamps[0], act.msgs[0]
                step_time = a_stamp
            else:
                if self._next_tick is None:
                    self._next_tick = act.stamps[0]
                tick = self._next_tick
                action_known = final or act.latest >= tick or self._high_water - tick >= self._max_delay
                if not action_known:
                    break
                n_in = bisect.bisect_right(act.stamps, tick)
                if n_in == 0:  # no new action in (previous tick, tick]
                    if not act.stamps:
                        break
                    self.stats["skipped_no_new_action"] += 1
                    self._advance_tick(act.stamps[0])
                    continue
                a_stamp = act.stamps[n_in - 1]
                if not self._obs_ready(a_stamp, final):
                    break
                msgs = act.msgs[:n_in]
                del act.stamps[:n_in], act.msgs[:n_in]
                step_time = tick
                self._advance_tick(None)
            act.decided_until = max(act.decided_until, a_stamp)
            if step_time <= self._last_step_time:  # two actions with one stamp: keep the first
                self.stats["skipped_duplicate_stamp"] += 1
                continue
            step = self._make_step(step_time, a_stamp, msgs)
            if step is not None:
                self._last_step_time = step_time
                out.append(step)
        if final and self.config.mode == "tick" and not act.stamps:
            self._next_tick = None
        return out

    def _advance_tick(self, next_action: int | None) -> None:
        assert self._next_tick is not None
        self._next_tick += self._period
        if next_action is not None and next_action > self._next_tick:
            # Skip the empty ticks in one go (counted once per skipped tick).
            missed = (next_action - self._next_tick + self._period - 1) // self._period
            self.stats["skipped_no_new_action"] += int(missed)
            self._next_tick += missed * self._period

    def _make_step(self, step_time: int, a_stamp: int, action_msgs: list[Any]) -> SyncedStep | None:
        actions = [self._convert(ACTION_STREAM, m) for m in action_msgs]
        action = actions[-1].astype(np.float32)
        if self.config.aggregate == "sum_delta" and len(actions) > 1:
            action = action.copy()
            action[:6] = np.sum([a[:6] for a in actions], axis=0)
        observation: dict[str, np.ndarray] = {}
        stamps = {ACTION_STREAM: a_stamp}
        for o in self.obs_streams:
            st = self._streams[o]
            j = bisect.bisect_right(st.stamps, a_stamp) - 1
            st.decided_until = max(st.decided_until, min(a_stamp, st.latest))
            if j < 0:
                self.stats["skipped_no_observation"] += 1
                return None
            if a_stamp - st.stamps[j] > self._max_age:
                self.stats["skipped_stale_observation"] += 1
                return None
            observation[o] = self._convert(o, st.msgs[j])
            stamps[f"observation/{o}"] = st.stamps[j]
        self.stats["steps"] += 1
        return SyncedStep(stamp_ns=int(step_time), action=action, observation=observation, stamps=stamps)

    def _convert(self, stream: str, msg: Any) -> np.ndarray:
        if isinstance(msg, np.ndarray):
            return msg
        if stream in self.converters:
            return np.asarray(self.converters[stream](msg))
        kind, arr, names = ros_convert.to_array(msg)
        if stream == ACTION_STREAM and kind != "eef_delta_action":
            raise ValueError(f"action stream: expected EefDeltaAction, got a {kind} message")
        if names:
            known = self.names.setdefault(stream, names)
            if names != known:
                if sorted(names) != sorted(known):
                    raise ValueError(f"stream {stream!r}: entry names changed from {known} to {names}")
                order = [names.index(n) for n in known]
                arr = arr[order]
        if kind in ("joint_state", "state_vector"):
            arr = arr.astype(np.float32)
        return arr

    def _prune(self) -> None:
        """Drop buffered observations no pending or future step can use (keeps memory bounded)."""
        act = self._streams[ACTION_STREAM]
        horizon = self._high_water - self._max_delay
        if self._active:
            # Pending actions, and future ones (stamped after the newest action seen, or after the start),
            # need the newest observation at or before their stamp.
            if act.stamps:
                horizon = min(horizon, act.stamps[0])
            elif act.latest >= 0:
                horizon = min(horizon, act.latest)
            elif self._start_ns is not None:
                horizon = min(horizon, self._start_ns)
        for o in self.obs_streams:
            st = self._streams[o]
            j = bisect.bisect_right(st.stamps, horizon) - 1  # newest entry at or before the horizon stays
            if j > 0:
                del st.stamps[:j], st.msgs[:j]
