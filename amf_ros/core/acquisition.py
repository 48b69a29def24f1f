"""ScoreFns of the peer acquisition rules (core/peer_selectors.py) that need no policy internals: the per-task
score machinery every uncertainty rule shares (:class:`PerTaskScores`), Diversity (learnsyslab/uq_vla), and the
candidate states drawn from recorded episodes. Lower score = chosen first.

The rules that evaluate action heads (SAVE's ensemble disagreement vfd, action_l2, gu, and the AMF paper's Dropout
baseline) need torch and the policies; they live in :mod:`amf_ros.policies.peer_scores` on top of the pieces here,
with :func:`~amf_ros.policies.peer_scores.peer_score_fn`, the one entry for task_selector and the benchmark. Why
split: core/ is numpy-only and imports nothing above it.

Candidate states: ``candidates = {task: transitions}``, the rows at which a rule looks at each candidate task; every
row is evaluated WITH that task (its ``task`` column is replaced), so the rows may come from anywhere:
* uq_vla scores the first frame of every candidate episode of a task and averages over them
  (``src/iterative_fine_tuning/selection.py``: ``_initial_frame_index``, ``_aggregate_task_uncertainty``): pass the
  initial observations of the task's scenes (a simulator can reset to them without demonstrating);
* the AMF paper's Dropout averages the entropy over states of the task's demonstrations (Sec. 5): pass frames of
  its recorded episodes (hence the warm start of that selector).

* :func:`diversity_score_fn`: k-center greedy on embeddings: score = -max_(x in X_c) min_(y in Y) ||x - y||, Y =
  the covered set (``covered`` rows plus, for each task already chosen in this batch, its farthest row).
  Diversity covers the picks; the uncertainty rules ignore ``chosen`` (they never condition on hallucinated
  demonstrations).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

Transitions = Mapping[str, np.ndarray]

ENSEMBLE_METRICS = ("vfd", "action_l2", "gu")
"""The ensemble disagreement rules (:func:`amf_ros.policies.peer_scores.ensemble_score_fn`)."""


def _rows(transitions: Transitions) -> int:
    sizes = {len(np.asarray(v)) for k, v in transitions.items() if k != "task"}
    if len(sizes) != 1:
        raise ValueError(f"transitions need columns of one length besides 'task', got {sorted(transitions)} "
                         f"with lengths {sorted(sizes)}")
    return sizes.pop()


def with_task(transitions: Transitions, task: str) -> dict[str, np.ndarray]:
    """``transitions`` with every row's ``task`` set to ``task``."""
    return {**transitions, "task": np.full(_rows(transitions), task)}


class PerTaskScores:
    """ScoreFn from one value per task, computed on first use for every task of ``candidates`` (then reused).

    Args:
        candidates: {task: transitions} (see the module docstring).
        uncertainty: ``(task, transitions with that task) -> float``, higher = more informative.
        name: the rule, for error messages and ``last_info``.
    """

    def __init__(self, candidates: Mapping[str, Transitions], uncertainty: Callable[[str, Transitions], float],
                 name: str) -> None:
        empty = [t for t, tr in candidates.items() if _rows(tr) == 0]
        if not candidates or empty:
            raise ValueError(f"{name} needs states of every candidate task, got none for "
                             f"{empty or 'any task'}")
        self.candidates = dict(candidates)
        self.uncertainty_fn = uncertainty
        self.name = name
        self.values: dict[str, float] | None = None
        self.last_info: dict[str, Any] = {}

    def __call__(self, cands: list[str], chosen: list[str]) -> np.ndarray:
        """Score ``cands`` (lower = more informative) from each task's cached value; ``chosen`` does not change them."""
        missing = [c for c in cands if c not in self.candidates]
        if missing:
            raise ValueError(f"{self.name}: no states of candidate task(s) {missing} to score; "
                             f"have {sorted(self.candidates)}")
        if self.values is None:
            self.values = {t: float(self.uncertainty_fn(t, with_task(tr, t))) for t, tr in self.candidates.items()}
        self.last_info = {"uncertainty": {c: self.values[c] for c in cands}, "rule": self.name}
        return -np.array([self.values[c] for c in cands], dtype=np.float64)


def _embedder(embed: Any) -> Callable[[Transitions], np.ndarray]:
    if hasattr(embed, "head_inputs"):
        return lambda tr: embed.head_inputs(tr).detach().numpy()
    return embed


class CoverageScores:
    """ScoreFn of k-center greedy (selector diversity); see :func:`diversity_score_fn`."""

    def __init__(self, points: Mapping[str, np.ndarray], covered: np.ndarray) -> None:
        self.points, self.covered = dict(points), covered
        self.last_info: dict[str, Any] = {}

    @staticmethod
    def _min_dist(x: np.ndarray, y: np.ndarray) -> np.ndarray:
        """(len(x),) distance of each row of x to its nearest row of y (inf when y is empty)."""
        if len(y) == 0:
            return np.full(len(x), np.inf)
        d2 = (x * x).sum(1)[:, None] + (y * y).sum(1)[None, :] - 2.0 * x @ y.T
        return np.sqrt(np.maximum(d2, 0.0)).min(1)

    def __call__(self, cands: list[str], chosen: list[str]) -> np.ndarray:
        """Score ``cands`` by minus their distance to the covered set grown by ``chosen`` (lower = farther = first)."""
        missing = [c for c in [*cands, *chosen] if c not in self.points]
        if missing:
            raise ValueError(f"diversity: no states of candidate task(s) {sorted(set(missing))} to embed; "
                             f"have {sorted(self.points)}")
        cov = [self.covered]
        for c in chosen:  # each pick covers its farthest point, as k-center greedy adds the point it chose
            y = np.concatenate(cov)
            d = self._min_dist(self.points[c], y)
            cov.append(self.points[c][[int(np.argmax(d))]] if len(y) else self.points[c][[0]])
        y = np.concatenate(cov)
        if len(y) == 0:  # nothing covered: every candidate ties (the selector picks at random)
            far = {c: 0.0 for c in cands}
        else:
            far = {c: float(self._min_dist(self.points[c], y).max()) for c in cands}
        self.last_info = {"coverage_distance": far, "rule": "diversity"}
        return -np.array([far[c] for c in cands], dtype=np.float64)


def diversity_score_fn(embed: Any, candidates: Mapping[str, Transitions],
                       covered: Transitions | None = None) -> CoverageScores:
    """ScoreFn of k-center greedy (uq_vla ``scripts/active_learning/k_greedy.py``) over embedded states.

    Args:
        embed: a policy (its ``head_inputs``: frame features + instruction embedding, i.e. the x = (s, c) the
            policy conditions on) or ``transitions -> (N, D)``. uq_vla embeds first frames with SigLIP.
        candidates: {task: transitions}, each row one candidate point of the task (uq_vla: one first frame per
            candidate episode); embedded with that task.
        covered: the already demonstrated points (their own ``task``), e.g. the first frame of every recorded
            episode; None = nothing covered yet.
    """
    emb = _embedder(embed)
    points = {t: np.asarray(emb(with_task(tr, t)), dtype=np.float64) for t, tr in candidates.items()}
    empty = [t for t, p in points.items() if p.ndim != 2 or len(p) == 0]
    if not points or empty:
        raise ValueError(f"diversity needs (N, D) embeddings of states of every candidate task, got none for "
                         f"{empty or 'any task'}")
    dim = next(iter(points.values())).shape[1]
    y = np.zeros((0, dim))
    if covered is not None and _rows(covered) > 0:
        y = np.asarray(emb(covered), dtype=np.float64)
    return CoverageScores(points, y)


PEER_RULES = (*ENSEMBLE_METRICS, "dropout", "diversity")
"""Rules whose scores :func:`amf_ros.policies.peer_scores.peer_score_fn` builds from recorded episodes."""


def _concat(parts: Sequence[Transitions]) -> dict[str, np.ndarray]:
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}


def recorded_candidates(episodes: Sequence[Transitions], tasks: Sequence[str], frames: int
                        ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
    """Candidate states of every task from recorded episodes, and diversity's covered set.

    Returns ({task: ``frames`` evenly spaced steps of each of its episodes}, the first step of every episode).
    Tasks without an episode are left out (the peer selectors warm-start them first).
    """
    if not episodes:
        raise ValueError("the peer rules score tasks on recorded episodes; there are none")
    per_task: dict[str, list[dict[str, np.ndarray]]] = {}
    firsts = []
    for ep in episodes:
        n = len(ep["task"])
        idx = np.unique(np.linspace(0, n - 1, min(n, frames)).round().astype(int))
        per_task.setdefault(str(np.asarray(ep["task"])[0]), []).append({k: np.asarray(v)[idx] for k, v in ep.items()})
        firsts.append({k: np.asarray(v)[:1] for k, v in ep.items()})
    return {t: _concat(per_task[t]) for t in tasks if t in per_task}, _concat(firsts)
