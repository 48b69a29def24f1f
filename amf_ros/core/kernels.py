"""Kernels for AMF-GP: an ARD RBF kernel over concatenated (state, task) inputs, and the linear feature kernel.

Why a class: the posterior needs both ``k(A, B)`` and the cheap diagonal ``k.diag(A)``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.spatial.distance import cdist


@dataclass(frozen=True)
class RBFKernel:
    """``k(a, b) = amplitude * exp(-0.5 * sum_i ((a_i - b_i) / lengthscale_i)^2)``.

    Attributes:
        lengthscales: (dim,) one length scale per input column (ARD), all > 0.
        amplitude: prior variance k(x, x) > 0.
    """

    lengthscales: tuple[float, ...]
    amplitude: float = 1.0

    def __post_init__(self) -> None:
        ls = np.asarray(self.lengthscales, dtype=np.float64)
        if ls.ndim != 1 or ls.size == 0 or not np.all(np.isfinite(ls)) or np.any(ls <= 0):
            raise ValueError(f"lengthscales must be a non-empty sequence of positive numbers, got {self.lengthscales=}")
        if not (np.isfinite(self.amplitude) and self.amplitude > 0):
            raise ValueError(f"amplitude must be > 0, got {self.amplitude=}")

    @property
    def dim(self) -> int:
        """Input dimension, one length scale per column."""
        return len(self.lengthscales)

    def _scaled(self, x: np.ndarray, name: str) -> np.ndarray:
        x = np.asarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim:
            raise ValueError(f"{name} must be (rows, {self.dim}), got shape {x.shape}")
        return x / np.asarray(self.lengthscales)

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(|a|, |b|) kernel matrix."""
        sq = cdist(self._scaled(a, "a"), self._scaled(b, "b"), "sqeuclidean")
        return self.amplitude * np.exp(-0.5 * sq)

    def diag(self, a: np.ndarray) -> np.ndarray:
        """(|a|,) ``k(a_i, a_i)`` = amplitude."""
        return np.full(self._scaled(a, "a").shape[0], self.amplitude)


@dataclass(frozen=True)
class LinearKernel:
    """``k(a, b) = prior_var * <a, b>``: the kernel of loss-gradient embeddings (inputs are features)."""

    prior_var: float = 1.0

    def __call__(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(|a|, |b|) kernel matrix ``prior_var * a b^T``."""
        return self.prior_var * (np.asarray(a, dtype=np.float64) @ np.asarray(b, dtype=np.float64).T)

    def diag(self, a: np.ndarray) -> np.ndarray:
        """(|a|,) ``prior_var * |a_i|^2``, without forming the full kernel matrix."""
        a = np.asarray(a, dtype=np.float64)
        return self.prior_var * np.einsum("ij,ij->i", a, a)
