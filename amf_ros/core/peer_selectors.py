"""The peer acquisition rules as selectors: SAVE's (learnsyslab/uq_vla) vfd, action_l2, gu and diversity, and the
AMF paper's Dropout baseline; registered by name in :mod:`amf_ros.core.selectors`.

Each selector only turns scores into picks (batch rule, warm start); what a rule measures is its score function in
:mod:`amf_ros.policies.peer_scores` (the rules that run the policy's head) or :mod:`amf_ros.core.acquisition`.
Scores follow the ScoreFn convention, lower = chosen first: the uncertainty rules return -u.

uq_vla selects episodes from a pool of recorded ones, scored at each episode's first frame and averaged per task;
amf_ros selects tasks, so a rule's per-task score is the mean over the candidate's states (acquisition.py), and
uq_vla's per-task caps (the pool size) do not apply.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from amf_ros.core.selection import (
    GreedySelector,
    ScoreFn,
    Selection,
    SelectorBase,
    check_candidates,
    check_scores,
    warm_start_picks,
)

UQ_VLA = "learnsyslab/uq_vla@bcc2433 active_learning/"
"""Where the peer rules come from (SAVE, arXiv 2606.18043): the published tree; ``src/iterative_fine_tuning/
selection.py`` at the repository root (commit daffea8) has the same task-weighted rule."""


class UncertaintySelector(SelectorBase):
    """Highest uncertainty u = -score first, by one of three batch rules (the peer rules' shared machinery).

    * ``"weighted"`` -- uq_vla's ``task_weighted_top_k`` (``src/iterative_fine_tuning/selection.py``:
      ``_sample_task_counts_by_uncertainty``): B draws with replacement, P(c) = u'(c)^T / sum_c' u'(c')^T with
      u' = max(u, 0) (``shift``: u' = u - min u + 0.01 (max u - min u), GU's transform for log-variances), uniform
      when T = 0 or every u' is 0. uq_vla caps a task by its pool of recorded candidate episodes; a task here can
      be demonstrated any number of times, so there is no cap.
    * ``"top_k"`` -- the B candidates of highest u, distinct (cycling through the ranking when B > |C|); ties in
      candidate order.
    * ``"greedy"`` -- argmax of u, re-scored after every pick with the picks so far (like amf).

    The score function is called once per pick (``"greedy"``) or once per batch (the others, whose scores do not
    depend on the picks: ``chosen`` is empty).

    Args:
        tasks: the known task set (candidates outside it raise ValueError); None = accept any key.
        warm_start: each candidate without a demonstration first (as amf); None = the rule's default.
        batch_rule: "weighted" | "top_k" | "greedy"; None = the rule's default.
        temperature: T of the weighted rule (>= 0); None = the rule's default.
    """

    name = "uncertainty"
    default_rule = "weighted"
    default_temperature = 1.0
    default_warm_start = False
    shift = False
    score_source = "ensemble_score_fn"

    def __init__(self, tasks: Sequence[str] | None = None, warm_start: bool | None = None,
                 batch_rule: str | None = None, temperature: float | None = None) -> None:
        super().__init__(tasks)
        self.warm_start = self.default_warm_start if warm_start is None else bool(warm_start)
        self.batch_rule = self.default_rule if batch_rule is None else str(batch_rule)
        self.temperature = float(self.default_temperature if temperature is None else temperature)
        if self.batch_rule not in ("weighted", "top_k", "greedy"):
            raise ValueError(f"batch_rule must be 'weighted', 'top_k' or 'greedy', got {self.batch_rule=}")
        if not np.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(f"temperature must be finite and >= 0, got {self.temperature=}")

    def pick_probabilities(self, u: np.ndarray) -> np.ndarray:
        """(C,) P(c) of one draw of the weighted rule from uncertainties u (C,)."""
        if self.shift:
            w = u - u.min() + 0.01 * (u.max() - u.min())
        else:
            w = np.maximum(u, 0.0)
        if self.temperature > 0:
            w = np.power(w, self.temperature)
        if self.temperature == 0 or not w.sum() > 0:
            return np.full(len(u), 1.0 / len(u))
        return w / w.sum()

    def select(self, candidates: list[str], demo_counts: Mapping[str, int], rng: np.random.Generator,
               batch_size: int = 1, score_fn: ScoreFn | None = None,
               pretrain_counts: Mapping[str, int] | None = None) -> Selection:
        """Warm start, then fill the batch by ``batch_rule`` from the uncertainty score (higher = more uncertain)."""
        cands = check_candidates(candidates, demo_counts, batch_size, self.known)
        chosen = warm_start_picks(cands, demo_counts, rng, batch_size) if self.warm_start else []
        warm = bool(chosen)
        info: dict = {"warm_start_tasks": list(chosen), "batch_rule": self.batch_rule}
        scores: dict[str, float] = {}
        if len(chosen) < batch_size:
            if score_fn is None:
                raise ValueError(f"{self.name} needs a score_fn" + (" once the warm start is over"
                                                                    if self.warm_start else "")
                                 + f" (amf_ros.policies.peer_scores.{self.score_source})")
            s = check_scores(score_fn(cands, list(chosen)), cands)
            scores = dict(zip(cands, s.tolist(), strict=True))
            extra = getattr(score_fn, "last_info", None)
            if isinstance(extra, dict):
                info.update(extra)
            need = batch_size - len(chosen)
            if self.batch_rule == "weighted":
                p = self.pick_probabilities(-s)
                info["pick_probability"] = dict(zip(cands, p.tolist(), strict=True))
                chosen.extend(cands[i] for i in rng.choice(len(cands), size=need, p=p))
            elif self.batch_rule == "top_k":
                order = np.argsort(s, kind="stable")
                chosen.extend(cands[order[i % len(cands)]] for i in range(need))
            else:
                batch_scores = [scores]
                chosen.append(cands[int(np.argmin(s))])
                while len(chosen) < batch_size:
                    s = check_scores(score_fn(cands, list(chosen)), cands)
                    batch_scores.append(dict(zip(cands, s.tolist(), strict=True)))
                    chosen.append(cands[int(np.argmin(s))])
                info["batch_scores"] = batch_scores
        else:
            scores = {c: float(demo_counts.get(c, 0) > 0) for c in cands}
        return Selection(chosen, scores, warm, info)


class VFDSelector(UncertaintySelector):
    """SAVE w/ VFD: velocity-field disagreement of a two-model ensemble, task-weighted draws at T = 2.5.

    Source (``UQ_VLA``): ``src/lerobot/uncertainty/uncertainty_scoring/scoring_metrics.py`` (``InterVelDiff``),
    ``src/lerobot/uncertainty/uncertainty_samplers/cross_bayesian_sampler.py``, the batch rule in
    ``src/iterative_fine_tuning/selection.py``, T = 2.5 and no warm start in ``configs/active_learning/smolvla/
    vfd.yaml`` (and xvla/vfd.yaml). Scores: :func:`amf_ros.policies.peer_scores.ensemble_score_fn` (metric "vfd").
    """

    name = "vfd"
    default_temperature = 2.5


class ActionL2Selector(UncertaintySelector):
    """SAVE w/ Action-L2: mean L2 distance between the ensemble members' sampled action chunks, T = 1.5.

    Source (``UQ_VLA``): ``scoring_metrics.py`` (``ActionL2Distance``), ``cross_bayesian_sampler.py`` (metric
    "action_l2"), the batch rule in ``src/iterative_fine_tuning/selection.py``, T = 1.5 in
    ``configs/active_learning/smolvla/action_l2.yaml``. Scores: ``ensemble_score_fn`` (metric "action_l2").
    """

    name = "action_l2"
    default_temperature = 1.5


class GUSelector(UncertaintySelector):
    """SAVE w/ GU: summed log-variance of the members' terminal actions from shared noise, T = 1, shifted weights.

    Source (``UQ_VLA``): ``scoring_metrics.py`` (``EnsembleTerminalVariance``), the shift for
    ``ensemble_terminal_variance`` in ``selection.py`` (``_sample_task_counts_by_uncertainty``), T = 1 in
    ``configs/active_learning/smolvla/gu.yaml``. Scores: ``ensemble_score_fn`` (metric "gu").
    """

    name = "gu"
    default_temperature = 1.0
    shift = True


class DropoutSelector(UncertaintySelector):
    """The AMF paper's Dropout baseline: maximal prior entropy under test-time MC dropout (Sec. 5, "How do
    uncertainty estimates for AMF compare?", Fig. 4 and its Metaworld appendix figure):
    argmax_c E sum_t H(pi(s_t, c) | tau_1:n-1), states of task c's demonstrations.

    Warm start as amf (the candidate's states come from its demonstrations); a batch is the B candidates of highest
    entropy (top-B: prior entropy does not change with hallucinated picks, and the paper runs B = 1). Scores:
    :func:`amf_ros.policies.peer_scores.dropout_score_fn`. Not one of uq_vla's rules.
    """

    name = "dropout"
    default_rule = "top_k"
    default_warm_start = True
    score_source = "dropout_score_fn"


class DiversitySelector(GreedySelector):
    """uq_vla's Diversity baseline: k-center greedy on embeddings, the candidate farthest from the covered set first.

    Source (``UQ_VLA``): ``scripts/active_learning/k_greedy.py`` (``k_center_greedy``: the first pick at random,
    then argmax of the distance to the nearest selected point; the covered set starts empty) and
    ``src/iterative_fine_tuning/selection.py`` (``_run_predefined_ranking_selection``: each round takes the next
    entries of that ranking), ``configs/active_learning/smolvla/diversity.yaml`` (no warm start).

    Batch: greedy, the score function is told the picks so far and adds each to the covered set
    (:func:`amf_ros.core.acquisition.diversity_score_fn`). Exact ties (e.g. nothing covered yet: every score 0) are
    broken at random with ``rng``, which gives k-center greedy's random first pick.

    Args:
        tasks: the known task set (candidates outside it raise ValueError); None = accept any key.
        warm_start: each candidate without a demonstration first (as amf); uq_vla has none.
    """

    name = "diversity"
    default_warm_start = False
    random_ties = True
    score_fn_hint = "amf_ros.core.acquisition.diversity_score_fn"
