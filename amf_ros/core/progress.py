"""Learning progress per task from the evaluation history: the estimator behind the ``progress`` selector.

Why: a rival family to information-based selection allocates demonstrations by *measured* learning progress
(e.g. Data-Efficient Multitask DAgger, arXiv 2509.25466, a Kalman-filter estimate of each task's improvement). This
module is a learning-progress rule of that family, not a port of that paper (which also ranks tasks by a "need" term
and rank-normalises): it estimates, per task, the improvement in success per demonstration of that task, and the
selector gives the next demonstration to the task with the largest predicted gain.

Estimator: one Kalman filter per task, a local linear trend indexed by the task's own demonstration count n.

  state x = (l, s): l = success rate of the current policy on the task, s = improvement per demonstration of it.
  prior:   x_0 ~ N((0.5, 0), diag(0.25, slope_prior_sd^2))   (0.25: the largest variance of a rate in [0, 1])
  predict, between two evaluations with dn = n_k - n_{k-1} >= 0 new demonstrations of the task:
           x <- F x,  P <- F P F^T + Q,  F = [[1, dn], [0, 1]],  Q = diag(level_process_var, dn * slope_process_var)
           (the level drifts every evaluation, also when dn = 0: fine-tuning on other tasks moves it; the slope
           drifts with each demonstration spent on the task: returns diminish)
  observe: y_k = success rate over e_k evaluation episodes,  y = H x + v,  H = (1, 0),
           v ~ N(0, r),  r = max(p (1 - p) / e, obs_var_floor),  p = (y e + 1) / (e + 2)
           (the binomial variance of a mean of e episodes, at the Laplace-smoothed rate so that 0/e and e/e are
           not exact; the floor: the evaluation scenes are a fixed, finite set, so many episodes do not make a
           success rate exact)
  update:  the standard Kalman update, K = P H^T / (H P H^T + r), x <- x + K (y - H x), P <- (I - K H) P.

Selection score (lower = chosen first, the ScoreFn convention): minus the predicted gain of one more demonstration,

  gain(c | k picks of c this batch) = clip(l + (d + k + 1) s~, 0, 1) - clip(l + (d + k) s~, 0, 1),

with d = demonstrations of c recorded since its last evaluation (their effect is predicted, not yet measured) and
s~ = s + ucb * sd(s), an upper confidence bound (default ucb = 1). Why the clip: success is bounded, so a task at
1.0 gains nothing however steep its slope, and a greedy batch that keeps picking one task walks up its predicted
curve until the headroom is used (a pick updates that task's predicted count). Why a UCB rather than the mean: with
10 evaluation episodes the noise of one success rate (sd ~0.15) is as large as the improvement a demonstration
brings, so greedy on the mean would starve a task whose first measured step happened to be low; the bound keeps
choosing tasks whose slope is still uncertain until evaluations pin it down. ``ucb = 0`` gives the plain mean.
A task never evaluated is scored from the prior (level 0.5, slope 0 +- slope_prior_sd) at its current count.

A slope needs two evaluations at different demonstration counts: the ``progress`` selector starts with the warm
start (each task once) like the other rules; with the pre-trained policy's evaluation as the first point, the
evaluation after a task's first demonstration gives its first slope.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from amf_ros.core.selection import ScoreFn


@dataclass(frozen=True)
class Evaluation:
    """One evaluation of one task: the policy, after ``demos`` fine-tuning demonstrations of the task, succeeded
    on a ``success`` share of ``episodes`` evaluation episodes."""

    task: str
    demos: int
    """Fine-tuning demonstrations of this task the evaluated policy was trained on."""
    success: float
    """Success rate in [0, 1]."""
    episodes: int
    """Evaluation episodes behind ``success`` (>= 1)."""

    def __post_init__(self) -> None:
        if not 0.0 <= float(self.success) <= 1.0:
            raise ValueError(f"success must be in [0, 1], got {self.success=} (task {self.task!r})")
        if int(self.episodes) < 1 or int(self.demos) < 0:
            raise ValueError(f"need episodes >= 1 and demos >= 0, got {self.episodes=} {self.demos=} "
                             f"(task {self.task!r})")


@dataclass(frozen=True)
class ProgressConfig:
    """The estimator's settings (module docstring: where each enters)."""

    slope_prior_sd: float = 0.25
    """Prior sd of the improvement per demonstration (one demonstration can take a new Metaworld task from 0 to
    ~0.5)."""
    level_process_var: float = 0.0025
    """Drift variance of the success level per evaluation (sd 0.05: training on the other tasks moves it)."""
    slope_process_var: float = 0.001
    """Drift variance of the slope per demonstration of the task (sd ~0.03: diminishing returns)."""
    obs_var_floor: float = 0.001
    """Floor of the observation variance (sd ~0.03: a fixed set of evaluation scenes is never exact)."""
    ucb: float = 1.0
    """Score slope = mean + ucb * sd (0 = the mean alone)."""

    def __post_init__(self) -> None:
        for name in ("slope_prior_sd", "level_process_var", "slope_process_var", "obs_var_floor", "ucb"):
            v = float(getattr(self, name))
            if not np.isfinite(v) or v < 0:
                raise ValueError(f"{name} must be finite and >= 0, got {v}")
        if self.slope_prior_sd <= 0 or self.obs_var_floor <= 0:
            raise ValueError(f"slope_prior_sd and obs_var_floor must be > 0, got {self.slope_prior_sd=} "
                             f"{self.obs_var_floor=}")


@dataclass(frozen=True)
class TrendEstimate:
    """The filtered local linear trend of one task after its last evaluation."""

    level: float
    """Success rate now (posterior mean)."""
    slope: float
    """Improvement in success per demonstration of the task (posterior mean)."""
    cov: np.ndarray
    """(2, 2) posterior covariance of (level, slope)."""
    demos: int
    """The task's demonstration count at its last evaluation."""
    evaluations: int
    """Evaluations filtered."""

    @property
    def slope_sd(self) -> float:
        """Posterior sd of the slope."""
        return float(np.sqrt(max(self.cov[1, 1], 0.0)))


def observation_var(success: float, episodes: int, floor: float) -> float:
    """Binomial variance of a success rate over ``episodes`` episodes at the Laplace-smoothed rate, floored."""
    p = (float(success) * episodes + 1.0) / (episodes + 2.0)
    return max(p * (1.0 - p) / episodes, float(floor))


def filter_task(evaluations: Sequence[Evaluation], config: ProgressConfig = ProgressConfig()) -> TrendEstimate:
    """Run the local-linear-trend Kalman filter over one task's evaluations, oldest first (module docstring).

    Raises:
        ValueError: no evaluations, or a demonstration count that decreases.
    """
    if not evaluations:
        raise ValueError("no evaluations to filter")
    prior = prior_estimate(0, config)
    x, cov = np.array([prior.level, prior.slope]), prior.cov.copy()
    last = None
    for ev in evaluations:
        n = int(ev.demos)
        if last is not None:
            dn = n - last
            if dn < 0:
                raise ValueError(f"task {ev.task!r}: demonstration count went down from {last} to {n}; evaluations "
                                 "must be in time order")
            f = np.array([[1.0, float(dn)], [0.0, 1.0]])
            x = f @ x
            cov = f @ cov @ f.T + np.diag([config.level_process_var, dn * config.slope_process_var])
        r = observation_var(ev.success, int(ev.episodes), config.obs_var_floor)
        gain = cov[:, 0] / (cov[0, 0] + r)  # K = P H^T / (H P H^T + r), H = (1, 0)
        x = x + gain * (float(ev.success) - x[0])
        cov = cov - np.outer(gain, cov[0, :])
        cov = 0.5 * (cov + cov.T)
        last = n
    return TrendEstimate(float(x[0]), float(x[1]), cov, int(last), len(evaluations))


def estimate_progress(history: Sequence[Evaluation], config: ProgressConfig = ProgressConfig()
                      ) -> dict[str, TrendEstimate]:
    """``{task: TrendEstimate}`` for every task with at least one evaluation in ``history`` (time order)."""
    by_task: dict[str, list[Evaluation]] = {}
    for ev in history:
        by_task.setdefault(ev.task, []).append(ev)
    return {task: filter_task(evs, config) for task, evs in by_task.items()}


def prior_estimate(demos: int, config: ProgressConfig = ProgressConfig()) -> TrendEstimate:
    """The filter's prior as the estimate of a task never evaluated (now at ``demos`` demonstrations)."""
    return TrendEstimate(0.5, 0.0, np.diag([0.25, config.slope_prior_sd ** 2]), int(demos), 0)


def predicted_gain(estimate: TrendEstimate, since: int, picks: int, config: ProgressConfig = ProgressConfig()
                   ) -> float:
    """Predicted success gain of one more demonstration of a task with ``since`` demonstrations recorded after its
    last evaluation and ``picks`` already chosen in this batch (module docstring)."""
    s = estimate.slope + config.ucb * estimate.slope_sd
    n = since + picks
    return float(np.clip(estimate.level + (n + 1) * s, 0.0, 1.0) - np.clip(estimate.level + n * s, 0.0, 1.0))


def progress_score_fn(history: Sequence[Evaluation], demo_counts: Mapping[str, int],
                      config: ProgressConfig = ProgressConfig()) -> ScoreFn:
    """The ``progress`` selector's ScoreFn: ``(candidates, chosen) -> -predicted gain`` (lower = chosen first).

    ``demo_counts``: each task's demonstrations now (those after its last evaluation are predicted along the trend).
    The function's ``last_info`` holds each task's level, slope, slope sd and predicted gain of the first pick.
    """
    estimates = estimate_progress(history, config)

    def score(candidates: list[str], chosen: list[str]) -> np.ndarray:
        gains = []
        for c in candidates:
            now = int(demo_counts.get(c, 0))
            est = estimates.get(c) or prior_estimate(now, config)
            gains.append(predicted_gain(est, max(now - est.demos, 0), chosen.count(c), config))
        return -np.asarray(gains, dtype=np.float64)

    score.last_info = {"progress": {  # type: ignore[attr-defined]
        t: {"level": e.level, "slope": e.slope, "slope_sd": e.slope_sd, "demos": e.demos,
            "evaluations": e.evaluations} for t, e in estimates.items()}}
    return score
