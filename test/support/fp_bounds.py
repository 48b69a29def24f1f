"""Rounding-error bounds for tests that compare ONE float computation carried out along two paths.

Why: a tolerance fitted to one CPU fails on the next. Exact equality is right only where no arithmetic can differ
(a copy, a serialisation round trip, the same call repeated in one process). Two paths are anything else: another
batch size or row order (the BLAS picks another kernel for a small batch: on an AMD EPYC, rows of a float32
``nn.Linear`` differ by up to 7e-7 between a batch of 1-3 rows and one of 300, and between a batch and its
reverse), another reduction order, another CPU's OpenBLAS/MKL/oneDNN/numpy kernels.

The bound (Higham, Accuracy and Stability of Numerical Algorithms, 2nd ed., Lemma 3.1 and eq. 3.5): a sum or dot
product of n terms, computed in ANY order, with or without FMA, errs by at most gamma_n sum|terms|,
gamma_n = n u / (1 - n u), u = eps / 2. Two paths of it differ by at most 2 gamma_n sum|terms| ~ n eps sum|terms|.
Through a network the layers' errors add to first order, so n = the sum of the fan-ins along a path (bounded here by
the sum over all layers) and sum|terms| is taken as the output's largest magnitude: the assumption, as in
test/policies/test_golden.py (which checks it against measured errors), is that no layer's |W| |x| is far above
the output's scale (no catastrophic cancellation).
"""

from __future__ import annotations

from typing import Any

import numpy as np


def gamma(n: int, dtype: Any = np.float32) -> float:
    """gamma_n = n u / (1 - n u), u = eps(dtype) / 2: relative error bound of an n-term sum in any order."""
    u = float(np.finfo(dtype).eps) / 2.0
    if n * u >= 1.0:
        raise ValueError(f"gamma_n is unbounded for n = {n} terms in {np.dtype(dtype).name}")
    return n * u / (1.0 - n * u)


def two_path_tolerance(n: int, scale: float, dtype: Any = np.float32) -> float:
    """Largest difference of two evaluation orders of an n-term float sum whose sum|terms| is ``scale``."""
    return 2.0 * gamma(n, dtype) * float(scale)


def fan_in_sum(*modules: Any, backward: bool = False) -> int:
    """Sum of the fan-ins (multiply-adds per output) of every Linear, Conv and LayerNorm layer of torch modules:
    an upper bound on the terms summed along any path through them. ``backward``: add the sums of a backward pass
    (a Linear's input gradient sums over its outputs; LayerNorm's over its features twice)."""
    import torch

    total = 0
    for module in modules:
        for m in module.modules():
            if isinstance(m, torch.nn.Linear):
                total += m.in_features + (m.out_features if backward else 0)
            elif isinstance(m, torch.nn.modules.conv._ConvNd):
                total += m.in_channels // m.groups * int(np.prod(m.kernel_size))
                total += m.out_channels // m.groups * int(np.prod(m.kernel_size)) if backward else 0
            elif isinstance(m, torch.nn.LayerNorm):
                total += (4 if backward else 2) * int(np.prod(m.normalized_shape))  # mean and variance sums
    return total


def assert_two_paths_close(got: Any, want: Any, n: int, dtype: Any = np.float32, what: str = "") -> float:
    """``got`` and ``want`` within :func:`two_path_tolerance` of n terms at the scale max|want|; returns the bound.

    Raises AssertionError with the worst difference and the bound."""
    got, want = (np.asarray(x.detach() if hasattr(x, "detach") else x, dtype=np.float64) for x in (got, want))
    assert got.shape == want.shape, (what, got.shape, want.shape)
    tol = two_path_tolerance(n, np.abs(want).max(initial=0.0), dtype)
    err = float(np.abs(got - want).max(initial=0.0))
    assert err <= tol, f"{what}: |difference| {err:.3g} > two-path rounding bound {tol:.3g} ({n} terms, {dtype})"
    return tol
