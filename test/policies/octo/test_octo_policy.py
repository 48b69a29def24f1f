"""Octo-initialised TaskConditionedPolicy: Octo's head + prior, Octo's action statistics, fine-tuning, save/load."""

import numpy as np
import pytest
import torch
from octo_testlib import BRIDGE_STATS, np_sample, synthetic_octo_params

from amf_ros.policies.octo.policy import load_octo_policy, octo_policy
from amf_ros.policies.postprocess import unnormalize_actions

TASKS = {"carrot_on_plate": "put carrot on plate", "spoon_on_towel": "put the spoon on the towel"}


def _transitions(n=12, E=384, seed=0):
    rng = np.random.default_rng(seed)
    return {"state": rng.normal(size=(n, E)).astype(np.float32),
            "action": np.concatenate([rng.normal(0, 0.01, (n, 6)), rng.integers(0, 2, (n, 1))], 1).astype(np.float32),
            "task": np.array(["carrot_on_plate"] * (n // 2) + ["spoon_on_towel"] * (n - n // 2)),
            "episode_index": np.repeat(np.arange(2), n // 2), "step": np.tile(np.arange(n // 2), 2)}


def test_octo_policy_acts_like_octo_head_with_bridge_unnormalisation():
    params = synthetic_octo_params(384, seed=5)
    small = params["heads_action"]["diffusion_model"]["reverse_network"]["Dense_1"]
    small["kernel"] *= 0.0  # keep the DDPM chain inside +-5 so the comparison is informative
    small["bias"] *= 0.0
    policy = octo_policy(params, BRIDGE_STATS, TASKS)
    assert policy.task_dim == 0 and policy.embedding_dim == 384
    for p, q in zip(policy.head.parameters(), policy.prior.parameters(), strict=True):
        assert torch.equal(p, q) and not q.requires_grad
    emb = np.random.default_rng(1).normal(size=(1, 384)).astype(np.float32) * 20.0  # large: no clipping allowed
    init = np.zeros((1, 28), np.float32)
    steps = np.zeros((20, 1, 28), np.float32)
    ref = np_sample(params["heads_action"], emb.astype(np.float64), init, steps)[0]
    with torch.no_grad():
        got = policy.head.predict_action(torch.from_numpy(emb), init_noise=torch.from_numpy(init),
                                         step_noise=torch.from_numpy(steps))[0].numpy()
    np.testing.assert_allclose(got, ref, rtol=1e-3, atol=1e-4)
    feats = policy.trunk.encode_frames({"state": emb})
    assert torch.equal(feats, torch.from_numpy(emb))  # identity trunk, no clip at 10
    chunk = policy.act({"state": emb[0]}, "carrot_on_plate", seed=0)
    assert chunk.shape == (4, 7)
    raw = policy.action_normalizer.normalize(chunk)
    np.testing.assert_allclose(unnormalize_actions(raw, BRIDGE_STATS), chunk, atol=1e-5)
    assert policy.action_normalizer.mask.tolist() == [True] * 6 + [False]


def test_fine_tuning_moves_head_not_prior_and_roundtrips(tmp_path):
    policy = octo_policy(synthetic_octo_params(384), BRIDGE_STATS, TASKS)
    prior_before = [p.clone() for p in policy.prior.parameters()]
    data = _transitions()
    loss0 = policy.loss(data)
    policy.fit(data, steps=5, batch_size=8)
    assert policy.loss(data) < loss0
    assert all(torch.equal(a, b) for a, b in zip(prior_before, policy.prior.parameters(), strict=True))
    phi = policy.embed(data)
    assert phi.shape[0] == 12 and np.all(np.isfinite(phi))
    path = policy.save(tmp_path / "ckpt")
    back = load_octo_policy(path)
    x = {"state": data["state"][0]}
    np.testing.assert_allclose(back.act(x, "spoon_on_towel", seed=3), policy.act(x, "spoon_on_towel", seed=3),
                               atol=1e-6)
    assert back.trunk.clip == float("inf")


def test_rejects_mismatched_statistics():
    with pytest.raises(ValueError, match="7 dims"):
        octo_policy(synthetic_octo_params(384), {"mean": [0.0] * 6, "std": [1.0] * 6}, TASKS)


def test_image_actor_windows_frames_and_uses_the_instruction():
    from amf_ros.policies.octo.observation import ObservationWindow
    from amf_ros.policies.octo.policy import OctoImageActor

    class FakeTrunk:  # OctoTrunk's surface: new_window(mode, crop_scale), embed(obs, instructions) -> (B, E)
        def __init__(self):
            self.seen = []

        def new_window(self, mode="octo", crop_scale=None):
            return ObservationWindow(window=2, mode=mode, crop_scale=crop_scale)

        def embed(self, obs, instructions):
            self.seen.append((obs["timestep_pad_mask"].tolist(), list(instructions)))
            return np.full((1, 384), obs["image_primary"][0, -1].mean() / 255.0, np.float32)

    policy = octo_policy(synthetic_octo_params(384), BRIDGE_STATS, TASKS)
    trunk = FakeTrunk()
    actor = OctoImageActor(trunk, policy)
    with pytest.raises(RuntimeError, match="reset"):
        actor.act(np.zeros((48, 64, 3), np.uint8))
    with pytest.raises(ValueError, match="unknown task"):
        actor.reset("nope")
    actor.reset("carrot_on_plate")
    a = actor.act(np.zeros((48, 64, 3), np.uint8), seed=0)
    b = actor.act(np.full((48, 64, 3), 255, np.uint8), seed=0)
    assert a.shape == b.shape == (4, 7) and not np.allclose(a, b)
    assert trunk.seen == [([[False, True]], ["put carrot on plate"]), ([[True, True]], ["put carrot on plate"])]
    np.testing.assert_allclose(b, policy.act({"state": np.ones(384, np.float32)}, "carrot_on_plate", seed=0))
