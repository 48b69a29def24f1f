"""One training loop for every head (Algorithm 1's "update pi"): AdamW, grad clipping, loss curve, seeded.

The loop is fed by a ``batch_embeddings(idx) -> (B, E)`` callable, so the same code trains on cached trunk
embeddings (fine-tuning: a table lookup) or runs a trunk every step (joint pre-training, and the reference side of
``amf bench perf-finetune``). Determinism: minibatch indices come from a numpy Generator and diffusion noise from a
torch Generator, both seeded; dropout (if any) runs under a forked, seeded global torch RNG.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable, Iterable

import numpy as np
import torch
from torch import nn

from amf_ros.policies.base import FitResult, StepCallback
from amf_ros.policies.fine_tuning import FINE_TUNE, LR_SCHEDULES


@dataclass
class TrainConfig:
    """Optimiser settings of one fine-tuning call."""

    batch_size: int = FINE_TUNE.batch_size
    """Minibatch size (paper: 256)."""
    lr: float = 3e-4
    """AdamW learning rate (paper pre-training: 1e-4; Octo fine-tuning peak: 3e-4)."""
    weight_decay: float = 0.01
    """AdamW weight decay (Octo: 0.01)."""
    grad_clip: float = 1.0
    """Global gradient-norm clip (Octo: 1.0; 0 = off)."""
    seed: int = 0
    """Seed of minibatch sampling and diffusion noise."""
    lr_schedule: str = "constant"
    """"constant", or "cosine": lr * (1 + cos(pi * step / steps)) / 2 over the call's steps (Octo, diffusion_policy
    and LeRobot decay their learning rate; a constant one leaves the last iterate as noisy as the first epochs')."""
    ema_decay: float = 0.0
    """Decay of an exponential moving average of the trained weights, copied into the head when the call ends
    (diffusion_policy keeps one; 0 = off). Warm-up as TensorFlow's ExponentialMovingAverage with ``num_updates``: the
    decay at 0-based step t is min(ema_decay, (1 + t) / (10 + t)), so a short call is not dominated by the start."""

    def __post_init__(self) -> None:
        if self.batch_size < 1 or self.lr <= 0 or self.weight_decay < 0 or self.grad_clip < 0:
            raise ValueError(f"invalid TrainConfig: {self.batch_size=} {self.lr=} {self.weight_decay=} "
                             f"{self.grad_clip=}")
        if self.lr_schedule not in LR_SCHEDULES:
            raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {self.lr_schedule=}")
        if not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"ema_decay must be in [0, 1), got {self.ema_decay=}")



def lr_factor(schedule: str, step: int, steps: int) -> float:
    """Multiplier of the learning rate at 0-based ``step`` of ``steps`` (1.0 throughout for "constant")."""
    if schedule == "constant":
        return 1.0
    if schedule == "cosine":
        return 0.5 * (1.0 + math.cos(math.pi * min(step, steps) / max(1, steps)))
    raise ValueError(f"lr_schedule must be one of {LR_SCHEDULES}, got {schedule=}")


def sampling_probabilities(row_weights: np.ndarray, n: int) -> np.ndarray:
    """(n,) minibatch probabilities from non-negative row weights; a clear error for a wrong shape or all zeros."""
    w = np.asarray(row_weights, dtype=np.float64)
    if w.shape != (n,) or not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
        raise ValueError(f"row_weights must be {n} finite weights >= 0, not all 0; got shape {w.shape}")
    return w / w.sum()


def train_head(head: nn.Module, batch_embeddings: Callable[[np.ndarray], torch.Tensor], chunks: torch.Tensor,
               mask: torch.Tensor | None, steps: int, config: TrainConfig, *,
               extra_params: Iterable[nn.Parameter] = (), progress: bool = False,
               callback: StepCallback | None = None, desc: str = "fine-tune",
               row_weights: np.ndarray | None = None) -> FitResult:
    """Train ``head`` (and ``extra_params``) for ``steps`` AdamW steps on minibatches of N examples.

    Args:
        head: an action head with ``loss(emb, actions, mask, generator=...)``.
        batch_embeddings: maps (B,) int row indices to (B, E) trunk embeddings (cache lookup or trunk forward).
        chunks: (N, H, A) normalized action chunks.
        mask: (N, H, A) bool validity of ``chunks``, or None (all valid).
        steps: gradient steps (0 is allowed and does nothing).
        config: optimiser settings and seed.
        extra_params: further parameters to train (e.g. the trunk's, during joint pre-training).
        progress: show a tqdm bar.
        callback: called after every step with (step, loss); returning False cancels.
        desc: label of the progress bar.
        row_weights: (N,) >= 0 sampling probability of each example in a minibatch (normalised here), e.g. a
            fixed share of replayed pre-training rows (uq_vla's 50/50 replay); None = uniform (the default draws,
            unchanged).
    """
    from tqdm.auto import tqdm

    n = chunks.shape[0]
    if steps < 0:
        raise ValueError(f"steps must be >= 0, got {steps=}")
    if n == 0 and steps > 0:
        raise ValueError("no training examples")
    if mask is not None and mask.shape != chunks.shape:
        raise ValueError(f"mask shape {tuple(mask.shape)} != chunks shape {tuple(chunks.shape)}")
    probs = None if row_weights is None else sampling_probabilities(row_weights, n)
    params = [p for p in head.parameters() if p.requires_grad] + list(extra_params)
    opt = torch.optim.AdamW(params, lr=config.lr, weight_decay=config.weight_decay)
    ema = [p.detach().clone() for p in params] if config.ema_decay > 0 else None
    rng = np.random.default_rng(config.seed)
    gen = torch.Generator().manual_seed(config.seed)
    result = FitResult()
    was_training = head.training
    head.train()
    t0 = time.perf_counter()
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(config.seed)
        bar = tqdm(range(steps), desc=desc, disable=not progress, leave=False)
        for step in bar:
            if probs is None:
                idx = rng.integers(0, n, size=config.batch_size)  # with replacement
            else:
                idx = rng.choice(n, size=config.batch_size, p=probs)
            emb = batch_embeddings(idx)
            m = None if mask is None else mask[idx]
            loss = head.loss(emb, chunks[idx], m, generator=gen)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            if config.grad_clip > 0:
                nn.utils.clip_grad_norm_(params, config.grad_clip)
            for group in opt.param_groups:
                group["lr"] = config.lr * lr_factor(config.lr_schedule, step, steps)
            opt.step()
            if ema is not None:
                decay = min(config.ema_decay, (1 + step) / (10 + step))
                with torch.no_grad():
                    for e, p in zip(ema, params, strict=True):
                        e.mul_(decay).add_(p.detach(), alpha=1.0 - decay)
            value = float(loss.detach())
            result.losses.append(value)
            result.steps = step + 1
            if progress and step % 50 == 0:
                bar.set_postfix(loss=f"{value:.4f}")
            if callback is not None and not callback(step, value):
                result.cancelled = True
                break
    if ema is not None and result.steps:
        with torch.no_grad():
            for p, e in zip(params, ema, strict=True):
                p.copy_(e)
    result.wall_time_s = time.perf_counter() - t0
    head.train(was_training)
    return result
