"""The selector contract every task selector shares: the score function type, what a selection returns, the
Selector protocol, the checks of a selector's inputs, the warm start and the greedy batch rule.

Why a module of its own: the built-in selectors (:mod:`amf_ros.core.selectors`, which also registers every selector
by name) and the peer rules' selectors (:mod:`amf_ros.core.peer_selectors`) are both built on these; here they sit
below both, so the registry can import the peer selectors without either importing the other back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Mapping, Protocol, Sequence

import numpy as np

#: (candidates, tasks already chosen in this batch) -> (len(candidates),) scores, lower = better.
ScoreFn = Callable[[list[str], list[str]], np.ndarray]

BATCH_CONDITIONING: tuple[str, ...] = ("hallucinated", "recorded")
"""What a task picked earlier in a greedy batch is conditioned on while the next pick is scored (AMF's
``amf_nn_score_fn`` ``batch_conditioning``; the paper's first). Here, beside the greedy batch rule, so that the
parameter schema and the command lines name the choices without importing the criterion (scipy)."""


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
        """Choose ``batch_size`` tasks among ``candidates`` (repeats allowed) and report every candidate's score."""
        ...


def check_candidates(candidates: Sequence[str], demo_counts: Mapping[str, int], batch_size: int,
                     known: frozenset[str] | None) -> list[str]:
    """The candidates as a list, after ValueError for what no selector accepts: none, duplicates, keys outside the
    known task set, a batch size below 1, negative or non-integer demonstration counts."""
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


def check_scores(scores: np.ndarray, candidates: list[str]) -> np.ndarray:
    """A score function's output as (len(candidates),) float64, ValueError if it has another shape or a non-finite
    entry."""
    s = np.asarray(scores, dtype=np.float64)
    if s.shape != (len(candidates),):
        raise ValueError(f"score_fn returned shape {s.shape}, expected ({len(candidates)},)")
    bad = [candidates[i] for i in np.flatnonzero(~np.isfinite(s))]
    if bad:
        raise ValueError(f"score_fn returned non-finite scores for {bad}")
    return s


def warm_start_picks(cands: list[str], demo_counts: Mapping[str, int], rng: np.random.Generator,
                     batch_size: int) -> list[str]:
    """Up to ``batch_size`` candidates without a fine-tuning demonstration, in random order.

    Warm start = the first |C| demonstrations uniformly without replacement (App. M), in random order: a fixed order
    would spend the first rounds on whatever tasks happen to be listed first.
    """
    unseen = [c for c in cands if demo_counts.get(c, 0) == 0]
    return [unseen[i] for i in rng.permutation(len(unseen))[:batch_size]]


class SelectorBase:
    """What every selector has: its name and the known task set (None = accept any key)."""

    name = "base"

    def __init__(self, tasks: Sequence[str] | None = None) -> None:
        self.known = frozenset(tasks) if tasks is not None else None


class GreedySelector(SelectorBase):
    """Warm start (if enabled), then :func:`greedy_selection` on the score function (amf, progress, diversity).

    Args:
        tasks: the known task set (candidates outside it raise ValueError); None = accept any key.
        warm_start: each candidate without a demonstration first; None = the rule's :attr:`default_warm_start`.
    """

    default_warm_start = True
    random_ties = False
    """Break exact score ties with the selection's ``rng`` (else: the first candidate)."""
    score_fn_hint = ""
    """Where the score function comes from, for the error when it is missing ("" = nothing to add)."""

    def __init__(self, tasks: Sequence[str] | None = None, warm_start: bool | None = None) -> None:
        super().__init__(tasks)
        self.warm_start = self.default_warm_start if warm_start is None else bool(warm_start)

    def select(self, candidates: list[str], demo_counts: Mapping[str, int], rng: np.random.Generator,
               batch_size: int = 1, score_fn: ScoreFn | None = None,
               pretrain_counts: Mapping[str, int] | None = None) -> Selection:
        """Warm start (if enabled), then the greedy argmin of ``score_fn`` conditioned on this batch's picks."""
        cands = check_candidates(candidates, demo_counts, batch_size, self.known)
        chosen = warm_start_picks(cands, demo_counts, rng, batch_size) if self.warm_start else []
        info: dict = {"warm_start_tasks": list(chosen)}
        missing = (f"{self.name} needs a score_fn" + (" once the warm start is over" if self.warm_start else "")
                   + (f" ({self.score_fn_hint})" if self.score_fn_hint else ""))
        return greedy_selection(cands, chosen, bool(chosen), info, demo_counts, batch_size, score_fn, missing,
                                tie_rng=rng if self.random_ties else None)




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
        s = check_scores(score_fn(cands, list(chosen)), cands)
        batch_scores.append(dict(zip(cands, s.tolist(), strict=True)))
        ties = np.flatnonzero(s == s.min())
        pick = int(ties[tie_rng.integers(len(ties))]) if tie_rng is not None and len(ties) > 1 else int(np.argmin(s))
        chosen.append(cands[pick])
    scores = batch_scores[0] if batch_scores else {c: float(demo_counts.get(c, 0) > 0) for c in cands}
    info["batch_scores"] = batch_scores
    extra = getattr(score_fn, "last_info", None)
    if isinstance(extra, dict):
        info.update(extra)
    return Selection(chosen, scores, warm, info)
