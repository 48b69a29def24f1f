"""PolicyContract: the checks every Policy backend must pass (STYLE habit 11, after dm_env's EnvironmentTestMixin).

A backend's test class inherits the mixin and provides ``make_policy(self, seed)`` (an untrained policy) and
``transitions(self)`` (a small dataset with the keys of ``policies/base.py``), plus ``task`` (a task key). What a
kind legitimately cannot do is stated by a class switch, and the mixin then checks that the policy says so
(ValueError), never skips:

- ``has_head``: a neural action head (:class:`~amf_ros.policies.base.HeadPolicy`: ``head``, ``head_inputs``); the GP
  has none.
- ``embeds``: loss-gradient embeddings (AMF-NN's phi); the GP scores with its kernel and refuses ``embed``.
- ``iterative_fit``: ``fit`` runs ``steps`` seeded gradient steps; the GP conditions exactly, in one seed-free step.
- ``has_prior``: a frozen prior head from the start (the Octo-initialised policy); otherwise ``prior`` is None and
  ``fit_alpha`` refuses.
- ``learns_tasks``: ``set_tasks`` adds a task it did not know, which it then acts for and learns from demonstrations
  (how policy_server and task_selector take on a configured task the checkpoint lacks); the GP refuses a new key.
``load_policy(path)`` reads a checkpoint of the kind (default ``type(policy).load``; Octo: its own loader).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
import torch

from amf_ros.policies.base import FitResult, HeadPolicy, Policy


class PolicyContract:
    """Mixin of contract tests; see module docstring."""

    task = "a"
    fit_steps = 30
    has_head = True
    embeds = True
    iterative_fit = True
    has_prior = False
    learns_tasks = True

    def make_policy(self, seed: int = 0) -> Policy:  # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def transitions(self) -> dict[str, np.ndarray]:  # pragma: no cover - provided by subclasses
        raise NotImplementedError

    def load_policy(self, policy: Policy, path: Path) -> Policy:
        """Read back a checkpoint written by ``policy.save``."""
        return type(policy).load(path)

    def _frame(self, data: dict[str, np.ndarray], i: int) -> dict[str, np.ndarray]:
        return {k: data[k][i] for k in ("state", "image") if k in data}

    def _assert_same_weights(self, a: Policy, b: Policy) -> None:
        if self.has_head:
            assert isinstance(a, HeadPolicy) and isinstance(b, HeadPolicy)
            for key, value in a.head.state_dict().items():
                assert torch.equal(value, b.head.state_dict()[key]), key

    @pytest.fixture(scope="class")
    def fitted(self):
        policy = self.make_policy(0)
        data = self.transitions()
        result = policy.fit(data, self.fit_steps)
        return policy, data, result

    # -- the protocol's members exist and say what they are -------------------------------------------------------
    def test_satisfies_protocol(self, fitted):
        policy = fitted[0]
        assert isinstance(policy, Policy)
        assert isinstance(policy, HeadPolicy) == self.has_head

    def test_members(self, fitted):
        policy, data, _ = fitted
        assert isinstance(policy.tasks, list) and self.task in policy.tasks
        assert all(isinstance(t, str) for t in policy.tasks)
        assert set(policy.instructions) == set(policy.tasks)
        assert all(isinstance(v, str) and v for v in policy.instructions.values())
        assert set(policy.alphas) <= set(policy.tasks)
        assert all(isinstance(v, float) for v in policy.alphas.values())
        assert isinstance(policy.action_horizon, int) and policy.action_horizon >= 1
        assert policy.action_dim == data["action"].shape[1]
        assert (policy.prior is not None) == self.has_prior
        encoder = policy.encoder
        if encoder is not None:
            assert isinstance(encoder.dim, int) and encoder.encode(["x"]).shape == (1, encoder.dim)

    # -- acting --------------------------------------------------------------------------------------------------
    def test_act_shape_and_finite(self, fitted):
        policy, data, _ = fitted
        chunk = policy.act(self._frame(data, 0), self.task)
        assert chunk.shape == (policy.action_horizon, policy.action_dim)
        assert np.all(np.isfinite(chunk))

    def test_seeded_act_is_deterministic(self, fitted):
        policy, data, _ = fitted
        obs = self._frame(data, 1)
        first = policy.act(obs, self.task, seed=3)
        policy.act(obs, self.task)  # the policy's own generator does not touch seeded draws
        np.testing.assert_array_equal(policy.act(obs, self.task, seed=3), first)

    def test_unknown_task_rejected(self, fitted):
        policy, data, _ = fitted
        with pytest.raises(ValueError, match="unknown task"):
            policy.act(self._frame(data, 0), "no-such-task")
        bad = dict(data, task=np.asarray(["no-such-task"] * len(data["task"])))
        with pytest.raises(ValueError, match="unknown task"):
            self.make_policy(0).fit(bad, 2)

    def test_set_tasks_adds_a_task_it_then_learns(self):
        data = self.transitions()
        policy = self.make_policy(0)
        new = {"new-task": "do something it has never seen"}
        if not self.learns_tasks:
            with pytest.raises(ValueError, match="new-task"):
                policy.set_tasks(new)
            assert "new-task" not in policy.tasks
            return
        before = list(policy.tasks)
        policy.set_tasks(new)
        assert policy.tasks == [*before, "new-task"] and policy.instructions["new-task"] == new["new-task"]
        relabeled = dict(data, task=np.asarray(["new-task"] * len(data["task"]), dtype=object))
        result = policy.fit(relabeled, 2)
        assert result.steps == 2 and all(math.isfinite(v) for v in result.losses)
        chunk = policy.act(self._frame(data, 0), "new-task")
        assert chunk.shape == (policy.action_horizon, policy.action_dim) and np.all(np.isfinite(chunk))

    # -- the criterion's inputs -------------------------------------------------------------------------------------
    def test_loss_is_finite_and_deterministic(self, fitted):
        policy, data, _ = fitted
        value = policy.loss(data)
        assert isinstance(value, float) and math.isfinite(value)
        assert policy.loss(data) == value

    def test_embed(self, fitted):
        policy, data, _ = fitted
        if not self.embeds:
            with pytest.raises(ValueError, match="embedding"):
                policy.embed(data)
            return
        phi = policy.embed(data)
        assert phi.ndim == 2 and phi.shape[0] == len(data["task"]) and phi.dtype == np.float32
        assert np.all(np.isfinite(phi)) and np.abs(phi).max() > 0
        assert np.array_equal(phi, policy.embed(data))

    def test_head_inputs(self, fitted):
        policy, data, _ = fitted
        if not self.has_head:
            assert not hasattr(policy, "head_inputs")
            return
        assert isinstance(policy, HeadPolicy)
        emb = policy.head_inputs(data)
        assert tuple(emb.shape[:1]) == (len(data["task"]),) and emb.ndim == 2

    # -- training --------------------------------------------------------------------------------------------------
    def test_loss_curve_recorded_and_decreasing(self, fitted):
        _, data, result = fitted
        assert isinstance(result, FitResult) and not result.cancelled
        if not self.iterative_fit:  # exact conditioning: one step, and the data is then explained better
            assert result.steps == 1 and len(result.losses) == 1
            assert result.losses[0] < self.make_policy(0).loss(data)
            return
        assert len(result.losses) == self.fit_steps == result.steps
        k = max(1, self.fit_steps // 5)
        assert np.mean(result.losses[-k:]) < np.mean(result.losses[:k])

    def test_callback_cancels(self):
        data = self.transitions()
        policy = self.make_policy(0)
        seen: list[tuple[int, float]] = []

        def stop(step: int, loss: float) -> bool:
            seen.append((step, loss))
            return False

        result = policy.fit(data, 5, callback=stop)
        assert result.cancelled and result.steps <= 1 and seen and seen[0][0] == 0
        assert all(math.isfinite(loss) for _, loss in seen)

    def test_seeded_fit_is_deterministic(self):
        data = self.transitions()
        a, b = self.make_policy(5), self.make_policy(5)
        ra, rb = a.fit(data, 5), b.fit(data, 5)
        assert ra.losses == rb.losses
        self._assert_same_weights(a, b)
        obs = self._frame(data, 2)
        np.testing.assert_array_equal(a.act(obs, self.task), b.act(obs, self.task))
        c = self.make_policy(6)
        if self.iterative_fit:
            assert c.fit(data, 5).losses != ra.losses
        else:  # exact conditioning does not depend on the seed
            assert c.fit(data, 5).losses == ra.losses

    def test_fit_alpha(self):
        data = self.transitions()
        policy = self.make_policy(0)
        if not self.has_prior:
            with pytest.raises(ValueError, match="prior"):
                policy.fit_alpha(data, steps=2, seed=0)
            return
        policy.fit(data, 2)
        alphas = policy.fit_alpha(data, steps=3, seed=0)
        assert set(alphas) <= set(policy.tasks) and self.task in alphas
        assert all(0.0 < v < 1.0 for v in alphas.values())
        assert dict(policy.alphas) == alphas

    # -- checkpoints -----------------------------------------------------------------------------------------------
    def test_save_load_exact(self, fitted, tmp_path):
        policy, data, _ = fitted
        path = policy.save(tmp_path / "ck")
        assert isinstance(path, Path) and path.is_dir()
        loaded = self.load_policy(policy, path)
        assert isinstance(loaded, Policy)
        assert loaded.tasks == policy.tasks and dict(loaded.instructions) == dict(policy.instructions)
        assert dict(loaded.alphas) == dict(policy.alphas)
        self._assert_same_weights(policy, loaded)
        obs = self._frame(data, 1)
        np.testing.assert_allclose(loaded.act(obs, self.task, seed=3), policy.act(obs, self.task, seed=3),
                                   rtol=0, atol=0)
        assert loaded.loss(data) == policy.loss(data)
        if self.embeds:
            np.testing.assert_allclose(loaded.embed(data), policy.embed(data), rtol=0, atol=0)
