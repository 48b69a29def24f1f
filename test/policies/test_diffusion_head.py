"""Diffusion head: Octo's schedule and parameter tree, loss masking, sampler shapes/masking/determinism."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fp_bounds import two_path_tolerance

from amf_ros.policies.diffusion_head import (
    DiffusionActionHead,
    DiffusionHeadConfig,
    cosine_beta_schedule,
    octo_param_map,
)

# alpha_hats of octo-head-params.md section 4 (jax float32).
OCTO_ALPHA_HATS = {0: 0.992007, 5: 0.786911, 10: 0.416312, 15: 0.0940456, 18: 0.00605964, 19: 6.05956e-06}


def small_head(**kw) -> DiffusionActionHead:
    torch.manual_seed(0)
    cfg = DiffusionHeadConfig(embedding_dim=8, action_horizon=3, action_dim=2, hidden_dim=16, num_blocks=2, **kw)
    return DiffusionActionHead(cfg)


def test_cosine_schedule_matches_octo_table():
    betas = cosine_beta_schedule(20)
    alpha_hats = torch.cumprod(1 - betas, 0)
    for k, v in OCTO_ALPHA_HATS.items():
        assert alpha_hats[k].item() == pytest.approx(v, rel=2e-5, abs=2e-7)
    assert betas[-1].item() == pytest.approx(0.999)


@pytest.mark.parametrize("factory, total", [(DiffusionHeadConfig.octo_small, 1_703_564),
                                            (DiffusionHeadConfig.octo_base, 1_801_868)])
def test_octo_parameter_tree_maps_one_to_one(factory, total):
    head = DiffusionActionHead(factory())
    sd = head.state_dict()
    rows = octo_param_map(head.config)
    assert len(rows) == len(sd) == 27
    assert {r.torch_key for r in rows} == set(sd)
    assert sum(int(np.prod(r.octo_shape)) for r in rows) == total
    for r in rows:
        shape = tuple(sd[r.torch_key].shape)
        assert (shape[::-1] if r.transpose else shape) == r.octo_shape, r
        assert r.octo_path.startswith("heads_action/diffusion_model/")
    first = next(r for r in rows if r.octo_path.endswith("reverse_network/Dense_0/kernel"))
    assert first.octo_shape[0] == 32 + head.config.embedding_dim + 28


def test_layer_norm_eps_is_flax_default():
    head = small_head()
    assert head.diffusion_model.reverse_network.blocks[0].norm.eps == 1e-6


def test_loss_shapes_and_per_sample_mean_equals_batch_loss():
    head = small_head()
    emb, act = torch.randn(5, 8), torch.randn(5, 3, 2)
    draws = head.draw(1, 5, torch.Generator().manual_seed(1))
    per = head.per_sample_loss(emb, act, None, draws)
    assert per.shape == (5,)
    # One network call, two orders of the mean of its 5 x 6 squared errors (>= 0, so their sum is the loss's scale)
    # plus 4 scalings: within 2 gamma_34 loss (test/support/fp_bounds.py).
    loss = head.loss(emb, act, None, draws)
    assert abs(per.mean().item() - loss.item()) <= two_path_tolerance(5 * 6 + 4, loss.item())
    with pytest.raises(ValueError, match="expected shape"):
        head.loss(emb, torch.randn(5, 4, 2))


def test_mask_all_true_equals_none_and_all_false_gives_zero():
    head = small_head()
    emb, act = torch.randn(4, 8), torch.randn(4, 3, 2)
    draws = head.draw(2, 4, torch.Generator().manual_seed(2))
    ones = torch.ones(4, 3, 2, dtype=torch.bool)
    assert torch.equal(head.per_sample_loss(emb, act, ones, draws), head.per_sample_loss(emb, act, None, draws))
    assert torch.all(head.per_sample_loss(emb, act, torch.zeros_like(ones), draws) == 0)


def test_masked_loss_equals_manual_formula():
    head = small_head()
    emb, act = torch.randn(3, 8), torch.randn(3, 3, 2)
    mask = torch.rand(3, 3, 2) > 0.3
    draws = head.draw(1, 3, torch.Generator().manual_seed(3))
    flat = act.reshape(3, 6).clip(-5, 5)
    ah = head.alpha_hats[draws.time]
    x_t = ah.sqrt() * flat + (1 - ah).sqrt() * draws.noise
    eps_hat = head.diffusion_model(emb[None], x_t, draws.time.float())
    m = mask.reshape(1, 3, 6).float()
    want = 2 * ((eps_hat - draws.noise) ** 2 * m).mean() / m.mean().clamp(min=1e-5)
    assert torch.allclose(head.loss(emb, act, mask, draws), want, atol=1e-6)


def test_sampler_shapes_clip_and_embodiment_mask():
    head = small_head()
    emb = torch.randn(4, 8)
    out = head.predict_action(emb, generator=torch.Generator().manual_seed(0), sample_shape=(2,))
    assert out.shape == (2, 4, 3, 2)
    assert torch.all(out.abs() <= 5.0)
    # untrained head: padding dims contain only the last-step noise, std sqrt(1 - alpha_hat_0) ~ 0.089
    g = torch.Generator().manual_seed(0)
    padded = head.predict_action(torch.randn(2000, 8), generator=g, embodiment_action_dim=1)
    assert padded[..., 1].std().item() == pytest.approx((1 - head.alpha_hats[0]).sqrt().item(), rel=0.1)


def test_sampler_is_deterministic_given_noise_and_seed():
    head = small_head()
    emb = torch.randn(3, 8)
    a = head.predict_action(emb, generator=torch.Generator().manual_seed(7))
    b = head.predict_action(emb, generator=torch.Generator().manual_seed(7))
    assert torch.equal(a, b)
    init = torch.randn(3, 6)
    steps = torch.randn(20, 3, 6)
    c = head.predict_action(emb, init_noise=init, step_noise=steps)
    d = head.predict_action(emb, init_noise=init, step_noise=steps, generator=torch.Generator().manual_seed(1))
    assert torch.equal(c, d)
    with pytest.raises(ValueError, match="step_noise"):
        head.predict_action(emb, init_noise=init, step_noise=torch.randn(19, 3, 6))


def test_trained_head_samples_the_demonstrated_chunk():
    """A head fit on one fixed chunk per embedding must sample close to it (the sampler inverts the loss)."""
    head = small_head()
    emb = torch.eye(8)[:2]
    target = torch.tensor([[[1.0, -1.0]] * 3, [[-0.5, 0.5]] * 3])
    opt = torch.optim.Adam(head.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(0)
    for _ in range(300):
        opt.zero_grad()
        head.loss(emb.repeat(32, 1), target.repeat(32, 1, 1), generator=g).backward()
        opt.step()
    out = head.predict_action(emb.repeat(50, 1), generator=g).reshape(50, 2, 3, 2).mean(0)
    assert torch.allclose(out, target, atol=0.15), out


def test_config_validation():
    with pytest.raises(ValueError, match="time_dim"):
        DiffusionHeadConfig(time_dim=3)
    with pytest.raises(ValueError, match="loss_type"):
        DiffusionHeadConfig(loss_type="huber")
