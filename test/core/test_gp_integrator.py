"""GP policy backend, 2D integrator and the AMF-GP score function."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.envs.integrator import Integrator2D, IntegratorConfig
from amf_ros.policies.gp import GPPolicy, GPPolicyConfig, GPScoreFn


def test_integrator_expert_and_rollout():
    env = Integrator2D()
    assert env.expert_return(0.0) == pytest.approx(-sum(0.5 ** t for t in range(1, 6)))
    goals = env.goals(env.evaluation_angles(12))
    assert goals.shape == (12, 2) and np.allclose(np.linalg.norm(goals, axis=1), 1.0)
    states, actions, ret = env.rollout(lambda s, g, r: np.zeros_like(s), goals[:3], np.random.default_rng(0))
    assert states.shape == (3, 5, 2) and np.allclose(ret, -5.0)
    d1 = env.demonstrate(0.3, np.random.default_rng(1))
    d2 = env.demonstrate(0.3, np.random.default_rng(2))
    assert d1.states.shape == (5, 2) and not np.allclose(d1.actions, d2.actions)  # noisy expert
    with pytest.raises(ValueError, match="horizon"):
        IntegratorConfig(horizon=0)
    with pytest.raises(ValueError, match="bad actions"):
        env.rollout(lambda s, g, r: np.full_like(s, np.nan), goals[:1], np.random.default_rng(0))


def test_gp_policy_matches_textbook_formulas():
    rng = np.random.default_rng(0)
    cfg = GPPolicyConfig(state_lengthscale=0.7, task_lengthscale=0.4, amplitude=0.3, noise_var=0.02)
    pol = GPPolicy(cfg, 2, 2, 2)
    s, t, a = rng.normal(size=(9, 2)), rng.normal(size=(9, 2)), rng.normal(size=(9, 2))
    pol.add(s[:4], t[:4], a[:4])
    pol.add(s[4:], t[4:], a[4:])
    x = np.concatenate([s, t], axis=1)
    qs, qt = rng.normal(size=(5, 2)), rng.normal(size=(5, 2))
    q = np.concatenate([qs, qt], axis=1)
    inv = np.linalg.inv(pol.kernel(x, x) + 0.02 * np.eye(9))
    mean, var = pol.predict(qs, qt)
    np.testing.assert_allclose(mean, pol.kernel(q, x) @ inv @ a, atol=1e-10)
    np.testing.assert_allclose(var, 0.3 - np.einsum("ij,jk,ik->i", pol.kernel(q, x), inv, pol.kernel(q, x)),
                               atol=1e-10)
    acts = rng.normal(size=(5, 2))
    v = var + 0.02
    want = -0.5 * (np.sum((acts - mean) ** 2, 1) / v + 2 * np.log(2 * np.pi * v))
    np.testing.assert_allclose(pol.log_prob(qs, qt, acts), want, atol=1e-10)
    np.testing.assert_allclose(pol.entropy(qs, qt), np.log(2 * np.pi * np.e * var), atol=1e-10)
    cp = pol.copy()
    cp.add(qs, qt, acts)
    np.testing.assert_allclose(pol.predict(qs, qt)[1], var)  # the original is untouched
    assert np.all(cp.predict(qs, qt)[1] < var)


def _pretrained(env, angles, rng):
    pol = GPPolicy(GPPolicyConfig(), 2, 2, 2)
    trajs = []
    for a in angles:
        d = env.demonstrate(a, rng)
        pol.add(d.states, d.goal, d.actions)
        trajs.append((d.states, d.actions, d.goal))
    return pol, trajs


def test_gp_score_fn_prefers_undemonstrated_tasks_both_forms():
    env = Integrator2D()
    rng = np.random.default_rng(0)
    evals = env.evaluation_angles(12)
    pol, trajs = _pretrained(env, np.concatenate([evals[:6], evals[:6], evals]), rng)  # tasks 0-5 thrice
    keys = [f"{a}" for a in evals]
    for form in ("log_variance", "variance"):
        fn = GPScoreFn(pol, trajs, env.goals(evals), lambda k: env.goals(float(k))[0], form=form,
                       max_trajectories=8)
        s = fn(keys, [])
        assert s.shape == (12,) and np.all(np.isfinite(s))
        assert s[6:].mean() < s[:6].mean()
        ess = fn.last_info["effective_sample_size"]
        assert set(ess) == set(keys) and all(1.0 <= v <= len(trajs) for v in ess.values())
        assert len(fn.last_info["effective_sample_size_targets"]) == 12
        # conditioning on a hallucinated demo of the best task makes that task less attractive
        best = int(np.argmin(s))
        s2 = fn(keys, [keys[best]])
        assert s2[best] - np.median(s2) > s[best] - np.median(s)
    with pytest.raises(ValueError, match="at least one collected trajectory"):
        GPScoreFn(pol, [], env.goals(evals), None)
