"""Importance weights (eq. 4), clipping, normalisation, ESS, App. E assembly and state subsampling."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.core.importance import (
    demo_loglik,
    effective_sample_size,
    importance_weights,
    indicator_weights,
    normalize_weights,
    trajectory_log_likelihood,
)
from amf_ros.core.occupancy import app_e_inputs
from amf_ros.core.posterior import FeaturePosterior
from amf_ros.core.subsample import conditioning_rows, keep_indices, target_rows


def test_eq4_against_explicit_products():
    rng = np.random.default_rng(0)
    n, c, h = 4, 3, 5
    step = rng.normal(-2.0, 1.0, size=(n, c, h))
    demo_task = np.array([0, 2, 2, 1])
    ll = trajectory_log_likelihood(step, clip=None)
    w = importance_weights(ll, demo_loglik(ll, demo_task))
    for k in range(n):
        for j in range(c):
            num = n * np.prod(np.exp(step[k, j]))
            den = sum(np.prod(np.exp(step[k, demo_task[i]])) for i in range(n))
            assert w[k, j] == pytest.approx(num / den, rel=1e-10)


def test_clipping_per_step_and_errors():
    lp = np.array([[[-20.0, 1.0, -3.0]]])
    assert trajectory_log_likelihood(lp)[0, 0] == pytest.approx(-12.0 + 0.0 - 3.0)
    assert trajectory_log_likelihood(np.array([-np.inf, -1.0]))[()] == pytest.approx(-13.0)
    with pytest.raises(ValueError, match="NaN"):
        trajectory_log_likelihood(np.array([np.nan, 0.0]))
    with pytest.raises(ValueError, match="time axis"):
        trajectory_log_likelihood(np.zeros((3, 0)))
    with pytest.raises(ValueError, match="finite"):
        importance_weights(np.array([[-np.inf]]), np.array([[0.0]]))


def test_extreme_logliks_do_not_overflow():
    ll = np.array([[-700.0, 0.0], [0.0, -700.0]])
    w = importance_weights(ll, ll)
    assert np.all(np.isfinite(w)) and w[0, 1] == pytest.approx(2.0, rel=1e-9)


def test_normalisation_ess_and_indicator():
    w = np.array([[1.0, 0.0], [3.0, 0.0]])
    np.testing.assert_allclose(normalize_weights(w, "self"), [[0.25, 0.0], [0.75, 0.0]])
    np.testing.assert_allclose(normalize_weights(w, "mean"), w / 2)
    np.testing.assert_allclose(effective_sample_size(w), [16.0 / 10.0, 0.0])
    np.testing.assert_array_equal(indicator_weights(np.array([1, 0]), 3), [[0, 1, 0], [1, 0, 0]])
    with pytest.raises(ValueError):
        normalize_weights(-w)


def test_app_e_inputs_weights_and_pruning():
    states = [np.full((2, 1), float(k)) for k in range(3)]
    join = lambda s, t: np.concatenate([s, np.broadcast_to(t, (s.shape[0], t.size))], axis=1)  # noqa: E731
    w_t = np.array([[1.0, 1e-9], [1.0, 1.0], [2.0, 0.0]])
    w_c = np.array([[0.5], [0.5], [0.0]])
    tx, tw, cx, cw, info = app_e_inputs(states, np.array([[10.0], [20.0]]), np.array([[30.0]]), w_t, w_c, join)
    # task 0: trajectories 0, 1, 2 with self-normalised weights 1/4, 1/4, 1/2, divided by |C_hat| = 2 per state
    assert tx.shape == (2 * 3 + 2 * 1, 2)  # task 1 keeps only trajectory 1 (1e-9 pruned, 0 dropped)
    np.testing.assert_allclose(tw[:6], np.repeat([0.125, 0.125, 0.25], 2))
    np.testing.assert_allclose(tw[6:], [0.5, 0.5])
    assert len(cx[0]) == 2 and np.allclose(cw[0], [0.5, 0.5]) and cx[0][0][0, 1] == 30.0
    assert info["ess_candidate"][0] == pytest.approx(2.0)
    top1 = app_e_inputs(states, np.array([[10.0]]), np.array([[30.0]]), w_t[:, :1], w_c, join, max_trajectories=1)
    assert top1[0].shape[0] == 2 and np.all(top1[0][:, 0] == 2.0)  # only the heaviest trajectory (k = 2)
    with pytest.raises(ValueError, match="no collected trajectories"):
        app_e_inputs([], np.zeros((1, 1)), np.zeros((1, 1)), np.zeros((0, 1)), np.zeros((0, 1)), join)
    with pytest.raises(ValueError, match="trajectory 0"):
        app_e_inputs([np.zeros((0, 1))], np.zeros((1, 1)), np.zeros((1, 1)), np.ones((1, 1)), np.ones((1, 1)), join)


def test_subsampling_is_exact_for_repeated_states_and_keeps_scale():
    # A trajectory that repeats each of 5 distinct rows 10 times: keeping 5 rows scaled by sqrt(10) conditions
    # exactly like the full 50 rows, and target weights x10 reproduce the full sum.
    rng = np.random.default_rng(0)
    distinct = rng.normal(size=(5, 6))
    full = np.repeat(distinct, 10, axis=0)
    assert keep_indices(50, 5).size == 5 and keep_indices(3, 10).tolist() == [0, 1, 2]
    idx = np.array([5, 15, 25, 35, 45])
    sub = full[idx] * np.sqrt(10.0)
    q = rng.normal(size=(4, 6))
    a = FeaturePosterior(full, noise_var=0.1).var(q)
    b = FeaturePosterior(sub, noise_var=0.1).var(q)
    np.testing.assert_allclose(a, b, rtol=1e-9)
    rows = conditioning_rows(full, 5)
    assert rows.shape == (5, 6) and np.allclose(np.linalg.norm(rows, axis=1),
                                                np.sqrt(10) * np.linalg.norm(full[keep_indices(50, 5)], axis=1))
    t_rows, t_w = target_rows(full, 5, weight=0.5)
    assert t_rows.shape == (5, 6) and np.allclose(t_w, 5.0)
