"""TaskConditionedPolicy <-> (tensors, meta) for checkpoints: what is stored and how it is verified on load.

Tensors: ``head.*``, ``prior.*`` (when frozen), ``trunk.*`` (state_dict incl. normalization buffers),
``alpha.logits`` (T_alpha,), ``task_embeddings`` (T, L) in ``meta["tasks"]`` order, ``action_norm.{mean,std,mask}``.
Meta: format version, PolicyConfig, head config, dims, tasks + instructions, alpha task order, encoder name.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Protocol, TypeVar

import numpy as np
import torch
from torch import nn

from amf_ros.policies.adaptive_prior import AdaptivePrior
from amf_ros.policies.checkpoint import CheckpointError, check_shapes
from amf_ros.policies.config import PolicyConfig
from amf_ros.policies.diffusion_head import DiffusionHeadConfig
from amf_ros.policies.language import TaskEncoder
from amf_ros.policies.mlp_head import MLPHeadConfig
from amf_ros.policies.normalizer import Normalizer

POLICY_KIND = "TaskConditionedPolicy/1"


class StoredPolicy(Protocol):
    """What a checkpoint stores of a policy and restores into it: :class:`amf_ros.policies.agent.TaskConditionedPolicy`
    (which calls this module from ``save``/``load``; typed here structurally, so this module need not import it)."""

    config: PolicyConfig
    state_dim: int
    action_dim: int
    task_dim: int
    head: nn.Module
    prior: nn.Module | None
    trunk: nn.Module
    head_config: DiffusionHeadConfig | MLPHeadConfig
    adaptive: AdaptivePrior
    action_normalizer: Normalizer | None
    instructions: dict[str, str]
    task_embeddings: dict[str, np.ndarray]
    _fit_calls: int

    @property
    def tasks(self) -> list[str]:
        """Known task keys, in order."""
        ...

    def freeze_prior(self) -> None:
        """Keep a frozen copy of the current head as the prior."""
        ...


P = TypeVar("P", bound=StoredPolicy)


class _StoredEncoder:
    """Stands in for the task encoder of a loaded policy until a new instruction needs the real one."""

    def __init__(self, name: str, dim: int, fallback: Any) -> None:
        self.name, self.dim, self._fallback = name, dim, fallback
        self._real: TaskEncoder | None = None

    def encode(self, texts: Any) -> np.ndarray:
        if self._real is None:
            self._real = self._fallback()
        return self._real.encode(texts)


def policy_state(policy: StoredPolicy) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """All tensors and the JSON meta of ``policy``."""
    if policy.action_normalizer is None:
        raise ValueError("cannot save an untrained policy (no action statistics): call fit() first")
    tensors: dict[str, Any] = {f"head.{k}": v for k, v in policy.head.state_dict().items()}
    if policy.prior is not None:
        tensors.update({f"prior.{k}": v for k, v in policy.prior.state_dict().items()})
    tensors.update({f"trunk.{k}": v for k, v in policy.trunk.state_dict().items()})
    tensors["alpha.logits"] = policy.adaptive.logits.detach()
    tasks = policy.tasks
    tensors["task_embeddings"] = torch.from_numpy(np.stack([policy.task_embeddings[t] for t in tasks]))
    for k, v in policy.action_normalizer.state().items():
        tensors[f"action_norm.{k}"] = torch.from_numpy(np.asarray(v))
    head_cfg = dataclasses.asdict(policy.head_config)
    if "hidden_dims" in head_cfg:
        head_cfg["hidden_dims"] = list(head_cfg["hidden_dims"])
    meta = {
        "kind": POLICY_KIND,
        "config": policy.config.to_dict(),
        "head_type": type(policy.head_config).__name__,
        "head_config": head_cfg,
        "state_dim": policy.state_dim,
        "action_dim": policy.action_dim,
        "task_dim": policy.task_dim,
        "task_encoder": policy.config.task_encoder,
        "tasks": tasks,
        "instructions": [policy.instructions[t] for t in tasks],
        "alpha_tasks": list(policy.adaptive.tasks),
        "has_prior": policy.prior is not None,
        "fit_calls": policy._fit_calls,
    }
    return tensors, meta


def policy_from_state(cls: type[P], tensors: dict[str, torch.Tensor], meta: dict[str, Any],
                      expected: PolicyConfig | None, task_encoder: TaskEncoder | None, where: str) -> P:
    """Rebuild a policy from :func:`policy_state` output, verifying shapes and (optionally) the config."""
    if meta.get("kind") != POLICY_KIND:
        raise CheckpointError(f"{where}: not a TaskConditionedPolicy checkpoint (kind {meta.get('kind')!r})")
    config = PolicyConfig.from_dict(meta["config"])
    if expected is not None and expected.to_dict() != config.to_dict():
        diff = {k: (v, config.to_dict()[k]) for k, v in expected.to_dict().items() if config.to_dict()[k] != v}
        raise CheckpointError(f"{where}: config mismatch, {{field: (expected, stored)}} = {diff}")
    head_cls = {"DiffusionHeadConfig": DiffusionHeadConfig, "MLPHeadConfig": MLPHeadConfig}[meta["head_type"]]
    head_cfg = head_cls(**meta["head_config"])
    task_dim = int(meta["task_dim"])
    encoder = task_encoder
    if encoder is None:
        from amf_ros.policies.language import make_task_encoder

        encoder = _StoredEncoder(meta["task_encoder"], task_dim,
                                 lambda: make_task_encoder(config.task_encoder, config.task_embedding_dim))
    emb = tensors["task_embeddings"].numpy()
    if emb.shape != (len(meta["tasks"]), task_dim):
        raise CheckpointError(f"{where}: task_embeddings has shape {emb.shape}, expected "
                              f"({len(meta['tasks'])}, {task_dim})")
    # Build with no tasks, then install the stored embeddings (no encoder call needed).
    # num_threads=0 while building: loading must not override the thread count the loading process chose.
    policy = cls(dataclasses.replace(config, num_threads=0), action_dim=int(meta["action_dim"]),
                 state_dim=int(meta["state_dim"]), tasks={}, task_encoder=encoder, head_config=head_cfg)
    policy.config = config
    if policy.task_dim != task_dim:
        raise CheckpointError(f"{where}: task encoder width {policy.task_dim} != stored {task_dim}")
    for t, ins, v in zip(meta["tasks"], meta["instructions"], emb, strict=True):
        policy.task_embeddings[t] = np.array(v, dtype=np.float32)
        policy.instructions[t] = ins

    def part(prefix: str) -> dict[str, torch.Tensor]:
        return {k[len(prefix):]: v for k, v in tensors.items() if k.startswith(prefix)}

    check_shapes(part("head."), policy.head.state_dict(), f"{where} (head)")
    policy.head.load_state_dict(part("head."))
    if meta["has_prior"]:
        policy.freeze_prior()
        check_shapes(part("prior."), policy.prior.state_dict(), f"{where} (prior)")
        policy.prior.load_state_dict(part("prior."))
    check_shapes(part("trunk."), policy.trunk.state_dict(), f"{where} (trunk)")
    policy.trunk.load_state_dict(part("trunk."))
    policy.trunk.eval()
    policy.adaptive.add_tasks(meta["alpha_tasks"])
    logits = tensors["alpha.logits"]
    if tuple(logits.shape) != (len(meta["alpha_tasks"]),):
        raise CheckpointError(f"{where}: alpha.logits has shape {tuple(logits.shape)}, expected "
                              f"({len(meta['alpha_tasks'])},)")
    with torch.no_grad():
        policy.adaptive.logits.copy_(logits)
    policy.action_normalizer = Normalizer.from_state({k: tensors[f"action_norm.{k}"].numpy()
                                                      for k in ("mean", "std", "mask")})
    if policy.action_normalizer.dim != policy.action_dim:
        raise CheckpointError(f"{where}: action statistics have width {policy.action_normalizer.dim}, "
                              f"expected {policy.action_dim}")
    policy._fit_calls = int(meta.get("fit_calls", 0))
    return policy
