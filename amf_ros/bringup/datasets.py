"""Glue between the episode store, the transitions dict and the policy, shared by policy_server and task_selector.

``transitions`` = dict of numpy arrays with N rows (policies/base.py): ``state`` (N, S), ``task`` (N,) task keys,
``action`` (N, A), ``episode_index`` (N,), ``step`` (N,). The action is the simulator's native action when every
episode recorded it (the Metaworld policy is trained in its native 4-D space), else the 7-D wire action.
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


def load_transitions(dataset_dir: str | Path, tasks: Sequence[str] = ()) -> Transitions | None:
    """Every step of every complete episode (optionally only ``tasks``) as transitions; None if there are none.

    Uses ``action_native`` when every selected episode has it (Metaworld policies act in the native space).
    """
    from amf_ros.data.schema import ACTION, ACTION_NATIVE, STATE
    from amf_ros.data.store import EpisodeStore

    if not Path(dataset_dir).is_dir():
        return None
    episodes = list(EpisodeStore(dataset_dir, create=False).episodes(images=False, tasks=list(tasks) or None))
    if not episodes:
        return None
    native = all(ACTION_NATIVE in ep.steps for ep in episodes)
    parts = []
    for i, ep in enumerate(episodes):
        n = len(ep)
        parts.append({"state": np.asarray(ep.steps[STATE], np.float32),
                      "action": np.asarray(ep.steps[ACTION_NATIVE if native else ACTION], np.float32),
                      "task": np.asarray([ep.meta.task] * n, dtype=object),
                      "episode_index": np.full(n, i, np.int64), "step": np.arange(n, dtype=np.int64)})
    return concat(parts)


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


def fit(policy: Any, transitions: Mapping[str, np.ndarray], steps: int, batch_size: int, lr: float,
        seed: int) -> list[float]:
    """``steps`` gradient steps of the policy's own fine-tuning loop; returns the per-step losses."""
    result = policy.fit(transitions, steps, batch_size=batch_size, lr=lr, seed=seed)
    losses = getattr(result, "losses", result)
    return [float(x) for x in np.asarray(losses, dtype=np.float64).ravel()]


def fit_alpha(policy: Any, transitions: Mapping[str, np.ndarray], steps: int) -> None:
    """Train the adaptive prior's alpha(c) (no-op for a policy without one)."""
    fn = getattr(policy, "fit_alpha", None)
    if fn is not None:
        fn(transitions, steps=steps)


def alphas(policy: Any) -> dict[str, float]:
    """Per-task alpha(c) of the adaptive prior ({} for a policy without one)."""
    fn = getattr(policy, "alphas", None)
    if fn is None:
        return {}
    values = fn() if callable(fn) else fn
    return {str(k): float(v) for k, v in dict(values).items()}
