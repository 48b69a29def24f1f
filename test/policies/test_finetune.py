"""Fine-tuning loop: cached trunk embeddings == running the trunk; cancel; joint trunk training; validation."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amf_ros.policies.agent import PolicyConfig, TaskConditionedPolicy
from amf_ros.policies.finetune import TrainConfig, train_head
from amf_ros.policies.mlp_head import GaussianMLPHead, MLPHeadConfig

from .conftest import make_demos


def image_policy(seed=0):
    cfg = PolicyConfig(head="mlp", trunk="image", task_encoder="hash", action_horizon=1, image_feature_dim=8,
                       mlp_hidden_dims=(16,), batch_size=8, seed=seed)
    return TaskConditionedPolicy(cfg, action_dim=2, tasks={"a": "task a"})


def image_data():
    data = make_demos("a", 2, steps=6)
    data["image"] = np.random.default_rng(0).integers(0, 255, size=(12, 16, 16, 3), dtype=np.uint8)
    return data


def test_cached_and_uncached_trunk_give_the_same_training():
    data = image_data()
    a, b = image_policy(), image_policy()
    ra = a.fit(data, 10, cached=True)
    rb = b.fit(data, 10, cached=False)
    np.testing.assert_allclose(ra.losses, rb.losses, rtol=1e-5)
    assert a.cache.stats.misses == 12  # the trunk ran once per frame
    assert len(b.cache) == 0  # never used


def test_joint_trunk_training_changes_the_trunk_and_clears_the_cache():
    data = image_data()
    policy = image_policy()
    policy.fit(data, 2)
    before = {k: v.clone() for k, v in policy.trunk.state_dict().items()}
    policy.fit(data, 5, train_trunk=True)
    assert any(not torch.equal(before[k], v) for k, v in policy.trunk.state_dict().items())
    assert len(policy.cache) == 0


def test_callback_cancels_and_loss_curve_is_kept():
    head = GaussianMLPHead(MLPHeadConfig(embedding_dim=4, action_horizon=1, action_dim=2, hidden_dims=(8,)))
    emb = torch.randn(20, 4)
    chunks = torch.randn(20, 1, 2)
    seen = []
    result = train_head(head, lambda idx: emb[idx], chunks, None, 50, TrainConfig(batch_size=4),
                        callback=lambda step, loss: seen.append((step, loss)) or step < 6)
    assert result.cancelled and result.steps == 7 and len(result.losses) == 7
    assert [s for s, _ in seen] == list(range(7))
    with pytest.raises(ValueError, match="steps"):
        train_head(head, lambda idx: emb[idx], chunks, None, -1, TrainConfig())


def test_fit_validates_transitions():
    policy = TaskConditionedPolicy(PolicyConfig(head="mlp", task_encoder="hash", action_horizon=2), state_dim=5,
                                   action_dim=2, tasks={"a": "task a"})
    data = make_demos("a", 1)
    del data["episode_index"]
    with pytest.raises(ValueError, match="episode_index"):
        policy.fit(data, 1)
    with pytest.raises(ValueError, match="untrained"):
        policy.act({"state": np.zeros(5)}, "a")
    with pytest.raises(ValueError, match="state"):
        TaskConditionedPolicy(PolicyConfig(task_encoder="hash"), action_dim=2, tasks={})
