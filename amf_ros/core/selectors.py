"""Task selectors behind one interface: amf, uniform, round_robin, rebalancing, progress, and the peer rules vfd,
action_l2, gu, diversity, dropout.

Why one interface: the benchmarks, the ROS task_selector node and the NN experiments swap selectors by name
(``make_selector("amf")``) and log the same :class:`Selection` (chosen tasks plus every candidate's score).

* ``amf`` -- warm start (each candidate once in random order, finite task sets), then the argmin of a criterion
  ``score_fn`` (lower = more informative). Batches are chosen greedily: the score function is told which tasks were
  already chosen this round so that it can condition on their hallucinated demonstrations (Algorithm 1, batch B).
* ``uniform`` -- i.i.d. uniform over the candidates (with replacement).
* ``round_robin`` -- the candidate with the fewest fine-tuning demonstrations, ties in candidate order.
* ``rebalancing`` -- App. J's privileged baseline: fewest *pre-training + fine-tuning* demonstrations
  (needs ``pretrain_counts``, which AMF never sees).
* ``progress`` -- a learning-progress rival: warm start, then the greedy argmax of the predicted success gain of one
  more demonstration, from a per-task Kalman-filter trend of the evaluation history (score function
  :func:`amf_ros.core.progress.progress_score_fn`, which states the estimator); each pick moves that task along its
  predicted curve (the batch rule); exact ties (e.g. every task at success 1) broken at random.
* ``vfd``, ``action_l2``, ``gu`` -- SAVE's ensemble-disagreement rules (learnsyslab/uq_vla), batch rule
  "task-weighted": B i.i.d. draws with P(c) proportional to u(c)^T, u = -score (:class:`UncertaintySelector`).
* ``dropout`` -- the AMF paper's Dropout baseline: the B candidates of highest prior entropy (top-B).
* ``diversity`` -- k-center greedy (uq_vla's Diversity baseline): greedy argmin, the score function adding each pick
  to the covered set; exact ties broken at random (the random first pick of k-center greedy).

The peer rules' selectors are in :mod:`amf_ros.core.peer_selectors`, their score functions (they need a policy, an
ensemble or embeddings) in :mod:`amf_ros.policies.peer_scores` and :mod:`amf_ros.core.acquisition`; selectors only
see scores.
"""

from __future__ import annotations

import logging
from typing import Mapping

import numpy as np

from amf_ros.core.peer_selectors import (
    ActionL2Selector,
    DiversitySelector,
    DropoutSelector,
    GUSelector,
    VFDSelector,
)
from amf_ros.core.selection import (
    GreedySelector,
    ScoreFn,
    Selection,
    Selector,
    SelectorBase,
    check_candidates,
)

logger = logging.getLogger(__name__)

class UniformSelector(SelectorBase):
    """I.i.d. uniform over the candidates."""

    name = "uniform"

    def select(self, candidates: list[str], demo_counts: Mapping[str, int], rng: np.random.Generator,
               batch_size: int = 1, score_fn: ScoreFn | None = None,
               pretrain_counts: Mapping[str, int] | None = None) -> Selection:
        """Draw ``batch_size`` candidates i.i.d. uniformly (with replacement); every score is 1 / len(candidates)."""
        cands = check_candidates(candidates, demo_counts, batch_size, self.known)
        idx = rng.integers(0, len(cands), size=batch_size)
        return Selection([cands[i] for i in idx], {c: 1.0 / len(cands) for c in cands}, False, {})


class _CountBalancer(SelectorBase):
    """Picks the candidate with the lowest count, updating counts within the batch; ties in candidate order."""

    def _counts(self, cands: list[str], demo_counts: Mapping[str, int],
                pretrain_counts: Mapping[str, int] | None) -> np.ndarray:
        return np.array([demo_counts.get(c, 0) for c in cands], dtype=np.int64)

    def select(self, candidates: list[str], demo_counts: Mapping[str, int], rng: np.random.Generator,
               batch_size: int = 1, score_fn: ScoreFn | None = None,
               pretrain_counts: Mapping[str, int] | None = None) -> Selection:
        cands = check_candidates(candidates, demo_counts, batch_size, self.known)
        counts = self._counts(cands, demo_counts, pretrain_counts)
        ties = counts == counts.min()
        scores = {c: float(t) / float(ties.sum()) for c, t in zip(cands, ties, strict=True)}
        chosen = []
        for _ in range(batch_size):
            i = int(np.argmin(counts))  # first minimum = candidate order
            chosen.append(cands[i])
            counts[i] += 1
        return Selection(chosen, scores, False, {"counts": dict(zip(cands, self._counts(
            cands, demo_counts, pretrain_counts).tolist(), strict=True))})


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


class AMFSelector(GreedySelector):
    """Warm start, then greedy argmin of the AMF criterion (``warm_start`` False: for continuous task spaces with
    random shooting)."""

    name = "amf"


class ProgressSelector(GreedySelector):
    """Warm start (a slope needs a second evaluation point), then the greedy argmin of -(predicted gain of one more
    demonstration), the score function being :func:`amf_ros.core.progress.progress_score_fn` on the evaluation
    history (it gets the picks so far); exact ties broken at random."""

    name = "progress"
    random_ties = True
    score_fn_hint = "amf_ros.core.progress.progress_score_fn on the evaluation history"


_SELECTORS: dict[str, type[Selector]] = {
    "amf": AMFSelector,
    "uniform": UniformSelector,
    "round_robin": RoundRobinSelector,
    "rebalancing": RebalancingSelector,
    "progress": ProgressSelector,
    "vfd": VFDSelector,
    "action_l2": ActionL2Selector,
    "gu": GUSelector,
    "diversity": DiversitySelector,
    "dropout": DropoutSelector,
}

#: Names accepted by :func:`make_selector`.
SELECTOR_NAMES: tuple[str, ...] = tuple(_SELECTORS)


def make_selector(name: str, **kwargs) -> Selector:
    """Build a selector by name (:data:`SELECTOR_NAMES`).

    kwargs: ``tasks`` (known task set, all selectors); ``warm_start`` (amf, progress and the peer rules);
    ``batch_rule`` and ``temperature`` (vfd, action_l2, gu, dropout).
    """
    if name not in _SELECTORS:
        raise ValueError(f"unknown selector {name!r}; choose from {list(_SELECTORS)}")
    return _SELECTORS[name](**kwargs)
