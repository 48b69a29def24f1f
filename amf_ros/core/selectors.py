"""Task selectors behind one interface: amf, uniform, round_robin, rebalancing, and the peer rules vfd, action_l2,
gu, diversity, dropout.

Why one interface: the benchmarks, the ROS task_selector node and the NN experiments swap selectors by name
(``make_selector("amf")``) and log the same :class:`Selection` (chosen tasks plus every candidate's score).

* ``amf`` -- warm start (each candidate once in random order, finite task sets), then the argmin of a criterion
  ``score_fn`` (lower = more informative). Batches are chosen greedily: the score function is told which tasks were already
  chosen this round so that it can condition on their hallucinated demonstrations (Algorithm 1, batch B).
* ``uniform`` -- i.i.d. uniform over the candidates (with replacement).
* ``round_robin`` -- the candidate with the fewest fine-tuning demonstrations, ties in candidate order.
* ``rebalancing`` -- App. J's privileged baseline: fewest *pre-training + fine-tuning* demonstrations
  (needs ``pretrain_counts``, which AMF never sees).
* ``vfd``, ``action_l2``, ``gu`` -- SAVE's ensemble-disagreement rules (learnsyslab/uq_vla), batch rule
  "task-weighted": B i.i.d. draws with P(c) proportional to u(c)^T, u = -score (:class:`UncertaintySelector`).
* ``dropout`` -- the AMF paper's Dropout baseline: the B candidates of highest prior entropy (top-B).
* ``diversity`` -- k-center greedy (uq_vla's Diversity baseline): greedy argmin, the score function adding each pick
  to the covered set; exact ties broken at random (the random first pick of k-center greedy).

The peer rules' selectors are in :mod:`amf_ros.core.peer_selectors`, their score functions (they need a policy, an
ensemble or embeddings) in :mod:`amf_ros.core.acquisition`; selectors only see scores.
"""

from __future__ import annotations

import importlib
import logging
from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

logger = logging.getLogger(__name__)

#: (candidates, tasks already chosen in this batch) -> (len(candidates),) scores, lower = better.
ScoreFn = Callable[[list[str], list[str]], np.ndarray]


@dataclass
class Selection:
    """What a selector chose and why.

    Attributes:
        tasks: chosen task keys, len = batch_size, in selection order.
        scores: every candidate's score (amf and the peer rules vfd, action_l2, gu, diversity, dropout: the
            score function's value for the first pick, lower = better; uniform, round_robin, rebalancing: the
            probability of being picked first). During a warm start: 0.0 = not demonstrated yet, 1.0 = seen.
        warm_start: True if any task of this batch was chosen by the warm start.
        info: extra diagnostics, e.g. {"form": ..., "effective_sample_size": {...}, "batch_scores": [...]}.
    """

    tasks: list[str]
    scores: dict[str, float]
    warm_start: bool
    info: dict = field(default_factory=dict)


class Selector(Protocol):
    """Chooses the next ``batch_size`` tasks to demonstrate."""

    name: str

    def select(self, candidates: list[str], demo_counts: Mapping[str, int], rng: np.random.Generator,
               batch_size: int = 1, score_fn: ScoreFn | None = None,
               pretrain_counts: Mapping[str, int] | None = None) -> Selection:
        ...


def _validate(candidates: Sequence[str], demo_counts: Mapping[str, int], batch_size: int,
              known: frozenset[str] | None) -> list[str]:
    cands = list(candidates)
    if not cands:
        raise ValueError("empty candidate task set: nothing to select from")
    if len(set(cands)) != len(cands):
        dup = sorted({c for c in cands if cands.count(c) > 1})
        raise ValueError(f"duplicate candidate tasks {dup}")
    if known is not None:
        unknown = [c for c in cands if c not in known]
        if unknown:
            raise ValueError(f"unknown candidate task(s) {unknown}; known tasks: {sorted(known)}")
    if not isinstance(batch_size, (int, np.integer)) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size=}")
    bad = {k: v for k, v in demo_counts.items() if not isinstance(v, (int, np.integer)) or v < 0}
    if bad:
        raise ValueError(f"demo_counts must be non-negative integers, got {bad}")
    return cands


def _check_scores(scores: np.ndarray, candidates: list[str]) -> np.ndarray:
    s = np.asarray(scores, dtype=np.float64)
    if s.shape != (len(candidates),):
        raise ValueError(f"score_fn returned shape {s.shape}, expected ({len(candidates)},)")
    bad = [candidates[i] for i in np.flatnonzero(~np.isfinite(s))]
    if bad:
        raise ValueError(f"score_fn returned non-finite scores for {bad}")
    return s


def _warm_start_picks(cands: list[str], demo_counts: Mapping[str, int], rng: np.random.Generator,
                      batch_size: int) -> list[str]:
    """Up to ``batch_size`` candidates without a fine-tuning demonstration, in random order.

    Warm start = the first |C| demonstrations uniformly without replacement (App. M), in random order: a fixed order
    would spend the first rounds on whatever tasks happen to be listed first.
    """
    unseen = [c for c in cands if demo_counts.get(c, 0) == 0]
    return [unseen[i] for i in rng.permutation(len(unseen))[:batch_size]]


class _Base:
    name = "base"

    def __init__(self, tasks: Sequence[str] | None = None) -> None:
        self.known = frozenset(tasks) if tasks is not None else None


class UniformSelector(_Base):
    """I.i.d. uniform over the candidates."""

    name = "uniform"

    def select(self, candidates: list[str], demo_counts: Mapping[str, int], rng: np.random.Generator,
               batch_size: int = 1, score_fn: ScoreFn | None = None,
               pretrain_counts: Mapping[str, int] | None = None) -> Selection:
        cands = _validate(candidates, demo_counts, batch_size, self.known)
        idx = rng.integers(0, len(cands), size=batch_size)
        return Selection([cands[i] for i in idx], {c: 1.0 / len(cands) for c in cands}, False, {})


class _CountBalancer(_Base):
    """Picks the candidate with the lowest count, updating counts within the batch; ties in candidate order."""

    def _counts(self, cands: list[str], demo_counts: Mapping[str, int],
                pretrain_counts: Mapping[str, int] | None) -> np.ndarray:
        return np.array([demo_counts.get(c, 0) for c in cands], dtype=np.int64)

    def select(self, candidates: list[str], demo_counts: Mapping[str, int], rng: np.random.Generator,
               batch_size: int = 1, score_fn: ScoreFn | None = None,
               pretrain_counts: Mapping[str, int] | None = None) -> Selection:
        cands = _validate(candidates, demo_counts, batch_size, self.known)
        counts = self._counts(cands, demo_counts, pretrain_counts)
        ties = counts == counts.min()
        scores = {c: float(t) / float(ties.sum()) for c, t in zip(cands, ties)}
        chosen = []
        for _ in range(batch_size):
            i = int(np.argmin(counts))  # first minimum = candidate order
            chosen.append(cands[i])
            counts[i] += 1
        return Selection(chosen, scores, False, {"counts": dict(zip(cands, self._counts(
            cands, demo_counts, pretrain_counts).tolist()))})


class RoundRobinSelector(_CountBalancer):
    """Balances fine-tuning demonstration counts."""

    name = "round_robin"


class RebalancingSelector(_CountBalancer):
    """Privileged baseline (App. J): balances pre-training + fine-tuning counts."""

    name = "rebalancing"

    def _counts(self, cands: list[str], demo_counts: Mapping[str, int],
                pretrain_counts: Mapping[str, int] | None) -> np.ndarray:
        if pretrain_counts is None:
            raise ValueError("rebalancing needs pretrain_counts (it is the privileged baseline of App. J)")
        return np.array([demo_counts.get(c, 0) + pretrain_counts.get(c, 0) for c in cands], dtype=np.int64)


class AMFSelector(_Base):
    """Warm start, then greedy argmin of the AMF criterion.

    Args:
        tasks: the known task set (candidates outside it raise ValueError); None = accept any key.
        warm_start: demonstrate every candidate with zero fine-tuning demonstrations first (finite task sets);
            set False for continuous task spaces with random shooting.
    """

    name = "amf"

    def __init__(self, tasks: Sequence[str] | None = None, warm_start: bool = True) -> None:
        super().__init__(tasks)
        self.warm_start = bool(warm_start)

    def select(self, candidates: list[str], demo_counts: Mapping[str, int], rng: np.random.Generator,
               batch_size: int = 1, score_fn: ScoreFn | None = None,
               pretrain_counts: Mapping[str, int] | None = None) -> Selection:
        cands = _validate(candidates, demo_counts, batch_size, self.known)
        chosen = _warm_start_picks(cands, demo_counts, rng, batch_size) if self.warm_start else []
        warm = bool(chosen)
        info: dict = {"warm_start_tasks": list(chosen)}
        return greedy_selection(cands, chosen, warm, info, demo_counts, batch_size, score_fn,
                                "amf needs a score_fn once the warm start is over")


def greedy_selection(cands: list[str], chosen: list[str], warm: bool, info: dict, demo_counts: Mapping[str, int],
                     batch_size: int, score_fn: ScoreFn | None, missing: str,
                     tie_rng: np.random.Generator | None = None) -> Selection:
    """Fill the batch after the warm-start picks ``chosen`` by the greedy argmin of ``score_fn`` conditioned on the
    picks so far (Algorithm 1's batch rule; amf, diversity). Ties: the first candidate, or a random one with
    ``tie_rng``. ``missing``: the error when a score is needed and there is no ``score_fn``. The scores reported are
    those of the first scored pick (during a warm-start-only batch: 0.0 = not demonstrated yet, 1.0 = seen)."""
    batch_scores: list[dict[str, float]] = []
    while len(chosen) < batch_size:
        if score_fn is None:
            raise ValueError(missing)
        s = _check_scores(score_fn(cands, list(chosen)), cands)
        batch_scores.append(dict(zip(cands, s.tolist())))
        ties = np.flatnonzero(s == s.min())
        pick = int(ties[tie_rng.integers(len(ties))]) if tie_rng is not None and len(ties) > 1 else int(np.argmin(s))
        chosen.append(cands[pick])
    scores = batch_scores[0] if batch_scores else {c: float(demo_counts.get(c, 0) > 0) for c in cands}
    info["batch_scores"] = batch_scores
    extra = getattr(score_fn, "last_info", None)
    if isinstance(extra, dict):
        info.update(extra)
    return Selection(chosen, scores, warm, info)


_SELECTORS: dict[str, str] = {  # name -> "module:Class", imported on first use
    "amf": "amf_ros.core.selectors:AMFSelector",
    "uniform": "amf_ros.core.selectors:UniformSelector",
    "round_robin": "amf_ros.core.selectors:RoundRobinSelector",
    "rebalancing": "amf_ros.core.selectors:RebalancingSelector",
    "vfd": "amf_ros.core.peer_selectors:VFDSelector",
    "action_l2": "amf_ros.core.peer_selectors:ActionL2Selector",
    "gu": "amf_ros.core.peer_selectors:GUSelector",
    "diversity": "amf_ros.core.peer_selectors:DiversitySelector",
    "dropout": "amf_ros.core.peer_selectors:DropoutSelector",
}

#: Names accepted by :func:`make_selector`.
SELECTOR_NAMES: tuple[str, ...] = tuple(_SELECTORS)


def make_selector(name: str, **kwargs) -> Selector:
    """Build a selector by name (:data:`SELECTOR_NAMES`).

    kwargs: ``tasks`` (known task set, all selectors); ``warm_start`` (amf and the peer rules); ``batch_rule`` and
    ``temperature`` (vfd, action_l2, gu, dropout).
    """
    if name not in _SELECTORS:
        raise ValueError(f"unknown selector {name!r}; choose from {list(_SELECTORS)}")
    module, cls = _SELECTORS[name].split(":")
    return getattr(importlib.import_module(module), cls)(**kwargs)
