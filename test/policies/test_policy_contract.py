"""Every policy kind under PolicyContract: TaskConditionedPolicy (diffusion/MLP heads, state/image trunks, MiniLM),
the Octo-initialised policy (synthetic Octo head parameters) and the GP policy."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.policies.agent import PolicyConfig, TaskConditionedPolicy
from amf_ros.policies.gp import GPPolicyConfig, GPTaskPolicy

from .conftest import concat, make_demos
from .contract import PolicyContract

TASKS = {"a": "open the drawer", "b": "close the drawer"}


def state_data() -> dict[str, np.ndarray]:
    return concat(make_demos("a", 3, seed=1), make_demos("b", 3, sign=-1.0, seed=2, episode_offset=10))


class TestDiffusionStatePolicy(PolicyContract):
    def make_policy(self, seed=0):
        cfg = PolicyConfig(head="diffusion", task_encoder="hash", action_horizon=3, diffusion_hidden_dim=32,
                           batch_size=32, lr=1e-3, seed=seed)
        return TaskConditionedPolicy(cfg, state_dim=5, action_dim=2, tasks=TASKS)

    def transitions(self):
        return state_data()


class TestMLPStatePolicy(PolicyContract):
    def make_policy(self, seed=0):
        cfg = PolicyConfig(head="mlp", task_encoder="hash", action_horizon=1, mlp_hidden_dims=(32, 32),
                           batch_size=32, lr=1e-3, seed=seed)
        return TaskConditionedPolicy(cfg, state_dim=5, action_dim=2, tasks=TASKS)

    def transitions(self):
        return state_data()


class TestDiffusionImagePolicy(PolicyContract):
    fit_steps = 20

    def make_policy(self, seed=0):
        cfg = PolicyConfig(head="diffusion", trunk="image", task_encoder="hash", action_horizon=2,
                           image_feature_dim=16, diffusion_hidden_dim=32, batch_size=16, lr=1e-3, seed=seed)
        return TaskConditionedPolicy(cfg, action_dim=2, tasks=TASKS)

    def transitions(self):
        data = state_data()
        rng = np.random.default_rng(0)
        data["image"] = rng.integers(0, 255, size=(len(data["task"]), 24, 24, 3), dtype=np.uint8)
        del data["state"]
        return data


class TestMiniLMPolicy(PolicyContract):
    """The paper's task conditioning; the encoder is the session's single MiniLM instance."""

    @pytest.fixture(autouse=True)
    def _encoder(self, minilm_encoder):
        self.encoder = minilm_encoder

    def make_policy(self, seed=0):
        cfg = PolicyConfig(head="mlp", task_encoder="minilm", action_horizon=1, mlp_hidden_dims=(32,),
                           batch_size=32, lr=1e-3, seed=seed)
        return TaskConditionedPolicy(cfg, state_dim=5, action_dim=2, tasks=TASKS, task_encoder=self.encoder)

    def transitions(self):
        return state_data()

    @pytest.fixture(scope="class")
    def fitted(self, minilm_encoder):
        self.encoder = minilm_encoder
        policy = self.make_policy(0)
        data = self.transitions()
        return policy, data, policy.fit(data, self.fit_steps)


class TestOctoPolicy(PolicyContract):
    """The policy policy_server serves with backend octo: Octo's head and frozen prior on Octo embeddings."""

    task = "carrot_on_plate"
    fit_steps = 20
    has_prior = True

    def make_policy(self, seed=0):
        from octo_testlib import BRIDGE_STATS, synthetic_octo_params

        from amf_ros.policies.octo.policy import octo_policy

        cfg = PolicyConfig(head="diffusion", trunk="state", action_horizon=4, batch_size=16, lr=1e-3, seed=seed)
        return octo_policy(synthetic_octo_params(384), BRIDGE_STATS, OCTO_TASKS, config=cfg)

    def transitions(self):
        rng = np.random.default_rng(0)
        n, per = 32, 8
        action = np.concatenate([rng.normal(0, 0.01, (n, 6)), rng.integers(0, 2, (n, 1))], 1).astype(np.float32)
        return {"state": rng.normal(size=(n, 384)).astype(np.float32), "action": action,
                "task": np.repeat(["carrot_on_plate", "spoon_on_towel"] * (n // (2 * per)), per),
                "episode_index": np.arange(n) // per, "step": np.tile(np.arange(per), n // per)}

    def load_policy(self, policy, path):
        from amf_ros.policies.octo.policy import load_octo_policy

        return load_octo_policy(path)


OCTO_TASKS = {"carrot_on_plate": "put carrot on plate", "spoon_on_towel": "put the spoon on the towel"}


class TestGPPolicy(PolicyContract):
    """AMF-GP's policy: exact conditioning, no head, no loss-gradient embeddings, no adaptive prior."""

    has_head = False
    embeds = False
    iterative_fit = False
    learns_tasks = False

    def make_policy(self, seed=0):
        return GPTaskPolicy(GPPolicyConfig(), state_dim=5, action_dim=2, instructions=TASKS, seed=seed,
                            task_vectors={"a": [1.0, 0.0], "b": [0.0, 1.0]})

    def transitions(self):
        return state_data()
