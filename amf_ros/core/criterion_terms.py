"""The pieces both forms of the AMF criterion share: the direct one (:mod:`amf_ros.core.criterion`, one pass over
the data posterior per call) and the cached one (:mod:`amf_ros.core.incremental`, the posterior covariance among
targets and candidates kept between calls): the per-target term h(v) and its variance floor, the criterion forms,
and how targets and hallucinated demonstrations are checked and normalised. Definitions: criterion.py's docstring.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amf_ros.core.posterior import as_float64_2d

FORMS: tuple[str, ...] = ("log_variance", "variance")
"""The criterion's per-target term: the Gaussian entropy of the variance (default) or the variance itself."""
#: Hallucinated points whitened per pass over the data (bounds memory at (N + Q) x this many floats).
CHUNK_POINTS = 4096
#: Variances are floored at this fraction of the largest prior target variance before the log (no -inf).
RELATIVE_VARIANCE_FLOOR = 1e-12

Alternatives = list[tuple[np.ndarray, float]]  # [(inputs (M, d), weight omega_j), ...]


def check_form(form: str) -> str:
    """``form`` if it is one of :data:`FORMS`, else ValueError naming them."""
    if form not in FORMS:
        raise ValueError(f"unknown criterion form {form!r}; choose from {list(FORMS)}")
    return form


def score_terms(var: np.ndarray, form: str, floor: float) -> np.ndarray:
    """Per-target term h(v) of the criterion (criterion.py's docstring), variances floored at ``floor``."""
    if form == "variance":
        return var
    return 0.5 * np.log(2.0 * np.pi * np.e * np.maximum(var, floor))


def alternatives_of(entry: Any, weights: Any, dim: int, name: str) -> Alternatives:
    """Normalise one candidate's hallucinated demo(s) to [(inputs (M, dim), omega), ...]."""
    if isinstance(entry, np.ndarray) and entry.ndim == 2:
        blocks = [entry]
    elif isinstance(entry, np.ndarray) and entry.ndim == 3:
        blocks = list(entry)
    elif isinstance(entry, (list, tuple)) and all(np.ndim(b) == 2 for b in entry):
        blocks = [np.asarray(b) for b in entry]
    else:
        raise ValueError(f"{name} must be (M, {dim}), (J, M, {dim}) or a list of (M_j, {dim}) arrays, "
                         f"got {type(entry).__name__} of shape {np.shape(entry)}")
    if not blocks:
        raise ValueError(f"{name} has no hallucinated demonstration")
    blocks = [as_float64_2d(b, name, dim) for b in blocks]
    if any(b.shape[0] == 0 for b in blocks):
        raise ValueError(f"{name} contains an empty trajectory (0 states)")
    if weights is None:
        omega = np.full(len(blocks), 1.0 / len(blocks))
    else:
        omega = np.asarray(weights, dtype=np.float64).reshape(-1)
        if omega.shape != (len(blocks),):
            raise ValueError(f"weights of {name} must have shape ({len(blocks)},), got {omega.shape}")
        if not np.all(np.isfinite(omega)) or np.any(omega < 0):
            raise ValueError(f"weights of {name} must be finite and >= 0, got {omega}")
        if not omega.sum() > 0:
            raise ValueError(f"weights of {name} are all zero: the candidate would get a meaningless score 0")
    return [(b, float(w)) for b, w in zip(blocks, omega, strict=True) if w > 0]


def kept_targets(x: np.ndarray, weights: np.ndarray | None, dim: int | None) -> tuple[np.ndarray, np.ndarray]:
    """The checked target points (Q, dim) and weights (Q,) (None = all 1), without the targets of weight 0."""
    x = as_float64_2d(x, "target points", dim)
    if x.shape[0] == 0:
        raise ValueError("no target points: the criterion needs at least one (state, target task) point")
    if weights is None:
        w = np.ones(x.shape[0])
    else:
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (x.shape[0],):
            raise ValueError(f"target_weights must have shape ({x.shape[0]},), got {w.shape}")
        if not np.all(np.isfinite(w)) or np.any(w < 0):
            raise ValueError("target_weights must be finite and >= 0")
        if not w.sum() > 0:
            raise ValueError("target_weights are all zero: no target contributes to the criterion")
    keep = w > 0
    return x[keep], w[keep]
