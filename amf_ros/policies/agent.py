"""TaskConditionedPolicy: trunk + head + frozen prior + alpha + normalizers + task encoder, behind one class.

What the Metaworld benchmark, ``amf pretrain`` and the ROS policy_server/task_selector use. Life cycle:
    policy = TaskConditionedPolicy(PolicyConfig(), state_dim=39, action_dim=4, tasks={"reach": "reach the goal"})
    policy.fit(pretrain_transitions, steps=3000)         # fits normalizers on first use
    policy.freeze_prior()                                # frozen copy of the pre-trained head (adaptive prior)
    policy.fit(demos, steps=500); policy.fit_alpha(demos)   # one round of Algorithm 1
    chunk = policy.act({"state": s}, "reach")            # (H, A) un-normalized, mixed with the prior
    phi = policy.embed(transitions)                      # (N, P) loss-gradient embeddings for the criterion
    policy.save("ckpt/"); TaskConditionedPolicy.load("ckpt/")
``transitions``: dict of numpy arrays, ``state`` (N, S) or ``image`` (N, h, w, 3) uint8, ``task`` (N,) keys,
``action`` (N, A), ``episode_index`` (N,), ``step`` (N,); chunks never cross an episode boundary.
"""

from __future__ import annotations

import copy
import dataclasses
import logging
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np
import torch
from torch import nn

from amf_ros.policies.adaptive_prior import AdaptivePrior, fit_alpha
from amf_ros.policies.base import FitResult, StepCallback, Transitions
from amf_ros.policies.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from amf_ros.policies.chunking import action_chunks
from amf_ros.policies.config import PolicyConfig
from amf_ros.policies.diffusion_head import DiffusionActionHead, DiffusionHeadConfig
from amf_ros.policies.embeddings import EmbeddingConfig, compute_embeddings
from amf_ros.policies.finetune import train_head
from amf_ros.policies.language import TaskEncoder, make_task_encoder
from amf_ros.policies.mlp_head import GaussianMLPHead, MLPHeadConfig
from amf_ros.policies.normalizer import Normalizer
from amf_ros.policies.trunks import FrameCache, StateTrunk, make_trunk
from amf_ros.threads import limit_threads

log = logging.getLogger(__name__)


class TaskConditionedPolicy:
    """A policy pi(a_chunk | frame, task) with an optional adaptive prior (see module docstring).

    Args:
        config: architecture and training settings.
        action_dim: A. state_dim: S (state trunk only).
        tasks: {task key: instruction}; more can be added later with :meth:`set_tasks`.
        task_encoder: override the encoder named by ``config.task_encoder`` (e.g. a shared MiniLMEncoder).
        head_config: explicit head config (e.g. ``DiffusionHeadConfig.octo_small()`` sizes); its embedding_dim,
            action_horizon and action_dim are overwritten to fit this policy.
    """

    def __init__(self, config: PolicyConfig, *, action_dim: int, tasks: Mapping[str, str], state_dim: int = 0,
                 task_encoder: TaskEncoder | None = None,
                 head_config: DiffusionHeadConfig | MLPHeadConfig | None = None) -> None:
        if action_dim < 1:
            raise ValueError(f"action_dim must be >= 1, got {action_dim=}")
        if config.trunk == "state" and state_dim < 1:
            raise ValueError(f"a state trunk needs state_dim >= 1, got {state_dim=}")
        self.config = config
        self.state_dim, self.action_dim = state_dim, action_dim
        self._encoder = task_encoder
        self.task_dim = task_encoder.dim if task_encoder is not None else (
            384 if config.task_encoder == "minilm" else config.task_embedding_dim)
        limit_threads(config.num_threads)  # 0 = torch's default
        with torch.random.fork_rng(devices=[]):  # seeded initialisation without touching the global RNG
            torch.manual_seed(config.seed)
            self.trunk = make_trunk(config.trunk, state_dim, config.image_feature_dim, config.state_differences)
            self.head_config = self._head_config(head_config)
            self.head: nn.Module = self._make_head(self.head_config)
        self.prior: nn.Module | None = None
        self.instructions: dict[str, str] = {}
        self.task_embeddings: dict[str, np.ndarray] = {}
        self.adaptive = AdaptivePrior([], config.alpha_init)
        self.action_normalizer: Normalizer | None = None
        self.cache = FrameCache(self.trunk)
        self._fit_calls = 0
        self._act_gen = torch.Generator().manual_seed(config.seed + 17)
        self.set_tasks(tasks)

    # ------------------------------------------------------------------ construction helpers
    @property
    def embedding_dim(self) -> int:
        """E = frame features + task embedding width."""
        return int(self.trunk.feature_dim) + self.task_dim

    def _head_config(self, given: DiffusionHeadConfig | MLPHeadConfig | None) -> Any:
        c = self.config
        common = dict(embedding_dim=self.embedding_dim, action_horizon=c.action_horizon, action_dim=self.action_dim)
        if c.head == "diffusion":
            if given is not None and not isinstance(given, DiffusionHeadConfig):
                raise ValueError(f"head='diffusion' needs a DiffusionHeadConfig, got {type(given).__name__}")
            base = given or DiffusionHeadConfig(hidden_dim=c.diffusion_hidden_dim, num_blocks=c.diffusion_num_blocks,
                                                time_dim=c.diffusion_time_dim, diffusion_steps=c.diffusion_steps,
                                                dropout_rate=c.dropout_rate)
        else:
            if given is not None and not isinstance(given, MLPHeadConfig):
                raise ValueError(f"head='mlp' needs an MLPHeadConfig, got {type(given).__name__}")
            base = given or MLPHeadConfig(hidden_dims=c.mlp_hidden_dims, sigma=c.mlp_sigma,
                                          dropout_rate=c.dropout_rate)
        return dataclasses.replace(base, **common)

    @staticmethod
    def _make_head(cfg: DiffusionHeadConfig | MLPHeadConfig) -> nn.Module:
        return DiffusionActionHead(cfg) if isinstance(cfg, DiffusionHeadConfig) else GaussianMLPHead(cfg)

    @property
    def encoder(self) -> TaskEncoder:
        """The task encoder (loaded lazily: a loaded checkpoint needs it only for new instructions)."""
        if self._encoder is None:
            self._encoder = make_task_encoder(self.config.task_encoder, self.config.task_embedding_dim)
        return self._encoder

    def set_tasks(self, tasks: Mapping[str, str]) -> None:
        """Add or update {task key: instruction}; instructions are encoded once each."""
        changed = [k for k, v in tasks.items() if self.instructions.get(k) != v or k not in self.task_embeddings]
        if changed:
            vecs = self.encoder.encode([tasks[k] for k in changed])
            if vecs.shape[1] != self.task_dim:
                raise ValueError(f"task encoder gives width {vecs.shape[1]}, the policy was built for {self.task_dim}")
            for k, v in zip(changed, vecs, strict=True):
                self.task_embeddings[k] = np.asarray(v, dtype=np.float32)
                self.instructions[k] = str(tasks[k])
        self.adaptive.add_tasks(list(tasks))

    @property
    def tasks(self) -> list[str]:
        """Known task keys."""
        return list(self.instructions)

    @property
    def alphas(self) -> dict[str, float]:
        """{task: alpha(c)} of the adaptive prior."""
        return self.adaptive.alphas()

    @property
    def action_horizon(self) -> int:
        """H, the length of the action chunks the head predicts."""
        return int(self.config.action_horizon)

    @property
    def uses_prior(self) -> bool:
        """True when actions are mixed with the frozen prior."""
        return self.prior is not None and self.config.use_prior

    # ------------------------------------------------------------------ data plumbing
    def _task_rows(self, tasks: Sequence[str]) -> torch.Tensor:
        unknown = sorted({str(t) for t in tasks if str(t) not in self.task_embeddings})
        if unknown:
            raise ValueError(f"unknown task(s) {unknown}; known: {self.tasks} (add them with set_tasks)")
        return torch.from_numpy(np.stack([self.task_embeddings[str(t)] for t in tasks]))

    def _frames(self, transitions: Transitions) -> dict[str, np.ndarray]:
        key = self.trunk.frame_key
        if key not in transitions:
            raise ValueError(f"transitions need {key!r} for a {self.config.trunk} trunk, "
                             f"got keys {sorted(transitions)}")
        return {key: np.asarray(transitions[key])}

    def _embeddings(self, transitions: Transitions, cached: bool = True) -> torch.Tensor:
        """(N, E) trunk embeddings: cached frame features + task embedding."""
        frames = self._frames(transitions)
        if cached:
            feats = self.cache.features(frames)
        else:
            with torch.no_grad():
                feats = self.trunk.encode_frames(frames)
        return torch.cat([feats, self._task_rows(list(transitions["task"]))], dim=1)

    def head_inputs(self, transitions: Transitions) -> torch.Tensor:
        """(N, E) what the action head sees for each row: frame features (cached) + the embedding of its ``task``.

        Needs only the frame key (``state`` or ``image``) and ``task``; used by the peer acquisition rules
        (policies/peer_scores.py, core/acquisition.py) to evaluate heads and to embed states.
        """
        return self._embeddings(transitions)

    def fit_normalizers(self, transitions: Transitions) -> None:
        """Fit action (and state) statistics; done automatically by the first :meth:`fit`."""
        self.action_normalizer = Normalizer.fit(np.asarray(transitions["action"], dtype=np.float32))
        if isinstance(self.trunk, StateTrunk):
            self.trunk.set_normalizer(Normalizer.fit(self.trunk.raw_features(transitions["state"]).numpy()))
            self.cache.clear()

    def _chunks(self, transitions: Transitions) -> tuple[torch.Tensor, torch.Tensor]:
        """(N, H, A) normalized chunks and (N, H, A) bool mask."""
        if self.action_normalizer is None:
            raise ValueError("the policy has no action statistics yet: call fit() (or fit_normalizers()) first")
        for key in ("action", "episode_index", "step"):
            if key not in transitions:
                raise ValueError(f"transitions need {key!r}, got keys {sorted(transitions)}")
        act = self.action_normalizer.normalize(transitions["action"])
        chunks, mask = action_chunks(act, transitions["episode_index"], transitions["step"],
                                     self.config.action_horizon)
        return torch.from_numpy(chunks), torch.from_numpy(mask)

    # ------------------------------------------------------------------ training
    def fit(self, transitions: Transitions, steps: int, *, batch_size: int | None = None, lr: float | None = None,
            seed: int | None = None, progress: bool = False, callback: StepCallback | None = None,
            train_trunk: bool = False, cached: bool = True, row_weights: np.ndarray | None = None,
            lr_schedule: str | None = None, ema_decay: float | None = None) -> FitResult:
        """Train the head (and, with ``train_trunk``, the image trunk) for ``steps`` AdamW steps.

        ``lr_schedule``, ``ema_decay``: this call's (None = the config's; pre-training passes its own).

        ``row_weights``: (N,) minibatch sampling weight of each transition (e.g. replayed pre-training rows at a fixed
        share); None = uniform.

        ``cached=False`` runs the frozen trunk on every minibatch instead of using the per-frame cache (same result,
        slower: the reference side of ``amf bench perf-finetune``).
        """
        for key in ("action", "episode_index", "step", "task"):
            if key not in transitions:
                raise ValueError(f"transitions need {key!r}, got keys {sorted(transitions)}")
        self._frames(transitions)
        if self.action_normalizer is None:
            self.fit_normalizers(transitions)
        chunks, mask = self._chunks(transitions)
        cfg = self.config.train_config(batch_size=batch_size, lr=lr, lr_schedule=lr_schedule, ema_decay=ema_decay,
                                       seed=seed if seed is not None else self.config.seed + self._fit_calls)
        self._fit_calls += 1
        tasks = self._task_rows(list(transitions["task"]))
        frames = self._frames(transitions)
        extra: list[nn.Parameter] = []
        if train_trunk and not isinstance(self.trunk, StateTrunk):
            extra = list(self.trunk.parameters())
            self.trunk.train()

            def batch_embeddings(idx: np.ndarray) -> torch.Tensor:
                feats = self.trunk.encode_frames({k: v[idx] for k, v in frames.items()})
                return torch.cat([feats, tasks[idx]], dim=1)
        elif cached:
            table = torch.cat([self.cache.features(frames), tasks], dim=1)

            def batch_embeddings(idx: np.ndarray) -> torch.Tensor:
                return table[idx]
        else:
            def batch_embeddings(idx: np.ndarray) -> torch.Tensor:
                with torch.no_grad():
                    feats = self.trunk.encode_frames({k: v[idx] for k, v in frames.items()})
                return torch.cat([feats, tasks[idx]], dim=1)
        result = train_head(self.head, batch_embeddings, chunks, mask, steps, cfg, extra_params=extra,
                            progress=progress, callback=callback, row_weights=row_weights)
        if extra:
            self.trunk.eval()
            self.cache.clear()
        return result

    def freeze_prior(self) -> None:
        """Keep a frozen copy of the current head as the prior (call once, after pre-training)."""
        self.prior = copy.deepcopy(self.head).eval()
        for p in self.prior.parameters():
            p.requires_grad_(False)

    @torch.no_grad()
    def _sample_heads(self, emb: torch.Tensor, seed: int | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        g1 = self._act_gen if seed is None else torch.Generator().manual_seed(seed)
        self.head.eval()
        a_ft = self.head.sample(emb, generator=g1)
        a_p = None
        if self.uses_prior:
            g2 = self._act_gen if seed is None else torch.Generator().manual_seed(seed + 1)
            a_p = self.prior.sample(emb, generator=g2)
        return a_ft, a_p

    def fit_alpha(self, transitions: Transitions, steps: int | None = None, seed: int | None = None
                  ) -> dict[str, float]:
        """Train alpha(c) of the tasks in ``transitions`` on the BC loss of the mixed action (+ beta * mean alpha)."""
        if self.prior is None:
            raise ValueError("fit_alpha needs a prior: call freeze_prior() after pre-training")
        acfg = self.config.alpha_config(steps=steps)
        seed = self.config.seed if seed is None else seed
        n = len(transitions["task"])
        rows = np.arange(n)
        if n > acfg.max_frames:
            rows = np.sort(np.random.default_rng(seed).choice(n, acfg.max_frames, replace=False))
        chunks, mask = self._chunks(transitions)
        sub = {k: np.asarray(v)[rows] for k, v in transitions.items()}
        emb = self._embeddings(sub)
        a_ft = self.head.eval().sample(emb, generator=torch.Generator().manual_seed(seed))
        a_p = self.prior.sample(emb, generator=torch.Generator().manual_seed(seed + 1))
        fit_alpha(self.adaptive, a_ft, a_p, chunks[rows], mask[rows], [str(t) for t in sub["task"]], acfg)
        return self.alphas

    # ------------------------------------------------------------------ inference
    def act(self, obs: Mapping[str, np.ndarray], task: str, seed: int | None = None) -> np.ndarray:
        """(H, A) un-normalized action chunk for one frame (``{"state": (S,)}`` or ``{"image": (h, w, 3)}``)."""
        key = self.trunk.frame_key
        if key not in obs:
            raise ValueError(f"obs needs {key!r} for a {self.config.trunk} trunk, got keys {sorted(obs)}")
        return self.act_batch({key: np.asarray(obs[key])[None]}, [task], seed=seed)[0]

    def act_batch(self, obs: Mapping[str, np.ndarray], tasks: Sequence[str], seed: int | None = None) -> np.ndarray:
        """(B, H, A) un-normalized chunks for B frames and their tasks (mixed with the prior when enabled)."""
        if self.action_normalizer is None:
            raise ValueError("the policy is untrained (no action statistics): call fit() first")
        tasks = [str(t) for t in tasks]
        emb = self._embeddings({**self._frames(obs), "task": np.asarray(tasks)}, cached=False)
        a_ft, a_p = self._sample_heads(emb, seed)
        a = a_ft if a_p is None else self.adaptive.mix(a_ft, a_p, self.adaptive.index(tasks)).detach()
        return self.action_normalizer.unnormalize(a.numpy())

    @torch.no_grad()
    def loss(self, transitions: Transitions) -> float:
        """Mean loss of the (fine-tuned) head on ``transitions`` at fixed draws (deterministic)."""
        chunks, mask = self._chunks(transitions)
        emb = self._embeddings(transitions)
        self.head.eval()
        draws = self.head.draw(max(1, self.config.embedding_draws), 1, torch.Generator().manual_seed(self.config.seed))
        return float(self.head.per_sample_loss(emb, chunks, mask, draws).mean())

    def embed(self, transitions: Transitions, config: EmbeddingConfig | None = None, **overrides: Any) -> np.ndarray:
        """(N, P) embeddings for the AMF criterion (default: loss gradients w.r.t. the head's last layer).

        Rows without a recorded action (no ``action`` key) or ``label="sample"`` use an action sampled from the
        (mixed) policy at a fixed seed as the label.
        """
        cfg = config or self.config.embedding_config(**overrides)
        emb = self._embeddings(transitions)
        if cfg.label == "sample" or "action" not in transitions:
            a_ft, a_p = self._sample_heads(emb, cfg.seed)
            tasks = [str(t) for t in transitions["task"]]
            actions = a_ft if a_p is None else self.adaptive.mix(a_ft, a_p, self.adaptive.index(tasks)).detach()
            mask = None
        else:
            actions, mask = self._chunks(transitions)
        out = compute_embeddings(self.head, emb, actions, mask, dataclasses.replace(cfg, label="demo"))
        return out.numpy().astype(np.float32, copy=False)

    def log_prob(self, transitions: Transitions) -> np.ndarray:
        """(N,) log-likelihood of the recorded chunks (Gaussian MLP head only).

        Diffusion heads are treated as deterministic by the importance weights (w = 1 or 0, App. M.3.3).
        """
        if not isinstance(self.head, GaussianMLPHead):
            raise ValueError("log_prob needs head='mlp'; diffusion policies use deterministic weights (w = 1 or 0)")
        chunks, mask = self._chunks(transitions)
        with torch.no_grad():
            return self.head.log_prob(self._embeddings(transitions), chunks, mask).numpy()

    # ------------------------------------------------------------------ checkpoints
    def save(self, path: str | Path) -> Path:
        """Write the whole policy to directory ``path`` atomically (safetensors + meta.json)."""
        from amf_ros.policies.serialization import policy_state

        tensors, meta = policy_state(self)
        return save_checkpoint(path, tensors, meta)

    @classmethod
    def load(cls, path: str | Path, *, expected_config: PolicyConfig | None = None,
             task_encoder: TaskEncoder | None = None) -> "TaskConditionedPolicy":
        """Read and verify a checkpoint; ``expected_config`` (if given) must equal the stored config."""
        from amf_ros.policies.serialization import policy_from_state

        tensors, meta = load_checkpoint(path)
        try:
            return policy_from_state(cls, tensors, meta, expected_config, task_encoder, where=str(path))
        except CheckpointError:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{path}: checkpoint does not describe a TaskConditionedPolicy ({exc})") from exc


__all__ = ["TaskConditionedPolicy", "PolicyConfig"]
