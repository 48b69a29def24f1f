"""ScoreFns of the peer acquisition rules (core/peer_selectors.py): SAVE's ensemble disagreement (vfd, action_l2, gu)
and Diversity (learnsyslab/uq_vla), and the AMF paper's Dropout baseline. Lower score = chosen first.

Candidate states: ``candidates = {task: transitions}``, the rows at which a rule looks at each candidate task; every
row is evaluated WITH that task (its ``task`` column is replaced), so the rows may come from anywhere:
* uq_vla scores the first frame of every candidate episode of a task and averages over them
  (``src/iterative_fine_tuning/selection.py``: ``_initial_frame_index``, ``_aggregate_task_uncertainty``): pass the
  initial observations of the task's scenes (a simulator can reset to them without demonstrating);
* the AMF paper's Dropout averages the entropy over states of the task's demonstrations (Sec. 5): pass frames of
  its recorded episodes (hence the warm start of that selector).
A policy here is anything with ``head`` (an action head) and ``head_inputs(transitions) -> (N, E)`` (e.g.
``TaskConditionedPolicy``); uncertainties are in the normalized action space.

* :func:`ensemble_score_fn`: score = -u(c), u = mean over c's rows of the members' disagreement
  (policies/disagreement.py): "vfd" (denoiser KL along the first member's chains), "action_l2" or "gu". The
  ensemble is supplied by the caller: uq_vla pre-trains its two members from different seeds and fine-tunes both
  every round on the same data; the smallest version is two copies of one checkpoint fine-tuned with different
  seeds. members[0] is the sampler (uq_vla: the first member, the one evaluated).
* :func:`dropout_score_fn`: score = -H(c), H = mean over c's rows of 1/2 sum_d log(var_d + 1e-8) (the Gaussian
  entropy up to a constant; ``form="variance"``: sum_d var_d), var = the variance of the policy's sampled chunk
  across last-layer MC-dropout masks.
* :func:`diversity_score_fn`: k-center greedy on embeddings: score = -max_(x in X_c) min_(y in Y) ||x - y||, Y =
  the covered set (``covered`` rows plus, for each task already chosen in this batch, its farthest row).
The uncertainty rules ignore ``chosen`` (they never condition on hallucinated demonstrations); diversity covers
the picks.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

Transitions = Mapping[str, np.ndarray]

ENSEMBLE_METRICS = ("vfd", "action_l2", "gu")


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
        missing = [c for c in cands if c not in self.candidates]
        if missing:
            raise ValueError(f"{self.name}: no states of candidate task(s) {missing} to score; "
                             f"have {sorted(self.candidates)}")
        if self.values is None:
            self.values = {t: float(self.uncertainty_fn(t, with_task(tr, t))) for t, tr in self.candidates.items()}
        self.last_info = {"uncertainty": {c: self.values[c] for c in cands}, "rule": self.name}
        return -np.array([self.values[c] for c in cands], dtype=np.float64)


def ensemble_score_fn(members: Sequence[Any], candidates: Mapping[str, Transitions], *, metric: str = "vfd",
                      samples: int = 5, seed: int = 0) -> PerTaskScores:
    """ScoreFn of SAVE's disagreement rules (selectors vfd, action_l2, gu) for an ensemble of policies.

    Args:
        members: >= 2 policies with the same action head shape; members[0] samples (vfd: the reference chain).
        candidates: {task: transitions} of the states to score each task at.
        metric: "vfd" | "action_l2" | "gu" (policies/disagreement.py: denoiser_kl, action_l2 over the whole
            ensemble as uq_vla's scorers, terminal_log_variance).
        samples: N, chains/chunks per state (uq_vla's num_action_samples: 5).
        seed: every task's draws start from this seed (common random numbers across tasks).
    """
    from amf_ros.policies import disagreement as dis

    if metric not in ENSEMBLE_METRICS:
        raise ValueError(f"metric must be one of {ENSEMBLE_METRICS}, got {metric=}")
    if len(members) < 2:
        raise ValueError(f"{metric} needs an ensemble of at least two policies, got {len(members)}")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples=}")

    def uncertainty(task: str, rows: Transitions) -> float:
        import torch

        g = torch.Generator().manual_seed(int(seed))
        emb = members[0].head_inputs(rows)
        for m in members[1:]:
            other = m.head_inputs(rows)
            if other.shape != emb.shape or not bool((other == emb).all()):
                raise ValueError(f"{metric}: the ensemble members give different head inputs for the same rows; "
                                 "they must share the (frozen) trunk and task encoder and differ in the head only")
        heads = [m.head for m in members]
        if metric == "vfd":
            u = dis.denoiser_kl(heads[0], heads[1:], emb, samples, g)
        elif metric == "action_l2":
            u = dis.action_l2(heads[0], heads, emb, samples, g)  # uq_vla's scorers: the ensemble, sampler included
        else:
            u = dis.terminal_log_variance(heads, emb, samples, g)
        return float(u.double().mean())

    return PerTaskScores(candidates, uncertainty, metric)


def dropout_score_fn(policy: Any, candidates: Mapping[str, Transitions], *, masks: int = 16, rate: float = 0.1,
                     form: str = "log_variance", seed: int = 0) -> PerTaskScores:
    """ScoreFn of the Dropout baseline (selector dropout): prior entropy under test-time last-layer MC dropout.

    Args:
        policy: the fine-tuned policy (its head; the adaptive prior is not involved).
        candidates: {task: transitions}, states of each task's demonstrations.
        masks, rate: n dropout masks of rate p (embeddings.py's "dropout" embeddings use the same masks).
        form: "log_variance" (Gaussian entropy, default) or "variance" (trace of the covariance).
        seed: seed of the masks and of the shared chain noise.

    Test-time dropout of a network trained without it measures feature magnitudes: Var = p / (1 - p) *
    sum_f W_f^2 h_f^2 for an MLP mean. With LayerNorm before the features (the paper's MLP, Octo's head blocks)
    far-away states need not score higher; test/core/test_acquisition.py shows the known answer without it.
    """
    from amf_ros.policies.disagreement import mc_dropout_variance

    if form not in ("log_variance", "variance"):
        raise ValueError(f"form must be 'log_variance' or 'variance', got {form=}")

    def uncertainty(task: str, rows: Transitions) -> float:
        import torch

        var = mc_dropout_variance(policy.head, policy.head_inputs(rows), masks, rate, seed,
                                  torch.Generator().manual_seed(int(seed)))
        per_row = 0.5 * torch.log(var.double() + 1e-8).sum(-1) if form == "log_variance" else var.double().sum(-1)
        return float(per_row.mean())

    return PerTaskScores(candidates, uncertainty, "dropout")


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
"""Rules whose scores :func:`peer_score_fn` builds from recorded episodes."""


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


def peer_score_fn(rule: str, policy: Any, episodes: Sequence[Transitions], tasks: Sequence[str], *,
                  frames: int = 16, seed: int = 0, members: Sequence[Any] = ()) -> Any:
    """The ScoreFn of peer rule ``rule`` (:data:`PEER_RULES`) on recorded episodes: one home for task_selector and
    ``amf bench metaworld``.

    Args:
        policy: the fine-tuned policy (dropout, diversity; members[0] of the ensemble rules when ``members`` is
            empty is an error).
        episodes: recorded episodes (transitions dicts, one task each); candidates per :func:`recorded_candidates`.
        members: the ensemble of the disagreement rules (>= 2 policies sharing trunk and task encoder).
    """
    if rule not in PEER_RULES:
        raise ValueError(f"unknown peer rule {rule!r}; choose from {PEER_RULES}")
    candidates, covered = recorded_candidates(episodes, tasks, frames)
    if rule in ENSEMBLE_METRICS:
        return ensemble_score_fn(members, candidates, metric=rule, seed=seed)
    if rule == "dropout":
        return dropout_score_fn(policy, candidates, seed=seed)
    return diversity_score_fn(policy, candidates, covered)
