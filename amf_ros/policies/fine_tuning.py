"""What a fine-tuning round is, importable without torch: its settings and its cancellation.

Why a module of its own: policy_server's parameter table, `amf run` and the benchmarks all take their fine-tuning
defaults from :class:`FineTuneSettings` (one home for 300 steps, 100 alpha steps, batch 256, lr 1e-3), and they must
read it without importing torch. The training loop itself is :mod:`amf_ros.policies.finetune`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FineTuneSettings:
    """How one fine-tuning round trains (Algorithm 1's "update pi", then the adaptive-prior fit).

    The single source of these defaults: policy_server's parameters ``fine_tune_steps``, ``fine_tune_batch_size``,
    ``fine_tune_lr`` and ``alpha_steps`` (amf_ros/bringup/params/policy_server.py), `amf run --fine-tune-steps`,
    `amf bench fleet`'s ``fine_tune_steps`` and `amf bench metaworld`'s ``finetune_steps``, ``batch_size``, ``lr``
    and ``alpha_steps`` take theirs from here, so the ROS loop and the benchmarks fine-tune alike.
    """

    steps: int = 300
    """Gradient steps of the action head per round (paper: 3000 on a GPU; 300 keeps a round near a minute on a
    2-core CPU)."""
    alpha_steps: int = 100
    """Adam steps of the alpha(c) fit after each round (0 = keep alpha)."""
    batch_size: int = 256
    """Minibatch size (paper: 256)."""
    lr: float = 1e-3
    """AdamW learning rate of the action head."""

    def __post_init__(self) -> None:
        if self.steps < 1 or self.alpha_steps < 0 or self.batch_size < 1 or not self.lr > 0:
            raise ValueError("FineTuneSettings needs steps >= 1, alpha_steps >= 0, batch_size >= 1 and lr > 0, "
                             f"got {self}")


LR_SCHEDULES = ("constant", "cosine")
"""Learning-rate schedules of one training call (:class:`amf_ros.policies.finetune.TrainConfig`)."""

FINE_TUNE = FineTuneSettings()
"""The defaults, for the tables and configs that take theirs from :class:`FineTuneSettings`."""


class FineTuneCancelledError(Exception):
    """A fine-tune was cancelled (its goal cancelled, or shutdown) before it saved anything."""
