"""Adaptive prior: alpha rises where the fine-tuned head is better, stays near 0 where the prior is better."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amf_ros.policies.adaptive_prior import AdaptivePrior, AlphaConfig, alpha_loss, fit_alpha
from amf_ros.policies.agent import PolicyConfig, TaskConditionedPolicy

from .conftest import concat, make_demos


def synthetic(n=200, noise_good=0.05, noise_bad=1.0):
    g = torch.Generator().manual_seed(0)
    target = torch.randn(2 * n, 4, 3, generator=g)
    good = target + noise_good * torch.randn(target.shape, generator=g)
    bad = target + noise_bad * torch.randn(target.shape, generator=g)
    tasks = ["old"] * n + ["new"] * n
    # "old": the prior is good and the fine-tuned head bad (forgetting); "new": the reverse.
    a_ft = torch.cat([bad[:n], good[n:]])
    a_prior = torch.cat([good[:n], bad[n:]])
    return a_ft, a_prior, target, tasks


def test_alpha_rises_where_finetuned_is_better_and_stays_low_where_prior_is_better():
    a_ft, a_prior, target, tasks = synthetic()
    prior = AdaptivePrior(["old", "new", "unseen"], init_alpha=0.05)
    losses = fit_alpha(prior, a_ft, a_prior, target, None, tasks, AlphaConfig(steps=100))
    alphas = prior.alphas()
    assert alphas["new"] > 0.9
    assert alphas["old"] < 0.05
    assert alphas["unseen"] == pytest.approx(0.05)  # no data, untouched
    assert losses[-1] < losses[0]


def test_penalty_pulls_alpha_down_when_both_heads_agree():
    a_ft, _, target, tasks = synthetic()
    prior = AdaptivePrior(["old", "new"], init_alpha=0.5)
    fit_alpha(prior, a_ft, a_ft.clone(), target, None, tasks, AlphaConfig(steps=50, beta=0.01))
    assert max(prior.alphas().values()) < 0.1


def test_mix_and_loss_formula():
    prior = AdaptivePrior(["a", "b"], init_alpha=0.25)
    ft, pr = torch.ones(2, 1, 2), torch.zeros(2, 1, 2)
    idx = prior.index(["a", "b"])
    assert torch.allclose(prior.mix(ft, pr, idx), torch.full((2, 1, 2), 0.25))
    target = torch.ones(2, 1, 2)
    want = 0.75 * np.sqrt(2) + 0.01 * 0.25
    assert alpha_loss(prior, ft, pr, target, None, idx, 0.01).item() == pytest.approx(want, rel=1e-5)
    with pytest.raises(ValueError, match="unknown task"):
        prior.index(["c"])


@pytest.mark.parametrize("head", ["mlp", "diffusion"])
def test_policy_alpha_separates_pretrained_and_new_tasks(head):
    """End to end: prior knows task "old"; fine-tuning on "new" (a different expert) only; alpha follows."""
    cfg = PolicyConfig(head=head, task_encoder="hash", action_horizon=1, batch_size=64, lr=2e-3,
                       diffusion_hidden_dim=32, mlp_hidden_dims=(32, 32), alpha_max_frames=256)
    policy = TaskConditionedPolicy(cfg, state_dim=5, action_dim=2, tasks={"old": "old task", "new": "new task"})
    old = make_demos("old", 8, sign=1.0, seed=1)
    new = make_demos("new", 8, sign=-1.0, seed=2, episode_offset=100)
    policy.fit(old, 300)
    policy.freeze_prior()
    policy.fit(new, 300)  # forgets "old": only "new" data
    alphas = policy.fit_alpha(concat(make_demos("old", 4, sign=1.0, seed=3, episode_offset=200), new))
    assert alphas["new"] > 0.8, alphas
    assert alphas["old"] < 0.1, alphas
    # the mixed policy acts like the prior on "old" and like the fine-tuned head on "new"
    s = old["state"][:20]
    mixed_old = policy.act_batch({"state": s}, ["old"] * 20, seed=0)[:, 0]
    err = np.abs(mixed_old - old["action"][:20]).mean()
    assert err < 0.3, err
