"""What scripted_teleop does, without ROS: the simulated human operator of the embedded simulation.

It reads three latest values, never polls a service per tick: the recorder's status (a new recording episode
starts a demonstration), the simulator's TaskStatus (task, resets, steps, success, done; published by sim_bridge
right after every observation with the same stamp) and the newest observation. The node
(amf_ros/ros/nodes/scripted_teleop.py) feeds messages into the ``on_*`` methods and carries out what
:class:`TeleopOutputs` is asked to do (publish an action, call EndEpisode, call the sim reset service).

One episode, step by step:
1. A new recording episode for task T (recorder status). No expert for T: end it with discard.
2. Wait for a TaskStatus stamped after the episode start (sim_bridge re-publishes its status while idle, so one
   arrives within its idle period). If it says the simulator is on T and fresh (steps == 0, not done), demonstrate
   on that scene. Otherwise ask for a reset to T with seed -1 (the simulator's next seed), asynchronously, and wait
   for the TaskStatus showing that reset (resets counter increased, task T).
   Why reset only then, not at every episode start: `amf run` (amf_ros/loop/run.py) resets the simulator itself
   with a chosen seed before StartEpisode; resetting again would replace that seeded scene and consume a seed.
   Deciding on a status stamped after the episode start (rather than on whatever status was held when the episode
   started) means a reset that raced with StartEpisode is always seen, so such a scene is never reset twice.
3. Act: at most one action per control period, each on the newest observation stamped after the last action and
   held together with the TaskStatus of the same stamp (so every action is computed from exactly one observation
   whose stamp precedes the action's stamp: the pair a recorder must store together). When that status says
   success or done, or ``max_steps`` actions were sent, end the episode (EndEpisode once, success from the status).
Failures end the episode with discard and an error line saying why: no fresh status/observation, no reset reply,
or no status after the reset within ``start_timeout_s``; a failed reset; the simulator reset or switched to another
task by someone else mid-episode; an expert error.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from amf_ros.envs.suites import Expert

WAIT_STATUS, RESETTING, RUNNING = "wait_status", "resetting", "running"


@dataclass(frozen=True)
class SimStatus:
    """The simulator's TaskStatus message, stamped (``stamp_ns`` = header.stamp in nanoseconds)."""

    stamp_ns: int
    task: str
    resets: int
    steps: int
    success: bool
    done: bool


class TeleopOutputs(Protocol):
    """What the operator does to the world (the node implements it with ROS; tests with lists)."""

    def send_action(self, a7: np.ndarray, stamp_ns: int) -> None:
        """Publish one 7-D action stamped ``stamp_ns``."""

    def end_episode(self, episode_id: str, success: bool, discard: bool) -> None:
        """Call EndEpisode asynchronously (the answer is only logged)."""

    def reset_sim(self, episode_id: str, task: str) -> None:
        """Call the sim reset service (seed -1) asynchronously; report the answer to
        :meth:`ScriptedTeleop.on_reset_reply` (or nothing at all: the start timeout ends the episode)."""

    def log(self, level: str, text: str) -> None:
        """A log line; ``level`` is ``"info"``, ``"warn"`` or ``"error"``."""


@dataclass
class _Episode:
    episode_id: str
    task: str
    start_ns: int  # recorder's stamp of the start: statuses/observations at or before it are from before
    max_steps: int
    phase_since_ns: int  # clock when the current phase began (for start_timeout_s)
    phase: str = WAIT_STATUS
    resets: int = -1  # resets counter before our reset (RESETTING) / of the scene demonstrated on (RUNNING)
    replied: bool = False  # the reset service answered ok
    ready_ns: int = 0  # stamp of the status accepted to start: observations from then on are usable
    steps: int = 0
    last_action_ns: int = 0  # stamp of the last action (observations must be newer)
    last_act_clock_ns: int = 0  # clock when the last action was sent (paces the actions)


class ScriptedTeleop:
    """Decides the next action, when to end and when to reset (see the module docstring). Thread-safe.

    Args:
        experts: task -> :class:`Expert`.
        out: the effects (:class:`TeleopOutputs`).
        clock: current time in nanoseconds, on the clock that stamps messages (the node clock).
        control_rate_hz: at most this many actions per second.
        max_steps: actions per episode before giving up (0 = each expert's ``max_steps``).
        start_timeout_s: bound on each wait before the first action (fresh status, reset reply, status after the
            reset, first observation); past it the episode is discarded.
        end_episode: call EndEpisode when done (False: just stop acting).
    """

    def __init__(self, experts: Mapping[str, Expert], out: TeleopOutputs, clock: Callable[[], int],
                 control_rate_hz: float = 5.0, max_steps: int = 0, start_timeout_s: float = 5.0,
                 end_episode: bool = True) -> None:
        if control_rate_hz <= 0 or start_timeout_s <= 0 or max_steps < 0:
            raise ValueError(f"need control_rate_hz > 0, start_timeout_s > 0, max_steps >= 0; got "
                             f"{control_rate_hz=}, {start_timeout_s=}, {max_steps=}")
        self.experts = dict(experts)
        self._out = out
        self._clock = clock
        self._period_ns = 1e9 / control_rate_hz
        self._max_steps = int(max_steps)
        self._timeout_ns = start_timeout_s * 1e9
        self._timeout_s = start_timeout_s
        self._end_episode = end_episode
        self._lock = threading.RLock()  # an output's reply may come back on the calling thread
        self._episode: _Episode | None = None
        self._handled: set[str] = set()
        self._obs: tuple[int, np.ndarray] | None = None
        self._status: SimStatus | None = None

    @property
    def episode(self) -> _Episode | None:
        """The episode being demonstrated (None when idle); read-only view for tests and logs."""
        return self._episode

    # ---- inputs -------------------------------------------------------------------------------------------------
    def on_recorder_status(self, recording: bool, episode_id: str, task: str, stamp_ns: int) -> None:
        """The recorder's latched status: a new recording episode starts a demonstration."""
        with self._lock:
            ep = self._episode
            if ep is not None and (not recording or episode_id != ep.episode_id):
                self._out.log("info", f"episode {ep.episode_id} ended by someone else after {ep.steps} actions")
                self._episode = None
            if not recording or episode_id in self._handled or self._episode is not None:
                return
            self._handled.add(episode_id)
            if task not in self.experts:
                self._finish(episode_id, False, True, "error", f"no scripted expert for task {task!r} (have "
                             f"{sorted(self.experts)}); discarding it")
                return
            max_steps = self._max_steps or self.experts[task].max_steps
            self._episode = _Episode(episode_id, task, int(stamp_ns), max_steps, self._clock())
            self._out.log("info", f"episode {episode_id}: demonstrating {task!r} (max {max_steps} steps)")
            if self._status is not None and self._status.stamp_ns > stamp_ns:
                self._on_fresh_status(self._episode, self._status)
                self._maybe_act()

    def on_sim_status(self, status: SimStatus) -> None:
        """The simulator's TaskStatus (latest value)."""
        with self._lock:
            self._status = status
            ep = self._episode
            if ep is None:
                return
            if ep.phase == RUNNING and status.resets != ep.resets:
                self._finish(ep.episode_id, False, True, "error", f"the simulator was reset by someone else (now on "
                             f"{status.task!r}) after {ep.steps} actions; discarding it")
                return
            if status.stamp_ns > ep.start_ns:
                self._on_fresh_status(ep, status)
            self._maybe_act()

    def on_state(self, stamp_ns: int, values: np.ndarray) -> None:
        """The newest observation state (D,)."""
        with self._lock:
            self._obs = (int(stamp_ns), np.asarray(values, dtype=np.float64))
            self._maybe_act()  # an observation later than the tick is acted on at once (still at most the rate)

    def on_reset_reply(self, episode_id: str, ok: bool, message: str) -> None:
        """The sim reset service's answer to :meth:`TeleopOutputs.reset_sim`."""
        with self._lock:
            ep = self._episode
            if ep is None or ep.episode_id != episode_id or ep.phase != RESETTING:
                return  # late answer for an episode that is over or already running
            if not ok:
                self._finish(ep.episode_id, False, True, "error", f"the simulator refused the reset to {ep.task!r}: "
                             f"{message}; discarding it")
                return
            ep.replied = True

    def tick(self) -> None:
        """Control tick: act if due, and end an episode whose start waits longer than ``start_timeout_s``."""
        with self._lock:
            ep = self._episode
            if ep is None:
                return
            if ep.steps == 0 and self._clock() - ep.phase_since_ns > self._timeout_ns:
                why = {WAIT_STATUS: "no simulator status (TaskStatus) newer than the episode start",
                       RESETTING: ("the reset was answered but no TaskStatus showing it arrived" if ep.replied else
                                   f"no reply from the simulator's reset service (reset to {ep.task!r})"),
                       RUNNING: "no observation with its TaskStatus"}[ep.phase]
                self._finish(ep.episode_id, False, True, "error", f"{why} within {self._timeout_s} s; discarding it")
                return
            self._maybe_act()

    def stop(self, reason: str) -> None:
        """An ArmStop from someone else: end the demonstration in progress, discarded (the operator stopped it)."""
        with self._lock:
            if self._episode is not None:
                self._finish(self._episode.episode_id, False, True, "warn", f"{reason}; discarding it")

    # ---- decisions ----------------------------------------------------------------------------------------------
    def _on_fresh_status(self, ep: _Episode, status: SimStatus) -> None:
        """A status stamped after the episode start: start on this scene, ask for a reset, or see the reset done."""
        if ep.phase == WAIT_STATUS:
            if status.task == ep.task and status.steps == 0 and not status.done:
                self._run(ep, status, "the simulator is on it and fresh")
                return
            ep.phase, ep.resets, ep.phase_since_ns = RESETTING, status.resets, self._clock()
            self._out.log("info", f"episode {ep.episode_id}: simulator on {status.task!r} after {status.steps} steps; "
                          f"resetting it to {ep.task!r}")
            self._out.reset_sim(ep.episode_id, ep.task)
        elif ep.phase == RESETTING and status.resets > ep.resets:
            if status.task != ep.task:
                self._finish(ep.episode_id, False, True, "error", f"the simulator was reset to {status.task!r}, not "
                             f"{ep.task!r}; discarding it")
                return
            self._run(ep, status, "after the reset")

    def _run(self, ep: _Episode, status: SimStatus, why: str) -> None:
        ep.phase, ep.resets, ep.ready_ns, ep.phase_since_ns = RUNNING, status.resets, status.stamp_ns, self._clock()
        self._out.log("info", f"episode {ep.episode_id}: demonstrating on the scene of reset {status.resets} ({why})")

    def _maybe_act(self) -> None:
        """End the episode or send the expert's action on the newest observation, at most once per control period."""
        ep, now = self._episode, self._clock()
        if ep is None or ep.phase != RUNNING or self._obs is None or self._status is None:
            return
        if now - ep.last_act_clock_ns < 0.9 * self._period_ns:
            return  # at most one action per control period (10% slack for timer jitter)
        obs_ns, obs = self._obs
        if obs_ns < ep.ready_ns or obs_ns <= ep.last_action_ns or self._status.stamp_ns != obs_ns:
            return  # no fresh observation yet, or its status (same stamp) not in yet
        status = self._status
        if status.success or status.done or ep.steps >= ep.max_steps:
            done = "solved" if status.success else ("gave up" if ep.steps >= ep.max_steps else "simulator done")
            self._finish(ep.episode_id, status.success, False, "info", f"{done} after {ep.steps} actions")
            return
        try:
            a7 = np.asarray(self.experts[ep.task].act(obs), dtype=np.float64).reshape(-1)
            if a7.shape != (7,) or not np.all(np.isfinite(a7)):
                raise ValueError(f"expected 7 finite values, got {a7.tolist()}")
        except Exception as exc:
            self._finish(ep.episode_id, False, True, "error", f"expert failed: {type(exc).__name__}: {exc}; "
                         "discarding it")
            return
        ep.last_action_ns = max(now, obs_ns + 1)
        ep.last_act_clock_ns = now
        ep.steps += 1
        self._out.send_action(a7, ep.last_action_ns)

    def _finish(self, episode_id: str, success: bool, discard: bool, level: str, why: str) -> None:
        """Stop demonstrating and ask the recorder to end the episode."""
        if self._episode is not None and self._episode.episode_id == episode_id:
            self._episode = None
        self._out.log(level, f"episode {episode_id}: {why}")
        if self._end_episode:
            self._out.end_episode(episode_id, success, discard)
