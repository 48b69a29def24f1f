"""From an episode store to the transitions dict the policies fine-tune on, shared by policy_server, task_selector,
the benchmarks and library users.

``transitions`` = dict of numpy arrays with N rows = the training steps of the selected episodes (policies/base.py)::

    {"state": float32 (N, S), "action": float32 (N, A), "task": object (N,) task keys, "episode_index": int64 (N,),
     "step": int64 (N,), "actor": uint8 (N,), ["image": uint8 (N, H, W, 3)]}

The training rule (:data:`DEFAULT_ACTORS`): fine-tuning learns from the steps a PERSON acted. A plain demonstration
is all a person's; a run_policy goal recorded while a person took over (intervention, HG-DAgger; the episode's
``actor`` column, amf_ros/data/schema.py) contributes the person's segments, each a demonstration of the task from
the state the policy had reached; the policy's own steps are left out (they are what the person corrected).
Episodes without the column (recorded before it existed, imported) are all a person's. ``actors="all"`` keeps
every step.

``episode_index`` counts the selected demonstrations in the order read (store order, oldest first, or the order of
``episode_ids``): one per episode, or one per contiguous run of a person's steps of an intervention episode, so
that action chunks (policies/chunking.py) never span a gap where the policy acted; ``step`` stays the step within
the episode. The action is the policy's own (:mod:`amf_ros.policies.action_spaces`): the recorded 7-D wire
action for "eef7", its exact Metaworld preimage for "metaworld".
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import numpy as np

from amf_ros.data.codec import resize_images
from amf_ros.data.schema import ACTION, ACTOR, ACTOR_HUMAN, OBS_PREFIX, STATE
from amf_ros.data.schema import actors as actor_column
from amf_ros.data.store import EpisodeStore
from amf_ros.policies.action_spaces import action_space as get_action_space
from amf_ros.policies.base import Policy

Transitions = dict[str, np.ndarray]

ACTOR_RULES = ("human", "all")
"""Which steps become training transitions: the person's (default) or every step."""
DEFAULT_ACTORS = "human"
"""The default training rule: a person's steps are the demonstrations (see the module docstring)."""


def demonstration_runs(actor: np.ndarray, rule: str = DEFAULT_ACTORS) -> list[tuple[int, int]]:
    """``[(start, stop), ...]`` row ranges of one episode that train the policy under ``rule``: every contiguous run
    of a person's steps ("human"), or the whole episode ("all").

    Args:
        actor: (N,) the episode's ``actor`` column (:func:`amf_ros.data.schema.actors`).
        rule: one of :data:`ACTOR_RULES`.
    """
    if rule not in ACTOR_RULES:
        raise ValueError(f"actors must be one of {ACTOR_RULES}, got {rule!r}")
    actor = np.asarray(actor).reshape(-1)
    if rule == "all":
        return [(0, len(actor))] if len(actor) else []
    keep = np.r_[False, actor == ACTOR_HUMAN, False].astype(np.int8)
    edges = np.flatnonzero(np.diff(keep))
    return [(int(a), int(b)) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def append_runs(cols: dict[str, list[np.ndarray]], steps: Mapping[str, np.ndarray], who: np.ndarray, task: str,
                rule: str, index: int, transform: Callable[[str, np.ndarray], np.ndarray] | None = None) -> int:
    """Append one episode's training runs under ``rule`` (:func:`demonstration_runs`) to the columns ``cols``: each
    row array of ``steps`` sliced per run (then ``transform(key, rows)``, e.g. an image resize, only on kept rows),
    and per run its ``task``, ``episode_index`` (``index``, ``index + 1``, ...), ``step`` and ``actor``. Returns the
    next free episode_index. The one home of the rule's bookkeeping for every transitions builder."""
    for a, b in demonstration_runs(who, rule):
        for key, rows in steps.items():
            cols[key].append(transform(key, rows[a:b]) if transform is not None else rows[a:b])
        cols["task"].append(np.full(b - a, task, dtype=object))
        cols["episode_index"].append(np.full(b - a, index, dtype=np.int64))
        cols["step"].append(np.arange(a, b, dtype=np.int64))
        cols[ACTOR].append(who[a:b])
        index += 1
    return index


def human_rows(transitions: Mapping[str, np.ndarray]) -> Transitions:
    """``transitions`` without the rows a policy acted (those with ``actor`` != human); unchanged without the
    column. The fine-tune worker applies it to whatever it is given (the training rule in one place)."""
    if ACTOR not in transitions:
        return dict(transitions)
    keep = np.asarray(transitions[ACTOR]).reshape(-1) == ACTOR_HUMAN
    if keep.all():
        return dict(transitions)
    return {k: np.asarray(v)[keep] for k, v in transitions.items()}


def load_transitions(store: EpisodeStore | str | os.PathLike, *, tasks: Sequence[str] = (),
                     episode_ids: Sequence[str] | None = None, action_space: str = "eef7",
                     image_key: str | None = None, image_size: tuple[int, int] | None = None,
                     state_key: str = STATE, success_only: bool = False,
                     actors: str = DEFAULT_ACTORS) -> Transitions | None:
    """Concatenate the training steps of the selected episodes; None when no episode is selected, none has such a
    step, or no dataset exists.

    Args:
        store: an EpisodeStore or a dataset directory.
        tasks: keep only these task keys (empty = all).
        episode_ids: read exactly these episodes, in this order (``tasks`` still filters them).
        action_space: the policy's action space: "eef7" = the recorded wire action, "metaworld" = Metaworld's native
            4-D action (the recorder stores the 7-D wire action; the native action is its exact preimage, so every
            store works the same).
        image_key: also load this image stream (e.g. ``"image_primary"``) as ``"image"``.
        image_size: (H, W) to resize images to (None = as stored).
        state_key: which observation array is the state (default ``observation/state``).
        success_only: skip episodes not marked successful (recovered episodes have success=None).
        actors: the training rule: "human" (default) = the steps a person acted, each contiguous run its own
            ``episode_index``; "all" = every step, one ``episode_index`` per episode.
    Raises:
        ValueError: an unknown action space, an episode without the state or action, or episodes that disagree on
            the state/action width.
        EpisodeValidationError: an episode fails validation (names the episode and field).
    """
    space = get_action_space(action_space)
    demonstration_runs(np.zeros(0), actors)  # ValueError for an unknown rule, before any read
    if not isinstance(store, EpisodeStore):
        if not Path(store).is_dir():
            return None
        store = EpisodeStore(store, create=False)
    state_key = state_key if state_key.startswith(OBS_PREFIX) else OBS_PREFIX + state_key
    ids = list(episode_ids) if episode_ids is not None else store.episode_ids()
    wanted = set(tasks)
    cols: dict[str, list[np.ndarray]] = {"state": [], "action": [], "task": [], "episode_index": [], "step": [],
                                         ACTOR: []}
    if image_key is not None:
        cols["image"] = []
    used = 0
    for eid in ids:
        meta = store.meta(eid)
        if (wanted and meta.task not in wanted) or (success_only and meta.success is not True):
            continue
        ep = store.load(eid, images=[image_key] if image_key else False)
        n = len(ep)
        for key in (ACTION, state_key):
            if key not in ep.steps:
                raise ValueError(f"episode {eid!r} has no {key!r} (has {sorted(ep.steps)})")
        who = actor_column(ep.steps)
        state = np.asarray(ep.steps[state_key], dtype=np.float32).reshape(n, -1)
        action = np.asarray(ep.steps[ACTION], dtype=np.float32)
        rows = {"state": state, "action": action}
        if image_key is not None:
            rows["image"] = ep.steps[image_key if image_key.startswith(OBS_PREFIX) else OBS_PREFIX + image_key]
        used = append_runs(cols, rows, who, meta.task, actors, used,
                           (lambda key, x: resize_images(x, image_size) if key == "image" else x) if image_size
                           else None)
    if not used:
        return None
    for key in ("state", "action"):
        widths = {a.shape[1] for a in cols[key]}
        if len(widths) > 1:
            raise ValueError(f"episodes disagree on the {key} width: {sorted(widths)}")
    out = {k: np.concatenate(v) for k, v in cols.items()}
    out["action"] = space.from_wire_rows(out["action"])
    return out


class EpisodeCache:
    """Per-episode transitions of a store, each committed episode read once (committed episodes never change).

    Why: task_selector answers next_task from the whole store; re-reading 400 episodes per request costs seconds.

    Args:
        action_space: the policy's action space (see :func:`load_transitions`).
        loader: ``episode ids -> transitions`` replacing :func:`load_transitions` (the Octo backend: states are
            the trunk's cached frame embeddings, data.octo_embeddings.EmbeddingCache.transitions).
    """

    def __init__(self, dataset_dir: str | Path, action_space: str,
                 loader: Callable[[Sequence[str]], Transitions | None] | None = None) -> None:
        get_action_space(action_space)  # ValueError for an unknown one, now rather than at the first read
        self.dataset_dir = Path(dataset_dir)
        self.action_space = action_space
        self.loader = loader
        self._tasks: dict[str, str] = {}
        self._steps: dict[str, Transitions] = {}

    def _ids(self) -> list[str]:
        if not self.dataset_dir.is_dir():
            return []
        store = EpisodeStore(self.dataset_dir, create=False)
        ids = store.episode_ids()
        for eid in ids:
            if eid not in self._tasks:
                self._tasks[eid] = store.meta(eid).task
        return ids

    def demo_counts(self) -> dict[str, int]:
        """Number of committed episodes per task key."""
        counts: dict[str, int] = {}
        for eid in self._ids():
            counts[self._tasks[eid]] = counts.get(self._tasks[eid], 0) + 1
        return counts

    def episodes(self) -> list[tuple[str, Transitions]]:
        """``[(episode id, transitions of that episode)]``, oldest first; only new episodes are read from disk."""
        ids = self._ids()
        for eid in (e for e in ids if e not in self._steps):  # one at a time: the training rule may split an
            # episode into several demonstrations (episode_index values) or leave nothing of it
            data = (self.loader([eid]) if self.loader is not None else
                    load_transitions(self.dataset_dir, action_space=self.action_space, episode_ids=[eid]))
            self._steps[eid] = data or {}
        return [(e, self._steps[e]) for e in ids if self._steps[e]]


def concat(parts: Sequence[Mapping[str, np.ndarray]]) -> Transitions:
    """Row-wise concatenation of transitions dicts with the same keys."""
    if not parts:
        raise ValueError("nothing to concatenate: no recorded states for any target task")
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}


def alphas(policy: Policy) -> dict[str, float]:
    """Per-task alpha(c) of the adaptive prior ({} for a policy without one), as plain floats for a message."""
    return {str(k): float(v) for k, v in policy.alphas.items()}
