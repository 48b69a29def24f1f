"""What task_selector does, without ROS: its own copy of the policy (initial choice, reload on a checkpoint
announcement), demo counts from the store, the configured selector from amf_ros.core, a decision with every score.

The AMF-NN score is :func:`amf_ros.core.amf_nn.amf_nn_score_fn`, the same function ``amf bench metaworld`` uses
(paper Sec. 4, App. E, M), so that the ROS loop and the benchmark make the same decisions. Here: the validation set is
the first recorded episode of every task (the warm start; ``targets="all"``: every episode), the target tasks are
the tasks of those episodes, and the embeddings of each (episode, frames) are cached until the policy changes.

Selector ``progress`` (core/progress.py) needs no policy: it reads the evaluation history, which policy_server's
outcomes topic (every finished run_policy goal) and checkpoint announcements give: :class:`EvaluationHistory`.

Concurrency: a request takes the (policy, embedding cache) pair once, under the lock, and uses only that pair; a
reload swaps in a new pair (never mutates the one a request is reading), so a reload during a request neither
mixes two policies' embeddings in one score nor leaves the old policy's embeddings in the new policy's cache.
"""

from __future__ import annotations

import logging
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from amf_ros.core.acquisition import ENSEMBLE_METRICS, PEER_RULES
from amf_ros.data import transitions as datasets
from amf_ros.data.replay import replay_cache
from amf_ros.data.schema import MAX_NAME_CHARS, text_problem
from amf_ros.data.tasks import check_task_keys
from amf_ros.runtime.readiness import Readiness, octo_inputs

if TYPE_CHECKING:
    from amf_ros.bringup.params.task_selector import TaskSelectorParams
    from amf_ros.policies.base import Policy
    from amf_ros.policies.language import TaskEncoder

log = logging.getLogger(__name__)

PROGRESS_HISTORY = "progress_history.jsonl"
"""Under ``checkpoint_dir``: selector progress's evaluation history (:class:`EvaluationHistory`), one JSON line appended
per announcement and outcome, so that a restart of task_selector keeps it."""

FROZEN_RECORD = "selection_frozen.json"
"""Under ``checkpoint_dir``: the checkpoint ``selection_policy: frozen`` froze (``{"checkpoint": path}``), so that a
restart keeps it instead of moving to the newest round (issue 29); written atomically when the first copy loads."""



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
    robot: str = ""
    pending: list[tuple[str, str]] = field(default_factory=list)
    """(robot, task) assignments of other robots, not recorded yet, that this decision conditioned on."""


class EvaluationHistory:
    """The evaluation history of the ``progress`` selector, from policy_server's messages (no shared state).

    Every finished run_policy goal (policy_server's outcomes topic: task, success) is one evaluation episode of the
    policy that was acting then: the newest checkpoint announced at or before the outcome's stamp (policy_server
    stamps both with its clock, so outcomes and announcements that arrive out of order are still grouped right).
    Each checkpoint's episodes give one :class:`~amf_ros.core.progress.Evaluation` per task: success rate = the
    share of successful episodes, at the task's demonstration count in the store when the checkpoint was announced
    (policy_server fine-tunes on every episode recorded before the fine-tune, so an episode recorded during one is
    counted one checkpoint early: a known approximation). Outcomes before the first announcement are dropped (their
    demonstration counts are unknown). Thread-safe.

    Args:
        path: JSON Lines file that keeps the history across restarts: read at construction, then one line appended
            per announcement or outcome (``{"checkpoint": [stamp, round, counts]}`` / ``{"outcome": [stamp, task,
            success]}``), rewritten atomically only when it has grown to twice ``max_outcomes`` lines; an unreadable
            line (a crash mid-append leaves at most the last one) is skipped with a note in :attr:`notes`. A history
            of the former one-document JSON format (``*.json`` beside it) is read when the journal is missing.
            None = in memory only.
        max_outcomes: the oldest outcomes beyond this are forgotten (bounds memory and the file).
    """

    def __init__(self, path: str | Path | None = None, max_outcomes: int = 100_000) -> None:
        self._lock = threading.Lock()
        self._checkpoints: list[tuple[float, int, dict[str, int]]] = []  # (stamp, round, demo counts), by stamp
        self._outcomes: list[tuple[float, str, bool]] = []  # (stamp, task, success)
        self.max_outcomes = int(max_outcomes)
        self.dropped = 0
        self.path = Path(path) if path is not None else None
        self.notes: list[str] = []
        self._lines = 0  # lines in the journal at path
        if self.path is not None:
            self._read()

    def _read(self) -> None:
        """Load the history of an earlier start from :attr:`path` (missing = none; the former JSON document if only
        that exists), then compact it into a fresh journal."""
        import json

        legacy = self.path.with_suffix(".json")
        source = self.path
        try:
            if not self.path.exists() and legacy.exists():
                doc = json.loads(legacy.read_text(encoding="utf-8"))
                events = [{"checkpoint": c} for c in doc["checkpoints"]] + [{"outcome": o} for o in doc["outcomes"]]
                source = legacy
            else:
                events, source = self.path.read_text(encoding="utf-8").splitlines(), self.path
        except FileNotFoundError:
            return
        except Exception as exc:  # unreadable: start again, say so (the next write replaces it)
            self.notes.append(f"progress: cannot read the evaluation history {source} ({exc}); starting a new one")
            return
        bad = 0
        for event in events:
            try:
                self._apply(json.loads(event) if isinstance(event, str) else event)
            except Exception:
                bad += 1
        if bad:
            self.notes.append(f"progress: skipped {bad} unreadable line(s) of the evaluation history {source}")
        self.notes.append(f"progress: evaluation history of {len(self._outcomes)} episode(s) over "
                          f"{len(self._checkpoints)} checkpoint(s) read from {source}")
        with self._lock:
            self._compact()

    def _apply(self, event: Mapping[str, Any]) -> bool:
        """One event (a journal line, or a new announcement or outcome) into memory: checkpoints kept by stamp, a
        round seen before ignored, the oldest outcomes beyond ``max_outcomes`` forgotten. Returns False for an
        ignored round; raises on a malformed event."""
        if "checkpoint" in event:
            t, r, c = event["checkpoint"]
            if any(r0 == int(r) for _, r0, _ in self._checkpoints):
                return False
            self._checkpoints.append((float(t), int(r), {str(k): int(v) for k, v in c.items()}))
            self._checkpoints.sort(key=lambda cp: cp[0])
        else:
            t, task, ok = event["outcome"]
            self._outcomes.append((float(t), str(task), bool(ok)))
            del self._outcomes[:-self.max_outcomes]
        return True

    @staticmethod
    def _line(event: Mapping[str, Any]) -> str:
        """One journal line."""
        import json

        return json.dumps(event, separators=(",", ":")) + "\n"

    def _append(self, event: Mapping[str, Any]) -> None:
        """Append one event to :attr:`path` (caller holds the lock); compacts when the journal has grown to twice
        ``max_outcomes`` lines. A failure is noted once and the history stays in memory."""
        if self.path is None:
            return
        if self._lines >= 2 * self.max_outcomes + len(self._checkpoints):
            self._compact()
            return
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(self._line(event))
            self._lines += 1
        except OSError as exc:
            self._note_write_failure(exc)

    def _compact(self) -> None:
        """Rewrite :attr:`path` atomically with exactly the history in memory (caller holds the lock)."""
        from amf_ros.atomic import atomic_write_text

        if self.path is None:
            return
        lines = ([self._line({"checkpoint": [t, r, c]}) for t, r, c in self._checkpoints]
                 + [self._line({"outcome": list(o)}) for o in self._outcomes])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(self.path, "".join(lines))
            self._lines = len(lines)
        except OSError as exc:
            self._note_write_failure(exc)

    def _note_write_failure(self, exc: OSError) -> None:
        note = f"progress: cannot write the evaluation history to {self.path} ({exc}); it is kept in memory"
        if note not in self.notes:
            self.notes.append(note)

    def on_checkpoint(self, round_: int, stamp: float, demo_counts: Mapping[str, int]) -> bool:
        """A checkpoint announcement (round, stamp) with the store's counts now; a round seen before is ignored
        (the latched topic repeats the newest). Returns True if it was new."""
        event = {"checkpoint": [float(stamp), int(round_), {str(k): int(v) for k, v in demo_counts.items()}]}
        with self._lock:
            if not self._apply(event):
                return False
            self._append(event)
            return True

    def on_outcome(self, task: str, success: bool, stamp: float) -> None:
        """One finished run_policy goal (an evaluation episode) of ``task``."""
        event = {"outcome": [float(stamp), str(task), bool(success)]}
        with self._lock:
            self._apply(event)
            self._append(event)

    def evaluations(self) -> list[Any]:
        """``[Evaluation]`` in checkpoint order (core/progress.py's input)."""
        from bisect import bisect_right

        from amf_ros.core.progress import Evaluation

        with self._lock:
            checkpoints, outcomes = list(self._checkpoints), list(self._outcomes)
        stamps = [c[0] for c in checkpoints]
        groups: dict[int, dict[str, list[bool]]] = {}
        dropped = 0
        for stamp, task, success in outcomes:
            i = bisect_right(stamps, stamp) - 1
            if i < 0:
                dropped += 1
                continue
            groups.setdefault(i, {}).setdefault(task, []).append(success)
        self.dropped = dropped
        return [Evaluation(task, int(checkpoints[i][2].get(task, 0)), float(np.mean(runs)), len(runs))
                for i in sorted(groups) for task, runs in groups[i].items()]

    def summary(self) -> str:
        """``"N evaluation episodes over K checkpoints"`` for a decision's message."""
        with self._lock:
            return f"{len(self._outcomes)} evaluation episode(s) over {len(self._checkpoints)} checkpoint(s)"


class PendingAssignments:
    """Tasks given to robots of a fleet and not recorded yet (issue 17): what a concurrent request conditions on.

    Why: two robots asking at the same instant must not both be sent to demonstrate the same task unless that is
    the most informative choice. A robot's assignment counts as a demonstration about to exist (hallucinated, as in
    AMF's batch criterion, Algorithm 1) until the robot records an episode of it, asks again, or ``timeout_s``
    passes (a robot that died or discarded its take must not block the task forever). ``timeout_s <= 0`` turns
    the bookkeeping off (independent per-robot selection).
    """

    def __init__(self, timeout_s: float, clock: Any = time.monotonic) -> None:
        self.timeout_s = float(timeout_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._by_robot: dict[str, tuple[list[str], float]] = {}  # robot -> (tasks, expiry time)
        self.expired: list[tuple[str, str]] = []  # (robot, task) that timed out, for the log

    def active(self, exclude: str = "") -> list[tuple[str, str]]:
        """Unexpired (robot, task) pairs of every robot but ``exclude``, oldest robot first."""
        now = self._clock()
        with self._lock:
            for robot, (tasks, until) in list(self._by_robot.items()):
                if until <= now:
                    del self._by_robot[robot]
                    self.expired.extend((robot, t) for t in tasks)
            return [(r, t) for r, (tasks, _) in self._by_robot.items() if r != exclude for t in tasks]

    def assign(self, robot: str, tasks: Sequence[str]) -> None:
        """``robot`` now works on ``tasks`` (replaces what it had)."""
        if self.timeout_s <= 0 or not robot:
            return
        with self._lock:
            self._by_robot[robot] = (list(tasks), self._clock() + self.timeout_s)

    def recorded(self, robot: str, task: str) -> bool:
        """An episode of ``task`` by ``robot`` was saved: that assignment is done. True if there was one."""
        with self._lock:
            tasks, until = self._by_robot.get(robot, ([], 0.0))
            if task not in tasks:
                return False
            rest = list(tasks)
            rest.remove(task)
            if rest:
                self._by_robot[robot] = (rest, until)
            else:
                del self._by_robot[robot]
            return True


class TaskSelection:
    """task_selector's state: task set, selector, the store, and its own copy of the policy.

    Args:
        selector: name for :func:`amf_ros.core.selectors.make_selector`.
        instructions: ordered ``{task key: instruction}`` (the configured task set).
        dataset_dir: the episode store.
        seed: RNG seed (selector tie breaks / random draws).
        form, noise_var, prior_var: AMF criterion settings (App. E).
        frames_per_episode: steps of each episode used as data/target points.
        max_points: cap on the total number of data points (fewer frames per episode in large stores); 0 = none
            (the default: the criterion is kept between requests and conditions on each new episode once).
        targets: "warm" = the first episode of each task is the validation set (targets and hallucinated
            demonstrations), "all" = every episode; condition_on_data: condition the posterior on the other episodes.
        action_space: which recorded action labels the embeddings ("metaworld" = native, "eef7" = wire action).
        episode_loader: ``episode ids -> transitions`` (default: the store's states; the Octo backend: cached
            trunk embeddings, see datasets.EpisodeCache).
        progress: the ``progress`` estimator's settings (core/progress.py; None = its defaults).
        replay_dir, replay_fraction: policy_server's replay (data/replay.py); with a fraction > 0 the ``amf``
            selector is replay-aware (core/amf_nn.py): it conditions on the replayed episodes at that share.
        batch_conditioning: what an earlier pick of a batch, or another robot's pending task, counts as for the
            ``amf`` selector (core/selection.py BATCH_CONDITIONING; "hallucinated" = the paper's).
    """

    def __init__(self, selector: str, instructions: Mapping[str, str], dataset_dir: str | Path, seed: int = 0,
                 form: str = "log_variance", noise_var: float = 1.0, prior_var: float = 1.0,
                 frames_per_episode: int = 16, max_points: int = 0, action_space: str = "metaworld",
                 targets: str = "warm", condition_on_data: bool = True, episode_loader: Any = None,
                 max_batch_size: int = 16, progress: Any = None, replay_dir: str | Path = "",
                 replay_fraction: float = 0.0, batch_conditioning: str = "hallucinated") -> None:
        from amf_ros.core.progress import ProgressConfig
        from amf_ros.core.selection import BATCH_CONDITIONING
        from amf_ros.core.selectors import make_selector

        if not instructions:
            raise ValueError("the task set is empty: set 'tasks_file' or load a checkpoint that lists its tasks")
        if batch_conditioning not in BATCH_CONDITIONING:
            raise ValueError(f"batch_conditioning must be one of {BATCH_CONDITIONING}, got {batch_conditioning!r}")
        self.batch_conditioning = batch_conditioning
        self.selector_name = selector
        self.max_batch_size = int(max_batch_size)
        # the peer rules score a task on states of its recorded demonstrations: over ROS every rule starts with a
        # warm start (each task once), as AMF does (uq_vla's own rules need no warm start: it draws candidate states
        # from a pool the node does not have)
        extra = {"warm_start": True} if selector in PEER_RULES else {}
        self.selector = make_selector(selector, tasks=list(instructions), **extra)
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
        self.replay_fraction = float(replay_fraction)
        self.replay_dir = str(replay_dir)
        self.replay = replay_cache(replay_dir, replay_fraction, action_space, replay_state_key(episode_loader))
        self._lock = threading.Lock()
        self._state = _PolicyState(None, {}, "", None)
        self.progress = progress if progress is not None else ProgressConfig()
        self.history = EvaluationHistory()
        """What ``progress`` scores from (filled by :class:`TaskSelectorRuntime` from policy_server's messages; it
        gives it a file under checkpoint_dir)."""
        self.no_policy_reason: Callable[[], str] = lambda: ""
        """Why there is no policy yet, for the refusal of a selector that needs one (the node's not-ready reason)."""

    def set_policy(self, policy: Policy, checkpoint: str | Path = "",
                   pretrain_counts: Mapping[str, int] | None = None, members: Sequence[Policy] = ()) -> None:
        """Swap in a (re)loaded policy with a fresh embedding cache; the next request uses it (a running one keeps
        the pair it started with). ``members``: the checkpoint's extra ensemble members (vfd, action_l2, gu)."""
        with self._lock:
            counts = dict(pretrain_counts) if pretrain_counts is not None else self._state.pretrain_counts
            self._state = _PolicyState(policy, {}, str(checkpoint), counts, tuple(members))

    @property
    def policy(self) -> Policy | None:
        """The policy the next request scores with (None before a checkpoint loads)."""
        with self._lock:
            return self._state.policy

    @property
    def checkpoint(self) -> str:
        """Path of the checkpoint of that policy ("" before one loads)."""
        with self._lock:
            return self._state.checkpoint

    @property
    def pretrain_counts(self) -> dict[str, int] | None:
        """Pre-training demonstrations per task of that checkpoint (rebalancing needs them; None = unknown)."""
        with self._lock:
            return self._state.pretrain_counts

    def next_task(self, candidates: Sequence[str] = (), batch_size: int = 1,
                  pending: Sequence[str] = ()) -> Decision:
        """Choose ``batch_size`` task(s) among ``candidates`` (empty = the whole task set).

        ``pending``: tasks assigned to other robots and not recorded yet; they count as demonstrations about to
        exist: in the demo counts of every selector (warm start, round robin, rebalancing) and, for AMF, as
        hallucinated demonstrations the criterion conditions on (the batch criterion's greedy picks, Algorithm 1).

        Raises:
            ValueError: unknown or repeated candidate task, a batch larger than the candidates or
                ``max_batch_size``, or AMF without a loaded policy.
        """
        t0 = time.perf_counter()
        with self._lock:  # one consistent (policy, embedding cache) pair for the whole request
            state = self._state
        cands = list(candidates) or list(self.instructions)
        check_task_keys(cands, list(self.instructions))
        batch_size = max(1, int(batch_size))
        limit = min(len(cands), self.max_batch_size)
        if batch_size > limit:
            raise ValueError(f"batch_size {batch_size} is larger than {limit} (the {len(cands)} candidate tasks, at "
                             f"most max_batch_size {self.max_batch_size}); ask for at most {limit}")
        counts = self.cache.demo_counts()
        demo_counts = {c: int(counts.get(c, 0)) for c in cands}
        pending = [t for t in pending if t in self.instructions]
        with_pending = {c: demo_counts[c] + pending.count(c) for c in cands}
        score_fn = None
        unseen = [c for c in cands if demo_counts[c] == 0]
        free = [c for c in unseen if with_pending[c] == 0]  # no demonstration and nobody working on one
        if self.selector_name == "amf" and unseen and batch_size > len(unseen):
            raise ValueError(f"batch_size {batch_size} is more than the warm start can choose: AMF scores need a first "
                             f"demonstration of every candidate task, and {len(unseen)} have none yet ({unseen}); "
                             f"ask for batch_size <= {len(unseen)} until each has one")
        if self.selector_name == "amf" and unseen and len(free) < batch_size:
            return self._duplicate_warm_start(cands, unseen, free, pending, demo_counts, batch_size, state, t0)
        if self.selector_name == "amf" and not unseen:
            base = self._amf_score_fn(state)  # during warm start the selector needs no scores
            score_fn = base if not pending else (lambda c, chosen: base(c, [*pending, *chosen]))
        elif self.selector_name in PEER_RULES and not unseen:
            score_fn = self._peer_score_fn(state, cands)
        elif self.selector_name == "progress":  # no policy needed: scores exist from the first request on
            from amf_ros.core.progress import progress_score_fn

            # other robots' pending tasks count as demonstrations after the last evaluation (predicted, as a pick)
            score_fn = progress_score_fn(self.history.evaluations(), with_pending, self.progress)
        selection = self.selector.select(cands, with_pending, self.rng, batch_size=batch_size, score_fn=score_fn,
                                         pretrain_counts=state.pretrain_counts)
        ess = selection.info.get("effective_sample_size", {}) if isinstance(selection.info, dict) else {}
        scores = [float(selection.scores.get(c, float("nan"))) for c in cands]
        chosen = list(selection.tasks)
        msg = (f"{self.selector_name}: {'warm start, ' if selection.warm_start else ''}chose {chosen} "
               f"(counts {demo_counts}); policy: {state.checkpoint or 'none'}")
        if self.selector_name == "progress":
            msg += f"; history: {self.history.summary()}"
        return Decision(task=chosen[0], instruction=self.instructions[chosen[0]], selected_tasks=chosen,
                        tasks=cands, scores=scores, demo_counts=[demo_counts[c] for c in cands],
                        warm_start=bool(selection.warm_start), selector=self.selector_name,
                        compute_time=time.perf_counter() - t0,
                        effective_sample_size=[float(ess.get(c, float("nan"))) for c in cands] if ess else [],
                        message=msg)

    def _duplicate_warm_start(self, cands: list[str], unseen: list[str], free: list[str], pending: list[str],
                              demo_counts: dict[str, int], batch_size: int, state: _PolicyState,
                              t0: float) -> Decision:
        """AMF's warm start when every task without a demonstration is already assigned to another robot: the
        criterion cannot score yet (it needs one demonstration of every task), so the free ones first, then the
        least-assigned unseen tasks again (ties at random): a second robot duplicates rather than idles."""
        order = list(free) + sorted((c for c in unseen if c not in free),
                                    key=lambda c: (pending.count(c), float(self.rng.random())))
        chosen = order[:batch_size]
        msg = (f"{self.selector_name}: warm start, chose {chosen}: every task without a demonstration is assigned "
               f"already ({sorted(set(pending))}), so this one is demonstrated twice; policy: "
               f"{state.checkpoint or 'none'}")
        return Decision(task=chosen[0], instruction=self.instructions[chosen[0]], selected_tasks=chosen, tasks=cands,
                        scores=[float(demo_counts[c] > 0) for c in cands],
                        demo_counts=[demo_counts[c] for c in cands], warm_start=True, selector=self.selector_name,
                        compute_time=time.perf_counter() - t0, message=msg)

    def _peer_score_fn(self, state: _PolicyState, cands: list[str]) -> Any:
        """ScoreFn of a peer rule (policies/peer_scores.py) on the recorded demonstrations: each task's candidate states
        are ``frames_per_episode`` evenly spaced steps of each of its episodes; diversity's covered set is the first
        step of every episode. The ensemble rules (vfd, action_l2, gu) use the loaded policy as member 0 and the
        checkpoint's extra members (written by policy_server with ``ensemble_members`` >= 2); a checkpoint without
        members is refused with that reason."""
        from amf_ros.policies.peer_scores import peer_score_fn

        if state.policy is None:
            raise ValueError(self._no_policy(f"selector {self.selector_name!r} needs a policy: no checkpoint is "
                                             "loaded yet"))
        members: list[Policy] = []
        if self.selector_name in ENSEMBLE_METRICS:
            if not state.members:
                raise ValueError(
                    f"selector {self.selector_name!r} needs an ensemble of independently fine-tuned heads, and "
                    f"checkpoint {state.checkpoint or '(none)'} has no ensemble members (<checkpoint>/members/"
                    "member_K): set policy_server's parameter ensemble_members to 2 or more (`amf run --selector "
                    f"{self.selector_name}` does) and fine-tune a round (task_selector picks it up with "
                    "selection_policy 'latest')")
            members = [state.policy, *state.members]
        episodes = [ep for _, ep in self.cache.episodes()]
        return peer_score_fn(self.selector_name, state.policy, episodes, cands, frames=self.frames_per_episode,
                             seed=self.seed, members=members)

    def _no_policy(self, default: str) -> str:
        """The refusal of a selector that needs a policy and has none: the node's not-ready reason, if it has one."""
        why = self.no_policy_reason()
        if not why:
            return default
        return (f"{why} (selector {self.selector_name!r} needs a policy after the warm start; the warm start, "
                "uniform, round_robin and progress answer without one)")

    def _amf_score_fn(self, state: _PolicyState) -> Any:
        """ScoreFn of AMF-NN (core/amf_nn.py) on ``state``'s policy, filling ``state``'s embedding cache."""
        from amf_ros.core.amf_nn import amf_nn_score_fn, warm_start_validation

        if state.policy is None:
            raise ValueError(self._no_policy("selector 'amf' needs a policy: no checkpoint is loaded yet (set "
                                             "'checkpoint' or 'checkpoint_dir', or wait for /amf/checkpoint)"))
        episodes = self.cache.episodes()
        if not episodes:
            raise ValueError(f"selector 'amf' needs recorded episodes; none in {str(self.dataset_dir)!r}")
        task_of = [str(ep["task"][0]) for _, ep in episodes]
        val = list(range(len(episodes))) if self.targets == "all" else warm_start_validation(task_of)
        replay = self._replayed()
        return amf_nn_score_fn(state.policy, [ep for _, ep in episodes], val, noise_var=self.noise_var,
                               prior_var=self.prior_var, form=self.form, condition_on_data=self.condition_on_data,
                               frames_per_episode=self.frames_per_episode, max_points=self.max_points or None,
                               cache=state.phi, keys=[eid for eid, _ in episodes],
                               criterion_cache=None if replay else state.criterion,
                               replay=[ep for _, ep in replay], replay_fraction=self.replay_fraction,
                               replay_keys=[("replay", eid) for eid, _ in replay],
                               batch_conditioning=self.batch_conditioning)

    def _replayed(self) -> list[tuple[str, datasets.Transitions]]:
        """The replayed pre-training episodes the criterion conditions on ([] without replay). The incremental
        criterion is not kept with them (each new recorded episode changes every replayed row's weight, so the
        posterior is rebuilt per request; their embeddings are cached)."""
        if self.replay is None:
            return []
        key = replay_state_key(self.cache.loader)
        if key != getattr(self.replay, "state_key", ""):  # the loaded policy's states changed kind (a camera
            # checkpoint after a state one, or the reverse): the replay must hold the new ones (ValueError if not)
            self.replay = replay_cache(self.replay_dir, self.replay_fraction, self.action_space, key)
        replayed = self.replay.episodes()
        if not replayed:
            raise ValueError(f"replay_fraction is {self.replay_fraction} but replay_dir "
                             f"{str(self.replay.dataset_dir)!r} holds no episodes")
        return replayed


@dataclass(frozen=True)
class _PolicyState:
    """What one request reads: the policy copy, ITS embedding cache {(episode id, frames): phi}, its origin, and
    the checkpoint's extra ensemble members (loaded only for the ensemble rules)."""

    policy: Policy | None
    phi: dict
    checkpoint: str
    pretrain_counts: dict[str, int] | None
    members: tuple[Policy, ...] = ()
    criterion: dict = field(default_factory=dict)  # the exact incremental criterion of this policy (core/amf_nn.py)


class OctoSelection:
    """task_selector's backend ``octo``: the head checkpoints policy_server writes, and the embedding cache it fills
    (the trunk is loaded here only for frames policy_server has not embedded yet).

    Args:
        p: the node's parameters (TaskSelectorParams).
        instructions: ``{task: instruction}`` of the task set (the embeddings depend on them).
    """

    def __init__(self, p: TaskSelectorParams, instructions: Mapping[str, str]) -> None:
        from amf_ros.data.octo_embeddings import EmbeddingCache

        self.p = p
        self.octo_checkpoint = str(p.checkpoint)
        if not self.octo_checkpoint:
            raise ValueError("task_selector backend octo needs 'checkpoint' = the Octo checkpoint directory")
        self._trunk: Any = None
        self._lock = threading.Lock()
        self.cache = EmbeddingCache(p.dataset_dir, self.octo_checkpoint, self.trunk, instructions,
                                    image_key=p.image_key, wrist_key=p.wrist_image_key,
                                    batch_size=p.embed_batch_size)

    def trunk(self) -> Any:
        """The trunk, loaded on first use (only for frames policy_server has not embedded yet)."""
        from amf_ros.policies.octo.trunk import load_octo_trunk

        with self._lock:
            if self._trunk is None:
                log.info("loading the Octo trunk to embed frames that are not cached yet")
                self._trunk = load_octo_trunk(self.octo_checkpoint, self.p.octo_trunk_factory, self.p.t5_path,
                                              self.p.octo_dataset)
            return self._trunk

    def newest_head(self) -> Path | None:
        """Newest head checkpoint made from this Octo checkpoint (None before policy_server has written one)."""
        from amf_ros.policies.octo.heads import newest_octo_round

        return newest_octo_round(self.p.checkpoint_dir, self.cache.key)

    def load(self, path: str | Path) -> Policy:
        """Load a head checkpoint (refuses one made from another Octo checkpoint)."""
        from amf_ros.policies.octo.heads import MARKER, made_from
        from amf_ros.policies.octo.policy import load_octo_policy

        if not made_from(path, self.cache.key):
            raise ValueError(f"{path} is not an Octo head checkpoint of {self.octo_checkpoint!r} (no matching "
                             f"{MARKER})")
        return load_octo_policy(path)

    def episode_loader(self) -> Callable[[Sequence[str]], dict[str, np.ndarray] | None]:
        """``episode ids -> transitions`` for datasets.EpisodeCache (states = cached Octo embeddings)."""
        return lambda ids: self.cache.transitions(episode_ids=ids)


def progress_config(p: TaskSelectorParams) -> Any:
    """The ``progress`` estimator's settings (core/progress.py ProgressConfig) from the node's parameters."""
    from amf_ros.core.progress import ProgressConfig

    return ProgressConfig(slope_prior_sd=p.progress_slope_prior_sd, level_process_var=p.progress_level_process_var,
                          slope_process_var=p.progress_slope_process_var, obs_var_floor=p.progress_obs_var_floor,
                          ucb=p.progress_ucb)


class CameraEpisodeLoader:
    """``episode ids -> transitions`` for a camera-policy checkpoint (``trunk: image_pretrained``): its frozen
    encoder's per-frame embeddings, cached beside the dataset by policy_server (the encoder is loaded here only for a
    frame not embedded yet), projected and beside the proprio, as the policy was trained. ``state_key``: what those
    states are (policies/camera_policy.py ``camera_state_key``), which a replay must hold."""

    def __init__(self, dataset_dir: str | Path, checkpoint: str | Path) -> None:
        from amf_ros.data.image_embeddings import ImageEmbeddingCache
        from amf_ros.policies.camera_policy import camera_state_key

        self.cache = ImageEmbeddingCache.for_checkpoint(dataset_dir, checkpoint)
        self.state_key = camera_state_key(checkpoint)

    def __call__(self, ids: Sequence[str]) -> dict[str, np.ndarray] | None:
        """The transitions of episodes ``ids`` (None if none has a training step)."""
        return self.cache.transitions(episode_ids=ids)


def camera_episode_loader(dataset_dir: str | Path, checkpoint: str | Path) -> CameraEpisodeLoader | None:
    """The :class:`CameraEpisodeLoader` of a camera-policy checkpoint; None for any other checkpoint (the store's
    states serve)."""
    from amf_ros.policies.camera_policy import read_marker

    if not checkpoint or read_marker(checkpoint) is None:
        return None
    return CameraEpisodeLoader(dataset_dir, checkpoint)


def replay_state_key(episode_loader: Any) -> str | None:
    """What the states read through ``episode_loader`` are, for the replay (data/replay.py ``replay_cache``): ""
    = the store's own (no loader), a camera policy's key, None = states no replay holds (Octo's)."""
    if episode_loader is None:
        return ""
    return getattr(episode_loader, "state_key", None)


class TaskSelectorRuntime:
    """task_selector without ROS, built from its parameters: the policy copy's life cycle and the selection.

    * start: the newest checkpoint (``checkpoint``, else the newest round under ``checkpoint_dir``; backend octo:
      the newest Octo head made from ``checkpoint``), or none (fine for uniform / round_robin; AMF refuses until
      one is announced);
    * :meth:`on_checkpoint`: reload on an announcement (``selection_policy="latest"``) or keep the first copy
      (``"frozen"``, the benchmark's frozen selection copy: the first checkpoint loaded on this checkpoint_dir,
      recorded in ``<checkpoint_dir>/selection_frozen.json`` and loaded again by every restart).
      Loading takes seconds: call it from a thread other
      than the one answering :meth:`next_task` (the node: its own callback group), which keeps answering with
      the previous copy meanwhile;
    * the checkpoint's pre-training counts (``pretrain.json``) go to the selector when ``pretrain_counts`` is set;
    * selectors vfd, action_l2, gu: the checkpoint's ensemble members (``<checkpoint>/members/member_K``, written by
      policy_server with ``ensemble_members`` >= 2) are loaded with it and swapped in together.

    Args:
        p: the node's parameters (amf_ros/bringup/params/task_selector.py).
    """

    def __init__(self, p: TaskSelectorParams) -> None:
        from amf_ros.data.tasks import task_set

        self.p = p
        self.notes: list[str] = []  # start-up remarks for the node's log
        self.octo: OctoSelection | None = None
        self.selection: TaskSelection | None = None
        self.readiness: Readiness | None = None
        if p.backend == "octo":  # head checkpoints + policy_server's cached Octo frame embeddings
            # without its Octo checkpoint: not ready, next_task answers where no policy is needed (runtime/readiness.py)
            self.readiness = Readiness(lambda: octo_inputs(p.checkpoint, p.octo_trunk_factory, need_octo=False),
                                       self._start_octo)
            self.readiness.check(inline=True)
        policy, checkpoint, members = self._newest_policy()
        instructions = task_set(p.tasks_file, policy, p.tasks)
        self._configured = dict(instructions)
        if policy is not None:
            self._learn(policy, members, checkpoint)
        if self.octo is not None and policy is not None:
            self.octo.cache.instructions.update(policy.instructions)
        self.selection = TaskSelection(
            p.selector, instructions, p.dataset_dir, seed=p.seed, form=p.form, noise_var=p.noise_var,
            prior_var=p.prior_var, frames_per_episode=p.frames_per_episode, max_points=p.max_points,
            action_space=p.action_space, targets=p.targets, condition_on_data=p.condition_on_data,
            episode_loader=(self.octo.episode_loader() if self.octo is not None
                            else camera_episode_loader(p.dataset_dir, checkpoint)),
            max_batch_size=p.max_batch_size, progress=progress_config(p), replay_dir=p.replay_dir,
            replay_fraction=p.replay_fraction, batch_conditioning=p.batch_conditioning)
        self.selection.no_policy_reason = self.not_ready
        if p.selector == "progress":  # its evaluation history survives a restart
            self.selection.history = EvaluationHistory(Path(p.checkpoint_dir) / PROGRESS_HISTORY)
            self.notes.extend(self.selection.history.notes)
        if policy is not None:
            self.selection.set_policy(policy, checkpoint, self._pretrain_counts(checkpoint), members)
            self._freeze(checkpoint)
        self.reloads = 0
        self.assignments = PendingAssignments(p.assignment_timeout_s)

    def not_ready(self) -> str:
        """``"not ready: <reason and what to do>"`` while backend octo waits for its checkpoint, "" when ready."""
        return self.readiness.not_ready() if self.readiness is not None else ""

    def _start_octo(self) -> None:
        """Build the octo backend (at start, or once its checkpoint appears: then also load the newest head)."""
        from amf_ros.data.tasks import task_set

        octo = OctoSelection(self.p, task_set(self.p.tasks_file, None, self.p.tasks))
        if self.selection is None:  # at start: __init__ goes on with it
            self.octo = octo
            return
        self.selection.cache = datasets.EpisodeCache(self.p.dataset_dir, self.p.action_space,
                                                     loader=octo.episode_loader())
        self.octo = octo
        policy, checkpoint, members = self._newest_policy()
        if policy is not None:
            self._learn(policy, members, checkpoint)
            octo.cache.instructions.update(policy.instructions)
            self.selection.set_policy(policy, checkpoint, self._pretrain_counts(checkpoint), members)

    @property
    def instructions(self) -> dict[str, str]:
        """The candidate task set ``{key: instruction}``."""
        return self.selection.instructions

    @property
    def checkpoint(self) -> str:
        """Path of the checkpoint the selector scores with ("" before one loads)."""
        return self.selection.checkpoint

    def next_task(self, candidates: Sequence[str] = (), batch_size: int = 1, robot: str = "") -> Decision:
        """:meth:`TaskSelection.next_task`, conditioned on the other robots' pending assignments; a named ``robot``
        gets the chosen tasks assigned (its previous assignment is replaced)."""
        too_long = text_problem("robot name", robot, MAX_NAME_CHARS)  # kept as an assignment's key: bounded
        if too_long:
            raise ValueError(too_long)
        pending = self.assignments.active(exclude=robot)
        decision = self.selection.next_task(candidates, batch_size, pending=[t for _, t in pending])
        decision.robot, decision.pending = robot, pending
        self.assignments.assign(robot, decision.selected_tasks)
        if pending:
            decision.message += f"; conditioned on pending {pending}"
            if self.selection.selector_name == "amf" and self.selection.batch_conditioning != "hallucinated":
                decision.message += f" as {self.selection.batch_conditioning} demonstrations"
        if self.not_ready():
            decision.message += f"; answered without a policy, task_selector is {self.not_ready()}"
        return decision

    def on_announcement(self, round_: int, stamp: float) -> bool:
        """policy_server announced checkpoint ``round_`` (its header stamp, seconds): a new group of ``progress``'s
        evaluation history, at the store's demonstration counts now. Returns True if the round was new."""
        return self.selection.history.on_checkpoint(round_, stamp, self.selection.cache.demo_counts())

    def on_outcome(self, task: str, success: bool, stamp: float) -> None:
        """policy_server finished a run_policy goal of ``task`` (its outcomes topic): one evaluation episode."""
        self.selection.history.on_outcome(task, success, stamp)

    def on_episode(self, robot: str, task: str) -> bool:
        """A robot saved an episode of ``task``: its assignment is done (True if it had one)."""
        return self.assignments.recorded(robot, task)

    def _newest_policy(self) -> tuple[Policy | None, str, list[Policy]]:
        """The frozen checkpoint (selection_policy frozen, recorded by an earlier start), else the newest one, and its
        ensemble members, or (None, "", []) when there is none (task_selector never
        pre-trains nor makes a first Octo head: policy_server does, and announces it)."""
        from amf_ros.policies.checkpoint_dirs import no_checkpoint_error, resolve_checkpoint
        from amf_ros.policies.loading import load_newest_good

        if self.p.backend == "octo" and self.octo is None:  # not ready: no Octo checkpoint yet
            return None, "", []
        frozen = self._frozen_choice()
        if frozen is not None:
            return frozen
        if self.octo is not None:
            head = self.octo.newest_head()
            if head is None:
                return None, "", []
            policy, members = self._load(head)
            return policy, str(head.resolve()), members
        if self.p.checkpoint:  # given explicitly: that one, or the error
            path = resolve_checkpoint(self.p.checkpoint, self.p.checkpoint_dir)
            policy, members = self._load(path)
            return policy, str(path.resolve()), members
        try:
            found = load_newest_good(self.p.checkpoint_dir, self._load, self.notes.append)
            if found is None:
                raise no_checkpoint_error(self.p.checkpoint_dir)
            (policy, members), path = found
            return policy, str(path.resolve()), members
        except ValueError as exc:
            if self.p.selector == "amf" or self.p.selector in PEER_RULES:
                self.notes.append(f"no policy yet ({exc}); {self.p.selector} scores need one after the warm start")
            return None, "", []

    def frozen_record(self) -> Path:
        """Where ``selection_policy: frozen`` keeps its choice (FROZEN_RECORD under ``checkpoint_dir``)."""
        return Path(self.p.checkpoint_dir) / FROZEN_RECORD

    def _frozen_choice(self) -> tuple[Policy, str, list[Policy]] | None:
        """The checkpoint an earlier start froze, loaded (``selection_policy: frozen`` without an explicit
        ``checkpoint``); None when there is none, or when it is gone or unreadable (then a note says so and the
        newest is frozen instead)."""
        import json

        if self.p.selection_policy != "frozen" or (self.p.checkpoint and self.octo is None):
            return None
        record = self.frozen_record()
        try:
            path = Path(str(json.loads(record.read_text(encoding="utf-8"))["checkpoint"]))
            policy, members = self._load(path)
        except FileNotFoundError as exc:
            if exc.filename is not None and Path(exc.filename) == record:
                return None  # nothing frozen yet
            self.notes.append(f"selection_policy=frozen: the frozen checkpoint is gone ({exc}); freezing the newest")
            return None
        except Exception as exc:  # a bad record or checkpoint: say so, freeze the newest
            self.notes.append(f"selection_policy=frozen: cannot use {record} ({exc}); freezing the newest")
            return None
        self.notes.append(f"selection_policy=frozen keeps {path} (recorded in {record})")
        return policy, str(path.resolve()), members

    def _freeze(self, checkpoint: str) -> None:
        """Record ``checkpoint`` as the frozen choice (``selection_policy: frozen``, no explicit ``checkpoint``)."""
        import json

        from amf_ros.atomic import atomic_write_json

        if self.p.selection_policy != "frozen" or (self.p.checkpoint and self.octo is None) or not checkpoint:
            return
        record = self.frozen_record()
        try:
            if json.loads(record.read_text(encoding="utf-8")).get("checkpoint") == checkpoint:
                return
        except (OSError, ValueError, AttributeError):
            pass
        try:
            record.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_json(record, {"checkpoint": checkpoint})
        except OSError as exc:
            self.notes.append(f"selection_policy=frozen: cannot record {checkpoint} in {record} ({exc}); a restart "
                              "freezes the newest checkpoint instead")

    def _load(self, path: str | Path, encoder: TaskEncoder | None = None) -> tuple[Policy, list[Policy]]:
        """(policy, its ensemble members) of checkpoint ``path``; the members (``<path>/members/member_K``) only
        for the ensemble rules (vfd, action_l2, gu), else []. ``encoder``: a loaded language model to share."""
        from amf_ros.policies.checkpoint_dirs import member_checkpoints
        from amf_ros.policies.loading import load_native

        paths = member_checkpoints(path) if self.p.selector in ENSEMBLE_METRICS else []
        if self.octo is not None:
            from amf_ros.policies.octo.policy import load_octo_policy

            # the Octo-checkpoint marker is on the round, not on its members
            return self.octo.load(path), [load_octo_policy(m) for m in paths]
        policy = load_native(path, task_encoder=encoder)
        shared = policy.encoder
        return policy, [load_native(m, task_encoder=shared) for m in paths]

    def _learn(self, policy: Policy, members: Sequence[Policy], checkpoint: str) -> None:
        """Add the configured tasks ``policy`` (and its ensemble members) do not know: they are scored as tasks
        without data (AMF's warm start demonstrates each once) and policy_server learns them at its next fine-tune;
        the served task set never depends on which checkpoint is loaded."""
        from amf_ros.policies.loading import learn_tasks

        new = learn_tasks(policy, self._configured)
        for member in members:
            learn_tasks(member, self._configured)
        if new:
            self.notes.append(f"task(s) {new} are new to the policy {checkpoint}: candidates without data, learned "
                              "from their demonstrations at the next fine-tune")

    def _follow_state_kind(self, path: str) -> None:
        """A native checkpoint of another kind than the loaded one (camera policy vs state policy): the episode
        cache reads the states the new policy was trained on (the camera encoder and projection are frozen across
        rounds, so rounds of one kind share a cache)."""
        if self.octo is not None:
            return
        camera = camera_episode_loader(self.p.dataset_dir, path)
        if (camera is None) != (self.selection.cache.loader is None):
            self.selection.cache = datasets.EpisodeCache(self.p.dataset_dir, self.p.action_space, loader=camera)

    def _pretrain_counts(self, checkpoint: str) -> dict[str, int] | None:
        """Pre-training demonstrations per task from ``<checkpoint>/pretrain.json`` (written by `amf pretrain`)."""
        from amf_ros.policies.loading import pretrain_counts

        return pretrain_counts(checkpoint) if self.p.pretrain_counts else None

    def on_checkpoint(self, path: str) -> tuple[bool, str]:
        """Reload the policy copy from an announced checkpoint; returns (reloaded, what happened for the log).

        Raises:
            Exception: whatever loading the checkpoint raised (the previous copy stays in use).
        """
        if self.readiness is not None and not self.readiness.ready:
            self.readiness.check(inline=True)  # this thread may take seconds (see above); loads the newest head
            if not self.readiness.ready:
                return False, f"checkpoint {path} announced; not loaded: task_selector is {self.not_ready()}"
        if path == self.selection.checkpoint:
            return False, f"checkpoint {path} is already loaded"
        if self.p.selection_policy == "frozen" and self.selection.policy is not None:
            return False, f"checkpoint {path} announced; selection_policy=frozen keeps {self.selection.checkpoint}"
        current = self.selection.policy  # share its language model instead of loading another copy
        policy, members = self._load(path, encoder=current.encoder if current is not None else None)
        self._learn(policy, members, path)
        self._follow_state_kind(path)
        self.selection.set_policy(policy, path, self._pretrain_counts(path), members)
        self._freeze(path)
        self.reloads += 1
        with_members = f" and its {len(members)} ensemble member(s)" if members else ""
        return True, f"reloaded policy from {path}{with_members}"
