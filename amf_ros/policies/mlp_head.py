"""Gaussian MLP action head with a fixed standard deviation (the paper's MLP policy, App. M.3.2).

pi(a | e) = N(mu(e), sigma^2 I) over the flat chunk (H * A). mu is an MLP (2 x 256 units, LayerNorm, ReLU by
default); sigma is fixed, so the BC loss is a scaled squared error and ``log_prob`` gives the action likelihood the
importance weights of eq. 4 need (App. M.3.3 treats deterministic outputs as Gaussian means with sigma = 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from torch import nn


@dataclass
class MLPHeadConfig:
    """Hyper-parameters of :class:`GaussianMLPHead`."""

    embedding_dim: int = 64
    """E, width of the trunk embedding."""
    action_horizon: int = 1
    """H, actions per predicted chunk."""
    action_dim: int = 7
    """A, action dimensions."""
    hidden_dims: tuple[int, ...] = field(default_factory=lambda: (256, 256))
    """Hidden layer widths (paper: 2 x 256)."""
    use_layer_norm: bool = True
    """LayerNorm after every hidden Linear (paper: yes)."""
    dropout_rate: float = 0.0
    """Dropout after every hidden activation (> 0 enables MC-dropout embeddings in train mode)."""
    sigma: float = 1.0
    """Fixed standard deviation of the Gaussian, in normalized action units."""

    def __post_init__(self) -> None:
        self.hidden_dims = tuple(int(h) for h in self.hidden_dims)
        for name in ("embedding_dim", "action_horizon", "action_dim"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"MLPHeadConfig.{name} must be >= 1, got {getattr(self, name)=}")
        if not self.hidden_dims or min(self.hidden_dims) < 1:
            raise ValueError(f"hidden_dims must be non-empty and positive, got {self.hidden_dims=}")
        if self.sigma <= 0:
            raise ValueError(f"sigma must be > 0, got {self.sigma=}")
        if not 0.0 <= self.dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must be in [0, 1), got {self.dropout_rate=}")

    @property
    def flat_action_dim(self) -> int:
        """H * A."""
        return self.action_horizon * self.action_dim


@dataclass
class GaussianDraws:
    """Fixed standard-normal draws z (K, B|1, H*A) for sampled labels a = mu + sigma z (``label="sample"``)."""

    noise: torch.Tensor


class GaussianMLPHead(nn.Module):
    """mu(e) = Linear(MLP(e)); loss = sum over action dims, mean over valid chunk steps of (mu - a)^2 / (2 sigma^2)."""

    def __init__(self, config: MLPHeadConfig) -> None:
        super().__init__()
        self.config = config
        self.action_horizon = config.action_horizon
        self.action_dim = config.action_dim
        layers: list[nn.Module] = []
        width = config.embedding_dim
        for h in config.hidden_dims:
            layers.append(nn.Linear(width, h))
            if config.use_layer_norm:
                layers.append(nn.LayerNorm(h))
            layers.append(nn.ReLU())
            if config.dropout_rate > 0:
                layers.append(nn.Dropout(config.dropout_rate))
            width = h
        self.body = nn.Sequential(*layers)
        self.out = nn.Linear(width, config.flat_action_dim)

    @property
    def last_layer(self) -> nn.Linear:
        """The Linear layer whose per-sample loss gradients are the AMF embeddings."""
        return self.out

    def features(self, emb: torch.Tensor) -> torch.Tensor:
        """(B, hidden) penultimate features."""
        if emb.shape[-1] != self.config.embedding_dim:
            raise ValueError(f"embeddings: expected shape (..., {self.config.embedding_dim}), got {tuple(emb.shape)}")
        return self.body(emb)

    def mean(self, emb: torch.Tensor) -> torch.Tensor:
        """(B, H, A) Gaussian mean."""
        return self.out(self.features(emb)).reshape(*emb.shape[:-1], self.action_horizon, self.action_dim)

    def _flat(self, actions: torch.Tensor, mask: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        if actions.shape[-2:] != (c.action_horizon, c.action_dim):
            raise ValueError(f"actions: expected shape (..., {c.action_horizon}, {c.action_dim}), "
                             f"got {tuple(actions.shape)}")
        flat = actions.reshape(*actions.shape[:-2], c.flat_action_dim)
        if mask is None:
            return flat, torch.ones_like(flat)
        if mask.shape != actions.shape:
            raise ValueError(f"mask: expected shape {tuple(actions.shape)}, got {tuple(mask.shape)}")
        return flat, mask.reshape(flat.shape).to(flat.dtype)

    def _scale(self, m: torch.Tensor) -> torch.Tensor:
        # sum over action dims, mean over valid entries / A: A / (2 sigma^2 * sum(m))
        return self.config.action_dim / (2 * self.config.sigma ** 2 * torch.clamp(m.sum(-1), min=1e-5))

    def per_sample_loss(self, emb: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None,
                        draws: GaussianDraws | None = None, generator: torch.Generator | None = None
                        ) -> torch.Tensor:
        """(B,) scaled squared error (the Gaussian NLL up to a constant); ``draws`` is unused (deterministic)."""
        flat, m = self._flat(actions, mask)
        mu = self.out(self.features(emb))
        return ((mu - flat).square() * m).sum(-1) * self._scale(m)

    def loss(self, emb: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None,
             draws: GaussianDraws | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        """Scalar mean of :meth:`per_sample_loss`."""
        return self.per_sample_loss(emb, actions, mask).mean()

    def log_prob(self, emb: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """(B,) log N(a; mu, sigma^2 I) over the valid entries of each chunk."""
        flat, m = self._flat(actions, mask)
        mu = self.out(self.features(emb))
        s2 = self.config.sigma ** 2
        return -0.5 * (((mu - flat).square() / s2 + math.log(2 * math.pi * s2)) * m).sum(-1)

    def draw(self, k: int, batch: int = 1, generator: torch.Generator | None = None) -> GaussianDraws:
        """K fixed standard-normal draws (K, batch, H*A) for sampled labels."""
        return GaussianDraws(torch.randn(k, batch, self.config.flat_action_dim, generator=generator))

    def last_layer_terms(self, emb: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None,
                         draws: GaussianDraws | None) -> tuple[torch.Tensor, torch.Tensor]:
        """Closed-form pieces of the per-sample last-layer gradient: h (1, B, hidden), g (1, B, H*A)."""
        flat, m = self._flat(actions, mask)
        h = self.features(emb)
        g = 2 * (self.out(h) - flat) * m * self._scale(m)[:, None]
        return h.unsqueeze(0), g.unsqueeze(0)

    @torch.no_grad()
    def sample(self, emb: torch.Tensor, generator: torch.Generator | None = None, *, noise_scale: float = 0.0
               ) -> torch.Tensor:
        """(B, H, A): the mean (``noise_scale`` 0, what the robot runs) or mu + noise_scale * sigma * z."""
        mu = self.mean(emb)
        if noise_scale:
            mu = mu + noise_scale * self.config.sigma * torch.randn(mu.shape, generator=generator)
        return mu

