"""What task_selector does per /amf/next_task request, without ROS: demo counts from the store, loss-gradient
embeddings from its own copy of the policy, the configured selector from amf_ros.core, a decision with every score.

AMF-NN as ``amf bench metaworld`` computes it (its ``amf_score_fn``: paper Sec. 4, App. E, M.3.3-M.3.4), so that the
ROS loop and the benchmark make the same decisions:
  * features phi = the policy's loss-gradient embeddings of recorded steps (label = the demonstrated action), at
    ``frames_per_episode`` evenly spaced steps of every episode (fewer when the store is large, so that the total
    stays within ``max_points``: the criterion factorises a matrix over the data points);
  * validation set: the first recorded episode of every task (the warm start; ``targets="all"``: every episode);
  * targets: the validation states with their own task (importance weight 1 when demonstrated for that task, 0
    otherwise: deterministic/diffusion policies, eq. 4), each task weighted equally (mu_c uniform);
  * a candidate c': its validation episode(s) as its hallucinated demonstration;
  * data conditioned on: every other episode (``condition_on_data``).
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from amf_ros.data import transitions as datasets

log = logging.getLogger(__name__)


@dataclass
class Decision:
    """The NextTask response fields (see srv/NextTask.srv)."""

    task: str
    instruction: str
    selected_tasks: list[str]
    tasks: list[str]
    scores: list[float]
    demo_counts: list[int]
    warm_start: bool
    selector: str
    compute_time: float
    effective_sample_size: list[float] = field(default_factory=list)
    message: str = ""


class TaskSelection:
    """task_selector's state: task set, selector, the store, and its own copy of the policy.

    Args:
        selector: name for :func:`amf_ros.core.selectors.make_selector`.
        instructions: ordered ``{task key: instruction}`` (the configured task set).
        dataset_dir: the episode store.
        seed: RNG seed (selector tie breaks / random draws, subsampling).
        form, noise_var, prior_var: AMF criterion settings (App. E).
        frames_per_episode: steps of each episode used as data/target points.
        max_points: cap on the total number of data points (fewer frames per episode in large stores).
        targets: "warm" = the first episode of each task is the validation set (targets and hallucinated
            demonstrations), "all" = every episode; condition_on_data: condition the posterior on the other episodes.
        action_space: which recorded action labels the embeddings ("metaworld" = native, "eef7" = wire action).
        episode_loader: ``episode ids -> transitions`` (default: the store's states; the Octo backend: cached
            trunk embeddings, see datasets.EpisodeCache).
    """

    def __init__(self, selector: str, instructions: Mapping[str, str], dataset_dir: str | Path, seed: int = 0,
                 form: str = "log_variance", noise_var: float = 1.0, prior_var: float = 1.0,
                 frames_per_episode: int = 16, max_points: int = 1024, action_space: str = "metaworld",
                 targets: str = "warm", condition_on_data: bool = True, episode_loader: Any = None) -> None:
        from amf_ros.core.selectors import make_selector

        if not instructions:
            raise ValueError("the task set is empty: set 'tasks_file' or load a checkpoint that lists its tasks")
        self.selector_name = selector
        self.selector = make_selector(selector, tasks=list(instructions))
        self.instructions = dict(instructions)
        self.dataset_dir = Path(dataset_dir)
        self.rng = np.random.default_rng(seed)
        self.seed = int(seed)
        self.form, self.noise_var, self.prior_var = form, float(noise_var), float(prior_var)
        self.frames_per_episode, self.max_points = int(frames_per_episode), int(max_points)
        self.action_space = action_space
        if targets not in ("warm", "all"):
            raise ValueError(f"targets must be 'warm' or 'all', got {targets=}")
        self.targets, self.condition_on_data = targets, bool(condition_on_data)
        self.cache = datasets.EpisodeCache(dataset_dir, action_space, loader=episode_loader)
        self._phi: dict[tuple[str, int], np.ndarray] = {}
        self.pretrain_counts: dict[str, int] | None = None
        self._policy: Any = None
        self.checkpoint: str = ""
        self._lock = threading.Lock()

    def set_policy(self, policy: Any, checkpoint: str | Path = "",
                   pretrain_counts: Mapping[str, int] | None = None) -> None:
        """Swap in a (re)loaded policy; the next request uses it."""
        with self._lock:
            self._policy = policy
            self._phi = {}
            self.checkpoint = str(checkpoint)
            if pretrain_counts is not None:
                self.pretrain_counts = dict(pretrain_counts)

    @property
    def policy(self) -> Any:
        with self._lock:
            return self._policy

    def next_task(self, candidates: Sequence[str] = (), batch_size: int = 1) -> Decision:
        """Choose ``batch_size`` task(s) among ``candidates`` (empty = the whole task set).

        Raises:
            ValueError: unknown candidate task, or AMF without a loaded policy.
        """
        t0 = time.perf_counter()
        cands = list(candidates) or list(self.instructions)
        unknown = [c for c in cands if c not in self.instructions]
        if unknown:
            raise ValueError(f"unknown task(s) {unknown}; known tasks: {list(self.instructions)}")
        if len(set(cands)) != len(cands):
            raise ValueError(f"candidate tasks repeat: {cands}")
        batch_size = max(1, int(batch_size))
        counts = self.cache.demo_counts()
        demo_counts = {c: int(counts.get(c, 0)) for c in cands}
        score_fn = None
        if self.selector_name == "amf" and all(v > 0 for v in demo_counts.values()):
            score_fn = self._amf_score_fn()  # during warm start the selector needs no scores
        selection = self.selector.select(cands, demo_counts, self.rng, batch_size=batch_size, score_fn=score_fn,
                                         pretrain_counts=self.pretrain_counts)
        ess = selection.info.get("effective_sample_size", {}) if isinstance(selection.info, dict) else {}
        scores = [float(selection.scores.get(c, float("nan"))) for c in cands]
        chosen = list(selection.tasks)
        msg = (f"{self.selector_name}: {'warm start, ' if selection.warm_start else ''}chose {chosen} "
               f"(counts {demo_counts}); policy: {self.checkpoint or 'none'}")
        return Decision(task=chosen[0], instruction=self.instructions[chosen[0]], selected_tasks=chosen,
                        tasks=cands, scores=scores, demo_counts=[demo_counts[c] for c in cands],
                        warm_start=bool(selection.warm_start), selector=self.selector_name,
                        compute_time=time.perf_counter() - t0,
                        effective_sample_size=[float(ess.get(c, float("nan"))) for c in cands] if ess else [],
                        message=msg)

    def _amf_score_fn(self) -> Any:
        """ScoreFn of the AMF criterion on loss-gradient embeddings of the policy (see module docstring)."""
        from amf_ros.core.criterion import feature_score_fn

        policy = self.policy
        if policy is None:
            raise ValueError("selector 'amf' needs a policy: no checkpoint is loaded yet (set 'checkpoint' or "
                             "'checkpoint_dir', or wait for /amf/checkpoint)")
        episodes = self.cache.episodes()
        if not episodes:
            raise ValueError(f"selector 'amf' needs recorded episodes; none in {str(self.dataset_dir)!r}")
        task_of = [str(ep["task"][0]) for _, ep in episodes]
        # Validation set (App. M.3.4): the first recorded episode of every task (the warm start), or every episode.
        val = [i for i, t in enumerate(task_of) if self.targets == "all" or task_of.index(t) == i]
        use = [i for i in range(len(episodes)) if i in val or self.condition_on_data]
        # Bound the criterion's cost (a Cholesky over the data points): at most max_points points in total.
        frames = max(1, min(self.frames_per_episode, self.max_points // max(1, len(use))))
        phi: dict[int, np.ndarray] = {}
        for i in use:
            eid, ep = episodes[i]
            if (eid, frames) not in self._phi:  # depends only on the policy (cleared on reload) and the episode
                self._phi[(eid, frames)] = np.asarray(policy.embed(datasets.evenly_spaced(ep, frames)), np.float64)
            phi[i] = self._phi[(eid, frames)]
        per_task: dict[str, list[int]] = {}
        for i in val:
            per_task.setdefault(task_of[i], []).append(i)
        # Targets: the validation states with their own task (w = 1), each task weighted equally (mu_c uniform).
        target_phi = np.concatenate([phi[i] for i in val])
        weights = np.concatenate([np.full(len(phi[i]), 1.0 / (len(per_task) * len(per_task[task_of[i]])
                                                                * len(phi[i]))) for i in val])
        rest = [phi[i] for i in use if i not in val]
        data_phi = np.concatenate(rest) if rest else np.zeros((0, target_phi.shape[1]))

        def candidate(task: str) -> tuple[list[np.ndarray], np.ndarray]:
            idx = per_task.get(task)
            if not idx:
                raise ValueError(f"no recorded episode of candidate {task!r} to hallucinate from (warm start "
                                 "demonstrates every candidate once first)")
            return [phi[i] for i in idx], np.full(len(idx), 1.0 / len(idx))

        # Importance weights are 0/1 per trajectory (eq. 4, deterministic policy), so the effective sample size of
        # task c's target weights is its number of target episodes.
        ess = {t: float(len(v)) for t, v in per_task.items()}
        return feature_score_fn(data_phi, candidate, target_phi, weights, noise_var=self.noise_var,
                                prior_var=self.prior_var, form=self.form, info={"effective_sample_size": ess})
