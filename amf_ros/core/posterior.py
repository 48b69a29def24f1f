"""Gaussian posterior algebra: conditional (co)variances of f given noisy observations at inputs X.

Why: every AMF score is a sum of posterior variances (paper Sec. 4, eq. for ``k_hat_X``), computed many times per
round. Labels never enter a posterior covariance, so these classes only store inputs.

Two models share one interface (:class:`Posterior`):

* :class:`KernelPosterior` -- a GP with an explicit kernel ``k(A, B) -> (|A|, |B|)`` (AMF-GP), always in sample
  space: ``cov(a, b) = k(a, b) - k(a, X) [k(X, X) + s2 I]^-1 k(X, b)``.
* :class:`FeaturePosterior` -- the linear kernel ``k(a, b) = prior_var <phi_a, phi_b>`` of loss-gradient embeddings
  (AMF-NN). It works in sample space when N <= D (an N x N system) and in feature space otherwise (a D x D
  precision ``I / prior_var + Phi^T Phi / s2``), whichever is cheaper; both give the same numbers.

Conditioning on more points (:meth:`Posterior.add`) appends a block to the Cholesky factor instead of
refactorising. Conditioning on a *hallucinated* demonstration is the rank-m update of
:func:`hallucinated_variance`. Everything is float64; Cholesky factors get jitter only if they need it.
"""

from __future__ import annotations

import logging
from typing import Callable, Protocol

import numpy as np
from scipy.linalg import solve_triangular

logger = logging.getLogger(__name__)

Kernel = Callable[[np.ndarray, np.ndarray], np.ndarray]

#: Relative jitter levels tried (times the mean diagonal) before a matrix is declared singular.
JITTERS: tuple[float, ...] = (0.0, 1e-12, 1e-10, 1e-8, 1e-6)


def as_float64_2d(x: np.ndarray, name: str, dim: int | None = None) -> np.ndarray:
    """Validate a (rows, dim) finite array and return it as contiguous float64."""
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be 2-D (rows, dim), got shape {arr.shape}")
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(f"{name} must have {dim} columns, got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} contains NaN or inf ({int(np.sum(~np.isfinite(arr)))} entries)")
    return np.ascontiguousarray(arr)


def jitter_cholesky(matrix: np.ndarray, name: str = "matrix") -> np.ndarray:
    """Lower Cholesky factor of a symmetric PSD matrix, adding diagonal jitter only if needed.

    Tries the jitter levels in :data:`JITTERS` (relative to the mean diagonal). Raises ValueError if the matrix
    has NaN/inf or is still not positive definite (e.g. a singular kernel matrix with zero noise).
    """
    m = np.asarray(matrix, dtype=np.float64)
    if m.ndim != 2 or m.shape[0] != m.shape[1]:
        raise ValueError(f"{name} must be square, got shape {m.shape}")
    if m.shape[0] == 0:
        return np.zeros((0, 0))
    if not np.all(np.isfinite(m)):
        raise ValueError(f"{name} contains NaN or inf")
    scale = float(np.mean(np.diag(m)))
    if not scale > 0.0:
        raise ValueError(f"{name} has a non-positive mean diagonal ({scale=}); the kernel is degenerate")
    for rel in JITTERS:
        try:
            factor = np.linalg.cholesky(m + (rel * scale) * np.eye(m.shape[0]) if rel else m)
        except np.linalg.LinAlgError:
            continue
        if rel:
            logger.debug("%s needed jitter %.1e x mean diagonal", name, rel)
        return factor
    raise ValueError(f"{name} ({m.shape[0]}x{m.shape[0]}) is not positive definite even with jitter "
                     f"{JITTERS[-1]:g} x mean diagonal: the kernel matrix is singular (duplicate inputs with "
                     "zero noise?). Use noise_var > 0.")


class Posterior(Protocol):
    """Posterior covariance of f given the inputs conditioned on so far (shapes: inputs (rows, dim)).

    The criterion works on the whitened form: ``cov(a, b) = prior_cov(a, b) - W_a^T W_b`` in sample space and
    ``cov(a, b) = W_a^T W_b`` in feature space, with ``W = whiten(.)``.
    """

    noise_var: float
    space: str  # "sample" or "feature"

    def whiten(self, a: np.ndarray) -> np.ndarray:
        """(N' , |a|) whitened cross-terms of a against the data (N' = N in sample space, D in feature space)."""
        ...

    def prior_cov(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(|a|, |b|) prior covariance."""
        ...

    def prior_diag(self, a: np.ndarray) -> np.ndarray:
        """(|a|,) prior variance."""
        ...

    def cov(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(|a|, |b|) posterior covariance."""
        ...

    def var(self, a: np.ndarray) -> np.ndarray:
        """(|a|,) posterior variance (diagonal of ``cov(a, a)``), never negative."""
        ...

    def add(self, x_new: np.ndarray) -> None:
        """Condition on more observed inputs (rank-m update of the factor)."""
        ...


class KernelPosterior:
    """GP posterior in sample space for an explicit kernel.

    Args:
        kernel: ``k(A, B) -> (|A|, |B|)`` on inputs of shape (rows, dim); must be positive semi-definite.
        x: (N, dim) inputs conditioned on (N may be 0 = the prior).
        noise_var: observation noise variance sigma^2 >= 0.
    """

    def __init__(self, kernel: Kernel, x: np.ndarray, noise_var: float) -> None:
        if not (np.isfinite(noise_var) and noise_var >= 0.0):
            raise ValueError(f"noise_var must be finite and >= 0, got {noise_var=}")
        self.kernel = kernel
        self.noise_var = float(noise_var)
        x = np.asarray(x, dtype=np.float64)
        self.dim = x.shape[1] if x.ndim == 2 else None
        self._x = np.zeros((0, self.dim or 0))
        self._chol = np.zeros((0, 0))
        if x.size:
            self.add(x)
        elif x.ndim != 2:
            raise ValueError(f"x must be 2-D (N, dim), got shape {x.shape}")

    space = "sample"

    @property
    def num_points(self) -> int:
        """Number of data points the posterior is conditioned on."""
        return self._x.shape[0]

    def prior_cov(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(|a|, |b|) prior covariance k(a, b)."""
        return self._k(self._check(a, "a"), self._check(b, "b"))

    def prior_diag(self, a: np.ndarray) -> np.ndarray:
        """(|a|,) prior variance k(a_i, a_i)."""
        return _kernel_diag(self.kernel, self._check(a, "a"))

    def _k(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        out = np.asarray(self.kernel(a, b), dtype=np.float64)
        if out.shape != (a.shape[0], b.shape[0]):
            raise ValueError(f"kernel returned shape {out.shape}, expected {(a.shape[0], b.shape[0])}")
        if not np.all(np.isfinite(out)):
            raise ValueError("kernel returned NaN or inf")
        return out

    def _check(self, a: np.ndarray, name: str) -> np.ndarray:
        a = as_float64_2d(a, name)
        if self.dim is None:
            self.dim = a.shape[1]
            self._x = np.zeros((0, self.dim))
        elif a.shape[1] != self.dim:
            raise ValueError(f"{name} must have {self.dim} columns like the data, got shape {a.shape}")
        return a

    def add(self, x_new: np.ndarray) -> None:
        """Append inputs: block Cholesky update [[L, 0], [B^T, chol(S)]], O(N^2 m) instead of O((N+m)^3)."""
        x_new = self._check(x_new, "x_new")
        if x_new.shape[0] == 0:
            return
        k_nn = self._k(x_new, x_new) + self.noise_var * np.eye(x_new.shape[0])
        if self.num_points == 0:
            self._chol = jitter_cholesky(k_nn, "kernel matrix")
        else:
            b = solve_triangular(self._chol, self._k(self._x, x_new), lower=True, check_finite=False)
            l22 = jitter_cholesky(k_nn - b.T @ b, "Schur complement of the kernel matrix")
            n, m = self.num_points, x_new.shape[0]
            chol = np.zeros((n + m, n + m))
            chol[:n, :n] = self._chol
            chol[n:, :n] = b.T
            chol[n:, n:] = l22
            self._chol = chol
        self._x = np.concatenate([self._x, x_new], axis=0)

    @property
    def inputs(self) -> np.ndarray:
        """(N, dim) inputs conditioned on so far (read-only view)."""
        view = self._x.view()
        view.flags.writeable = False
        return view

    def solve(self, y: np.ndarray) -> np.ndarray:
        """``[k(X, X) + s2 I]^-1 y`` for y (N, ...), via the Cholesky factor (for posterior means)."""
        y = np.asarray(y, dtype=np.float64)
        if y.shape[:1] != (self.num_points,):
            raise ValueError(f"y must have {self.num_points} rows, got shape {y.shape}")
        if self.num_points == 0:
            return y.copy()
        z = solve_triangular(self._chol, y, lower=True, check_finite=False)
        return solve_triangular(self._chol.T, z, lower=False, check_finite=False)

    def whiten(self, a: np.ndarray) -> np.ndarray:
        """``L^-1 k(X, a)``, (N, |a|): the data's explanation of a; cov(a, b) = k(a, b) - W_a^T W_b."""
        a = self._check(a, "a")
        if self.num_points == 0:
            return np.zeros((0, a.shape[0]))
        return _inverse_factor(self) @ self._k(self._x, a)

    def whiten_cross(self, k_xa: np.ndarray) -> np.ndarray:
        """``L^-1 k_xa`` for an already computed (N, B) cross-kernel (saves a second kernel evaluation)."""
        if self.num_points == 0:
            return np.zeros((0, k_xa.shape[1]))
        return _inverse_factor(self) @ k_xa

    def cov(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(|a|, |b|) posterior covariance ``k(a, b) - W_a^T W_b``."""
        a, b = self._check(a, "a"), self._check(b, "b")
        return self._k(a, b) - self.whiten(a).T @ self.whiten(b)

    def var(self, a: np.ndarray) -> np.ndarray:
        """(|a|,) posterior variance, clipped at 0 against round-off."""
        a = self._check(a, "a")
        prior = _kernel_diag(self.kernel, a)
        w = self.whiten(a)
        return np.maximum(prior - np.einsum("ij,ij->j", w, w), 0.0)


def _kernel_diag(k: Kernel, a: np.ndarray, chunk: int = 256) -> np.ndarray:
    """(|a|,) diagonal of k(a, a): ``k.diag(a)`` if the kernel has one, else diagonals of chunk blocks."""
    if hasattr(k, "diag"):
        out = np.asarray(k.diag(a), dtype=np.float64)  # type: ignore[attr-defined]
    else:
        out = np.concatenate([np.diag(np.asarray(k(a[i:i + chunk], a[i:i + chunk]), dtype=np.float64))
                              for i in range(0, a.shape[0], chunk)]) if a.shape[0] else np.zeros(0)
    if out.shape != (a.shape[0],) or not np.all(np.isfinite(out)):
        raise ValueError(f"kernel diagonal must be finite with shape {(a.shape[0],)}, got {out.shape}")
    return out


class FeaturePosterior:
    """Posterior of a Bayesian linear model ``f(x) = beta^T phi(x)``, ``beta ~ N(0, prior_var I)``.

    Equivalent to a GP with kernel ``prior_var * <phi_a, phi_b>``. Works in sample space (N x N) when N <= D
    and in feature space (D x D precision) when N > D, chosen at each :meth:`add`.

    Args:
        phi: (N, D) features of the inputs conditioned on.
        noise_var: observation noise sigma^2 > 0 (feature space needs it strictly positive).
        prior_var: prior variance of each weight.
        space: "auto" (cheaper of the two), "sample" or "feature" (for tests).
    """

    def __init__(self, phi: np.ndarray, noise_var: float = 1.0, prior_var: float = 1.0,
                 space: str = "auto") -> None:
        if not (np.isfinite(noise_var) and noise_var >= 0.0):
            raise ValueError(f"noise_var must be finite and >= 0, got {noise_var=}")
        if not (np.isfinite(prior_var) and prior_var > 0.0):
            raise ValueError(f"prior_var must be finite and > 0, got {prior_var=}")
        if space not in ("auto", "sample", "feature"):
            raise ValueError(f"space must be 'auto', 'sample' or 'feature', got {space=}")
        phi = as_float64_2d(phi, "phi")
        self.noise_var, self.prior_var, self.space_request = float(noise_var), float(prior_var), space
        self.dim = phi.shape[1]
        self._phi = np.zeros((0, self.dim))
        self._chol = np.zeros((0, 0))
        self.space = "sample"
        self.add(phi)

    @property
    def num_points(self) -> int:
        """Number of feature rows the posterior is conditioned on."""
        return self._phi.shape[0]

    def prior_cov(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(|a|, |b|) prior covariance ``prior_var * a b^T``."""
        return self.prior_var * (as_float64_2d(a, "a", self.dim) @ as_float64_2d(b, "b", self.dim).T)

    def prior_diag(self, a: np.ndarray) -> np.ndarray:
        """(|a|,) prior variance ``prior_var * |a_i|^2``."""
        a = as_float64_2d(a, "a", self.dim)
        return self.prior_var * np.einsum("ij,ij->i", a, a)

    def _choose_space(self, n: int) -> str:
        if self.space_request != "auto":
            return self.space_request
        return "sample" if n <= self.dim else "feature"

    def add(self, phi_new: np.ndarray) -> None:
        """Condition on more feature rows (block update in sample space, refactor of the precision otherwise)."""
        phi_new = as_float64_2d(phi_new, "phi_new", self.dim)
        n_total = self.num_points + phi_new.shape[0]
        space = self._choose_space(n_total)
        if space == "feature" and self.noise_var == 0.0:
            raise ValueError("feature-space posterior needs noise_var > 0")
        if space == "sample" and self.space == "sample" and self.num_points > 0 and phi_new.shape[0] > 0:
            b = solve_triangular(self._chol, self.prior_var * (self._phi @ phi_new.T), lower=True,
                                 check_finite=False)
            s = self.prior_var * (phi_new @ phi_new.T) + self.noise_var * np.eye(phi_new.shape[0]) - b.T @ b
            l22 = jitter_cholesky(s, "Schur complement of the Gram matrix")
            n, m = self.num_points, phi_new.shape[0]
            chol = np.zeros((n + m, n + m))
            chol[:n, :n], chol[n:, :n], chol[n:, n:] = self._chol, b.T, l22
            self._phi, self._chol = np.concatenate([self._phi, phi_new]), chol
            return
        self._phi = np.concatenate([self._phi, phi_new])
        self.space = space
        if self.num_points == 0:
            self._chol = np.zeros((0, 0))
        elif space == "sample":
            gram = self.prior_var * (self._phi @ self._phi.T) + self.noise_var * np.eye(self.num_points)
            self._chol = jitter_cholesky(gram, "Gram matrix")
        else:
            precision = np.eye(self.dim) / self.prior_var + (self._phi.T @ self._phi) / self.noise_var
            self._chol = jitter_cholesky(precision, "feature-space precision")

    def whiten(self, a: np.ndarray) -> np.ndarray:
        """Sample space: ``L^-1 prior_var Phi a^T`` (N, |a|); feature space: ``L^-1 a^T`` (D, |a|)."""
        a = as_float64_2d(a, "a", self.dim)
        if self.num_points == 0:
            return np.zeros((0, a.shape[0]))
        if self.space == "sample":
            return _inverse_factor(self) @ (self.prior_var * (self._phi @ a.T))
        return solve_triangular(self._chol, a.T, lower=True, check_finite=False)

    def cov(self, a: np.ndarray, b: np.ndarray) -> np.ndarray:
        """(|a|, |b|) posterior covariance of the features a and b, in whichever space the posterior is solved."""
        a, b = as_float64_2d(a, "a", self.dim), as_float64_2d(b, "b", self.dim)
        if self.num_points == 0:
            return self.prior_var * (a @ b.T)
        wa, wb = self.whiten(a), self.whiten(b)
        if self.space == "sample":
            return self.prior_var * (a @ b.T) - wa.T @ wb
        return wa.T @ wb

    def var(self, a: np.ndarray) -> np.ndarray:
        """(|a|,) posterior variance of the feature rows a, in the space the posterior is solved in (>= 0)."""
        a = as_float64_2d(a, "a", self.dim)
        prior = self.prior_var * np.einsum("ij,ij->i", a, a)
        if self.num_points == 0:
            return prior
        w = self.whiten(a)
        quad = np.einsum("ij,ij->j", w, w)
        return np.maximum(prior - quad, 0.0) if self.space == "sample" else quad


def _inverse_factor(post: "KernelPosterior | FeaturePosterior") -> np.ndarray:
    """``L^-1`` of a posterior's current factor, cached until the next :meth:`add` (the factor is then rebound).

    Why: whitening many small batches with one GEMM is several times faster than repeated triangular solves
    (scipy's TRSM copies its right-hand side), and ``L`` is well conditioned whenever noise_var > 0.
    """
    chol = post._chol
    cached = getattr(post, "_linv_cache", None)
    if cached is None or cached[0] is not chol:
        cached = (chol, solve_triangular(chol, np.eye(chol.shape[0]), lower=True, check_finite=False))
        post._linv_cache = cached  # type: ignore[attr-defined]
    return cached[1]


def hallucinated_variance(var_q: np.ndarray, cov_qc: np.ndarray, cov_cc: np.ndarray,
                          noise_var: float) -> np.ndarray:
    """Posterior variance of targets after also conditioning on m hallucinated points: a rank-m update.

    ``var_new(q) = var(q) - cov(q, C) [cov(C, C) + s2 I]^-1 cov(C, q)`` with all covariances already conditioned
    on the data, so the data system is never re-solved per candidate.

    Args:
        var_q: (Q,) current posterior variances of the targets.
        cov_qc: (..., Q, m) current posterior covariances targets x hallucinated points (leading batch dims allowed).
        cov_cc: (..., m, m) current posterior covariance of the hallucinated points.
        noise_var: observation noise of the hallucinated labels.
    Returns:
        (..., Q) updated variances, clipped at 0 against round-off.
    """
    m = cov_cc.shape[-1]
    if m == 0:
        return np.broadcast_to(var_q, cov_qc.shape[:-1]).copy()
    system = cov_cc + noise_var * np.eye(m)
    try:
        chol = np.linalg.cholesky(system)
    except np.linalg.LinAlgError:
        chol = _batched_jitter_cholesky(system)
    z = np.linalg.solve(chol, np.swapaxes(cov_qc, -1, -2))  # (..., m, Q) = L^-1 cov(C, q)
    return np.maximum(var_q - np.einsum("...mq,...mq->...q", z, z), 0.0)


def _batched_jitter_cholesky(system: np.ndarray) -> np.ndarray:
    flat = system.reshape(-1, system.shape[-2], system.shape[-1])
    out = np.stack([jitter_cholesky(s, "hallucinated-demonstration covariance") for s in flat])
    return out.reshape(system.shape)
