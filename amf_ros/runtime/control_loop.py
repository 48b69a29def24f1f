"""One run_policy goal as a loop on a dedicated control thread that keeps time (no rclpy import).

Why a thread of its own: inference (a 20-step diffusion sampler: ~20 ms) must never run inside an executor
callback, where it delays every other callback. Actions are published at the ticks of a monotonic schedule
``t0 + k * period``; each is computed from the NEWEST observation (read under a lock; subscription callbacks
only store it) shortly before its tick (a lead of 1.5 x the recent worst inference time), then held until the
tick, so the period the arm sees does not carry the inference time's jitter. A tick that is more than one period
late is not caught up (no burst of actions): the schedule restarts from now.

Bounds (every wait is one): every action is computed from an observation that arrived after the previous action was
published and, where both are stamped (ROS clock), was measured after that action's stamp (a frozen arm is never driven
open-loop, and no action is computed from a state its predecessor has not acted on yet). "Newer than the previous
action's observation" is not enough: one extra observation of the old state (sim_bridge re-publishes its frame while
idle, e.g. during a slow first inference) put the camera policy one step behind for the rest of the episode, each action
computed from the state before its predecessor took effect (session 36; docs/ros-robot.md has the numbers). Arrival is
not enough either: a frame the arm sent before the action reached it can be delivered after the action went out (the
process's executor runs late while an inference holds the CPU); its stamp says so. Nor is the stamp: an idle
re-publish measured after the action was stamped but before the arm took it (sim_bridge's executor busy) shows the old
state; its TaskStatus, stamped as the frame, says the arm applied nothing since the previous action's observation, and
the loop waits for the next frame (``action_valid_for_s``; once the action expired unapplied, the arm dropped it and the
frame is current). The first action waits at most
``obs_timeout_s`` for one (the arm may be idle, re-publishing slowly); after that an observation older than ``stale_s``
(default 1.5 control periods) is stale: nothing is computed from it, and unless a fresh one arrives the goal ends with
ok=false one period after the later of "it went stale" and "this thread started waiting for a new one" (a slow inference
starves the process's executor, so frames arrive late without the arm being at fault), so a stopped arm or camera is
never commanded for long. With a task status stream, the verdict after the last action waits at most
``status_timeout_s`` for the status of that action and otherwise ends ok=false; a status saying the arm's episode is
over (``done``: solved, or the arm's own step limit, after which a simulator takes no action and sends no observation)
ends the goal at once with that verdict, never as a stale observation; cancel, an ArmStop from someone else
(:meth:`ControlLoop.abort`) and shutdown are seen within one period.

Execution horizon (``ControlLoopConfig.execution_horizon`` > 1), for a policy slower than the period (Octo's trunk on a
CPU: ~450 ms at a 200 ms period): inference runs on a thread of its own, each chunk filed under the step of the
observation it was predicted from (chunk_actor), and every tick publishes the ensembled action of its step from
the chunks that cover it, at most ``execution_horizon`` steps past the newest chunk's observation. With no such
chunk the arm gets nothing (it holds) and the goal ends when the newest observation goes stale, when no action
came for ``obs_timeout_s`` with no inference running, or when one inference runs ``obs_timeout_s`` + 4 x the
slowest so far.

Take-over by a person (``handover``, amf_ros/runtime/handover.py: intervention, HG-DAgger): every action is
published inside the arbiter's turn, so none goes out once a teleop node holds control. While a person holds it the
loop computes nothing and publishes nothing (cancel, stop, shutdown and the arm's "episode over" are still seen
within one period; the stale-observation rule sleeps, as the person drives the arm). When control comes back, the
actor forgets its chunks and the next action is computed from an observation that arrived after the hand-back (the
current state), waited for at most ``obs_timeout_s`` as before a first action. ``max_steps`` counts the policy's
actions only.
"""

from __future__ import annotations

import bisect
import collections
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from amf_ros.policies.chunk_actor import ChunkActor
from amf_ros.runtime.handover import Handover


@dataclass(frozen=True)
class TaskStatusValue:
    """Latest task status of a (simulated) arm (msg/TaskStatus.msg)."""

    task: str
    resets: int
    steps: int
    success: bool
    done: bool


class Latest:
    """The newest value of a stream, its arrival time (monotonic) and its source stamp, shared between callbacks and
    the loop.

    ``wait_newer(since, timeout)`` blocks (bounded) until a value newer than ``since`` arrives. The last
    ``history`` stamped values stay findable by stamp (:meth:`at`): sim_bridge stamps a frame's TaskStatus with the
    frame's own stamp, so the loop can read what the arm had applied when a frame was measured.
    """

    def __init__(self, history: int = 32) -> None:
        self._cond = threading.Condition()
        self._value: Any = None
        self._time = -1.0
        self._count = 0
        self._stamp_ns = 0
        self._by_stamp: collections.deque[tuple[int, Any]] = collections.deque(maxlen=history)

    def set(self, value: Any, stamp_ns: int = 0) -> None:
        """Store a new value (measured at ``stamp_ns`` of the ROS clock; 0 = unknown) and wake every waiter."""
        with self._cond:
            self._value, self._time, self._stamp_ns = value, time.monotonic(), int(stamp_ns)
            if stamp_ns > 0:
                self._by_stamp.append((int(stamp_ns), value))
            self._count += 1
            self._cond.notify_all()

    def get(self) -> tuple[Any, float, int]:
        """(value or None, monotonic arrival time or -1, number of values so far)."""
        with self._cond:
            return self._value, self._time, self._count

    def stamped(self) -> tuple[Any, float, int, int]:
        """:meth:`get` and the value's source stamp, ns of the ROS clock (0 = unknown)."""
        with self._cond:
            return self._value, self._time, self._count, self._stamp_ns

    def at(self, stamp_ns: int) -> tuple[Any, bool]:
        """(the value stamped ``stamp_ns`` among the recent ones or None, whether one may still come: the stream is
        stamped and no value stamped at or after it has arrived yet)."""
        with self._cond:
            for stamp, value in reversed(self._by_stamp):
                if stamp == stamp_ns:
                    return value, False
            return None, 0 < self._stamp_ns < stamp_ns

    def wait_newer(self, count: int, timeout_s: float) -> bool:
        """Wait until more than ``count`` values have arrived; False after ``timeout_s``."""
        with self._cond:
            return self._cond.wait_for(lambda: self._count > count, timeout=max(0.0, timeout_s))


SETTLED_STATUSES = 3
"""Unchanged arm statuses in a row after the last action that end the wait for it (the arm re-publishes its status
while idle: sim_bridge every idle_publish_period_s), when some action of the run was dropped by the arm."""


@dataclass
class RunResult:
    """Outcome of one run_policy goal (the RunPolicy.Result fields)."""

    ok: bool = True
    message: str = ""
    success: bool = False
    cancelled: bool = False
    steps: int = 0
    tick_times: list[float] = field(default_factory=list)  # time.monotonic() of every published action
    takeovers: int = 0  # times a person took control during the goal
    act_times: list[float] = field(default_factory=list)  # duration of every policy call, s
    early_observations: int = 0  # observations that arrived after an action but were measured before it (skipped)
    unapplied_observations: int = 0  # observations whose arm status shows no action applied since the last acted on

    @property
    def periods(self) -> np.ndarray:
        """(steps - 1,) measured control periods, s."""
        return np.diff(np.asarray(self.tick_times, dtype=np.float64))

    def period_stats(self) -> tuple[float, float, float]:
        """(mean, median, max) control period, s (zeros with fewer than two actions)."""
        p = self.periods
        return (float(p.mean()), float(np.median(p)), float(p.max())) if p.size else (0.0, 0.0, 0.0)

    def timing(self) -> str:
        """Period and inference-time summary for logs and the result message."""
        mean, median, worst = self.period_stats()
        act = f", inference max {max(self.act_times) * 1e3:.1f} ms" if self.act_times else ""
        early = (f", {self.early_observations} observations measured before the action preceding them skipped"
                 if self.early_observations else "")
        unapplied = (f", {self.unapplied_observations} observations showing the previous action not yet applied "
                     "skipped" if self.unapplied_observations else "")
        return (f"mean period {mean * 1e3:.1f} ms, median {median * 1e3:.1f} ms, max {worst * 1e3:.1f} ms"
                f"{act}{early}{unapplied}")


@dataclass(frozen=True)
class ControlLoopConfig:
    """Timing of the control loop."""

    period_s: float
    max_steps: int
    obs_timeout_s: float
    status_timeout_s: float
    stale_s: float = 0.0
    """Age from which an observation is stale once acting, s; 0 = 1.5 control periods."""
    execution_horizon: int = 1
    """Most actions taken from the chunks of one observation; 1 = one inference per action (synchronous). Above
    1, inference runs on a thread of its own and a policy slower than the period keeps the rate with the next
    steps of its chunks (at most this many steps past the observation they were predicted from)."""
    action_valid_for_s: float = 0.0
    """How long after its stamp the arm may still apply an action (EefDeltaAction.valid_for; the arm drops it
    later). Above 0, with a stamped task status, an observation whose status shows that the arm applied no action
    since the observation the previous action came from is not acted on (the one-step loop), unless it was measured
    after the previous action expired (the arm dropped it). 0: that rule is off."""

    def __post_init__(self) -> None:
        if not (self.period_s > 0 and self.max_steps >= 1 and self.obs_timeout_s > 0 and self.status_timeout_s > 0
                and self.stale_s >= 0 and self.execution_horizon >= 1 and self.action_valid_for_s >= 0):
            raise ValueError(f"bad control loop timing, got {self}")
        if self.stale_s == 0:
            object.__setattr__(self, "stale_s", 1.5 * self.period_s)


class ControlLoop:
    """Act for one task until solved, ``max_steps`` actions, cancel, shutdown or a fault.

    Args:
        actor: this episode's :class:`~amf_ros.policies.chunk_actor.ChunkActor` (``predict(obs, step)``, then
            ``action(step) -> (7,)`` wire action), or a plain ``obs -> (7,)`` function.
        publish: sends one action (called on the control thread; rclpy publishers are thread safe) and returns the
            stamp it carries, ns of the ROS clock (None or 0: unstamped).
        observations: :class:`Latest` of ``{"state": (S,), ["image": (H, W, 3)], ...}`` dicts, each with the stamp
            of when it was measured where the arm gives one.
        status: :class:`Latest` of :class:`TaskStatusValue`, or None (no success detector: a real arm).
        task: the task key; cfg: timing; stop: set at shutdown; cancelled: polled once per tick.
        feedback: ``(step, elapsed_s)`` after every published action.
        handover: the arbiter of control between the policy and a person (None = the policy alone).
    """

    def __init__(self, actor: ChunkActor | Callable[[dict], np.ndarray],
                 publish: Callable[[np.ndarray], int | None],
                 observations: Latest, status: Latest | None, task: str, cfg: ControlLoopConfig, stop: threading.Event,
                 cancelled: Callable[[], bool] = lambda: False,
                 feedback: Callable[[int, float], None] | None = None, handover: Handover | None = None) -> None:
        self.actor = actor if isinstance(actor, ChunkActor) else ChunkActor.of_actions(actor)
        self.publish, self.observations, self.status = publish, observations, status
        self.task, self.cfg, self.stop, self.cancelled, self.feedback = task, cfg, stop, cancelled, feedback
        self.result = RunResult()
        self.handover = handover
        self._generation = 0  # the handover's hand-backs seen so far
        self._fresh = True  # no action since the start or the latest hand-back (the first-action wait applies)
        self._abort_reason = ""
        self._chunks = threading.Condition()  # a new chunk, a published action or the end (chunked loop)
        self._newest: tuple[int, float] | None = None  # (step, observation arrival) of the newest chunk
        self._infer_error = ""
        self._next_tick = 0.0
        self._inferring_since: float | None = None  # monotonic start of the inference in flight
        self._inferred_at = 0.0  # monotonic end of the newest inference
        self._last_sent = -1.0  # monotonic start of the newest publish: observations before it are old
        self._sent_stamps: list[int] = []  # this goal's actions' stamps (ROS clock; 0 = unstamped), in order
        self._applied_used: tuple[int, int] | None = None  # the arm's (resets, steps) at the used observation
        self._ended = threading.Event()
        self._thread = threading.Thread(target=self._run_safely, name=f"control:{task}", daemon=True)

    # -- the thread ------------------------------------------------------------------------------------------
    def start(self) -> "ControlLoop":
        """Start the control thread; returns self for chaining."""
        self._thread.start()
        return self

    def abort(self, reason: str) -> None:
        """End the goal (ok=false, ``reason``) within one period: an ArmStop from someone else."""
        self._abort_reason = reason
        self.stop.set()

    def join(self, timeout_s: float) -> bool:
        """Wait (bounded) for the loop to end; True if it did."""
        self._thread.join(max(0.0, timeout_s))
        return not self._thread.is_alive()

    def _run_safely(self) -> None:
        try:
            self._run() if self.cfg.execution_horizon == 1 else self._run_chunked()
        except Exception as exc:
            self._end(False, f"control loop failed at step {self.result.steps}: {type(exc).__name__}: {exc}")
        finally:
            if self.handover is not None:
                self.handover.end()

    def _end(self, ok: bool, message: str, success: bool = False) -> None:
        r = self.result
        r.ok, r.success = ok, success
        r.message = f"{message}; {r.timing()}" if r.steps > 1 else message
        if self.handover is not None and self.handover.log.takeovers:
            r.takeovers = self.handover.log.takeovers
            r.message = f"{r.message}; {self.handover.log.summary()}"

    # -- take-over by a person ----------------------------------------------------------------------------------
    def _take_control(self) -> None:
        """The goal starts acting: the arbiter announces the policy (or the person already holding a deadman)."""
        if self.handover is not None:
            self.handover.begin()
            self._generation = self.handover.generation

    def _paused(self) -> bool:
        """True while a person holds control (after waiting at most one period for that to change), and once on
        each hand-back, after forgetting the actor's chunks (the caller then restarts its schedule and waits for a
        fresh observation). False when the policy may act."""
        h = self.handover
        if h is None:
            return False
        if h.generation != self._generation:  # control came back since the last pass
            self._generation = h.generation
            ChunkActor.reset(self.actor)  # chunks predicted before the take-over are not the current state's
            self._fresh, self._applied_used = True, None
            return True
        if h.policy_may_act():
            return False
        if not h.wait_turn(self.cfg.period_s) or h.generation == self._generation:
            self.stop.wait(0.001)  # the policy holds, but the clock is not yet past the hand-back's stamp
        return True

    def _fresh_after(self) -> float:
        """Monotonic time after which an observation must have arrived to be acted on (the latest hand-back)."""
        return self.handover.resumed_at if self.handover is not None else -1.0

    def _arrived_before_last_action(self, t_obs: float) -> bool:
        """True when the observation arrived (monotonic ``t_obs``) before the newest action began to be published: it
        cannot show that action's effect, so acting on it would apply the same correction twice."""
        return t_obs < self._last_sent

    def _measured_before_last_action(self, stamp_ns: int) -> bool:
        """True when the observation was measured (``stamp_ns``, ROS clock) before the newest action's stamp: it
        cannot show that action's effect either, wherever it arrived. This catches what arrival cannot: a frame the
        arm sent before the action reached it, delivered after the action went out (the process's executor runs
        late while an inference holds the CPU). Both stamps come from ROS clocks assumed synchronised, as the arm's
        action gate already assumes; an unstamped observation or action is judged on arrival only."""
        return 0 < stamp_ns <= (self._sent_stamps[-1] if self._sent_stamps else 0)

    def _applied_at(self, stamp_ns: int) -> tuple[tuple[int, int] | None, bool]:
        """The arm's (resets, steps) when the observation stamped ``stamp_ns`` was measured, from the TaskStatus of
        the same stamp (None: unknown), and whether that status may still come (the arm sends it just after the
        frame)."""
        if self.status is None or self.cfg.action_valid_for_s <= 0 or stamp_ns <= 0:
            return None, False
        value, pending = self.status.at(stamp_ns)
        return ((value.resets, value.steps) if value is not None else None), pending

    def _previous_action_unapplied(self, applied: tuple[int, int] | None, stamp_ns: int) -> bool:
        """True when the arm had applied nothing since the observation the previous action came from (``applied``:
        its count when this one was measured) while that action could still be applied: the observation shows the
        state the previous action was computed from (an idle re-publish measured after the action was stamped but
        before the arm took it). Once the action expired unapplied, the arm dropped it and the observation is current.
        """
        last = self._sent_stamps[-1] if self._sent_stamps else 0
        return (applied is not None and applied == self._applied_used and last > 0
                and stamp_ns <= last + int(self.cfg.action_valid_for_s * 1e9))

    def _status_start(self) -> tuple[TaskStatusValue | None, str]:
        """The arm's status when the goal starts, and why it cannot act ("" = it can): with a success detector, the
        arm must be on this task with its episode not over (a reset just before the goal may still be in flight,
        so a fitting status is awaited for up to ``status_timeout_s``)."""
        if self.status is None:
            return None, ""
        deadline = time.monotonic() + self.cfg.status_timeout_s
        while True:
            value, _, count = self.status.get()
            if value is not None and value.task == self.task and not value.done:
                return value, ""
            if time.monotonic() >= deadline or self.stop.is_set() or self.cancelled():
                why = ("no task status from the arm" if value is None else
                       f"the arm is on task {value.task!r}" if value.task != self.task else
                       f"the episode of {value.task!r} is over after {value.steps} steps")
                return value, f"{why}; reset it to {self.task!r} first (sim/reset) and send the goal again"
            self.status.wait_newer(count, deadline - time.monotonic())

    def _solved(self, first: TaskStatusValue | None) -> bool:
        """The arm reports this task solved by an action of this run (a status from before the run does not
        count unless the arm advanced since)."""
        if self.status is None:
            return False
        value, _, _ = self.status.get()
        if value is None or value.task != self.task or not value.success:
            return False
        return first is None or value.resets != first.resets or value.steps > first.steps

    def _arm_episode_over(self, first: TaskStatusValue | None) -> bool:
        """True, with the goal ended, once the arm's task status says this run's episode is over (``done``): solved,
        or the arm's own step limit reached (a simulator's max_steps; it refuses further actions and sends no
        more observations, so without this the goal would end later as "observation stale"). A verdict like the
        one after ``max_steps`` actions: ok, success as the arm says."""
        if self.status is None:
            return False
        value, _, _ = self.status.get()
        if value is None or value.task != self.task or not value.done:
            return False
        if first is not None and value.resets == first.resets and value.steps <= first.steps:
            return False  # a status from before this run's first action
        r = self.result
        if self._solved(first):
            self._end(True, f"solved at step {r.steps}", success=True)
        else:
            self._end(True, f"the arm's episode of {self.task!r} is over after {value.steps} steps, not solved (the "
                            f"arm's step limit: it takes no more actions); {r.steps} actions of this goal "
                            f"(max_steps {self.cfg.max_steps}); reset it (sim/reset) to run again", success=False)
        return True

    def _lead_s(self, capped: bool = True) -> float:
        """How long before its tick an action is computed: 1.5 x the slowest of the last 10 inferences + 1 ms,
        at most 80% of a period when ``capped`` (the action is then published AT the tick, so the period the arm
        sees does not inherit the inference time's jitter, and the observation it acts on is at most this old; the
        chunked loop's inference thread starts uncapped: a slower inference begins at once)."""
        recent = self.result.act_times[-10:]
        lead = 1.5 * max(recent) + 0.001 if recent else 0.0
        return min(0.8 * self.cfg.period_s, lead) if capped else lead

    def _interrupted(self) -> bool:
        """True, with the goal ended, once shutdown, an abort or a cancel was requested."""
        r = self.result
        if self.stop.is_set():
            self._end(False, f"{self._abort_reason or 'policy_server is shutting down'}; stopped after {r.steps} steps")
            return True
        if self.cancelled():
            r.cancelled = True
            self._end(False, f"cancelled after {r.steps} steps")
            return True
        return False

    def _following_tick(self, tick: float) -> float:
        """The tick after ``tick``; a schedule more than a period late restarts from now (no catch-up burst)."""
        tick += self.cfg.period_s
        now = time.monotonic()
        return now if tick < now - self.cfg.period_s else tick

    def _stale_s(self) -> float:
        """Age from which an observation is stale: ``stale_s``, or twice the slowest of the last 10 inferences if
        that is longer (an inference slower than the period, e.g. Octo's trunk on a CPU, already acts on frames that
        old, and saturating the CPU delays the camera's frames as much). The goal's first inference counts only
        until a second one exists: it warms the policy up (690 ms against 20-70 ms after, measured under `ros2
        launch`), and kept in the window it made a silent arm's goal end 1.5 s after its last observation."""
        times = self.result.act_times
        recent = (times[1:] if len(times) > 1 else times)[-10:]  # the first call warms up (docstring)
        return max(self.cfg.stale_s, 2.0 * max(recent)) if recent else self.cfg.stale_s

    def _run(self) -> None:
        cfg, r = self.cfg, self.result
        first_status, refusal = self._status_start()
        if refusal:
            return self._end(False, refusal)
        self._take_control()
        start = time.monotonic()
        next_tick = start  # publish time of the next action
        scheduled = start  # the tick it was scheduled for before a late schedule restarted (for staleness)
        waiting_since: float | None = None
        used = 0  # count of the observation the previous action was computed from
        skipped = 0  # count of the newest observation skipped as measured before the previous action
        unapplied_seen = 0  # count of the newest observation skipped as showing the previous action unapplied
        while True:
            if self._interrupted() or self._arm_episode_over(first_status):
                return
            if self._paused():  # a person holds control; on the hand-back: a new schedule, a fresh observation
                waiting_since, next_tick = None, time.monotonic()
                scheduled = next_tick
                continue
            now = time.monotonic()
            if waiting_since is None and next_tick - self._lead_s() > now:  # too early to compute this tick's action
                self.stop.wait(next_tick - self._lead_s() - now)
                continue
            obs, t_obs, count, stamp_ns = self.observations.stamped()
            # Its age counts up to when this action was due to be computed: a late wake-up of this thread does not
            # make the arm's observation stale (a simulator waits for the action), an arm that stopped does.
            due = min(now, scheduled - self._lead_s())
            stale_s = self._stale_s()
            max_age = cfg.obs_timeout_s if self._fresh else stale_s
            arrived_before = self._arrived_before_last_action(t_obs)
            measured_before = self._measured_before_last_action(stamp_ns)
            if measured_before and not arrived_before and count not in (used, skipped):
                skipped = count
                r.early_observations += 1
            applied, status_pending = self._applied_at(stamp_ns)
            if status_pending and count != used and now - t_obs < cfg.period_s / 2:
                # the frame's status follows it on its own topic: wait for it, bounded (then judged without it)
                self.status.wait_newer(self.status.get()[2], t_obs + cfg.period_s / 2 - now)
                continue
            unapplied = not (arrived_before or measured_before) and self._previous_action_unapplied(applied, stamp_ns)
            if unapplied and count not in (used, unapplied_seen):
                unapplied_seen = count
                r.unapplied_observations += 1
            if (obs is None or count == used or due - t_obs > max_age or t_obs <= self._fresh_after()
                    or arrived_before or measured_before or unapplied):
                # Never act twice on one observation (a frozen arm must not be driven open-loop), nor on an old
                # one, nor on one from before the previous action went out. Before the first action the wait is
                # timed from the first tick that found none (an idle arm re-publishes slowly); once acting, the goal
                # ends one period after the newest observation went stale.
                waiting_since = now if waiting_since is None else waiting_since
                if self._fresh and now - waiting_since > cfg.obs_timeout_s:
                    what = "the first action" if r.steps == 0 else "the first action after the hand-back"
                    return self._end(False, f"no new observation for {cfg.obs_timeout_s} s before {what} "
                                            "(is the arm / sim_bridge / camera running?)")
                # Once acting: end one period after the newest observation went stale, and only after this thread
                # has itself waited a period for a new one (a slow inference, e.g. Octo's trunk on a CPU, starves
                # the process's executor: the camera's frames are then late through no fault of the arm's).
                if not self._fresh and now - max(t_obs + stale_s, waiting_since) > cfg.period_s:
                    return self._end(False, f"observation stale: the newest is {(now - t_obs) * 1e3:.0f} ms old "
                                            f"(stale after {stale_s * 1e3:.0f} ms: observation_stale_periods x "
                                            "the control period, or twice the slowest inference) after "
                                            f"{r.steps} steps; stopped commanding (is the arm / sim_bridge / "
                                            "camera running, and faster than the control rate?)"
                                            + self._early_hint())
                wait = min(cfg.period_s, cfg.obs_timeout_s)
                if not self._fresh:  # wake up at the deadline, not up to a period after it
                    wait = min(wait, max(0.0, max(t_obs + stale_s, waiting_since) + cfg.period_s - now) + 0.001)
                self.observations.wait_newer(count, wait)
                continue
            waiting_since, used, self._applied_used = None, count, applied
            t0 = time.monotonic()
            self.actor.predict(obs, r.steps)
            action, bad = self._checked(self.actor.action(r.steps))
            if bad:
                return self._end(False, bad)
            r.act_times.append(time.monotonic() - t0)
            delay = next_tick - time.monotonic()
            if delay > 0:
                self.stop.wait(delay)  # publish at the tick (early wake-up on stop: decided just below)
            if self.stop.is_set() or self.cancelled():
                continue  # decided above on the next pass: never publish after a stop/cancel request
            if self._published(action, start, first_status):
                return
            scheduled = next_tick + cfg.period_s
            next_tick = self._following_tick(next_tick)

    def _early_hint(self) -> str:
        """What to check when observations were skipped as measured before the previous action (their count is in
        the timing summary, :meth:`RunResult.timing`)."""
        return ("; observations arrived after an action but were stamped before it: are the ROS clocks of the arm and "
                "policy_server synchronised?" if self.result.early_observations else "")

    def _checked(self, action: np.ndarray | None) -> tuple[np.ndarray, str]:
        """The action as float64 (7,), and why it is bad ("" = it is not)."""
        a = np.asarray(np.nan if action is None else action, dtype=np.float64)
        if a.shape != (7,) or not np.all(np.isfinite(a)):
            return a, f"policy returned a bad action at step {self.result.steps}: shape {a.shape}, values {a.tolist()}"
        return a, ""

    def _published(self, action: np.ndarray, start: float, first_status: TaskStatusValue | None) -> bool:
        """Publish one action and book it, unless a person took control meanwhile (then nothing is published: the
        next pass waits); True if the goal ended with it (solved or the last step)."""
        r = self.result
        if self.handover is not None:
            with self.handover.turn() as mine:
                if not mine:
                    return False
                self._last_sent = time.monotonic()
                stamp = int(self.publish(action) or 0)
        else:
            self._last_sent = time.monotonic()
            stamp = int(self.publish(action) or 0)
        self._fresh = False
        with self._chunks:
            self._sent_stamps.append(stamp)
            r.steps += 1
            r.tick_times.append(time.monotonic())
            self._chunks.notify_all()
        if self.feedback is not None:
            self.feedback(r.steps, time.monotonic() - start)
        if self._solved(first_status):
            self._end(True, f"solved at step {r.steps}", success=True)
            return True
        if r.steps >= self.cfg.max_steps:
            self._final_verdict(first_status)
            return True
        return False

    # -- chunked: inference on its own thread ----------------------------------------------------------------
    def _run_chunked(self) -> None:
        """Publish at every tick the action of that step from the chunks predicted so far (at most
        ``execution_horizon`` steps past the newest chunk's observation) while :meth:`_infer_loop` predicts
        from the newest observation on a thread of its own: a policy slower than the period keeps the rate."""
        cfg, r = self.cfg, self.result
        first_status, refusal = self._status_start()
        if refusal:
            return self._end(False, refusal)
        self._take_control()
        start = time.monotonic()
        next_tick = self._next_tick = start
        waiting_since: float | None = None
        inference = threading.Thread(target=self._infer_loop, name=f"inference:{self.task}", daemon=True)
        inference.start()
        try:
            while True:
                if self._interrupted() or self._arm_episode_over(first_status):
                    return
                if self._paused():  # a person holds control; on the hand-back: a new schedule, fresh chunks only
                    waiting_since, next_tick = None, time.monotonic()
                    with self._chunks:
                        self._next_tick, self._newest = next_tick, None
                        self._chunks.notify_all()
                    continue
                now = time.monotonic()
                if waiting_since is None and next_tick > now:
                    self.stop.wait(next_tick - now)
                    continue
                with self._chunks:
                    newest, error = self._newest, self._infer_error
                if error:
                    return self._end(False, error)
                step = r.steps
                ready = newest is not None and step - newest[0] < cfg.execution_horizon
                action = self.actor.action(step) if ready else None
                if action is None:
                    waiting_since = now if waiting_since is None else waiting_since
                    ended = self._chunk_wait_over(now, waiting_since)
                    if ended:
                        return self._end(False, ended)
                    with self._chunks:
                        if self._newest == newest and not self._infer_error:
                            self._chunks.wait(min(cfg.period_s, cfg.obs_timeout_s) / 4)
                    continue
                action, bad = self._checked(action)
                if bad:
                    return self._end(False, bad)
                waiting_since = None
                if self._published(action, start, first_status):
                    return
                next_tick = self._next_tick = self._following_tick(next_tick)
        finally:
            self._ended.set()
            with self._chunks:
                self._chunks.notify_all()
            # an inference in flight finishes before the next goal may use the same trunk (bounded)
            inference.join(max(1.0, 3.0 * max(r.act_times[-10:], default=0.0)))

    def _chunk_wait_over(self, now: float, waiting_since: float) -> str:
        """Why the chunked loop stops waiting for an action ("" = it waits on): no action for ``obs_timeout_s``
        with no inference running (no usable observation), an inference running longer than
        ``obs_timeout_s`` plus 4 times the slowest so far (a hung policy), or, once acting, the newest observation
        stale for a period."""
        cfg, r = self.cfg, self.result
        _, t_obs, _ = self.observations.get()
        what = "before the first action" if r.steps == 0 else f"after {r.steps} steps"
        if self._fresh and r.steps > 0:
            what = f"after the hand-back ({r.steps} steps before it)"
        inferring = self._inferring_since
        if inferring is not None:
            bound = cfg.obs_timeout_s + 4.0 * max(r.act_times, default=0.0)
            if now - inferring > bound:
                return f"an inference ran for more than {bound:.1f} s {what}; stopped commanding"
        elif now - max(waiting_since, self._inferred_at) > cfg.obs_timeout_s:
            return (f"no action for {cfg.obs_timeout_s} s {what}: no new observation, or inference slower than "
                    f"{cfg.execution_horizon} control periods (is the arm / sim_bridge / camera running?)")
        stale_s = self._stale_s()
        if not self._fresh and t_obs >= 0 and now - max(t_obs + stale_s, waiting_since) > cfg.period_s:
            return (f"observation stale: the newest is {(now - t_obs) * 1e3:.0f} ms old (stale after "
                    f"{stale_s * 1e3:.0f} ms) after {r.steps} steps; stopped commanding (is the arm / sim_bridge / "
                    "camera running?)")
        return ""

    def _infer_loop(self) -> None:
        """Predict from every new observation, once per step it shows, no earlier than a lead before the next tick
        and never from a stale observation; an error is handed to the control thread."""
        cfg, r = self.cfg, self.result
        used = 0
        try:
            while not self._ended.is_set():
                if self.handover is not None and not self.handover.policy_may_act():
                    self.handover.wait_turn(cfg.period_s)  # a person holds control: predict nothing
                    continue
                obs, t_obs, count, stamp_ns = self.observations.stamped()
                step = self._step_shown(stamp_ns)  # row 0 of a chunk from this observation is this step's action
                with self._chunks:
                    covered = self._newest is not None and self._newest[0] >= step  # this step has its chunk
                    if covered and stamp_ns <= 0:  # unstamped: the next step is the next action's
                        self._chunks.wait(cfg.period_s)
                if covered:
                    if stamp_ns > 0:  # only a newer observation can show a later step
                        self.observations.wait_newer(count, cfg.period_s)
                    continue
                now = time.monotonic()
                max_age = cfg.obs_timeout_s if self._fresh else self._stale_s()
                if obs is None or count == used or now - t_obs > max_age or t_obs <= self._fresh_after():
                    self.observations.wait_newer(count, cfg.period_s)
                    continue
                lead = self._lead_s(capped=False)
                if self._next_tick - lead > now:  # a fast policy acts on the newest observation before its tick
                    self._ended.wait(min(cfg.period_s, self._next_tick - lead - now))
                    continue
                used = count
                t0 = self._inferring_since = time.monotonic()
                self.actor.predict(obs, step)
                self._inferred_at = time.monotonic()
                r.act_times.append(self._inferred_at - t0)
                self._inferring_since = None
                with self._chunks:
                    self._newest = (step, t_obs)
                    self._chunks.notify_all()
        except Exception as exc:
            with self._chunks:
                self._infer_error = f"control loop failed at step {r.steps}: {type(exc).__name__}: {exc}"
                self._chunks.notify_all()

    def _step_shown(self, stamp_ns: int) -> int:
        """The control step an observation shows: how many of this goal's actions are stamped before it was measured
        (``stamp_ns``, ROS clock). An observation delivered late (policy_server's executor starved by an inference)
        arrives after one or two more actions went out; a chunk predicted from it starts at the step it shows, not at
        the next one to publish (filed there, its rows went out a step or two late each). An arm that applies actions
        later than it measures its state is not seen this way: only the arm knows what it applied (sim_bridge's
        TaskStatus.steps; sim_bridge applies an action when it arrives). Without stamps: the next step to publish."""
        with self._chunks:
            steps, stamps = self.result.steps, list(self._sent_stamps)
        if stamp_ns <= 0 or 0 in stamps:  # an unstamped observation, or an action published unstamped
            return steps
        return bisect.bisect_left(stamps, stamp_ns)

    def _final_verdict(self, first: TaskStatusValue | None) -> None:
        """After the last action: wait (bounded) for the arm's status of that action, then decide success."""
        r = self.result
        if self.status is None:
            return self._end(True, f"{r.steps} steps (no success detector)")
        deadline = time.monotonic() + self.cfg.status_timeout_s
        settled, last_steps = 0, None
        while time.monotonic() < deadline and not self.stop.is_set():
            value, _, count = self.status.get()
            if value is not None and value.task == self.task and (
                    first is None or value.resets != first.resets or value.steps >= first.steps + r.steps):
                return self._end(True, f"{r.steps} steps, success={self._solved(first)}", success=self._solved(first))
            # An arm drops an action that arrives stale or is superseded before it is applied (depth-1 command
            # queue, EefDeltaAction.valid_for): its step counter then never reaches first.steps + r.steps. Once the
            # arm's (idle re-published) status has stopped advancing, that status is the verdict.
            if value is not None and value.task == self.task and first is not None and value.resets == first.resets:
                settled = settled + 1 if value.steps == last_steps else 0
                last_steps = value.steps
                if settled >= SETTLED_STATUSES:
                    applied = value.steps - first.steps
                    return self._end(True, f"{r.steps} steps sent, {applied} applied by the arm (the others arrived "
                                           f"stale or superseded), success={self._solved(first)}",
                                     success=self._solved(first))
            self.status.wait_newer(count, deadline - time.monotonic())
        return self._end(False, f"no task status for the last action within {self.cfg.status_timeout_s} s "
                                f"(is sim_bridge running?); {r.steps} steps")
