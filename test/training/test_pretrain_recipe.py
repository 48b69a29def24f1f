"""Pre-training's per-suite recipe: the WidowX's learning-rate schedule and EMA, and the opt-in relative features."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mujoco")
pytest.importorskip("torch")

from amf_ros.envs.widowx_sim.suite import STATE_NAMES
from amf_ros.policies.agent import TaskConditionedPolicy
from amf_ros.training.pretrain import PretrainConfig, pretrain, relative_state_differences

TINY = {"suite": "widowx", "tasks": ["carrot_on_plate", "stack_cube"], "allocation": "uniform", "demos": 2,
        "steps": 4, "task_encoder": "hash", "seed": 1}


def test_widowx_pretrains_with_cosine_and_ema_unless_told_otherwise():
    cfg = PretrainConfig(suite="widowx")
    assert (cfg.lr_schedule, cfg.ema_decay, cfg.relative_features) == ("cosine", 0.999, False)
    cfg = PretrainConfig(suite="widowx", lr_schedule="constant", ema_decay=0)
    assert (cfg.lr_schedule, cfg.ema_decay) == ("constant", 0.0)
    with pytest.raises(ValueError, match="lr_schedule"):
        PretrainConfig(suite="widowx", lr_schedule="step")


def test_metaworld_keeps_the_schedule_its_benchmark_was_measured_with():
    pytest.importorskip("metaworld")
    cfg = PretrainConfig(suite="metaworld")
    assert (cfg.lr_schedule, cfg.ema_decay) == ("constant", 0.0)
    with pytest.raises(ValueError, match="widowx"):
        PretrainConfig(suite="metaworld", relative_features=True)


def test_relative_features_are_object_minus_gripper_and_receptacle_minus_object():
    (a, b, n), (c, d, m) = relative_state_differences("widowx")
    assert (n, m) == (3, 3)
    assert STATE_NAMES[a:a + 3] == ("x", "y", "z")
    assert STATE_NAMES[b:b + 3] == ("object_x", "object_y", "object_z") and c == b
    assert STATE_NAMES[d:d + 3] == ("receptacle_x", "receptacle_y", "receptacle_z")


def test_pretrain_passes_its_schedule_and_builds_the_relative_trunk(monkeypatch: pytest.MonkeyPatch):
    calls = []
    fit = TaskConditionedPolicy.fit

    def spy(self, transitions, steps, **kw):
        calls.append(kw)
        return fit(self, transitions, steps, **kw)

    monkeypatch.setattr(TaskConditionedPolicy, "fit", spy)
    res = pretrain(PretrainConfig(**TINY, relative_features=True))
    assert calls == [{"lr_schedule": "cosine", "ema_decay": 0.999}]
    trunk = res.policy.trunk
    assert res.policy.config.state_differences == relative_state_differences("widowx")
    assert trunk.feature_dim == len(STATE_NAMES) + 6
    # the differences are normalised with their own statistics (demonstrations + exploration), not left raw
    states = np.concatenate([d.obs for d in res.demos])
    diffs = trunk.raw_features(states).numpy()[:, -6:]
    std = trunk.std.numpy()[-6:]
    assert np.all(std >= 0.05 - 1e-7) and np.any(np.abs(trunk.mean.numpy()[-6:]) > 1e-3)
    assert np.all(np.abs((diffs - trunk.mean.numpy()[-6:]) / std) < 10), "within the trunk's clip"
