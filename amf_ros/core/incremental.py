"""The exact AMF criterion at every data size: a cached posterior covariance among targets and candidates.

Why: the criterion (:mod:`amf_ros.core.criterion`) only reads posterior covariances among U = the target rows and
the candidates' hallucinated rows (~2,000 rows), never the data themselves; ``posterior_criterion`` re-derives them
from all N data rows on every call (~N^2 D or N D^2 flops). Here Sigma_U (U x U) is kept instead:

* a call scores every candidate from sub-blocks of Sigma_U (Sigma_QC, Sigma_CC per alternative), exactly the
  algebra of ``posterior_criterion``: ~Q C m flops, independent of N;
* a greedy batch pick conditions Sigma_U on the pick's heaviest hallucinated demo, a rank-m downdate
  ``Sigma_U -= A^T A``, ``A = chol(Sigma_pp + s2 I)^-1 Sigma_pU`` (~U^2 m flops), instead of re-whitening the data;
* a new episode (m data rows) is the same rank-m downdate with ``Sigma_nU`` from the data posterior, which is kept
  in the cheaper of two square-root forms of the weight covariance S (prior ``prior_var I``):

  - sample space, ``S = prior_var I - V^T V`` with V = ``prior_var L^-1 X`` (N x D, L = chol(K_XX + s2 I)),
    ~4 N D m flops per episode;
  - feature space, S itself (D x D, one triangle, BLAS symm/syrk), Woodbury per episode, ~3 D^2 m flops.

  The engine switches from the first to the second when the second gets cheaper (:func:`sample_space_limit`).

Everything is float64. Rows of U that are equal (a target state that is also a candidate's hallucinated state, the
usual case: both come from the validation demonstrations) are stored once.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.linalg import solve_triangular
from scipy.linalg.blas import dgemm, dsymm, dsyrk, dtrmm
from scipy.linalg.lapack import dpotri, dtrtri

from amf_ros.core import criterion_terms as terms
from amf_ros.core.posterior import as_float64_2d, jitter_cholesky

logger = logging.getLogger(__name__)

SPACES: tuple[str, ...] = ("auto", "sample", "feature")
#: BLAS ``lower`` flag of the feature-space S: only its upper triangle (Fortran order) is stored and updated.
UPPER = 0


@dataclass(frozen=True)
class Layout:
    """Where the (kept) targets and every candidate's alternatives live among the unique rows U.

    Attributes:
        rows: (U, d) unique rows (candidates' rows first, in candidate order, then targets not among them).
        q_idx, q_w: (Q,) row of each target with positive weight, sorted by row, and its weight.
        groups: alternatives batched by length: (candidate index (J,), rows (J, m), omega (J,)).
        picks: per candidate, the rows of its heaviest alternative (what a greedy pick conditions on).
        num_candidates: number of candidates.
    """

    rows: np.ndarray
    q_idx: np.ndarray
    q_w: np.ndarray
    groups: tuple[tuple[np.ndarray, np.ndarray, np.ndarray], ...]
    picks: tuple[np.ndarray, ...]
    num_candidates: int


def make_layout(target_x: np.ndarray, target_weights: np.ndarray | None, candidates: Sequence[Any],
                candidate_weights: Sequence[Any] | None, dim: int | None = None) -> Layout:
    """Validate the criterion's inputs exactly as ``posterior_criterion`` does and index them into unique rows.

    Args: as :func:`~amf_ros.core.criterion.posterior_criterion` (candidates: per candidate (M, d), (J, M, d) or a
        list of (M_j, d); candidate_weights: per candidate (J,) or None).
    """
    if len(candidates) == 0:
        raise ValueError("empty candidate set: nothing to score")
    if candidate_weights is not None and len(candidate_weights) != len(candidates):
        raise ValueError(f"candidate_weights has {len(candidate_weights)} entries for {len(candidates)} candidates")
    q_x, q_w = terms.kept_targets(target_x, target_weights, dim)
    dim = q_x.shape[1]
    alts = [terms.alternatives_of(entry, None if candidate_weights is None else candidate_weights[ci], dim,
                            f"candidate {ci}") for ci, entry in enumerate(candidates)]
    blocks = [b for a in alts for b, _ in a] + [q_x]
    rows, idx = _unique_rows(blocks)
    order = np.argsort(idx[-1], kind="stable")
    q_idx, q_w = idx[-1][order], q_w[order]
    by_len: dict[int, list[tuple[int, np.ndarray, float]]] = {}
    picks, k = [], 0
    for ci, a in enumerate(alts):
        heaviest = max(range(len(a)), key=lambda j: a[j][1])  # first of the heaviest, as max() in the old path
        picks.append(idx[k + heaviest])
        for block, omega in a:
            by_len.setdefault(block.shape[0], []).append((ci, idx[k], omega))
            k += 1
    groups = tuple((np.array([c for c, _, _ in g]), np.stack([r for _, r, _ in g]), np.array([o for _, _, o in g]))
                   for g in by_len.values())
    return Layout(rows, q_idx, q_w, groups, tuple(picks), len(candidates))


def _unique_rows(blocks: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
    """Unique rows of the stacked blocks (first occurrence order) and each block's row indices into them.

    Exact equality; the bytes of 16 fixed columns only bucket the rows to compare (no arithmetic, so equal rows
    always share a bucket).
    """
    stacked = np.concatenate(blocks)
    cols = np.unique(np.linspace(0, stacked.shape[1] - 1, 16).astype(np.int64))
    keys = np.ascontiguousarray(stacked[:, cols])
    buckets: dict[bytes, list[int]] = {}
    first: list[int] = []
    index = np.empty(stacked.shape[0], dtype=np.int64)
    for r in range(stacked.shape[0]):
        bucket = buckets.setdefault(keys[r].tobytes(), [])
        for u in bucket:
            if np.array_equal(stacked[first[u]], stacked[r]):
                index[r] = u
                break
        else:
            bucket.append(len(first))
            index[r] = len(first)
            first.append(r)
    bounds = np.cumsum([0] + [b.shape[0] for b in blocks])
    return stacked[first], [index[a:b] for a, b in itertools.pairwise(bounds)]


def _index(idx: np.ndarray) -> slice | np.ndarray:
    """A slice when ``idx`` is a contiguous increasing range (a view instead of a gather), else ``idx``."""
    if idx.size and idx[-1] - idx[0] == idx.size - 1 and np.all(np.diff(idx) == 1):
        return slice(int(idx[0]), int(idx[-1]) + 1)
    return idx


class HallucinationCovariance:
    """Posterior covariance Sigma_U among the unique target/candidate rows, and the criterion computed from it.

    Args:
        sigma: (U, U) symmetric posterior covariance of ``layout.rows`` (given the data), owned and updated in place.
        layout: :func:`make_layout`'s indexing.
        noise_var: observation noise of hallucinated (and data) labels.
        floor: variance floor of the log form (``terms.RELATIVE_VARIANCE_FLOOR`` x the largest prior target variance).
        form: "log_variance" or "variance".
    """

    def __init__(self, sigma: np.ndarray, layout: Layout, noise_var: float, floor: float, form: str) -> None:
        u = layout.rows.shape[0]
        if sigma.shape != (u, u):
            raise ValueError(f"sigma must be ({u}, {u}) for {u} unique rows, got {sigma.shape}")
        self.sigma, self.layout, self.noise_var = np.ascontiguousarray(sigma), layout, float(noise_var)
        self.floor, self.form = float(floor), terms.check_form(form)
        self._q = _index(layout.q_idx)

    @property
    def nbytes(self) -> int:
        """Bytes held by Sigma_U, the one large array, for the memory budget of the selector."""
        return int(self.sigma.nbytes)

    def copy(self) -> HallucinationCovariance:
        """An independent copy whose downdates leave this covariance untouched (the base of a greedy batch)."""
        return HallucinationCovariance(self.sigma.copy(), self.layout, self.noise_var, self.floor, self.form)

    def scores(self) -> np.ndarray:
        """(num_candidates,) criterion, lower = better: posterior_criterion's algebra on blocks of Sigma_U."""
        lay = self.layout
        var_q = np.maximum(np.diagonal(self.sigma)[lay.q_idx], 0.0)
        out = np.zeros(lay.num_candidates)
        for cand, rows, omega in lay.groups:
            j, m = rows.shape
            step = max(1, terms.CHUNK_POINTS // m)  # bounded memory: (terms.CHUNK_POINTS x Q) covariances at a time
            for s in range(0, j, step):
                r = rows[s:s + step]
                flat = _index(r.reshape(-1))
                cov_cq = self.sigma[flat][:, self._q].reshape(r.shape[0], m, -1)  # (J', m, Q)
                cov_cc = self.sigma[r[:, :, None], r[:, None, :]]  # (J', m, m)
                new_var = _hallucinated_variance(var_q, cov_cq, cov_cc, self.noise_var)
                np.add.at(out, cand[s:s + step], omega[s:s + step] * (terms.score_terms(new_var, self.form, self.floor)
                                                                        @ lay.q_w))
        if not np.all(np.isfinite(out)):  # inputs were validated: a bug, not a user error
            raise ValueError(f"criterion produced non-finite scores {out}")
        return out

    def condition_on_rows(self, rows: np.ndarray) -> None:
        """Condition on (hallucinated) observations of the rows ``rows`` (indices into U): rank-m downdate."""
        sel = _index(np.asarray(rows))
        cross = np.array(self.sigma[sel])  # (m, U) = Sigma_pU
        system = cross[:, sel] + self.noise_var * np.eye(cross.shape[0])
        chol = jitter_cholesky(system, "hallucinated-demonstration covariance")
        self.downdate(solve_triangular(chol, cross, lower=True, check_finite=False))

    def condition_on(self, candidate: int) -> None:
        """Greedy batch step: condition on candidate's heaviest hallucinated alternative."""
        self.condition_on_rows(self.layout.picks[candidate])

    def downdate(self, factor: np.ndarray) -> None:
        """``Sigma_U -= factor^T factor`` (factor (m, U) = chol(K)^-1 Sigma_nU of m new observations), in place:
        one BLAS gemm on the Fortran view of Sigma_U (3x faster than a syrk into a temporary plus a subtraction)."""
        out = dgemm(-1.0, factor, factor, beta=1.0, c=self.sigma.T, trans_a=1, overwrite_c=1)
        if not np.shares_memory(out, self.sigma):  # cannot happen for a C-ordered float64 sigma; be safe
            self.sigma = np.ascontiguousarray(out.T)


def _hallucinated_variance(var_q: np.ndarray, cov_cq: np.ndarray, cov_cc: np.ndarray,
                           noise_var: float) -> np.ndarray:
    """(J, Q) target variances after each of J hallucinated blocks: ``hallucinated_variance``'s formula
    ``var_q - |L_j^-1 Sigma_CjQ|^2`` (``L_j = chol(Sigma_CjCj + s2 I)``), with the m x m inverse factor applied by
    BLAS trmm (numpy's batched ``solve`` runs an LU per block and was ~5x slower; L_j is well conditioned when
    noise_var > 0, as in ``posterior._inverse_factor``).

    Args: var_q (Q,); cov_cq (J, m, Q) = Sigma_CQ of each block; cov_cc (J, m, m); noise_var.
    """
    system = cov_cc + noise_var * np.eye(cov_cc.shape[-1])
    try:
        chol = np.linalg.cholesky(system)
    except np.linalg.LinAlgError:
        chol = np.stack([jitter_cholesky(s, "hallucinated-demonstration covariance") for s in system])
    out = np.empty((cov_cq.shape[0], var_q.shape[0]))
    for j in range(cov_cq.shape[0]):
        inv, info = dtrtri(chol[j], lower=1)
        if info != 0:
            raise ValueError(f"singular hallucinated-demonstration covariance (LAPACK info {info})")
        zt = dtrmm(1.0, inv, cov_cq[j].T, side=1, lower=1, trans_a=1)  # (Q, m) = (L^-1 Sigma_CQ)^T
        out[j] = var_q - np.einsum("qm,qm->q", zt, zt)
    return np.maximum(out, 0.0)


class PickCache:
    """Sigma_U after the picks of the current greedy batch: a pick extending the cached prefix costs one
    rank-m downdate; any other sequence restarts from a copy of the base (data-only) covariance."""

    def __init__(self, base: HallucinationCovariance) -> None:
        self.base = base
        self._prefix: tuple[int, ...] = ()
        self._state: HallucinationCovariance | None = None

    def state(self, picks: Sequence[int]) -> HallucinationCovariance:
        """Sigma_U after ``picks``, reusing the cached prefix when ``picks`` extends it."""
        picks = tuple(int(p) for p in picks)
        if not picks:
            return self.base
        if self._state is None or picks[:len(self._prefix)] != self._prefix:
            self._state, self._prefix = self.base.copy(), ()
        for p in picks[len(self._prefix):]:
            self._state.condition_on(p)
        self._prefix = picks
        return self._state


def variance_floor(prior_diag_q: np.ndarray) -> float:
    """The log form's floor rule of posterior_criterion (no -inf for targets the data pin down exactly)."""
    return terms.RELATIVE_VARIANCE_FLOOR * max(float(np.max(prior_diag_q)), np.finfo(float).tiny)


def posterior_hallucination_covariance(post: Any, layout: Layout, form: str) -> HallucinationCovariance:
    """Sigma_U from a :class:`~amf_ros.core.posterior.FeaturePosterior` or ``KernelPosterior`` (one whitening)."""
    rows = layout.rows
    w = post.whiten(rows)  # (N', U)
    if post.space == "sample":
        sigma = post.prior_cov(rows, rows) - w.T @ w
    else:
        sigma = w.T @ w
    sigma = 0.5 * (sigma + sigma.T)
    floor = variance_floor(post.prior_diag(rows[layout.q_idx]))
    return HallucinationCovariance(sigma, layout, post.noise_var, floor, form)


def sample_space_limit(dim: int, unique_rows: int) -> int:
    """Most data rows for which the sample-space form is cheaper per new episode than the feature-space form.

    Per episode of m rows: sample ~ (4 N D + 2 N U) m flops (V Phi_n^T, the new rows of V, W_U), feature ~ 3 D^2 m
    (S Phi_n^T by symm, the rank-m syrk of S); both share the 2 U D m of Sigma_nU.
    """
    return int(3 * dim * dim // (4 * dim + 2 * unique_rows))


class IncrementalFeatureCriterion:
    """The exact AMF-NN criterion (linear kernel of features) with cached Sigma_U, updated per new episode.

    Scores equal :func:`~amf_ros.core.criterion.feature_criterion` on all data rows up to float round-off.

    Args:
        data_phi: (N, D) data rows to start from (N may be 0); built in the cheaper space.
        candidate_phi, target_phi, target_weights, candidate_weights, noise_var, prior_var, form: as
            :func:`~amf_ros.core.criterion.feature_criterion`.
        space: "auto" (sample space up to :func:`sample_space_limit` rows, then feature space), "sample" or
            "feature" (never switch; for tests and measurements).
    """

    def __init__(self, data_phi: np.ndarray, candidate_phi: Sequence[Any], target_phi: np.ndarray,
                 target_weights: np.ndarray | None = None, noise_var: float = 1.0, prior_var: float = 1.0,
                 form: str = "log_variance", candidate_weights: Sequence[Any] | None = None,
                 space: str = "auto") -> None:
        if not (np.isfinite(noise_var) and noise_var >= 0.0):
            raise ValueError(f"noise_var must be finite and >= 0, got {noise_var=}")
        if not (np.isfinite(prior_var) and prior_var > 0.0):
            raise ValueError(f"prior_var must be finite and > 0, got {prior_var=}")
        if space not in SPACES:
            raise ValueError(f"space must be one of {list(SPACES)}, got {space=}")
        if space == "feature" and noise_var == 0.0:
            raise ValueError("feature-space criterion needs noise_var > 0")
        terms.check_form(form)
        target_phi = as_float64_2d(target_phi, "target_phi")
        self.dim = target_phi.shape[1]
        self.layout = make_layout(target_phi, target_weights, candidate_phi, candidate_weights, self.dim)
        self.noise_var, self.prior_var, self.space_request = float(noise_var), float(prior_var), space
        self.limit = sample_space_limit(self.dim, self.layout.rows.shape[0]) if space == "auto" else None
        self.version = 0  # bumped by every add_data: score functions drop their batch cache
        q = self.layout.rows[self.layout.q_idx]
        self.form, self.floor = form, variance_floor(self.prior_var * np.einsum("ij,ij->i", q, q))
        self.build(data_phi)

    # ------------------------------------------------------------------------------------------------- state
    @property
    def num_rows(self) -> int:
        """Data rows conditioned on."""
        return self._n

    @property
    def nbytes(self) -> int:
        """Bytes of the cached state (Sigma_U, the data square root, the unique rows)."""
        state = self._s.nbytes if self.space == "feature" else self._v.nbytes + self._w.nbytes
        return int(self.cov.nbytes + state + self.layout.rows.nbytes)

    def _choose_space(self, n: int) -> str:
        if self.space_request != "auto":
            return self.space_request
        if self.noise_var == 0.0:
            return "sample"
        return "sample" if n <= (self.limit or 0) else "feature"

    def build(self, data_phi: np.ndarray) -> None:
        """(Re)build everything from scratch for these data rows (what a new selection policy costs: all
        features change). Sample space ~N^2 D + N^3/3 + 2 N D U, feature space ~N D^2 + D^3 + D^2 U flops."""
        data = np.asarray(data_phi, dtype=np.float64)
        if data.size == 0:
            data = data.reshape(0, self.dim)
        data = as_float64_2d(data, "data_phi", self.dim)
        phi_u, p, s2 = self.layout.rows, self.prior_var, self.noise_var
        n = data.shape[0]
        self.space, self._n = self._choose_space(n), n
        self._v, self._w, self._s = np.zeros((0, self.dim)), np.zeros((0, phi_u.shape[0])), np.zeros((0, 0))
        if self.space == "sample":
            sigma = p * (phi_u @ phi_u.T)
            cap = max(64, n + n // 4)  # room for a few episodes; no further than the switch to feature space
            cap = max(n, min(cap, self.limit)) if self.limit is not None else cap
            self._v, self._w = np.empty((cap, self.dim)), np.empty((cap, phi_u.shape[0]))
            if n:
                chol = jitter_cholesky(p * (data @ data.T) + s2 * np.eye(n), "Gram matrix")
                self._v[:n] = p * solve_triangular(chol, data, lower=True, check_finite=False)
                self._w[:n] = self._v[:n] @ phi_u.T
                sigma -= self._w[:n].T @ self._w[:n]
        else:
            precision = data.T @ data
            precision /= s2
            precision[np.diag_indices_from(precision)] += 1.0 / p
            chol = jitter_cholesky(precision, "feature-space precision")
            del precision
            y = solve_triangular(chol, phi_u.T, lower=True, check_finite=False)  # (D, U)
            sigma = y.T @ y
            del y
            # S = P^-1 in place: chol.T is the Fortran-ordered upper factor; S's upper triangle is kept (UPPER)
            self._s, info = dpotri(chol.T, lower=0, overwrite_c=1)
            if info != 0:
                raise ValueError(f"feature-space precision could not be inverted (LAPACK info {info})")
        self.cov = HallucinationCovariance(sigma, self.layout, s2, self.floor, self.form)
        self.version += 1

    def add_data(self, rows: np.ndarray) -> None:
        """Condition on m more data rows (a new episode): Sigma_U and the data square root get a rank-m update."""
        rows = as_float64_2d(rows, "rows", self.dim)
        m = rows.shape[0]
        if m == 0:
            return
        if self.space == "sample" and self._choose_space(self._n + m) == "feature":
            self._to_feature_space()
        factor = self._add_sample(rows) if self.space == "sample" else self._add_feature(rows)
        self.cov.downdate(factor)
        self._n += m
        self.version += 1

    def _add_sample(self, rows: np.ndarray) -> np.ndarray:
        n, m, p = self._n, rows.shape[0], self.prior_var
        v, w = self._v[:n], self._w[:n]
        b = v @ rows.T  # (N, m) = L^-1 K_Xn
        system = p * (rows @ rows.T) + self.noise_var * np.eye(m) - b.T @ b  # Sigma_nn + s2 I
        chol = jitter_cholesky(system, "new rows' covariance")
        cross = p * (rows @ self.layout.rows.T) - b.T @ w  # (m, U) = Sigma_nU
        v_new = solve_triangular(chol, p * rows - b.T @ v, lower=True, check_finite=False)
        factor = solve_triangular(chol, cross, lower=True, check_finite=False)
        if n + m > self._v.shape[0]:  # amortised growth (x1.5), never past the switch to feature space
            cap = max(n + m, min(int(1.5 * self._v.shape[0]), (self.limit or 1 << 62) + m))
            self._v = np.concatenate([self._v[:n], np.empty((cap - n, self.dim))])
            self._w = np.concatenate([self._w[:n], np.empty((cap - n, self._w.shape[1]))])
        self._v[n:n + m], self._w[n:n + m] = v_new, factor
        return factor

    def _add_feature(self, rows: np.ndarray) -> np.ndarray:
        g = dsymm(1.0, self._s, rows.T, lower=UPPER)  # (D, m) = S Phi_n^T
        system = rows @ g + self.noise_var * np.eye(rows.shape[0])
        system = 0.5 * (system + system.T)
        chol = jitter_cholesky(system, "new rows' covariance")
        h = solve_triangular(chol, g.T, lower=True, check_finite=False)  # (m, D) = L^-1 Phi_n S
        self._s = dsyrk(-1.0, h, beta=1.0, c=self._s, trans=1, lower=UPPER, overwrite_c=1)  # S -= h^T h
        return h @ self.layout.rows.T  # (m, U) = L^-1 Sigma_nU

    def _to_feature_space(self) -> None:
        """S = prior_var I - V^T V from the sample-space square root (once, when feature space gets cheaper)."""
        logger.info("incremental criterion: %d rows, switching to feature space", self._n)
        s = np.asfortranarray(self.prior_var * np.eye(self.dim))
        self._s = dsyrk(-1.0, self._v[:self._n], beta=1.0, c=s, trans=1, lower=UPPER, overwrite_c=1)
        self._v, self._w = np.zeros((0, self.dim)), np.zeros((0, self.layout.rows.shape[0]))
        self.space = "feature"

    def pick_block(self, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(R, aux, Sigma_RU (m, U)) of m extra rows R given the data, the state untouched: what a greedy batch needs
        to condition on rows that are no candidate's (a pick counted as a recorded demonstration). ``aux`` (V R^T in
        sample space, S R^T in feature space) gives the covariance between two such blocks (:meth:`_between`).
        ~N D m (sample) or D^2 m (feature) flops."""
        rows = as_float64_2d(rows, "rows", self.dim)
        if self.space == "sample":
            aux = self._v[:self._n] @ rows.T  # (N, m)
            cross = self.prior_var * (rows @ self.layout.rows.T) - aux.T @ self._w[:self._n]
        else:
            aux = dsymm(1.0, self._s, rows.T, lower=UPPER)  # (D, m)
            cross = aux.T @ self.layout.rows.T
        return rows, aux, cross

    def _between(self, a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> np.ndarray:
        """Sigma(R_a, R_b) given the data, from two :meth:`pick_block` results of the same data version."""
        if self.space == "sample":
            return self.prior_var * (a[0] @ b[0].T) - a[1].T @ b[1]
        return a[0] @ b[1]

    def with_pick_rows(self, blocks: dict[int, tuple[np.ndarray, ...]]) -> HallucinationCovariance:
        """Sigma over U and extra rows, where a greedy pick of candidate i conditions on ``blocks[i]``'s rows (a
        :meth:`pick_block` of this data version) instead of its heaviest alternative (candidates not in ``blocks``:
        that alternative). Scores are unchanged (same targets and candidates); only what a pick conditions on
        differs. Costs one copy of Sigma_U."""
        lay, u = self.layout, self.layout.rows.shape[0]
        bad = [i for i in blocks if not 0 <= i < lay.num_candidates]
        if bad:
            raise ValueError(f"candidate indices must be in [0, {lay.num_candidates}), got {bad}")
        if not blocks:
            return self.cov
        parts = list(blocks.values())
        sizes = np.cumsum([0] + [b[0].shape[0] for b in parts])
        sigma = np.empty((u + sizes[-1],) * 2)
        sigma[:u, :u] = self.cov.sigma
        for a, pa in enumerate(parts):
            ra = slice(u + sizes[a], u + sizes[a + 1])
            sigma[ra, :u], sigma[:u, ra] = pa[2], pa[2].T
            for b in range(a, len(parts)):
                rb = slice(u + sizes[b], u + sizes[b + 1])
                block = self._between(pa, parts[b])
                sigma[ra, rb] = 0.5 * (block + block.T) if a == b else block
                sigma[rb, ra] = sigma[ra, rb].T
        where = {i: np.arange(u + sizes[k], u + sizes[k + 1]) for k, i in enumerate(blocks)}
        picks = tuple(where.get(i, lay.picks[i]) for i in range(lay.num_candidates))
        layout = Layout(np.concatenate([lay.rows, *[b[0] for b in parts]]), lay.q_idx, lay.q_w, lay.groups, picks,
                        lay.num_candidates)
        return HallucinationCovariance(sigma, layout, self.noise_var, self.floor, self.form)

    # ---------------------------------------------------------------------------------------------- criterion
    def scores(self, chosen: Sequence[int] = ()) -> np.ndarray:
        """(num_candidates,) criterion after hallucinating the heaviest demo of each ``chosen`` candidate in order
        (not cached: see :meth:`score_fn` for greedy batches)."""
        if not chosen:
            return self.cov.scores()
        state = self.cov.copy()
        for c in chosen:
            state.condition_on(self._candidate(c))
        return state.scores()

    def _candidate(self, c: int) -> int:
        if not (isinstance(c, (int, np.integer)) and 0 <= c < self.layout.num_candidates):
            raise ValueError(f"candidate index must be in [0, {self.layout.num_candidates}), got {c!r}")
        return int(c)

    def score_fn(self, keys: Sequence[str], pick_rows_of: Callable[[str], np.ndarray | None] | None = None
                 ) -> Callable[[list[str], list[str]], np.ndarray]:
        """A :data:`~amf_ros.core.selection.ScoreFn` over task keys (``keys[i]`` = candidate i) that stays valid
        across :meth:`add_data`; greedy batch picks reuse the previous pick's Sigma_U (:class:`PickCache`).

        ``pick_rows_of``: task key -> the (m, D) rows a pick of it earlier in the batch conditions on, or None for
        its heaviest hallucinated alternative (None = always that: Algorithm 1); read once per task and data
        version, when the task is first picked (:meth:`pick_block`, :meth:`with_pick_rows`), so a batch pays for the
        rows of the tasks it picks only.
        """
        keys = [str(k) for k in keys]
        if len(keys) != self.layout.num_candidates or len(set(keys)) != len(keys):
            raise ValueError(f"need {self.layout.num_candidates} distinct keys, got {keys}")
        where = {k: i for i, k in enumerate(keys)}
        engine = self
        cache: dict[str, Any] = {"version": -1, "picks": None, "blocks": {}, "extended": ()}

        def fn(candidates: list[str], chosen: list[str]) -> np.ndarray:
            unknown = [c for c in [*candidates, *chosen] if c not in where]
            if unknown:
                raise ValueError(f"unknown task(s) {unknown}; the criterion knows {keys}")
            if not chosen:
                s = engine.cov.scores()
            else:
                if cache["version"] != engine.version:
                    cache.update(version=engine.version, picks=None, blocks={}, extended=())
                if pick_rows_of is not None:
                    blocks = cache["blocks"]
                    for c in chosen:
                        if where[c] not in blocks:
                            rows = pick_rows_of(c)
                            blocks[where[c]] = None if rows is None else engine.pick_block(rows)
                    need = tuple(i for i, b in blocks.items() if b is not None)
                    if cache["picks"] is None or need != cache["extended"]:  # a newly picked task with rows
                        cache["extended"] = need
                        cache["picks"] = PickCache(engine.with_pick_rows({i: blocks[i] for i in need}))
                elif cache["picks"] is None:
                    cache["picks"] = PickCache(engine.cov)
                s = cache["picks"].state([where[c] for c in chosen]).scores()
            return s[[where[c] for c in candidates]]

        return fn
