"""Octo head weights -> the package's torch DiffusionActionHead, checked against an independent numpy port."""

import numpy as np
import pytest
import torch
from octo_testlib import (
    count_leaves,
    np_loss,
    np_sample,
    np_schedule,
    np_score,
    synthetic_head_tree,
    synthetic_octo_params,
)

from amf_ros.policies.octo.convert import (
    convert_head_params,
    head_params,
    infer_head_config,
    load_head_npz,
    load_octo_head,
    octo_head_pair,
    save_head_npz,
)


@pytest.mark.parametrize("E,count", [(384, 1_703_564), (768, 1_801_868)])
def test_synthetic_trees_have_octo_sizes_and_convert(E, count):
    params = synthetic_octo_params(E)
    assert count_leaves(params["heads_action"]) == count  # the reference's parameter counts (Small / Base)
    cfg = infer_head_config(params)
    assert (cfg.embedding_dim, cfg.time_dim, cfg.hidden_dim, cfg.num_blocks) == (E, 32, 256, 3)
    head = load_octo_head(params)
    assert sum(p.numel() for p in head.parameters()) == count
    sd = head.state_dict()
    k = params["heads_action"]["diffusion_model"]["reverse_network"]["Dense_0"]["kernel"]
    np.testing.assert_array_equal(sd["diffusion_model.reverse_network.dense0.weight"].numpy(), k.T)
    tp = params["heads_action"]["diffusion_model"]["time_preprocess"]["kernel"]
    np.testing.assert_array_equal(sd["diffusion_model.time_preprocess.kernel"].numpy(), tp)  # not transposed


def test_conversion_rejects_wrong_trees():
    params = synthetic_octo_params(384)
    rn = params["heads_action"]["diffusion_model"]["reverse_network"]
    bad = {"heads_action": {"diffusion_model": dict(params["heads_action"]["diffusion_model"])}}
    bad["heads_action"]["diffusion_model"]["reverse_network"] = {k: v for k, v in rn.items()
                                                                 if k != "MLPResNetBlock_1"}
    cfg = infer_head_config(params)
    with pytest.raises(ValueError, match="missing diffusion_model/reverse_network/MLPResNetBlock_1"):
        convert_head_params(bad, cfg)
    base_cfg = infer_head_config(synthetic_octo_params(768))
    with pytest.raises(ValueError, match=r"expected \(828, 256\), got \(444, 256\)"):
        convert_head_params(params, base_cfg)
    with pytest.raises(ValueError, match="no 'heads_action/diffusion_model'"):
        head_params({"octo_transformer": {"x": np.zeros(1)}})
    with pytest.raises(ValueError, match="action_horizon"):
        infer_head_config(params, action_horizon=8)


def test_pair_is_independent_and_prior_frozen():
    ft, prior = octo_head_pair(synthetic_octo_params(384))
    assert all(not p.requires_grad for p in prior.parameters())
    assert all(p.requires_grad for p in ft.parameters())
    with torch.no_grad():
        ft.diffusion_model.reverse_network.dense1.bias.add_(1.0)
    assert not torch.equal(ft.diffusion_model.reverse_network.dense1.bias,
                           prior.diffusion_model.reverse_network.dense1.bias)


def test_every_accepted_tree_layout_converts_to_the_same_head():
    """The full tree, the head's own tree, both in flax's {"params": ...} collection (what ``head.init`` returns and
    orbax restores), and the flat dict all give identical weights."""
    params = synthetic_octo_params(384)
    head = params["heads_action"]
    ref = load_octo_head(params).state_dict()
    for tree in (head, {"params": params}, {"params": head}):
        got = load_octo_head(tree).state_dict()
        assert all(torch.equal(got[k], ref[k]) for k in ref)


def test_npz_roundtrip_and_flat_input(tmp_path):
    params = synthetic_octo_params(384)
    path = save_head_npz(params, tmp_path / "head.npz")
    flat = load_head_npz(path)
    assert all(k.startswith("heads_action/diffusion_model/") for k in flat) and len(flat) == 27
    a = load_octo_head(flat).state_dict()
    b = load_octo_head(params).state_dict()
    assert all(torch.equal(a[k], b[k]) for k in b)


def test_schedule_matches_reference_table():
    betas, _, ah = np_schedule()
    assert betas[0] == pytest.approx(0.00799268, abs=2e-7) and betas[19] == pytest.approx(0.999)
    assert ah[19] == pytest.approx(6.05956e-06, rel=1e-3)
    head = load_octo_head(synthetic_octo_params(384))
    np.testing.assert_allclose(head.alpha_hats.numpy(), ah, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("E", [384, 768])
def test_torch_head_matches_numpy_port_of_octo(E):
    tree = synthetic_head_tree(E, seed=3)
    head = load_octo_head({"heads_action": tree})
    rng = np.random.default_rng(0)
    B = 5
    emb = rng.normal(size=(B, E)).astype(np.float32)
    x = rng.normal(size=(B, 28)).astype(np.float32)
    t = rng.integers(0, 20, size=(B, 1)).astype(np.float32)
    with torch.no_grad():
        eps_t = head.diffusion_model(torch.from_numpy(emb), torch.from_numpy(x), torch.from_numpy(t)).numpy()
    eps_np = np_score(tree, emb, x, t)
    np.testing.assert_allclose(eps_t, eps_np, rtol=1e-4, atol=1e-4)
    assert np.abs(eps_np).max() > 0.1  # a non-trivial function of the inputs

    # loss with explicit draws, with a padding mask
    actions = rng.normal(size=(B, 4, 7)).astype(np.float32)
    mask = np.ones((B, 4, 7), bool)
    mask[0, 2:] = False
    time = rng.integers(0, 20, size=(1, B, 1))
    noise = rng.normal(size=(1, B, 28)).astype(np.float32)
    from amf_ros.policies.diffusion_head import DiffusionDraws

    draws = DiffusionDraws(time=torch.from_numpy(time), noise=torch.from_numpy(noise))
    with torch.no_grad():
        loss_t = head.loss(torch.from_numpy(emb), torch.from_numpy(actions), torch.from_numpy(mask), draws=draws).item()
    assert loss_t == pytest.approx(np_loss(tree, emb, actions, time, noise, mask), rel=1e-4)

    # DDPM sampler with explicit noise: scale the output layer so the chain stays inside +-5 (a random net saturates)
    small = synthetic_head_tree(E, seed=3)
    small["diffusion_model"]["reverse_network"]["Dense_1"]["kernel"] *= 0.0
    small["diffusion_model"]["reverse_network"]["Dense_1"]["bias"] *= 0.0
    head0 = load_octo_head({"heads_action": small})
    init = rng.normal(size=(B, 28)).astype(np.float32) * 1e-3
    steps = rng.normal(size=(20, B, 28)).astype(np.float32) * 1e-3
    out_t = head0.predict_action(torch.from_numpy(emb), init_noise=torch.from_numpy(init),
                                 step_noise=torch.from_numpy(steps)).numpy()
    out_np = np_sample(small, emb, init, steps)
    assert np.abs(out_np).max() < 4.9  # not saturated, so the comparison is informative
    np.testing.assert_allclose(out_t, out_np, rtol=1e-3, atol=1e-4)
