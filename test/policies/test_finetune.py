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


def _tiny_head() -> GaussianMLPHead:
    torch.manual_seed(0)
    return GaussianMLPHead(MLPHeadConfig(embedding_dim=4, action_horizon=1, action_dim=2, hidden_dims=(8,)))


def _iterates(config: TrainConfig, steps: int = 40) -> tuple[GaussianMLPHead, list[torch.Tensor]]:
    """Train a tiny head; the flat parameters after every optimiser step (the callback runs after each one)."""
    head = _tiny_head()
    gen = torch.Generator().manual_seed(1)
    emb, chunks = torch.randn(32, 4, generator=gen), torch.randn(32, 1, 2, generator=gen)
    seen = [torch.nn.utils.parameters_to_vector(head.parameters()).detach().clone()]

    def record(step: int, loss: float) -> bool:
        seen.append(torch.nn.utils.parameters_to_vector(head.parameters()).detach().clone())
        return True

    train_head(head, lambda idx: emb[idx], chunks, None, steps, config, callback=record)
    return head, seen


def test_lr_factor_is_one_or_a_half_cosine():
    from amf_ros.policies.finetune import lr_factor

    assert [lr_factor("constant", s, 10) for s in (0, 5, 9)] == [1.0, 1.0, 1.0]
    cos = [lr_factor("cosine", s, 10) for s in range(10)]
    assert cos[0] == 1.0 and cos[5] == pytest.approx(0.5, abs=1e-12)
    assert all(a > b for a, b in zip(cos[:-1], cos[1:], strict=True)) and 0 < cos[-1] < 0.03
    with pytest.raises(ValueError, match="lr_schedule"):
        TrainConfig(lr_schedule="linear")
    with pytest.raises(ValueError, match="ema_decay"):
        TrainConfig(ema_decay=1.0)


def test_cosine_schedule_makes_the_last_steps_small():
    _, const = _iterates(TrainConfig(batch_size=8, lr=1e-2))
    _, cos = _iterates(TrainConfig(batch_size=8, lr=1e-2, lr_schedule="cosine"))

    def step_size(run: list[torch.Tensor], i: int) -> float:
        return float((run[i + 1] - run[i]).norm())

    # Adam's steps are about lr per weight: the first steps agree, the last cosine step is ~lr * 0.0015
    assert step_size(cos, 0) == pytest.approx(step_size(const, 0), rel=1e-6)
    assert step_size(cos, 39) < 0.05 * step_size(const, 39)


def test_ema_weights_are_the_moving_average_of_the_iterates():
    decay = 0.9
    head, run = _iterates(TrainConfig(batch_size=8, lr=1e-2, ema_decay=decay), steps=30)
    # the callback saw the raw iterates; the head ends with their average (warm-up (1 + t) / (10 + t))
    ema = run[0].clone().double()
    for t, w in enumerate(run[1:]):
        d = min(decay, (1 + t) / (10 + t))
        ema = d * ema + (1 - d) * w.double()
    final = torch.nn.utils.parameters_to_vector(head.parameters()).detach().double()
    assert float((final - run[-1].double()).norm()) > 1e-3, "the average differs from the last iterate"
    torch.testing.assert_close(final, ema, rtol=0, atol=1e-6)
