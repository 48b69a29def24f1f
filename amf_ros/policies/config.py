"""PolicyConfig: every tunable of :class:`~amf_ros.policies.agent.TaskConditionedPolicy`, flat and JSON-able.

Flat (prefixed) fields so that YAML files, ROS parameters and the checkpoint's meta.json all carry the same keys.
Defaults are sized for CPU (the Metaworld benchmark runs 40 seeds x rounds in an hour on 2 cores); Octo-sized heads
come from ``diffusion_*`` fields (hidden 256, 3 blocks) or an explicit ``DiffusionHeadConfig.octo_small()``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping

from amf_ros.policies.adaptive_prior import AlphaConfig
from amf_ros.policies.embeddings import EmbeddingConfig
from amf_ros.policies.fine_tuning import FINE_TUNE
from amf_ros.policies.finetune import TrainConfig
from amf_ros.policies.trunks import check_differences


@dataclass
class PolicyConfig:
    """Architecture, training, embedding and adaptive-prior settings of a task-conditioned policy."""

    head: str = "diffusion"
    """"diffusion" (Octo's DiffusionActionHead) or "mlp" (Gaussian, fixed sigma)."""
    trunk: str = "state"
    """"state" (normalized state vector) or "image" (small CNN on (h, w, 3) uint8 frames)."""
    task_encoder: str = "minilm"
    """"minilm" (all-MiniLM-L6-v2, 384-d, the paper's) or "hash" (random unit vectors, no model)."""
    task_embedding_dim: int = 32
    """Width of "hash" task embeddings (minilm is always 384)."""
    action_horizon: int = 4
    """H, actions per chunk (Octo: 4)."""
    image_feature_dim: int = 64
    """Output width of the image trunk."""
    state_differences: tuple[tuple[int, int, int], ...] = ()
    """State trunk only: (a, b, n) triples, each appending ``state[b:b+n] - state[a:a+n]`` to the trunk's input before
    normalisation (:class:`~amf_ros.policies.trunks.StateTrunk`); () = the state alone (checkpoints written before
    this field load with it). ``PretrainConfig.relative_features`` sets the WidowX's object - gripper and receptacle -
    object (:func:`amf_ros.training.pretrain.relative_state_differences`)."""
    diffusion_hidden_dim: int = 128
    """Residual width of the diffusion head (Octo: 256)."""
    diffusion_num_blocks: int = 2
    """Residual blocks of the diffusion head (Octo: 3)."""
    diffusion_time_dim: int = 32
    """Fourier time-feature width (Octo: 32)."""
    diffusion_steps: int = 20
    """DDPM steps (Octo: 20)."""
    dropout_rate: float = 0.0
    """Dropout inside the head (Octo 1.5: 0)."""
    mlp_hidden_dims: tuple[int, ...] = field(default_factory=lambda: (256, 256))
    """Hidden widths of the MLP head (paper: 2 x 256)."""
    mlp_sigma: float = 1.0
    """Fixed std of the MLP head's Gaussian (normalized units; App. M.3.3 uses 1.0)."""
    batch_size: int = FINE_TUNE.batch_size
    """Fine-tuning minibatch size."""
    lr: float = 3e-4
    """AdamW learning rate."""
    weight_decay: float = 0.01
    """AdamW weight decay."""
    grad_clip: float = 1.0
    """Gradient-norm clip (0 = off)."""
    lr_schedule: str = "constant"
    """Learning rate over one :meth:`fit` call: "constant" or "cosine" (decays to 0 at its last step)."""
    ema_decay: float = 0.0
    """Exponential moving average of the head's weights over one :meth:`fit` call, adopted at its end (0 = off)."""
    embedding_kind: str = "grad"
    """AMF embeddings: "grad" (loss gradient), "last_layer" or "dropout"."""
    embedding_draws: int = 4
    """Fixed (step, noise) draws per example for diffusion embeddings."""
    embedding_label: str = "demo"
    """"demo" (recorded action) or "sample" (sampled from the policy) as the loss label."""
    embedding_projection_dim: int = 0
    """Random-projection width of gradient embeddings (0 = none)."""
    use_prior: bool = True
    """Mix with the frozen prior (once :meth:`freeze_prior` was called); False = plain fine-tuning."""
    alpha_lr: float = 1.0
    """Adam lr of the alpha logits (paper: 1.0)."""
    alpha_beta: float = 0.01
    """Conservative penalty on mean alpha (paper: 0.01)."""
    alpha_steps: int = FINE_TUNE.alpha_steps
    """Adam steps per fit_alpha call."""
    alpha_init: float = 0.05
    """alpha of a task before fitting."""
    alpha_max_frames: int = 2048
    """Frames at which both heads are sampled for one fit_alpha call."""
    seed: int = 0
    """Seed of initialisation, minibatches, noise, embeddings and acting."""
    num_threads: int = 1
    """torch intra-op threads, set PROCESS-WIDE when a policy is built (not when loaded; 0 = leave as is). Small heads
    run fastest on 1 thread; on a loaded machine torch's spinning thread pool made them ~10x slower."""

    def __post_init__(self) -> None:
        self.mlp_hidden_dims = tuple(int(h) for h in self.mlp_hidden_dims)
        self.state_differences = tuple(check_differences(self.state_differences))
        if self.state_differences and self.trunk != "state":
            raise ValueError(f"state_differences need the state trunk, got {self.trunk=}")
        if self.head not in ("diffusion", "mlp"):
            raise ValueError(f"head must be 'diffusion' or 'mlp', got {self.head=}")
        if self.trunk not in ("state", "image"):
            raise ValueError(f"trunk must be 'state' or 'image', got {self.trunk=}")
        if self.task_encoder not in ("minilm", "hash"):
            raise ValueError(f"task_encoder must be 'minilm' or 'hash', got {self.task_encoder=}")
        if self.num_threads < 0:
            raise ValueError(f"num_threads must be >= 0, got {self.num_threads=}")
        if self.action_horizon < 1:
            raise ValueError(f"action_horizon must be >= 1, got {self.action_horizon=}")
        # build the sub-configs once so that their validation runs now
        self.train_config(), self.embedding_config(), self.alpha_config()

    def train_config(self, **overrides: Any) -> TrainConfig:
        """The fine-tuning optimiser settings (``overrides`` with None values are ignored)."""
        base = TrainConfig(batch_size=self.batch_size, lr=self.lr, weight_decay=self.weight_decay,
                           grad_clip=self.grad_clip, seed=self.seed, lr_schedule=self.lr_schedule,
                           ema_decay=self.ema_decay)
        return dataclasses.replace(base, **{k: v for k, v in overrides.items() if v is not None})

    def embedding_config(self, **overrides: Any) -> EmbeddingConfig:
        """The AMF embedding settings."""
        base = EmbeddingConfig(kind=self.embedding_kind, draws=self.embedding_draws, label=self.embedding_label,
                               projection_dim=self.embedding_projection_dim, seed=self.seed)
        return dataclasses.replace(base, **{k: v for k, v in overrides.items() if v is not None})

    def alpha_config(self, **overrides: Any) -> AlphaConfig:
        """The adaptive-prior settings."""
        base = AlphaConfig(lr=self.alpha_lr, beta=self.alpha_beta, steps=self.alpha_steps,
                           init_alpha=self.alpha_init, max_frames=self.alpha_max_frames)
        return dataclasses.replace(base, **{k: v for k, v in overrides.items() if v is not None})

    def to_dict(self) -> dict[str, Any]:
        """JSON-able dict (tuples become lists)."""
        d = dataclasses.asdict(self)
        d["mlp_hidden_dims"] = list(self.mlp_hidden_dims)
        d["state_differences"] = [list(t) for t in self.state_differences]
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "PolicyConfig":
        """Inverse of :meth:`to_dict`; unknown keys raise ValueError naming them."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(d) - known)
        if unknown:
            raise ValueError(f"unknown PolicyConfig keys {unknown}; known: {sorted(known)}")
        return cls(**dict(d))
