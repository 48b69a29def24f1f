"""Adaptive prior (paper Sec. 4.2, App. I): per-task alpha(c) = sigmoid(logit_c) mixing fine-tuned and prior actions.

    a = alpha(c) * a_finetuned + (1 - alpha(c)) * a_prior            (normalized action space)
    L = 1/N sum_i sum_t || m_it * (a_it - a_mixed_it) ||_2  +  beta * 1/N sum_i alpha(c_i)

a_finetuned and a_prior are actions sampled from the two heads at the dataset's frames (fixed, no gradient), so
only the logits train: Adam, lr 1.0, beta 0.01 by default (App. M.3.5). The penalty keeps alpha near 0 unless the
fine-tuned head is clearly better on a task's data, which is what protects pre-trained skills from forgetting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch
from torch import nn

from amf_ros.policies.fine_tuning import FINE_TUNE


@dataclass
class AlphaConfig:
    """Training of the mixing weights."""

    lr: float = 1.0
    """Adam learning rate on the logits (paper: 1.0)."""
    beta: float = 0.01
    """Conservative penalty on mean alpha (paper: 0.01; Kitchen 0.001)."""
    steps: int = FINE_TUNE.alpha_steps
    """Adam steps per :meth:`TaskConditionedPolicy.fit_alpha` call (full batch; cheap, samples are fixed)."""
    init_alpha: float = 0.05
    """alpha of a task before any fitting (near 0 = start from the prior)."""
    max_frames: int = 2048
    """Frames (subsampled with a fixed seed) at which both heads are sampled for one fit."""

    def __post_init__(self) -> None:
        if self.lr <= 0 or self.beta < 0 or self.steps < 0 or self.max_frames < 1:
            raise ValueError(f"invalid AlphaConfig: {self.lr=} {self.beta=} {self.steps=} {self.max_frames=}")
        if not 0.0 < self.init_alpha < 1.0:
            raise ValueError(f"init_alpha must be in (0, 1), got {self.init_alpha=}")


class AdaptivePrior(nn.Module):
    """One learnable logit per task key; ``mix`` blends action chunks with alpha of each row's task."""

    def __init__(self, tasks: Sequence[str], init_alpha: float = 0.05) -> None:
        super().__init__()
        self.tasks = list(tasks)
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"duplicate task keys in {self.tasks}")
        self.init_logit = math.log(init_alpha / (1 - init_alpha))
        self.logits = nn.Parameter(torch.full((len(self.tasks),), self.init_logit))

    def add_tasks(self, tasks: Sequence[str]) -> None:
        """Append unseen task keys (their alpha starts at ``init_alpha``)."""
        new = [t for t in tasks if t not in self.tasks]
        if new:
            self.tasks += new
            extra = torch.full((len(new),), self.init_logit)
            self.logits = nn.Parameter(torch.cat([self.logits.detach(), extra]))

    def index(self, tasks: Sequence[str]) -> torch.Tensor:
        """(N,) int64 indices of task keys; unknown keys raise ValueError."""
        lookup = {t: i for i, t in enumerate(self.tasks)}
        unknown = sorted({t for t in tasks if t not in lookup})
        if unknown:
            raise ValueError(f"unknown task(s) {unknown}; known: {self.tasks}")
        return torch.as_tensor([lookup[t] for t in tasks], dtype=torch.long)

    def alpha(self, idx: torch.Tensor | None = None) -> torch.Tensor:
        """(N,) alpha of task indices ``idx`` (None = all tasks, in ``self.tasks`` order)."""
        a = torch.sigmoid(self.logits)
        return a if idx is None else a[idx]

    def alphas(self) -> dict[str, float]:
        """{task: alpha} for reporting and plotting (paper Fig. 11)."""
        return {t: float(a) for t, a in zip(self.tasks, self.alpha().detach(), strict=True)}

    def mix(self, a_finetuned: torch.Tensor, a_prior: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """(N, H, A) alpha * a_finetuned + (1 - alpha) * a_prior, alpha per row from task indices (N,)."""
        if a_finetuned.shape != a_prior.shape or a_finetuned.shape[0] != idx.shape[0]:
            raise ValueError(f"shape mismatch: {tuple(a_finetuned.shape)=} {tuple(a_prior.shape)=} "
                             f"{tuple(idx.shape)=}")
        a = self.alpha(idx).reshape(-1, *([1] * (a_finetuned.ndim - 1)))
        return a * a_finetuned + (1 - a) * a_prior


def alpha_loss(prior: AdaptivePrior, a_finetuned: torch.Tensor, a_prior: torch.Tensor, target: torch.Tensor,
               mask: torch.Tensor | None, idx: torch.Tensor, beta: float) -> torch.Tensor:
    """BC loss of the mixed chunk (L2 norm over action dims, summed over chunk steps, mean over rows) + penalty."""
    mixed = prior.mix(a_finetuned, a_prior, idx)
    err = target - mixed
    if mask is not None:
        err = err * mask.to(err.dtype)
    bc = torch.sqrt(err.square().sum(-1) + 1e-12).sum(-1).mean()
    return bc + beta * prior.alpha(idx).mean()


def fit_alpha(prior: AdaptivePrior, a_finetuned: torch.Tensor, a_prior: torch.Tensor, target: torch.Tensor,
              mask: torch.Tensor | None, tasks: Sequence[str], config: AlphaConfig) -> list[float]:
    """Train the logits of the tasks present in ``tasks`` (others are untouched); returns the loss curve.

    Args:
        prior: the per-task logits to train.
        a_finetuned: (N, H, A) normalized actions sampled from the fine-tuned head.
        a_prior: (N, H, A) normalized actions sampled from the prior.
        target: (N, H, A) demonstrated normalized chunks.
        mask: (N, H, A) validity of ``target`` (None = all valid).
        tasks: (N,) task keys of the rows.
        config: lr, beta and steps.
    """
    if not (a_finetuned.shape == a_prior.shape == target.shape) or target.shape[0] != len(tasks):
        raise ValueError(f"shape mismatch: {tuple(a_finetuned.shape)=} {tuple(a_prior.shape)=} "
                         f"{tuple(target.shape)=} {len(tasks)=}")
    idx = prior.index(list(tasks))
    opt = torch.optim.Adam([prior.logits], lr=config.lr)
    losses = []
    for _ in range(config.steps):
        opt.zero_grad()
        loss = alpha_loss(prior, a_finetuned.detach(), a_prior.detach(), target, mask, idx, config.beta)
        loss.backward()
        opt.step()
        losses.append(float(loss.detach()))
    return losses


def alpha_history_array(history: Sequence[dict[str, float]], tasks: Sequence[str]) -> np.ndarray:
    """(rounds, tasks) array from a list of per-round ``alphas()`` dicts (NaN where a task was unknown)."""
    return np.array([[h.get(t, np.nan) for t in tasks] for h in history], dtype=float)
