"""Subsample the states of a trajectory without (to first order) changing the criterion's scale.

Why: the criterion's cost grows with the square of the number of conditioned rows (sample space, N^2 D), so long
demonstrations (50 steps x hundreds of demos x D = 7168) must be thinned. Keeping every s-th state alone would
weaken the data s-fold; instead each kept row stands for the s rows around it:

* rows we condition on (data, hallucinated demos) are scaled by sqrt(s): with the linear kernel, observing
  ``sqrt(s) phi`` with noise sigma^2 is exactly observing ``phi`` s times (noise sigma^2 / s);
* target rows keep their features and get weight x s, so sum_t over all states is estimated by s x the kept sum.

The approximation is exact when the s states a row stands for have equal features; the selector-scaling benchmark
reports how far real scores move (rank correlation and argmin agreement against the full computation).
"""

from __future__ import annotations

import numpy as np


def keep_indices(length: int, keep: int) -> np.ndarray:
    """(min(keep, length),) evenly spaced state indices of a trajectory of ``length`` states (first and last kept)."""
    if length < 1:
        raise ValueError(f"trajectory must have at least one state, got {length=}")
    if keep < 1:
        raise ValueError(f"keep must be >= 1, got {keep=}")
    if keep >= length:
        return np.arange(length)
    return np.unique(np.round(np.linspace(0, length - 1, keep)).astype(np.int64))


def conditioning_rows(phi: np.ndarray, keep: int) -> np.ndarray:
    """(k, D) rows of a trajectory's features (H, D) to condition on, scaled by sqrt(H / k)."""
    phi = np.asarray(phi)
    idx = keep_indices(phi.shape[0], keep)
    return phi[idx] * np.sqrt(phi.shape[0] / idx.size)


def target_rows(phi: np.ndarray, keep: int, weight: float = 1.0) -> tuple[np.ndarray, np.ndarray]:
    """(k, D) target rows of a trajectory's features (H, D) and their (k,) weights ``weight * H / k``."""
    phi = np.asarray(phi)
    idx = keep_indices(phi.shape[0], keep)
    return phi[idx], np.full(idx.size, weight * phi.shape[0] / idx.size)
