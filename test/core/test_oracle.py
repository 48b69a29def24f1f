"""Posterior algebra and the criterion against a brute-force numpy oracle (full inverses, explicit loops), to 1e-8."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.core.criterion import feature_criterion, kernel_criterion
from amf_ros.core.kernels import RBFKernel
from amf_ros.core.posterior import FeaturePosterior, KernelPosterior, hallucinated_variance

TOL = 1e-8


def oracle_kernel_var(k, x_data, x_query, noise):
    """Var[f(q) | data] by the textbook formula with an explicit inverse, one query at a time."""
    out = []
    for q in x_query:
        q = q[None]
        if len(x_data) == 0:
            out.append(k(q, q)[0, 0])
            continue
        inv = np.linalg.inv(k(x_data, x_data) + noise * np.eye(len(x_data)))
        out.append(k(q, q)[0, 0] - (k(q, x_data) @ inv @ k(x_data, q))[0, 0])
    return np.array(out)


def oracle_feature_var(phi_data, phi_query, noise, prior):
    """Bayesian linear regression in weight space: Sigma = inv(I / prior + Phi^T Phi / noise)."""
    sigma = np.linalg.inv(np.eye(phi_query.shape[1]) / prior + phi_data.T @ phi_data / noise)
    return np.array([p @ sigma @ p for p in phi_query])


def oracle_score(var_fn, data, alternatives, omegas, targets, tw, form):
    total = 0.0
    for block, om in zip(alternatives, omegas, strict=True):
        v = var_fn(np.concatenate([data, block]), targets)
        h = v if form == "variance" else 0.5 * np.log(2 * np.pi * np.e * v)
        acc = 0.0
        for i in range(len(targets)):
            acc += tw[i] * h[i]
        total += om * acc
    return total


def _problem(rng, d=3, n=7, q=6, m=3, cands=4):
    x = rng.normal(size=(n, d))
    cand = [rng.normal(size=(m + (i % 2), d)) for i in range(cands)]
    tgt = rng.normal(size=(q, d))
    return x, cand, tgt


@pytest.mark.parametrize("n", [0, 1, 9])
def test_kernel_posterior_matches_oracle(n):
    rng = np.random.default_rng(n)
    k = RBFKernel((0.7, 1.3, 0.9), amplitude=1.7)
    x, q = rng.normal(size=(n, 3)), rng.normal(size=(5, 3))
    post = KernelPosterior(k, x, noise_var=0.05)
    np.testing.assert_allclose(post.var(q), oracle_kernel_var(k, x, q, 0.05), atol=TOL, rtol=0)
    full = k(q, q) - (k(q, x) @ np.linalg.inv(k(x, x) + 0.05 * np.eye(n)) @ k(x, q) if n else 0.0)
    np.testing.assert_allclose(post.cov(q, q), full, atol=TOL, rtol=0)


def test_incremental_add_equals_refit():
    rng = np.random.default_rng(1)
    k = RBFKernel((0.5, 0.8), amplitude=1.0)
    x1, x2, q = rng.normal(size=(6, 2)), rng.normal(size=(4, 2)), rng.normal(size=(5, 2))
    inc = KernelPosterior(k, x1, 0.1)
    inc.add(x2)
    ref = KernelPosterior(k, np.concatenate([x1, x2]), 0.1)
    np.testing.assert_allclose(inc.var(q), ref.var(q), atol=1e-12)
    np.testing.assert_allclose(inc.var(q), oracle_kernel_var(k, np.concatenate([x1, x2]), q, 0.1), atol=TOL)


@pytest.mark.parametrize("space", ["sample", "feature", "auto"])
@pytest.mark.parametrize("n", [3, 20])
def test_feature_posterior_both_spaces(space, n):
    rng = np.random.default_rng(n)
    d = 8
    phi, q = rng.normal(size=(n, d)), rng.normal(size=(5, d))
    post = FeaturePosterior(phi[: n // 2], noise_var=0.3, prior_var=2.0, space=space)
    post.add(phi[n // 2:])
    np.testing.assert_allclose(post.var(q), oracle_feature_var(phi, q, 0.3, 2.0), atol=TOL, rtol=0)
    sigma = np.linalg.inv(np.eye(d) / 2.0 + phi.T @ phi / 0.3)
    np.testing.assert_allclose(post.cov(q, q), q @ sigma @ q.T, atol=TOL, rtol=0)


def test_rank_m_update_equals_refit():
    rng = np.random.default_rng(2)
    k = RBFKernel((1.0, 1.0, 1.0))
    x, c, q = rng.normal(size=(5, 3)), rng.normal(size=(3, 3)), rng.normal(size=(4, 3))
    post = KernelPosterior(k, x, 0.2)
    new = hallucinated_variance(post.var(q), post.cov(q, c), post.cov(c, c), 0.2)
    np.testing.assert_allclose(new, oracle_kernel_var(k, np.concatenate([x, c]), q, 0.2), atol=TOL)


@pytest.mark.parametrize("form", ["variance", "log_variance"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("alternatives", [False, True])
def test_kernel_criterion_matches_oracle(form, weighted, alternatives):
    rng = np.random.default_rng(10 + 2 * weighted + alternatives)
    k = RBFKernel((0.9, 1.1, 0.6), amplitude=0.8)
    x, cand, tgt = _problem(rng)
    tw = rng.uniform(0.0, 2.0, size=len(tgt)) if weighted else None
    if alternatives:
        cand = [rng.normal(size=(3, 2, 3)) for _ in range(4)]
        cw = [rng.uniform(0.1, 1.0, size=3) for _ in range(4)]
    else:
        cw = None
    got = kernel_criterion(k, x, cand, tgt, tw, noise_var=0.1, form=form, candidate_weights=cw)
    want = [oracle_score(lambda a, b: oracle_kernel_var(k, a, b, 0.1), x, list(c) if c.ndim == 3 else [c],
                         cw[i] if cw else [1.0], tgt, tw if tw is not None else np.ones(len(tgt)), form)
            for i, c in enumerate(cand)]
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)


@pytest.mark.parametrize("form", ["variance", "log_variance"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("n", [4, 30])  # sample space (N <= D) and feature space (N > D)
def test_feature_criterion_matches_oracle(form, weighted, n):
    rng = np.random.default_rng(n + weighted)
    d = 10
    phi, tgt = rng.normal(size=(n, d)), rng.normal(size=(6, d))
    cand = [rng.normal(size=(2 + i, d)) for i in range(3)]
    tw = rng.uniform(0.0, 1.0, size=6) if weighted else None
    got = feature_criterion(phi, cand, tgt, tw, noise_var=0.5, prior_var=1.5, form=form)
    want = [oracle_score(lambda a, b: oracle_feature_var(a, b, 0.5, 1.5), phi, [c], [1.0], tgt,
                         tw if tw is not None else np.ones(6), form) for c in cand]
    np.testing.assert_allclose(got, want, atol=TOL, rtol=0)


def test_feature_equals_kernel_with_linear_kernel():
    rng = np.random.default_rng(5)
    phi, tgt = rng.normal(size=(6, 4)), rng.normal(size=(5, 4))
    cand = [rng.normal(size=(2, 4)) for _ in range(3)]
    a = feature_criterion(phi, cand, tgt, noise_var=0.2, prior_var=1.0)
    b = kernel_criterion(lambda u, v: u @ v.T, phi, cand, tgt, noise_var=0.2)
    np.testing.assert_allclose(a, b, atol=1e-10)


def test_chunked_evaluation_equals_single_pass(monkeypatch):
    from amf_ros.core import criterion

    rng = np.random.default_rng(9)
    k = RBFKernel((0.8, 0.8, 0.8))
    x, cand, tgt = _problem(rng, cands=6)
    whole = kernel_criterion(k, x, cand, tgt, form="variance")
    monkeypatch.setattr(criterion, "CHUNK_POINTS", 3)  # one candidate per pass
    np.testing.assert_allclose(kernel_criterion(k, x, cand, tgt, form="variance"), whole, atol=1e-12)
