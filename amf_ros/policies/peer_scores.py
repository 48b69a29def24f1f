"""ScoreFns of the peer acquisition rules that evaluate action heads: SAVE's ensemble disagreement (vfd, action_l2,
gu; learnsyslab/uq_vla) and the AMF paper's Dropout baseline, and :func:`peer_score_fn`, the one entry that
task_selector and ``amf bench metaworld`` use for every peer rule. Lower score = chosen first.

Why here and not in core/: these rules run the policy's action head (torch, :mod:`amf_ros.policies.disagreement`);
core/ stays numpy-only. What they share with the rule that needs no policy (Diversity) is in
:mod:`amf_ros.core.acquisition`: the per-task score machinery, the candidate states from recorded episodes.

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
The uncertainty rules ignore ``chosen`` (they never condition on hallucinated demonstrations).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import torch

from amf_ros.core.acquisition import (
    ENSEMBLE_METRICS,
    PEER_RULES,
    CoverageScores,
    PerTaskScores,
    Transitions,
    diversity_score_fn,
    recorded_candidates,
)
from amf_ros.policies import disagreement as dis
from amf_ros.policies.base import HeadPolicy


def ensemble_score_fn(members: Sequence[HeadPolicy], candidates: Mapping[str, Transitions], *, metric: str = "vfd",
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
    if metric not in ENSEMBLE_METRICS:
        raise ValueError(f"metric must be one of {ENSEMBLE_METRICS}, got {metric=}")
    if len(members) < 2:
        raise ValueError(f"{metric} needs an ensemble of at least two policies, got {len(members)}")
    if samples < 1:
        raise ValueError(f"samples must be >= 1, got {samples=}")

    def uncertainty(task: str, rows: Transitions) -> float:
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


def dropout_score_fn(policy: HeadPolicy, candidates: Mapping[str, Transitions], *, masks: int = 16, rate: float = 0.1,
                     form: str = "log_variance", seed: int = 0) -> PerTaskScores:
    """ScoreFn of the Dropout baseline (selector dropout): prior entropy under test-time last-layer MC dropout.

    Args:
        policy: the fine-tuned policy (its head; the adaptive prior is not involved).
        candidates: {task: transitions}, states of each task's demonstrations.
        masks: number n of dropout masks (embeddings.py's "dropout" embeddings use the same masks).
        rate: dropout rate p of each mask.
        form: "log_variance" (Gaussian entropy, default) or "variance" (trace of the covariance).
        seed: seed of the masks and of the shared chain noise.

    Test-time dropout of a network trained without it measures feature magnitudes: Var = p / (1 - p) *
    sum_f W_f^2 h_f^2 for an MLP mean. With LayerNorm before the features (the paper's MLP, Octo's head blocks)
    far-away states need not score higher; test/core/test_acquisition.py shows the known answer without it.
    """
    if form not in ("log_variance", "variance"):
        raise ValueError(f"form must be 'log_variance' or 'variance', got {form=}")

    def uncertainty(task: str, rows: Transitions) -> float:
        var = dis.mc_dropout_variance(policy.head, policy.head_inputs(rows), masks, rate, seed,
                                      torch.Generator().manual_seed(int(seed)))
        per_row = 0.5 * torch.log(var.double() + 1e-8).sum(-1) if form == "log_variance" else var.double().sum(-1)
        return float(per_row.mean())

    return PerTaskScores(candidates, uncertainty, "dropout")


def peer_score_fn(rule: str, policy: HeadPolicy, episodes: Sequence[Transitions], tasks: Sequence[str], *,
                  frames: int = 16, seed: int = 0, members: Sequence[HeadPolicy] = ()
                  ) -> PerTaskScores | CoverageScores:
    """The ScoreFn of peer rule ``rule`` (:data:`~amf_ros.core.acquisition.PEER_RULES`) on recorded episodes: one
    home for task_selector and ``amf bench metaworld``.

    Args:
        rule: one of :data:`~amf_ros.core.acquisition.PEER_RULES`.
        policy: the fine-tuned policy (dropout, diversity; members[0] of the ensemble rules when ``members`` is
            empty is an error).
        episodes: recorded episodes (transitions dicts, one task each); candidates per
            :func:`~amf_ros.core.acquisition.recorded_candidates`.
        tasks: the candidate tasks (those without an episode are left out: the selector warm-starts them).
        frames: evenly spaced steps taken from each episode as candidate states.
        seed: seed of the dropout masks and chain noise of the rules that sample.
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
