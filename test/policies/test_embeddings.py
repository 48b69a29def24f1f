"""Loss-gradient embeddings: closed form == autograd per-sample gradients; determinism; projection; ablations."""

from __future__ import annotations

import pytest
import torch
from fp_bounds import assert_two_paths_close, fan_in_sum

from amf_ros.policies.diffusion_head import DiffusionActionHead, DiffusionHeadConfig
from amf_ros.policies.embeddings import (
    EmbeddingConfig,
    autograd_per_sample_gradients,
    compute_embeddings,
    fixed_draws,
    gradient_dim,
    loss_gradient_embeddings,
    random_projection,
)
from amf_ros.policies.mlp_head import GaussianMLPHead, MLPHeadConfig


def diffusion_head(dtype=torch.float64):
    torch.manual_seed(0)
    cfg = DiffusionHeadConfig(embedding_dim=6, action_horizon=3, action_dim=2, hidden_dim=16, num_blocks=2)
    return DiffusionActionHead(cfg).to(dtype)


def mlp_head(dtype=torch.float64):
    torch.manual_seed(0)
    return GaussianMLPHead(MLPHeadConfig(embedding_dim=6, action_horizon=3, action_dim=2, hidden_dims=(16, 16),
                                         sigma=0.5)).to(dtype)


def batch(dtype=torch.float64, b=7):
    g = torch.Generator().manual_seed(1)
    emb = torch.randn(b, 6, generator=g, dtype=dtype)
    act = torch.randn(b, 3, 2, generator=g, dtype=dtype)
    mask = torch.rand(b, 3, 2, generator=g) > 0.25
    mask[0] = True
    return emb, act, mask


def _double(draws):
    if draws is not None and hasattr(draws, "noise"):
        draws.noise = draws.noise.double()
    return draws


@pytest.mark.parametrize("make", [diffusion_head, mlp_head])
@pytest.mark.parametrize("shared", [True, False])
def test_closed_form_equals_autograd_per_sample_gradients(make, shared):
    head = make()
    emb, act, mask = batch()
    draws = head.draw(4, 1 if shared else emb.shape[0], torch.Generator().manual_seed(3))
    draws = _double(draws)
    closed = loss_gradient_embeddings(head, emb, act, mask, draws)
    auto = autograd_per_sample_gradients(head, emb, act, mask, draws)
    assert closed.shape == (7, gradient_dim(head))
    assert torch.max(torch.abs(closed - auto)).item() < 1e-6
    assert closed.abs().max() > 1e-3  # a zero gradient would pass the comparison trivially


def test_closed_form_matches_autograd_in_float32():
    head = diffusion_head(torch.float32)
    emb, act, mask = batch(torch.float32)
    draws = head.draw(2, 1, torch.Generator().manual_seed(3))
    closed = loss_gradient_embeddings(head, emb, act, mask, draws)
    auto = autograd_per_sample_gradients(head, emb, act, mask, draws)
    # two algorithms for one gradient: forward and backward sums in other orders (test/support/fp_bounds.py)
    assert_two_paths_close(closed, auto, fan_in_sum(head, backward=True), what="closed form vs autograd, float32")


def test_embeddings_are_deterministic_and_independent_of_batching():
    head = diffusion_head(torch.float32)
    emb, act, mask = batch(torch.float32, b=9)
    full = compute_embeddings(head, emb, act, mask, EmbeddingConfig(seed=5))
    split = compute_embeddings(head, emb, act, mask, EmbeddingConfig(seed=5, batch_size=4))
    again = compute_embeddings(head, emb, act, mask, EmbeddingConfig(seed=5))
    other = compute_embeddings(head, emb, act, mask, EmbeddingConfig(seed=6))
    assert torch.equal(full, again)  # the same call twice
    # batches of 4: the same float32 sums, maybe in another kernel's order (values up to ~10: atol 1e-6 was 1 ulp)
    assert_two_paths_close(split, full, fan_in_sum(head), what="batch_size 4")
    assert not torch.allclose(full, other)


def test_random_projection_equals_projecting_the_full_gradient():
    head = diffusion_head()
    emb, act, mask = batch()
    draws = _double(fixed_draws(head, 3, 0))
    proj = random_projection(gradient_dim(head), 16, seed=0).double()
    full = loss_gradient_embeddings(head, emb, act, mask, draws)
    projected = loss_gradient_embeddings(head, emb, act, mask, draws, proj)
    assert projected.shape == (7, 16)
    assert torch.allclose(projected, full @ proj.T, atol=1e-9)


def test_sampled_labels_give_nonzero_gradients_for_the_gaussian_head():
    """The DESIGN.md pitfall: the model's own mean as label would give exactly zero gradient."""
    head = mlp_head(torch.float32)
    emb, _, _ = batch(torch.float32)
    with torch.no_grad():
        mean_label = head.mean(emb)
    zero = compute_embeddings(head, emb, mean_label, None, EmbeddingConfig())
    sampled = compute_embeddings(head, emb, None, None, EmbeddingConfig(label="sample"))
    assert torch.all(zero == 0)
    assert torch.all(sampled.norm(dim=1) > 0)


def test_last_layer_and_dropout_embeddings():
    head = diffusion_head(torch.float32)
    emb, act, mask = batch(torch.float32)
    ll = compute_embeddings(head, emb, act, mask, EmbeddingConfig(kind="last_layer"))
    assert ll.shape == (7, 16)
    mc = compute_embeddings(head, emb, act, mask, EmbeddingConfig(kind="dropout", dropout_samples=8))
    assert mc.shape == (7, 8 * 6)
    # phi is centered over dropout masks: per example, the n output vectors sum to zero
    assert torch.allclose(mc.reshape(7, 8, 6).sum(1), torch.zeros(7, 6), atol=1e-5)
    assert mc.abs().max() > 0
    with pytest.raises(ValueError, match="kind"):
        EmbeddingConfig(kind="ntk")
