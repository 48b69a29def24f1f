"""Pre-training keeps successful scripted demonstrations only (PretrainConfig.successful_only).

A fake per-task environment whose episode succeeds or fails by its scene seed stands in for a simulator, so the
rule is checked exactly and in milliseconds: failed attempts are replaced from the same random stream, every kept
demonstration succeeded, the per-task counts are honoured, nothing changes where every attempt succeeds, and a task
that never succeeds stops after ATTEMPTS_PER_DEMO attempts per asked demonstration.
"""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest

pytest.importorskip("mujoco")  # PretrainConfig validates its suite against the registry (the WidowX suite)

from amf_ros.envs.metaworld_rollouts import collect_demos
from amf_ros.training.pretrain import ATTEMPTS_PER_DEMO, PretrainConfig, pretraining_demos


class SeedEnv:
    """A 3-step episode whose success is ``succeeds(scene seed)``; counts the episodes it ran."""

    def __init__(self, key: str, succeeds) -> None:
        self.spec = SimpleNamespace(key=key, instruction=key, max_steps=3)
        self.succeeds = succeeds
        self.steps, self.success, self.episodes = 0, False, 0
        self._seed = 0

    @property
    def obs(self) -> np.ndarray:
        return np.full(14, self._seed % 1000 + self.steps, dtype=np.float32)

    @property
    def done(self) -> bool:
        return self.steps >= self.spec.max_steps

    def reset(self, seed: int) -> np.ndarray:
        self._seed, self.steps, self.success = int(seed), 0, False
        self.episodes += 1
        return self.obs

    def step(self, action: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        self.steps += 1
        self.success = self.done and bool(self.succeeds(self._seed))
        return self.obs, self.success, self.done

    def expert_action(self) -> np.ndarray:
        return np.zeros(7)

    def perturb(self, action: np.ndarray, noise_std: float, rng: np.random.Generator | None) -> np.ndarray:
        return action + (rng.normal(0.0, noise_std, action.shape) if noise_std > 0 else 0.0)

    def random_action(self, rng: np.random.Generator) -> np.ndarray:
        return rng.uniform(-1, 1, 7)


def config(**kw) -> PretrainConfig:
    base = dict(suite="widowx", tasks=["spoon_on_towel", "carrot_on_plate"], allocation="uniform", demos=8, seed=3,
                task_encoder="hash")
    return PretrainConfig(**{**base, **kw})


def test_failed_attempts_are_replaced_and_counts_are_kept() -> None:
    envs = {"spoon_on_towel": SeedEnv("spoon_on_towel", lambda s: s % 2 == 0),
            "carrot_on_plate": SeedEnv("carrot_on_plate", lambda s: s % 3 != 0)}
    demos = pretraining_demos(config(), envs)
    assert [d.task for d in demos] == ["spoon_on_towel"] * 4 + ["carrot_on_plate"] * 4
    assert all(d.success for d in demos)
    assert all(d.seed % 2 == 0 for d in demos[:4]) and all(d.seed % 3 != 0 for d in demos[4:])
    # with these rules about half (a third) of the scenes fail: the kept ones needed more attempts than demos
    assert envs["spoon_on_towel"].episodes + envs["carrot_on_plate"].episodes > len(demos)
    again = pretraining_demos(config(), {k: SeedEnv(k, e.succeeds) for k, e in envs.items()})
    assert [d.seed for d in again] == [d.seed for d in demos]  # deterministic in the config


def test_keeping_failures_is_the_old_rule() -> None:
    envs = {k: SeedEnv(k, lambda s: s % 2 == 0) for k in ("spoon_on_towel", "carrot_on_plate")}
    demos = pretraining_demos(config(successful_only=False), envs)
    reference = collect_demos({k: SeedEnv(k, lambda s: s % 2 == 0) for k in envs}, {k: 4 for k in envs}, seed=3,
                              noise_std=config().noise_std)
    assert [d.seed for d in demos] == [d.seed for d in reference]
    assert any(not d.success for d in demos), "scene seeds are random: some of 8 are odd"


def test_when_every_attempt_succeeds_nothing_changes() -> None:
    always = {k: SeedEnv(k, lambda s: True) for k in ("spoon_on_towel", "carrot_on_plate")}
    reference = collect_demos({k: SeedEnv(k, lambda s: True) for k in always}, {k: 4 for k in always}, seed=3,
                              noise_std=config().noise_std)
    demos = pretraining_demos(config(), always)
    assert [(d.task, d.seed) for d in demos] == [(d.task, d.seed) for d in reference]
    for a, b in zip(demos, reference, strict=True):
        np.testing.assert_array_equal(a.actions, b.actions)  # the same noise draws


def test_a_task_that_never_succeeds_stops_after_its_attempts(caplog: pytest.LogCaptureFixture) -> None:
    envs = {"spoon_on_towel": SeedEnv("spoon_on_towel", lambda s: True),
            "carrot_on_plate": SeedEnv("carrot_on_plate", lambda s: False)}
    with caplog.at_level(logging.WARNING, logger="amf_ros.training.pretrain"):
        demos = pretraining_demos(config(), envs)
    assert [d.task for d in demos] == ["spoon_on_towel"] * 4
    assert envs["carrot_on_plate"].episodes == ATTEMPTS_PER_DEMO * 4
    assert any("carrot_on_plate: kept 0" in r.getMessage() for r in caplog.records)
