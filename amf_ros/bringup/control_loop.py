"""One run_policy goal as a small state machine stepped by policy_server's control timer (no rclpy import).

Why a state machine and not a loop: the control timer (its own callback group) calls :meth:`EpisodeRun.tick` once
per period, so nothing ever sleeps or spins inside a callback (anti-pattern 3); the action's execute coroutine just
awaits ``done``. The measured periods are the jitter benchmark's raw data.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from amf_ros.bringup.policy_runtime import ActionAdapter


class EpisodeRun:
    """State of one run_policy goal.

    Args:
        goal: the rclpy goal handle (only ``is_cancel_requested`` is read here).
        policy: the policy this run acts with (fixed for the whole run).
        task: task key; max_steps: step limit.
        action_space, horizon, exp_weight: see :class:`ActionAdapter`.
        obs_timeout_s: fail if no fresh observation arrives for this long.
        now: start time, s; done: a future completed by :meth:`complete` (rclpy Future in the node).
    """

    def __init__(self, goal: Any, policy: Any, task: str, max_steps: int, action_space: str, horizon: int,
                 exp_weight: float, obs_timeout_s: float, now: float, done: Any) -> None:
        self.goal, self.policy, self.task, self.max_steps = goal, policy, task, int(max_steps)
        self.adapter = ActionAdapter(action_space, horizon, exp_weight)
        self.obs_timeout_s, self.start, self.done = float(obs_timeout_s), float(now), done
        self.steps, self.finished, self.ok, self.cancelled, self.success = 0, False, True, False, False
        self.message = ""
        self.completing = False  # set once the node has started completing the goal
        self.query_pending = False  # a success query is in flight
        self.tick_times: list[float] = []  # time.monotonic() of every published step
        self.elapsed = 0.0
        known = list(getattr(policy, "tasks", []) or [])
        if known and task not in known:
            self._stop(False, f"unknown task {task!r}; the policy knows {known}")

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
            if self.elapsed > self.obs_timeout_s:
                self._stop(False, f"no observation for {self.obs_timeout_s} s (is the arm/sim_bridge running?)")
            return None
        try:
            chunk = self.policy.act(obs[0], self.task)
            action = self.adapter(chunk)
        except Exception as exc:  # a policy error ends the goal with ok=false; the node keeps running
            self._stop(False, f"policy failed at step {self.steps}: {exc}")
            return None
        self.steps += 1
        self.tick_times.append(time.monotonic())
        if self.steps >= self.max_steps:
            self._stop(True, f"{self.steps} steps, mean period {self.mean_period * 1e3:.1f} ms")
        return action

    def on_success_reply(self, reply: Any) -> None:
        """A TaskSuccess answer arrived: a solved task ends the run early (the episode is over for the sim)."""
        self.query_pending = False
        if reply is not None and reply.ok and reply.success and reply.task in ("", self.task) and not self.finished:
            self.success = True
            self._stop(True, f"solved at step {self.steps}, mean period {self.mean_period * 1e3:.1f} ms")

    def complete(self, success: bool) -> None:
        """Record the success verdict and release the awaiting goal coroutine."""
        self.success = self.success or bool(success)
        if self.ok:
            self.message += f", success={self.success}"
        if not self.done.done():
            self.done.set_result(True)
