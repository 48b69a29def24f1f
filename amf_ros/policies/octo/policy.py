"""An Octo-initialised TaskConditionedPolicy: Octo's pretrained diffusion head on cached Octo embeddings.

Why: DESIGN.md fine-tunes only Octo's action head, on trunk embeddings computed once per recorded frame, and mixes
it with a frozen copy of the pretrained head (adaptive prior). The package's ``TaskConditionedPolicy`` already does
fine-tuning, loss-gradient embeddings, alpha fitting and checkpoints; this module configures it for Octo:

- frames are Octo readout embeddings (N, E) under the transition key ``"state"`` (E = 384 Small / 768 Base),
  computed by :meth:`OctoTrunk.embed_episode` (history window + instruction, so they already carry the task);
- the task embedding is zero-wide (:class:`NoTaskEncoder`), so the head's input is exactly Octo's embedding;
- the state "normaliser" is the identity and does not clip, so the pretrained head sees what Octo feeds it;
- the action normaliser is Octo's dataset statistics with the mask (gripper raw), not refit on demonstrations;
- head and prior both start from Octo's ``heads_action/diffusion_model`` weights (``convert.py``).

    trunk = OctoTrunk(ckpt)                                     # GPU machine
    policy = octo_policy(trunk.head_params(), trunk.action_statistics(), tasks={"carrot_on_plate": "..."})
    emb = trunk.embed_episode(images, "put carrot on plate")    # (T, E), cache it with the episode
    policy.fit({"state": emb, "action": a, "task": ..., "episode_index": ..., "step": ...}, steps=200)
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from amf_ros.policies.base import Policy
from amf_ros.policies.octo.convert import convert_head_params, infer_head_config

if TYPE_CHECKING:
    from amf_ros.policies.agent import TaskConditionedPolicy
    from amf_ros.policies.config import PolicyConfig

OCTO_FRAME_KEY = "state"
"""Transition key holding Octo embeddings (the state trunk of TaskConditionedPolicy passes them through)."""


class NoTaskEncoder:
    """A zero-width task encoder: Octo's embedding is already conditioned on the instruction."""

    name = "octo-readout"
    dim = 0

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(len(texts), 0) float32: no task features, the instruction is already in the embedding."""
        return np.zeros((len(texts), 0), dtype=np.float32)


def _unclipped(policy: TaskConditionedPolicy) -> TaskConditionedPolicy:
    policy.trunk.clip = math.inf  # identity statistics (mean 0, std 1) and no clipping
    policy.cache.clear()
    return policy


def octo_policy(head_params: Mapping[str, Any], action_stats: Mapping[str, Any], tasks: Mapping[str, str],
                config: PolicyConfig | None = None, action_horizon: int = 4,
                action_dim: int = 7) -> TaskConditionedPolicy:
    """A TaskConditionedPolicy whose head and frozen prior are Octo's pretrained head (see module doc).

    Args:
        head_params: Octo params (full tree, head tree or flat npz dict; see ``convert.head_params``).
        action_stats: the dataset's action statistics (mean, std, optional mask), e.g. Bridge's.
        tasks: {task key: instruction}.
        config: PolicyConfig (trunk must be "state", head "diffusion"); default: PolicyConfig with Octo's horizon.
        action_horizon: H of the head's action chunks (Octo: 4).
        action_dim: A, the width of one action (Octo's WidowX: 7).
    """
    from amf_ros.policies.agent import TaskConditionedPolicy
    from amf_ros.policies.config import PolicyConfig
    from amf_ros.policies.normalizer import Normalizer

    head_cfg = infer_head_config(head_params, action_horizon, action_dim)
    cfg = config or PolicyConfig(head="diffusion", trunk="state", action_horizon=action_horizon)
    if cfg.trunk != "state" or cfg.head != "diffusion" or cfg.action_horizon != action_horizon:
        raise ValueError(f"an Octo policy needs trunk='state', head='diffusion', action_horizon={action_horizon}; "
                         f"got {cfg.trunk=} {cfg.head=} {cfg.action_horizon=}")
    policy = TaskConditionedPolicy(cfg, action_dim=action_dim, tasks=tasks, state_dim=head_cfg.embedding_dim,
                                   task_encoder=NoTaskEncoder(), head_config=head_cfg)
    state, _ = convert_head_params(head_params, policy.head_config)
    policy.head.load_state_dict(state, strict=True)
    mean = np.asarray(action_stats["mean"], dtype=np.float64)
    if mean.shape != (action_dim,):
        raise ValueError(f"action statistics must have {action_dim} dims, got {mean.shape}")
    policy.action_normalizer = Normalizer(mean, np.asarray(action_stats["std"]), action_stats.get("mask"),
                                          min_std=1e-6)
    policy.freeze_prior()
    return _unclipped(policy)


class OctoImageActor:
    """Camera frames + task -> action chunks with an Octo policy: what a node serving Octo calls per control tick.

    Keeps one observation window per episode (Octo's HistoryWrapper convention), embeds it with the frozen trunk
    and acts with the (mixed) head of ``policy``; the chunk then goes through ``postprocess.ActionPostprocessor``.
    """

    def __init__(self, trunk: Any, policy: Policy, crop_scale: float | None = None) -> None:
        self.trunk = trunk
        self.policy = policy
        self.window = trunk.new_window(mode="octo", crop_scale=crop_scale)
        self.task: str | None = None

    def reset(self, task: str) -> None:
        """New episode of ``task`` (a key known to the policy)."""
        if task not in self.policy.instructions:
            raise ValueError(f"unknown task {task!r}; the policy knows {self.policy.tasks}")
        self.task = task
        self.window.reset()

    def act(self, image: np.ndarray, wrist: np.ndarray | None = None, seed: int | None = None) -> np.ndarray:
        """(H, A) un-normalised chunk for the newest camera frame (H x W x 3 uint8, any size)."""
        if self.task is None:
            raise RuntimeError("call reset(task) first")
        obs = self.window.add(image, wrist)
        emb = self.trunk.embed(obs, [self.policy.instructions[self.task]])
        return self.policy.act({OCTO_FRAME_KEY: emb[0]}, self.task, seed=seed)


def load_octo_policy(path: str | Path) -> TaskConditionedPolicy:
    """Load a checkpoint written by ``policy.save`` of an :func:`octo_policy` (restores the no-clip setting)."""
    from amf_ros.policies.agent import TaskConditionedPolicy

    return _unclipped(TaskConditionedPolicy.load(path, task_encoder=NoTaskEncoder()))
