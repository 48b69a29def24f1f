"""Mean/std normalization of states and actions (Octo's "normal" scheme, with a per-dimension mask).

Why: heads learn and mix (adaptive prior) in normalized space; un-normalizing happens once at the output. The
statistics are fit on pre-training data and then frozen, so the prior and the fine-tuned head share them.
"""

from __future__ import annotations

import numpy as np


class Normalizer:
    """x_norm = (x - mean) / std on dims where ``mask`` is True; other dims pass through unchanged.

    Args:
        mean, std: (D,) statistics; std is floored at ``min_std`` (constant dims would blow up otherwise).
        mask: (D,) bool, False = leave raw (e.g. a gripper already in [0, 1]); None = all True.
    """

    def __init__(self, mean: np.ndarray, std: np.ndarray, mask: np.ndarray | None = None,
                 min_std: float = 1e-3) -> None:
        mean = np.asarray(mean, dtype=np.float32).reshape(-1)
        std = np.asarray(std, dtype=np.float32).reshape(-1)
        if mean.shape != std.shape:
            raise ValueError(f"mean and std must have the same shape, got {mean.shape=} {std.shape=}")
        mask = np.ones(mean.shape, dtype=bool) if mask is None else np.asarray(mask, dtype=bool).reshape(-1)
        if mask.shape != mean.shape:
            raise ValueError(f"mask must have shape {mean.shape}, got {mask.shape=}")
        self.mean = np.where(mask, mean, 0.0).astype(np.float32)
        self.std = np.where(mask, np.maximum(std, min_std), 1.0).astype(np.float32)
        self.mask = mask

    @classmethod
    def fit(cls, x: np.ndarray, mask: np.ndarray | None = None) -> "Normalizer":
        """Statistics of rows of ``x`` (N, D)."""
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[0] == 0:
            raise ValueError(f"x must be (N, D) with N >= 1, got shape {x.shape}")
        return cls(x.mean(0), x.std(0), mask)

    @classmethod
    def identity(cls, dim: int) -> "Normalizer":
        """No-op normalizer of width ``dim``."""
        return cls(np.zeros(dim), np.ones(dim))

    @property
    def dim(self) -> int:
        """D."""
        return int(self.mean.shape[0])

    def normalize(self, x: np.ndarray) -> np.ndarray:
        """(..., D) -> (..., D) float32."""
        x = np.asarray(x, dtype=np.float32)
        if x.shape[-1] != self.dim:
            raise ValueError(f"expected last dim {self.dim}, got shape {x.shape}")
        return (x - self.mean) / self.std

    def unnormalize(self, x: np.ndarray) -> np.ndarray:
        """Inverse of :meth:`normalize`."""
        x = np.asarray(x, dtype=np.float32)
        if x.shape[-1] != self.dim:
            raise ValueError(f"expected last dim {self.dim}, got shape {x.shape}")
        return x * self.std + self.mean

    def state(self) -> dict[str, np.ndarray]:
        """Arrays for a checkpoint."""
        return {"mean": self.mean, "std": self.std, "mask": self.mask.astype(np.uint8)}

    @classmethod
    def from_state(cls, state: dict[str, np.ndarray]) -> "Normalizer":
        """Inverse of :meth:`state` (the stored std is already floored)."""
        return cls(state["mean"], state["std"], np.asarray(state["mask"]).astype(bool), min_std=0.0)
