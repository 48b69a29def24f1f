"""What task_selector does per /amf/next_task request, without ROS: demo counts from the store, loss-gradient
embeddings from its own copy of the policy, the configured selector from amf_ros.core, a decision with every score.

AMF-NN as the package implements it (paper Sec. 4, App. E, M; DESIGN.md "AMF, as the package implements it"):
  * data points: every recorded (state, task, action) of the store (subsampled to ``max_data_points``), features
    phi = the policy's loss-gradient embeddings (label = the demonstrated action);
  * hallucinated demonstration of a candidate c': the recorded states of c' relabelled with c' and labelled with the
    policy's own sampled action (DESIGN pitfall: never the model's mean prediction); before c' has a recording, the
    states of every episode relabelled with c';
  * targets: the recorded states of each task with that task (importance weight 1 if demonstrated for the task, 0
    otherwise: deterministic/diffusion policies, eq. 4), subsampled to ``max_target_points`` per task.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from amf_ros.bringup import datasets

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
        max_target_points, max_data_points: subsample sizes (bound the criterion's cost).
    """

    def __init__(self, selector: str, instructions: Mapping[str, str], dataset_dir: str | Path, seed: int = 0,
                 form: str = "log_variance", noise_var: float = 1.0, prior_var: float = 1.0,
                 max_target_points: int = 256, max_data_points: int = 1024) -> None:
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
        self.max_target_points, self.max_data_points = int(max_target_points), int(max_data_points)
        self.pretrain_counts: dict[str, int] | None = None
        self._policy: Any = None
        self.checkpoint: str = ""
        self._lock = threading.Lock()

    def set_policy(self, policy: Any, checkpoint: str | Path = "",
                   pretrain_counts: Mapping[str, int] | None = None) -> None:
        """Swap in a (re)loaded policy; the next request uses it."""
        with self._lock:
            self._policy = policy
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
        counts = datasets.demo_counts(self.dataset_dir)
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
               f"(counts {demo_counts})")
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
        data = datasets.load_transitions(self.dataset_dir)
        if data is None:
            raise ValueError(f"selector 'amf' needs recorded episodes; none in {str(self.dataset_dir)!r}")
        rng = np.random.default_rng(self.seed)
        data = datasets.subsample(data, self.max_data_points, rng)
        data_phi = np.asarray(policy.embed(data), dtype=np.float64)
        states_of = {t: datasets.select(data, data["task"] == t) for t in self.instructions}
        target_rows, target_w = [], []
        for t, rows in states_of.items():
            if len(rows["task"]) == 0:
                continue
            rows = datasets.subsample(rows, self.max_target_points, rng)
            target_rows.append(datasets.hallucinate(policy, rows, t, rng, self.seed))
            target_w.append(np.ones(len(rows["task"])))
        targets = datasets.concat(target_rows)
        target_phi = np.asarray(policy.embed(targets), dtype=np.float64)
        cache: dict[str, np.ndarray] = {}

        def candidate_phi(task: str) -> np.ndarray:
            if task not in cache:
                rows = states_of.get(task)
                if rows is None or len(rows["task"]) == 0:
                    rows = data
                rows = datasets.subsample(rows, self.max_target_points, rng)
                cache[task] = np.asarray(policy.embed(datasets.hallucinate(policy, rows, task, rng, self.seed)),
                                         dtype=np.float64)
            return cache[task]

        # Importance weights are 0/1 per trajectory (eq. 4, deterministic policy), so the effective sample size of
        # task c's weights is its number of demonstrated episodes.
        ess = {t: float(len(np.unique(rows["episode_index"]))) for t, rows in states_of.items()}
        return feature_score_fn(data_phi, candidate_phi, target_phi, np.concatenate(target_w),
                                noise_var=self.noise_var, prior_var=self.prior_var, form=self.form,
                                info={"effective_sample_size": ess})
