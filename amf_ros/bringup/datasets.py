"""Glue between the episode store, the transitions dict and the policy, shared by policy_server and task_selector.

``transitions`` = dict of numpy arrays with N rows (policies/base.py): ``state`` (N, S), ``task`` (N,) task keys,
``action`` (N, A), ``episode_index`` (N,), ``step`` (N,). The action is the simulator's native action for a
Metaworld policy (trained in its native 4-D space) and the 7-D wire action otherwise.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

Transitions = dict[str, np.ndarray]


def demo_counts(dataset_dir: str | Path) -> dict[str, int]:
    """Number of complete episodes per task key in the store ({} if the directory does not exist yet)."""
    from amf_ros.data.store import EpisodeStore

    if not Path(dataset_dir).is_dir():
        return {}
    store = EpisodeStore(dataset_dir, create=False)
    counts: dict[str, int] = {}
    for eid in store.episode_ids():
        task = store.meta(eid).task
        counts[task] = counts.get(task, 0) + 1
    return counts


ACTION_SPACES = ("metaworld", "eef7")
"""Action spaces of policies: Metaworld's native 4-D action, or the 7-D EefDeltaAction itself."""


def load_transitions(dataset_dir: str | Path, tasks: Sequence[str] = (),
                     action_space: str = "metaworld") -> Transitions | None:
    """Every step of every complete episode (optionally only ``tasks``) as transitions; None if there are none.

    Args:
        action_space: "metaworld" -> the native 4-D action, "eef7" -> the 7-D wire action.
    """
    from amf_ros.data.loader import load_transitions as _load
    from amf_ros.data.store import EpisodeStore

    if action_space not in ACTION_SPACES:
        raise ValueError(f"action_space must be one of {list(ACTION_SPACES)}, got {action_space=}")
    if not Path(dataset_dir).is_dir():
        return None
    store = EpisodeStore(dataset_dir, create=False)
    ids = store.episode_ids()
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


def concat(parts: Sequence[Mapping[str, np.ndarray]]) -> Transitions:
    """Row-wise concatenation of transitions dicts with the same keys."""
    if not parts:
        raise ValueError("nothing to concatenate: no recorded states for any target task")
    return {k: np.concatenate([np.asarray(p[k]) for p in parts]) for k in parts[0]}


def split_episodes(data: Mapping[str, np.ndarray], frames: int) -> list[Transitions]:
    """One transitions dict per episode, each cut to at most ``frames`` evenly spaced steps (first and last kept)."""
    out = []
    index = np.asarray(data["episode_index"])
    for e in np.unique(index):
        rows = np.flatnonzero(index == e)
        keep = rows[np.unique(np.linspace(0, len(rows) - 1, num=min(frames, len(rows))).round().astype(int))]
        out.append({k: np.asarray(v)[keep] for k, v in data.items()})
    return out


def alphas(policy: Any) -> dict[str, float]:
    """Per-task alpha(c) of the adaptive prior ({} for a policy without one)."""
    values = getattr(policy, "alphas", None) or {}
    return {str(k): float(v) for k, v in dict(values).items()}
