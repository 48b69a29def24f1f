"""PolicyContract: the checks every Policy backend must pass (STYLE habit 11, after dm_env's test mixins).

A backend's test class inherits the mixin and provides ``make_policy(self, seed)`` (an untrained policy) and
``transitions(self)`` (a small dataset with the keys of ``policies/base.py``), plus ``task`` (a task key).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from amf_ros.policies.base import Policy


class PolicyContract:
    """Mixin of contract tests; see module docstring."""

    task = "a"
    fit_steps = 30

    def make_policy(self, seed: int = 0):  # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def transitions(self) -> dict[str, np.ndarray]:  # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def _frame(self, data: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
        return {k: data[k][i] for k in ("state", "image") if k in data}

    @pytest.fixture(scope="class")
    def fitted(self):
        policy = self.make_policy(0)
        data = self.transitions()
        result = policy.fit(data, self.fit_steps)
        return policy, data, result

    def test_satisfies_protocol(self, fitted):
        assert isinstance(fitted[0], Policy)

    def test_act_shape_and_finite(self, fitted):
        policy, data, _ = fitted
        chunk = policy.act(self._frame(data, 0), self.task)
        assert chunk.shape == (policy.config.action_horizon, data["action"].shape[1])
        assert np.all(np.isfinite(chunk))

    def test_unknown_task_rejected(self, fitted):
        policy, data, _ = fitted
        with pytest.raises(ValueError, match="unknown task"):
            policy.act(self._frame(data, 0), "no-such-task")

    def test_embed_shape_and_determinism(self, fitted):
        policy, data, _ = fitted
        phi = policy.embed(data)
        assert phi.ndim == 2 and phi.shape[0] == len(data["task"])
        assert np.all(np.isfinite(phi)) and np.abs(phi).max() > 0
        assert np.array_equal(phi, policy.embed(data))

    def test_loss_curve_recorded_and_decreasing(self, fitted):
        _, _, result = fitted
        assert len(result.losses) == self.fit_steps
        k = max(1, self.fit_steps // 5)
        assert np.mean(result.losses[-k:]) < np.mean(result.losses[:k])

    def test_save_load_exact(self, fitted, tmp_path):
        policy, data, _ = fitted
        loaded = type(policy).load(policy.save(tmp_path / "ck"))
        for key, value in policy.head.state_dict().items():
            assert torch.equal(value, loaded.head.state_dict()[key]), key
        obs = self._frame(data, 1)
        np.testing.assert_allclose(loaded.act(obs, self.task, seed=3), policy.act(obs, self.task, seed=3), atol=0)
        np.testing.assert_allclose(loaded.embed(data), policy.embed(data), atol=0)

    def test_seeded_fit_is_deterministic(self):
        data = self.transitions()
        a, b = self.make_policy(5), self.make_policy(5)
        ra, rb = a.fit(data, 5), b.fit(data, 5)
        assert ra.losses == rb.losses
        for key, value in a.head.state_dict().items():
            assert torch.equal(value, b.head.state_dict()[key]), key
        c = self.make_policy(6)
        assert c.fit(data, 5).losses != ra.losses
