"""Importance weights w(tau, c) of the paper's eq. 4, their clipping, normalisation and effective sample size.

Why: AMF needs the expert's occupancy for tasks that may never have been demonstrated. Eq. 4 reweights the
trajectories collected so far: ``w(tau, c) = n * prod_t pi(a_t|s_t, c) / sum_i prod_t pi(a_t|s_t, c_i)``, where
``c_i`` is the task trajectory i was demonstrated for. Only action likelihoods enter (dynamics cancel).
Per-step log-probabilities are clipped (App. M: GP uses [-12, 0]) to bound the weights' variance.
"""

from __future__ import annotations

import numpy as np
from scipy.special import logsumexp

#: App. M, GP settings: per-step log-probabilities are clipped to this range.
DEFAULT_LOG_PROB_CLIP: tuple[float, float] = (-12.0, 0.0)


def trajectory_log_likelihood(step_log_probs: np.ndarray,
                              clip: tuple[float, float] | None = DEFAULT_LOG_PROB_CLIP) -> np.ndarray:
    """Sum over time of clipped per-step log-probabilities.

    Args:
        step_log_probs: (..., H) ``log pi(a_t | s_t, c)``; NaN is refused, -inf is allowed (clipped).
        clip: (low, high) applied per step before summing, or None for no clipping.
    Returns:
        (...,) trajectory log-likelihoods.
    """
    lp = np.asarray(step_log_probs, dtype=np.float64)
    if lp.ndim == 0 or lp.shape[-1] == 0:
        raise ValueError(f"step_log_probs needs a non-empty time axis, got shape {lp.shape}")
    if np.any(np.isnan(lp)):
        raise ValueError("step_log_probs contains NaN")
    if clip is not None:
        lo, hi = clip
        if not lo < hi:
            raise ValueError(f"clip must be (low, high) with low < high, got {clip=}")
        lp = np.clip(lp, lo, hi)
    elif np.any(np.isinf(lp)):
        raise ValueError("step_log_probs contains inf and clip=None; pass a clip range")
    return lp.sum(axis=-1)


def importance_weights(loglik_query: np.ndarray, loglik_demo: np.ndarray) -> np.ndarray:
    """Eq. 4 for every collected trajectory and query task.

    Args:
        loglik_query: (n, C) ``log p(tau_k | c_j)`` of trajectory k under query task j (target or candidate).
        loglik_demo: (n, n) ``log p(tau_k | c_i)`` of trajectory k under the task c_i that trajectory i was
            demonstrated for (see :func:`demo_loglik`).
    Returns:
        (n, C) ``w(tau_k, c_j) = n exp(loglik_query[k, j]) / sum_i exp(loglik_demo[k, i])`` (log-sum-exp stable).
    """
    q = np.asarray(loglik_query, dtype=np.float64)
    d = np.asarray(loglik_demo, dtype=np.float64)
    if q.ndim != 2 or q.shape[0] == 0:
        raise ValueError(f"loglik_query must be (n, C) with n >= 1 trajectories, got shape {q.shape}")
    if d.shape != (q.shape[0], q.shape[0]):
        raise ValueError(f"loglik_demo must be (n, n) = {(q.shape[0], q.shape[0])}, got shape {d.shape}")
    if not (np.all(np.isfinite(q)) and np.all(np.isfinite(d))):
        raise ValueError("log-likelihoods must be finite (clip them with trajectory_log_likelihood)")
    n = q.shape[0]
    log_den = logsumexp(d, axis=1)  # (n,)
    return np.exp(np.log(n) + q - log_den[:, None])


def demo_loglik(loglik: np.ndarray, demo_task_index: np.ndarray) -> np.ndarray:
    """(n, n) ``loglik[k, demo_task_index[i]]``: the denominator input of eq. 4 when the query tasks include
    every demonstrated task (``loglik`` is (n, C), ``demo_task_index`` (n,) column of each trajectory's task)."""
    loglik = np.asarray(loglik, dtype=np.float64)
    idx = np.asarray(demo_task_index, dtype=np.int64)
    if idx.shape != (loglik.shape[0],):
        raise ValueError(f"demo_task_index must be ({loglik.shape[0]},), got shape {idx.shape}")
    if idx.size and (idx.min() < 0 or idx.max() >= loglik.shape[1]):
        raise ValueError(f"demo_task_index out of range [0, {loglik.shape[1]}), got {idx.min()}..{idx.max()}")
    return loglik[:, idx]


def indicator_weights(demo_task_index: np.ndarray, num_tasks: int) -> np.ndarray:
    """(n, C) weights for deterministic policies (App. M, Octo): 1 if tau_k was demonstrated for task j, else 0."""
    idx = np.asarray(demo_task_index, dtype=np.int64)
    if idx.ndim != 1 or (idx.size and (idx.min() < 0 or idx.max() >= num_tasks)):
        raise ValueError(f"demo_task_index must be 1-D with values in [0, {num_tasks}), got {idx!r}")
    w = np.zeros((idx.size, num_tasks))
    w[np.arange(idx.size), idx] = 1.0
    return w


def normalize_weights(w: np.ndarray, mode: str = "self") -> np.ndarray:
    """Turn raw eq.-4 weights (n, C) into the per-task averaging weights of App. E.

    mode "self": self-normalised, each column sums to 1 (a column of zeros stays zero); "mean": ``w / n``, the
    plain importance-sampling average of App. E (columns sum to 1 only in expectation).
    """
    w = np.asarray(w, dtype=np.float64)
    if w.ndim != 2 or w.shape[0] == 0:
        raise ValueError(f"weights must be (n, C) with n >= 1, got shape {w.shape}")
    if np.any(~np.isfinite(w)) or np.any(w < 0):
        raise ValueError("weights must be finite and >= 0")
    if mode == "mean":
        return w / w.shape[0]
    if mode != "self":
        raise ValueError(f"mode must be 'self' or 'mean', got {mode=}")
    total = w.sum(axis=0, keepdims=True)
    return np.divide(w, total, out=np.zeros_like(w), where=total > 0)


def effective_sample_size(w: np.ndarray) -> np.ndarray:
    """(C,) Kish effective sample size ``(sum_k w)^2 / sum_k w^2`` per column of (n, C) weights (0 if all zero)."""
    w = np.asarray(w, dtype=np.float64)
    if w.ndim == 1:
        w = w[:, None]
    s1, s2 = w.sum(axis=0), np.square(w).sum(axis=0)
    return np.divide(s1 * s1, s2, out=np.zeros_like(s1), where=s2 > 0)
