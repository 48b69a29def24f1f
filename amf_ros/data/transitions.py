"""Glue between the episode store, the transitions dict and the policy, shared by policy_server and task_selector.

``transitions`` = dict of numpy arrays with N rows (policies/base.py): ``state`` (N, S), ``task`` (N,) task keys,
``action`` (N, A), ``episode_index`` (N,), ``step`` (N,). The action is the simulator's native action for a
Metaworld policy (trained in its native 4-D space) and the 7-D wire action otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

Transitions = dict[str, np.ndarray]


ACTION_SPACES = ("metaworld", "eef7")
"""Action spaces of policies: Metaworld's native 4-D action, or the 7-D EefDeltaAction itself."""


def load_transitions(dataset_dir: str | Path, tasks: Sequence[str] = (), action_space: str = "metaworld",
                     episode_ids: Sequence[str] | None = None) -> Transitions | None:
    """Every step of every complete episode (optionally only ``tasks``) as transitions; None if there are none.

    Args:
        action_space: "metaworld" -> the native 4-D action, "eef7" -> the 7-D wire action.
        episode_ids: read exactly these episodes (``episode_index`` follows their order).
    """
    from amf_ros.data.loader import load_transitions as _load
    from amf_ros.data.store import EpisodeStore

    if action_space not in ACTION_SPACES:
        raise ValueError(f"action_space must be one of {list(ACTION_SPACES)}, got {action_space=}")
    if not Path(dataset_dir).is_dir():
        return None
    store = EpisodeStore(dataset_dir, create=False)
    ids = list(episode_ids) if episode_ids is not None else store.episode_ids()
    if tasks:
        ids = [e for e in ids if store.meta(e).task in set(tasks)]
    if not ids:
        return None
    data = _load(store, episode_ids=ids, action_key="action")
    if action_space == "metaworld":
        # The recorder stores the 7-D wire action; Metaworld's native action is its exact preimage (eef7_to_native
        # undoes native_to_eef7 for the in-range actions a simulator executes), so every store works the same.
        from amf_ros.envs.metaworld_suite import eef7_to_native

        data["action"] = np.stack([eef7_to_native(a) for a in data["action"]]).astype(np.float32)
    data["task"] = np.asarray(data["task"], dtype=object)
    return data


class EpisodeCache:
    """Per-episode transitions of a store, each committed episode read once (committed episodes never change).

    Why: task_selector answers next_task from the whole store; re-reading 400 episodes per request costs seconds.

    Args:
        loader: ``episode ids -> transitions`` replacing :func:`load_transitions` (the Octo backend: states are
            the trunk's cached frame embeddings, octo_backend.EmbeddingCache.transitions).
    """

    def __init__(self, dataset_dir: str | Path, action_space: str = "metaworld",
                 loader: Callable[[Sequence[str]], Transitions | None] | None = None) -> None:
        if action_space not in ACTION_SPACES:
            raise ValueError(f"action_space must be one of {list(ACTION_SPACES)}, got {action_space=}")
        self.dataset_dir = Path(dataset_dir)
        self.action_space = action_space
        self.loader = loader
        self._tasks: dict[str, str] = {}
        self._steps: dict[str, Transitions] = {}

    def _ids(self) -> list[str]:
        from amf_ros.data.store import EpisodeStore

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
        new = [e for e in ids if e not in self._steps]
        if new:
            data = (self.loader(new) if self.loader is not None
                    else load_transitions(self.dataset_dir, action_space=self.action_space, episode_ids=new))
            index = np.asarray(data["episode_index"])
            for i, eid in enumerate(new):
                self._steps[eid] = {k: np.asarray(v)[index == i] for k, v in data.items()}
        return [(e, self._steps[e]) for e in ids]


def concat(parts: Sequence[Mapping[str, np.ndarray]]) -> Transitions:
    """Row-wise concatenation of transitions dicts with the same keys."""
    if not parts:
        raise ValueError("nothing to concatenate: no recorded states for any target task")
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}


def alphas(policy: Any) -> dict[str, float]:
    """Per-task alpha(c) of the adaptive prior ({} for a policy without one)."""
    values = getattr(policy, "alphas", None) or {}
    return {str(k): float(v) for k, v in dict(values).items()}
