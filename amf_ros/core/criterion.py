"""The AMF criterion (paper eq. 3, practical estimate of App. E): one score per candidate task, lower = better.

For a candidate task c' the score is

    phi(c') = sum_j omega_j  sum_q w_q  h( Var[f(x_q) | data, hallucinated demo j of c'] )

* targets x_q = (s_t, c): states of the collected trajectories paired with target tasks c ~ mu_c, weighted by
  w_q = w(tau, c) / |C_hat| (importance weights, eq. 4, see :mod:`amf_ros.core.importance`);
* hallucinated demos of c': one (M, D) block, or J alternatives (J, M, D) -- the collected trajectories relabelled
  with c' -- averaged with weights omega_j = w(tau_j, c') (App. E's outer sum over tau');
* ``form="variance"``: h(v) = v; ``form="log_variance"``: h(v) = 0.5 log(2 pi e v), the Gaussian entropy that
  eq. 3 literally sums. Default: ``log_variance`` -- it is the paper's objective, it is invariant to the scale of
  the features (loss-gradient embeddings have an arbitrary scale; the variance form is dominated by the targets with
  the largest gradient norms), and on the integrator benchmark it did at least as well as the variance form
  (mean return over rounds 10-40, averaged over the 12 allocations: -1.195 vs -1.199; docs/amf-core.md).

Hallucinated labels do not matter (Gaussian posterior covariances do not depend on labels), so a demo is only its
inputs. Each hallucination is a rank-m update of the data posterior
(:func:`~amf_ros.core.posterior.hallucinated_variance`).
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Sequence

import numpy as np

from amf_ros.core.criterion_terms import (
    CHUNK_POINTS,
    RELATIVE_VARIANCE_FLOOR,
    alternatives_of,
    check_form,
    kept_targets,
    score_terms,
)
from amf_ros.core.incremental import PickCache, make_layout, posterior_hallucination_covariance
from amf_ros.core.posterior import FeaturePosterior, Kernel, KernelPosterior, as_float64_2d, hallucinated_variance
from amf_ros.core.selection import ScoreFn

logger = logging.getLogger(__name__)

def posterior_criterion(post: KernelPosterior | FeaturePosterior, target_x: np.ndarray,
                        target_weights: np.ndarray | None, candidates: Sequence[Any],
                        candidate_weights: Sequence[Any] | None = None, form: str = "log_variance") -> np.ndarray:
    """Score every candidate given a data posterior (the shared engine of both criterion forms).

    Args:
        post: posterior conditioned on the data (kernel or feature form).
        target_x: (Q, d) target inputs.
        target_weights: (Q,) >= 0 or None (all 1).
        candidates: per candidate, (M, d), (J, M, d) or a list of (M_j, d) hallucinated demonstration inputs.
        candidate_weights: per candidate, (J,) omega_j >= 0 or None (uniform 1/J).
        form: "log_variance" (entropy) or "variance".
    Returns:
        (num_candidates,) scores, lower = more informative. Always finite.
    """
    check_form(form)
    if len(candidates) == 0:
        raise ValueError("empty candidate set: nothing to score")
    if candidate_weights is not None and len(candidate_weights) != len(candidates):
        raise ValueError(f"candidate_weights has {len(candidate_weights)} entries for {len(candidates)} candidates")
    dim = getattr(post, "dim", None)
    q_x, q_w = kept_targets(target_x, target_weights, dim)
    dim = q_x.shape[1]
    var_q = post.var(q_x)
    floor = RELATIVE_VARIANCE_FLOOR * max(float(np.max(post.prior_diag(q_x))), np.finfo(float).tiny)
    w_q = post.whiten(q_x)  # (N', Q)
    sign = -1.0 if post.space == "sample" else 1.0
    # Group every candidate's alternatives by length, then whiten all hallucinated points with ONE pass over the
    # data (the data matrix is the big operand: reading it once per candidate dominated the run time).
    groups: list[tuple[int, np.ndarray, np.ndarray]] = []  # (candidate index, pts (J, m, d), omegas (J,))
    for ci, entry in enumerate(candidates):
        alts = alternatives_of(entry, None if candidate_weights is None else candidate_weights[ci], dim,
                             f"candidate {ci}")
        by_len: dict[int, list[tuple[np.ndarray, float]]] = {}
        for block, omega in alts:
            by_len.setdefault(block.shape[0], []).append((block, omega))
        for group in by_len.values():
            groups.append((ci, np.stack([b for b, _ in group]), np.array([o for _, o in group])))
    scores = np.zeros(len(candidates))
    for chunk in _chunks(groups, CHUNK_POINTS):  # bounded memory: (N' + Q) x CHUNK_POINTS floats at a time
        all_pts = np.concatenate([pts.reshape(-1, dim) for _, pts, _ in chunk])
        w_all = post.whiten(all_pts)  # (N', P)
        cross_all = sign * (w_q.T @ w_all)  # (Q, P)
        if post.space == "sample":
            cross_all += post.prior_cov(q_x, all_pts)
        start = 0
        for ci, pts, omegas in chunk:
            j, m = pts.shape[:2]
            sl = slice(start, start + j * m)
            start += j * m
            cov_qc = cross_all[:, sl].reshape(q_x.shape[0], j, m).transpose(1, 0, 2)  # (J, Q, m)
            w_blocks = w_all[:, sl].reshape(w_all.shape[0], j, m)
            cov_cc = sign * np.einsum("njm,njk->jmk", w_blocks, w_blocks)
            if post.space == "sample":
                cov_cc = cov_cc + _prior_blocks(post, pts)
            new_var = hallucinated_variance(var_q, cov_qc, cov_cc, post.noise_var)  # (J, Q)
            scores[ci] += float(omegas @ (score_terms(new_var, form, floor) @ q_w))
    if not np.all(np.isfinite(scores)):  # defensive: inputs were validated, so this is a bug, not a user error
        raise ValueError(f"criterion produced non-finite scores {scores}")
    return scores


def _chunks(groups: list, max_points: int) -> list[list]:
    """Split groups (ci, pts (J, m, d), omegas) into consecutive runs of at most ~max_points points each."""
    out, cur, n = [], [], 0
    for g in groups:
        size = g[1].shape[0] * g[1].shape[1]
        if cur and n + size > max_points:
            out.append(cur)
            cur, n = [], 0
        cur.append(g)
        n += size
    if cur:
        out.append(cur)
    return out


def _prior_blocks(post: KernelPosterior | FeaturePosterior, pts: np.ndarray) -> np.ndarray:
    """(J, m, m) prior covariances within each block of pts (J, m, d): one kernel call when that is small."""
    j, m, _ = pts.shape
    if j * m <= 2048:
        full = post.prior_cov(pts.reshape(j * m, -1), pts.reshape(j * m, -1)).reshape(j, m, j, m)
        idx = np.arange(j)
        return full[idx, :, idx, :]
    return np.stack([post.prior_cov(p, p) for p in pts])


def feature_criterion(data_phi: np.ndarray, candidate_phi: Sequence[np.ndarray], target_phi: np.ndarray,
                      target_weights: np.ndarray | None = None, noise_var: float = 1.0, prior_var: float = 1.0,
                      form: str = "log_variance", candidate_weights: Sequence[np.ndarray] | None = None,
                      space: str = "auto") -> np.ndarray:
    """AMF criterion with the linear kernel of features (loss-gradient embeddings, AMF-NN).

    Args:
        data_phi: (N, D) features of the points already demonstrated (N may be 0).
        candidate_phi: per candidate task c', (M_c, D) features of a hallucinated demonstration of c'
            (or (J, M, D) / list of (M_j, D) alternatives, averaged with ``candidate_weights``).
        target_phi: (K, D) features of the target points (states x target tasks).
        target_weights: (K,) importance weights >= 0 (None = all 1).
        noise_var: observation noise of the linear-Gaussian model.
        prior_var: weight prior variance of the linear-Gaussian model.
        form: "log_variance" (entropy, default) or "variance".
        candidate_weights: per candidate, (J,) omega_j of its alternatives (None = uniform).
        space: "auto" (cheaper of sample/feature space), "sample" or "feature".
    Returns:
        (num_candidates,) scores, lower = more informative.
    """
    data_phi = np.asarray(data_phi, dtype=np.float64)
    target_phi = np.asarray(target_phi, dtype=np.float64)
    if target_phi.ndim != 2:
        raise ValueError(f"target_phi must be (K, D), got shape {target_phi.shape}")
    if data_phi.size == 0:
        data_phi = data_phi.reshape(0, target_phi.shape[1])
    if data_phi.ndim != 2 or data_phi.shape[1] != target_phi.shape[1]:
        raise ValueError(f"data_phi must be (N, {target_phi.shape[1]}), got shape {data_phi.shape}")
    post = FeaturePosterior(data_phi, noise_var=noise_var, prior_var=prior_var, space=space)
    return posterior_criterion(post, target_phi, target_weights, candidate_phi, candidate_weights, form)


def kernel_criterion(kernel: Kernel, X_data: np.ndarray, X_candidates: Sequence[np.ndarray], X_target: np.ndarray,
                     target_weights: np.ndarray | None = None, noise_var: float = 1.0,
                     form: str = "log_variance",
                     candidate_weights: Sequence[np.ndarray] | None = None) -> np.ndarray:
    """AMF criterion with an explicit kernel (AMF-GP); arguments as :func:`feature_criterion`, inputs instead of
    features: X_data (N, d), X_candidates per candidate (M, d) / (J, M, d), X_target (K, d)."""
    X_target = np.asarray(X_target, dtype=np.float64)
    X_data = np.asarray(X_data, dtype=np.float64)
    if X_data.size == 0 and X_target.ndim == 2:
        X_data = X_data.reshape(0, X_target.shape[1])
    post = KernelPosterior(kernel, X_data, noise_var)
    return posterior_criterion(post, X_target, target_weights, X_candidates, candidate_weights, form)


CHOSEN_MARK = "\0"
"""Separates a task key from the role of its entry in :class:`_PosteriorScoreFn`'s cache (task keys never hold it)."""


class _PosteriorScoreFn:
    """ScoreFn over a cached data posterior; chosen tasks are conditioned on their heaviest hallucinated demo (or on
    their ``chosen_of`` entry).

    The first pick (nothing chosen) is :func:`posterior_criterion`. Later greedy picks of a batch work on the cached
    posterior covariance Sigma_U among the targets and the candidates' hallucinated rows
    (:class:`~amf_ros.core.incremental.HallucinationCovariance`, built once from the data posterior): each pick is a
    rank-m downdate of Sigma_U, instead of copying the data posterior, adding the picks and re-whitening everything.
    Same scores up to float round-off.
    """

    def __init__(self, post: KernelPosterior | FeaturePosterior, candidate_of: Callable[[str], Any],
                 target_x: np.ndarray, target_weights: np.ndarray | None, form: str,
                 info: dict | None = None, chosen_of: Callable[[str], Any] | None = None) -> None:
        self.post, self.candidate_of, self.form = post, candidate_of, check_form(form)
        self.chosen_of = chosen_of
        self.target_x, self.target_weights = target_x, target_weights
        self.last_info: dict = {"form": form, **(info or {})}
        self._cache: dict[str, tuple[Any, Any]] = {}
        self._tasks: list[str] = []  # candidate order of the cached Sigma_U
        self._picks: Any = None  # incremental.PickCache over Sigma_U given the data

    def _entry(self, key: str) -> tuple[Any, Any]:
        if key not in self._cache:
            out = self.candidate_of(key)
            self._cache[key] = out if isinstance(out, tuple) else (out, None)
        return self._cache[key]

    def _chosen_key(self, task: str) -> str:
        """The entry a pick of ``task`` earlier in the batch is conditioned on: its ``chosen_of`` entry where that
        gives one (kept under its own key), else its candidate entry (no second copy of the same rows)."""
        if self.chosen_of is None:
            return task
        key = f"{task}{CHOSEN_MARK}chosen"
        if key not in self._cache:
            out = self.chosen_of(task)
            if out is None:
                return task
            self._cache[key] = out if isinstance(out, tuple) else (out, None)
        return key

    def _entries(self, tasks: list[str]) -> tuple[list[Any], list[Any] | None]:
        entries = [self._entry(c) for c in tasks]
        weights = [w for _, w in entries] if any(w is not None for _, w in entries) else None
        return [e for e, _ in entries], weights

    def __call__(self, candidates: list[str], chosen: list[str]) -> np.ndarray:
        if not chosen:
            entries, weights = self._entries(candidates)
            return posterior_criterion(self.post, self.target_x, self.target_weights, entries, weights, self.form)
        chosen = [self._chosen_key(t) for t in chosen]
        known = set(self._tasks)
        if self._picks is None or any(t not in known for t in [*candidates, *chosen]):
            self._tasks = list(dict.fromkeys([*self._tasks, *candidates, *chosen]))
            entries, weights = self._entries(self._tasks)
            layout = make_layout(self.target_x, self.target_weights, entries, weights,
                                 getattr(self.post, "dim", None))
            self._picks = PickCache(posterior_hallucination_covariance(self.post, layout, self.form))
        where = {t: i for i, t in enumerate(self._tasks)}
        scores = self._picks.state([where[t] for t in chosen]).scores()
        return scores[[where[c] for c in candidates]]


def feature_score_fn(data_phi: np.ndarray, candidate_phi_of: Callable[[str], Any], target_phi: np.ndarray,
                     target_weights: np.ndarray | None = None, noise_var: float = 1.0, prior_var: float = 1.0,
                     form: str = "log_variance", info: dict | None = None,
                     chosen_phi_of: Callable[[str], Any] | None = None) -> ScoreFn:
    """A :data:`~amf_ros.core.selection.ScoreFn` for the amf selector from features.

    Batch selection: tasks already chosen this round are conditioned on (their heaviest alternative) first.

    Args:
        data_phi: (N, D) features of the points already demonstrated (N may be 0).
        candidate_phi_of: task key -> (M, D) features of its hallucinated demonstration, or a tuple
            ((J, M, D) alternatives, (J,) weights).
        target_phi: (K, D) features of the target points (states x target tasks).
        target_weights: (K,) importance weights >= 0 (None = all 1).
        noise_var: observation noise of the linear-Gaussian model.
        prior_var: weight prior variance of the linear-Gaussian model.
        form: "log_variance" (entropy, default) or "variance".
        info: extra diagnostics (e.g. effective sample sizes) exposed as ``score_fn.last_info``.
        chosen_phi_of: task key -> what a task picked earlier in the batch is conditioned on, in the same forms as
            ``candidate_phi_of``, or None for a task whose candidate entry it is (``chosen_phi_of`` None = every
            task's candidate entry, Algorithm 1's greedy batch).
    """
    target_phi = as_float64_2d(target_phi, "target_phi")
    data_phi = np.asarray(data_phi, dtype=np.float64)
    if data_phi.size == 0:
        data_phi = data_phi.reshape(0, target_phi.shape[1])
    post = FeaturePosterior(data_phi, noise_var=noise_var, prior_var=prior_var)
    return _PosteriorScoreFn(post, candidate_phi_of, target_phi, target_weights, form, info, chosen_phi_of)


def kernel_score_fn(kernel: Kernel, X_data: np.ndarray, candidate_x_of: Callable[[str], Any], X_target: np.ndarray,
                    target_weights: np.ndarray | None = None, noise_var: float = 1.0, form: str = "log_variance",
                    info: dict | None = None) -> ScoreFn:
    """:func:`feature_score_fn` for an explicit kernel (AMF-GP); ``candidate_x_of`` gives inputs, not features."""
    X_target = as_float64_2d(X_target, "X_target")
    X_data = np.asarray(X_data, dtype=np.float64)
    if X_data.size == 0:
        X_data = X_data.reshape(0, X_target.shape[1])
    post = KernelPosterior(kernel, X_data, noise_var)
    return _PosteriorScoreFn(post, candidate_x_of, X_target, target_weights, form, info)
