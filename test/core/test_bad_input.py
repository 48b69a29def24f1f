"""Bad input gets a clear error (or documented handling), never a silent NaN score."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.core.criterion import feature_criterion, kernel_criterion
from amf_ros.core.kernels import RBFKernel
from amf_ros.core.posterior import KernelPosterior, jitter_cholesky

K = RBFKernel((1.0, 1.0))


def _ok():
    rng = np.random.default_rng(0)
    return rng.normal(size=(4, 2)), [rng.normal(size=(2, 2)) for _ in range(3)], rng.normal(size=(5, 2))


def test_empty_candidate_set():
    x, _, t = _ok()
    with pytest.raises(ValueError, match="empty candidate"):
        kernel_criterion(K, x, [], t)


def test_nan_inputs_are_refused():
    x, c, t = _ok()
    bad = x.copy()
    bad[1, 0] = np.nan
    with pytest.raises(ValueError, match="NaN"):
        kernel_criterion(K, bad, c, t)
    c_bad = [c[0], np.array([[np.nan, 0.0]])]
    with pytest.raises(ValueError, match="candidate 1"):
        kernel_criterion(K, x, c_bad, t)
    with pytest.raises(ValueError, match="NaN"):
        feature_criterion(np.ones((2, 3)), [np.ones((1, 3))], np.array([[np.inf, 0.0, 0.0]]))


def test_empty_trajectory_and_targets():
    x, c, t = _ok()
    with pytest.raises(ValueError, match="empty trajectory"):
        kernel_criterion(K, x, [c[0], np.zeros((0, 2))], t)
    with pytest.raises(ValueError, match="no target points"):
        kernel_criterion(K, x, c, np.zeros((0, 2)))
    with pytest.raises(ValueError, match="all zero"):
        kernel_criterion(K, x, c, t, target_weights=np.zeros(5))
    with pytest.raises(ValueError, match="all zero"):
        kernel_criterion(K, x, [np.stack([c[0], c[1]])], t, candidate_weights=[np.zeros(2)])


def test_singular_kernel_gets_jitter_or_a_clear_error():
    dup = np.zeros((3, 2))  # identical inputs, zero noise: rank-1 kernel matrix
    post = KernelPosterior(K, dup, noise_var=0.0)  # jitter rescues it
    assert np.all(np.isfinite(post.var(np.ones((2, 2)))))
    with pytest.raises(ValueError, match="not positive definite"):
        jitter_cholesky(np.array([[1.0, 2.0], [2.0, 1.0]]))  # indefinite: no jitter level fixes it
    with pytest.raises(ValueError, match="NaN"):
        jitter_cholesky(np.array([[np.nan]]))
    with pytest.raises(ValueError, match="noise_var"):
        KernelPosterior(K, dup, noise_var=-1.0)


def test_zero_noise_exact_interpolation_gives_finite_log_scores():
    # Hallucinating exactly the target points with (almost) no noise drives variances to ~0: the log form floors
    # them (RELATIVE_VARIANCE_FLOOR) instead of returning -inf.
    x, _, t = _ok()
    s = kernel_criterion(K, x, [t, t[:1]], t, noise_var=1e-14)
    assert np.all(np.isfinite(s)) and s[0] < s[1]


def test_shape_errors_name_the_problem():
    x, c, t = _ok()
    with pytest.raises(ValueError, match="target_weights must have shape"):
        kernel_criterion(K, x, c, t, target_weights=np.ones(3))
    with pytest.raises(ValueError, match="columns"):
        kernel_criterion(K, x, [np.ones((2, 3))], t)
    with pytest.raises(ValueError, match="form"):
        kernel_criterion(K, x, c, t, form="entropy2")
