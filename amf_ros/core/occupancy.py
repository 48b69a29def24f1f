"""Assemble App. E's sums: target points and hallucinated demonstrations from importance-weighted trajectories.

Why: the criterion (``core/criterion.py``) scores inputs; this module decides *which* inputs, following App. E:

    phi(c') ~ 1/|C_hat| sum_c sum_{tau'} sum_{tau} w(tau', c') w(tau, c) sum_t H(pi(s_t, c) | tau' as c', data)

* targets: for each target task c and collected trajectory tau_k, the states of tau_k paired with c, each with
  weight w_hat(tau_k, c) / |C_hat|;
* hallucinated demos of candidate c': the collected trajectories relabelled with c', weights w_hat(tau_j, c').

``w_hat`` is eq. 4 normalised per task: "self" (self-normalised importance sampling, our default: every task's
occupancy sums to 1, so candidates far from all data cannot win merely because all their raw weights are tiny) or
"mean" (App. E's plain average, ``w / n``). Weights below ``min_weight`` times the task's largest weight are dropped
(and "self" columns renormalised), and optionally only the ``max_trajectories`` heaviest are kept per task
(App. E's remark that a fixed number of trajectories makes the cost independent of the round).
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from amf_ros.core.importance import effective_sample_size, normalize_weights

#: (states (H, S) of one trajectory, task vector (T,)) -> criterion inputs (H, d) (GP inputs or features).
JoinFn = Callable[[np.ndarray, np.ndarray], np.ndarray]


def _prune(w: np.ndarray, min_weight: float, renormalize: bool, max_trajectories: int | None) -> np.ndarray:
    col_max = w.max(axis=0, keepdims=True)
    out = np.where(w >= min_weight * col_max, w, 0.0)
    if max_trajectories is not None and max_trajectories < w.shape[0]:
        rank = np.argsort(np.argsort(-w, axis=0, kind="stable"), axis=0)  # 0 = heaviest
        out = np.where(rank < max_trajectories, out, 0.0)
    if renormalize:
        total = out.sum(axis=0, keepdims=True)
        out = np.divide(out, total, out=np.zeros_like(out), where=total > 0)
    return out


def app_e_inputs(traj_states: Sequence[np.ndarray], target_tasks: np.ndarray, candidate_tasks: np.ndarray,
                 w_target: np.ndarray, w_candidate: np.ndarray, join: JoinFn, normalize: str = "self",
                 min_weight: float = 1e-3, max_trajectories: int | None = None
                 ) -> tuple[np.ndarray, np.ndarray, list[list[np.ndarray]], list[np.ndarray], dict]:
    """Inputs of :func:`~amf_ros.core.criterion.posterior_criterion` from n collected trajectories.

    Args:
        traj_states: n arrays (H_k, S), the states of each collected trajectory (H_k >= 1).
        target_tasks: (Ct, T) target task vectors (the finite set, or samples of mu_c).
        candidate_tasks: (Cc, T) candidate task vectors.
        w_target: (n, Ct) raw eq.-4 weights of each trajectory for each target task.
        w_candidate: (n, Cc) raw eq.-4 weights for each candidate task.
        join: builds criterion inputs from a trajectory's states and a task vector.
        normalize: "self" or "mean" (see module docstring).
        min_weight: relative pruning threshold in [0, 1).
        max_trajectories: keep at most this many heaviest trajectories per task (App. E: "a fixed number of
            trajectories" makes the cost independent of the round); None = all.
    Returns:
        target_x (Q, d), target_w (Q,), candidate_x (per candidate, list of (H_j, d)), candidate_w (per candidate
        (J,)), info {"ess_target": [...], "ess_candidate": [...]} (Kish effective sample sizes of the raw weights).
    """
    n = len(traj_states)
    if n == 0:
        raise ValueError("no collected trajectories: the occupancy cannot be estimated yet (use the warm start)")
    for k, s in enumerate(traj_states):
        s = np.asarray(s)
        if s.ndim != 2 or s.shape[0] == 0:
            raise ValueError(f"trajectory {k} must be (H >= 1, S) states, got shape {s.shape}")
        if not np.all(np.isfinite(s)):
            raise ValueError(f"trajectory {k} has NaN or inf states")
    target_tasks, candidate_tasks = np.atleast_2d(target_tasks), np.atleast_2d(candidate_tasks)
    if w_target.shape != (n, target_tasks.shape[0]):
        raise ValueError(f"w_target must be {(n, target_tasks.shape[0])}, got {w_target.shape}")
    if w_candidate.shape != (n, candidate_tasks.shape[0]):
        raise ValueError(f"w_candidate must be {(n, candidate_tasks.shape[0])}, got {w_candidate.shape}")
    if not 0 <= min_weight < 1:
        raise ValueError(f"min_weight must be in [0, 1), got {min_weight=}")
    if max_trajectories is not None and max_trajectories < 1:
        raise ValueError(f"max_trajectories must be >= 1 or None, got {max_trajectories=}")
    renorm = normalize == "self"
    wt = _prune(normalize_weights(w_target, normalize), min_weight, renorm, max_trajectories)
    wc = _prune(normalize_weights(w_candidate, normalize), min_weight, renorm, max_trajectories)
    xs, ws = [], []
    n_tasks = target_tasks.shape[0]
    for j in range(n_tasks):
        for k in np.flatnonzero(wt[:, j]):
            x = join(np.asarray(traj_states[k], dtype=np.float64), target_tasks[j])
            xs.append(x)
            ws.append(np.full(x.shape[0], wt[k, j] / n_tasks))
    cand_x: list[list[np.ndarray]] = []
    cand_w: list[np.ndarray] = []
    for j in range(candidate_tasks.shape[0]):
        ks = np.flatnonzero(wc[:, j])
        if ks.size == 0:
            raise ValueError(f"candidate {j} has zero weight on every trajectory; cannot hallucinate its demo")
        cand_x.append([join(np.asarray(traj_states[k], dtype=np.float64), candidate_tasks[j]) for k in ks])
        cand_w.append(wc[ks, j])
    info = {"ess_target": effective_sample_size(w_target).tolist(),
            "ess_candidate": effective_sample_size(w_candidate).tolist()}
    return np.concatenate(xs), np.concatenate(ws), cand_x, cand_w, info
