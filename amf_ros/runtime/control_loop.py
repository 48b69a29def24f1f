"""One run_policy goal as a small state machine stepped by policy_server's control timer (no rclpy import).

Why a state machine and not a loop: the control timer (its own callback group) calls :meth:`EpisodeRun.tick` once
per period, so the control loop never sleeps or spins inside a callback (anti-pattern 3); the action's execute
callback, on another executor thread, just waits for ``done``. The measured periods are the jitter benchmark's raw
data.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import numpy as np

from amf_ros.runtime.policy_server import ActionAdapter


class DoneEvent(threading.Event):
    """A one-shot completion flag with the future-like ``done()`` / ``set_result()`` EpisodeRun uses."""

    def done(self) -> bool:
        return self.is_set()

    def set_result(self, _value: Any) -> None:
        self.set()


class EpisodeRun:
    """State of one run_policy goal.

    Args:
        goal: the rclpy goal handle (only ``is_cancel_requested`` is read here).
        policy: the policy this run acts with (fixed for the whole run).
        task: task key; max_steps: step limit.
        action_space, horizon, exp_weight: see :class:`ActionAdapter`.
        obs_timeout_s: fail if no fresh observation arrives for this long.
        now: start time, s; done: completed by :meth:`complete` (a :class:`DoneEvent` in the node).
        actor: optional ``obs -> (7,)`` callable with ``reset(task)`` that replaces ``policy.act`` + ensembling
            (the Octo backend: camera window, trunk, head, Octo's post-processing; octo_backend.OctoActor).
    """

    def __init__(self, goal: Any, policy: Any, task: str, max_steps: int, action_space: str, horizon: int,
                 exp_weight: float, obs_timeout_s: float, now: float, done: Any, actor: Any = None) -> None:
        self.goal, self.policy, self.task, self.max_steps = goal, policy, task, int(max_steps)
        self.adapter = ActionAdapter(action_space, horizon, exp_weight)
        self.actor = actor
        self.obs_timeout_s, self.start, self.done = float(obs_timeout_s), float(now), done
        self.steps, self.finished, self.ok, self.cancelled, self.success = 0, False, True, False, False
        self.message = ""
        self.completing = False  # set once the node has started completing the goal
        self.query_pending = False  # a success query is in flight
        self.tick_times: list[float] = []  # time.monotonic() of every published step
        self.act_times: list[float] = []  # duration of every policy call (inference + ensembling), s
        self.elapsed = 0.0
        self.waiting_since: float | None = None  # first tick of the current wait for a fresh observation
        known = list(getattr(policy, "tasks", []) or [])
        if known and task not in known:
            self._stop(False, f"unknown task {task!r}; the policy knows {known}")
        elif actor is not None:
            actor.reset(task)

    def _stop(self, ok: bool, message: str) -> None:
        self.finished, self.ok, self.message = True, ok, message

    @property
    def periods(self) -> np.ndarray:
        """(steps - 1,) measured control periods, s."""
        return np.diff(np.asarray(self.tick_times, dtype=np.float64))

    @property
    def mean_period(self) -> float:
        p = self.periods
        return float(p.mean()) if p.size else 0.0

    @property
    def median_period(self) -> float:
        p = self.periods
        return float(np.median(p)) if p.size else 0.0

    @property
    def max_period(self) -> float:
        p = self.periods
        return float(p.max()) if p.size else 0.0

    def timing(self) -> str:
        """Period and inference-time summary for logs and the result message."""
        p = self.periods
        spread = f", median {self.median_period * 1e3:.1f} ms, max {self.max_period * 1e3:.1f} ms" if p.size else ""
        act = f", inference max {max(self.act_times) * 1e3:.1f} ms" if self.act_times else ""
        return f"mean period {self.mean_period * 1e3:.1f} ms{spread}{act}"

    def tick(self, obs: tuple[dict, float] | None, now: float) -> np.ndarray | None:
        """One control step: the 7-D action to publish, or None (finished, or still waiting for an observation).

        Args:
            obs: the newest observation ``({"state": (S,), "image": (H, W, 3) uint8 if a camera is configured},
                receive time s)``, or None before the first one.
            now: current time, s.
        """
        if self.finished:
            return None
        self.elapsed = now - self.start
        if getattr(self.goal, "is_cancel_requested", False):
            self.cancelled = True
            self._stop(False, f"cancelled after {self.steps} steps")
            return None
        if obs is None or now - obs[1] > self.obs_timeout_s:
            # The wait is timed from the first tick that found no fresh observation, not from the goal's start:
            # after the whole process stalled (a starved machine), the subscription callbacks need one tick to
            # deliver what arrived meanwhile, so one late tick alone must not end the run.
            if self.waiting_since is None:
                self.waiting_since = now
            elif now - self.waiting_since > self.obs_timeout_s:
                self._stop(False, f"no observation for {self.obs_timeout_s} s (is the arm/sim_bridge running?)")
            return None
        self.waiting_since = None
        try:
            t0 = time.monotonic()
            if self.actor is not None:
                action = np.asarray(self.actor(obs[0]), dtype=np.float64)
                if action.shape != (7,) or not np.all(np.isfinite(action)):
                    raise ValueError(f"actor returned a bad action: shape {action.shape}, values {action}")
            else:
                action = self.adapter(self.policy.act(obs[0], self.task))
            self.act_times.append(time.monotonic() - t0)
        except Exception as exc:  # a policy error ends the goal with ok=false; the node keeps running
            self._stop(False, f"policy failed at step {self.steps}: {exc}")
            return None
        self.steps += 1
        self.tick_times.append(time.monotonic())
        if self.steps >= self.max_steps:
            self._stop(True, f"{self.steps} steps, {self.timing()}")
        return action

    def on_success_reply(self, reply: Any) -> None:
        """A TaskSuccess answer arrived: a solved task ends the run early (the episode is over for the sim)."""
        self.query_pending = False
        if reply is not None and reply.ok and reply.success and reply.task in ("", self.task) and not self.finished:
            self.success = True
            self._stop(True, f"solved at step {self.steps}, {self.timing()}")

    def complete(self, success: bool) -> None:
        """Record the success verdict and release the waiting goal callback."""
        self.success = self.success or bool(success)
        if self.ok:
            self.message += f", success={self.success}"
        if not self.done.done():
            self.done.set_result(True)
