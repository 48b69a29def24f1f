"""Replay of pre-training data during fine-tuning: the one home of how replayed rows join the recorded ones.

Why: every current fine-tuning recipe mixes the pre-training data back in (uq_vla replays 50/50, Octo's and
LeRobot's fine-tuning mix datasets), so that a new task is learned without forgetting the old ones. With replay
fraction r, every fine-tuning minibatch draws r of its rows from the replayed pre-training episodes and 1 - r from
the recorded ones, whatever their sizes. AMF's replay-aware criterion (core/amf_nn.py, ``replay_fraction``) weighs
the data the same way, so policy_server and task_selector read the same two settings.

A mixed transitions dict carries the column :data:`REPLAYED` (bool, True on replayed rows); the fine-tune worker
turns it into minibatch weights with :func:`row_weights` and fits the adaptive prior's alpha(c) on the recorded rows
only (what the person demonstrated for the new round, as without replay).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from amf_ros.data.transitions import EpisodeCache

Transitions = dict[str, np.ndarray]

REPLAYED = "replayed"
"""Bool column of a mixed transitions dict: True on the rows replayed from pre-training."""


def check_fraction(fraction: float) -> float:
    """``fraction`` as a float in [0, 1) (ValueError otherwise: r = 1 would never train on the recorded data)."""
    r = float(fraction)
    if not 0.0 <= r < 1.0:
        raise ValueError(f"replay_fraction must be in [0, 1), got {fraction!r}")
    return r


def mix(recorded: Mapping[str, np.ndarray], replay: Mapping[str, np.ndarray]) -> Transitions:
    """Replayed rows first, then the recorded ones, with the :data:`REPLAYED` column.

    The recorded rows' ``episode_index`` is shifted past the replayed ones', so that no action chunk
    (policies/chunking.py) joins the last replayed episode to the first recorded one. Columns present in only one
    side are dropped (e.g. ``actor`` when the replayed episodes predate it); ``state`` and ``action`` must agree in
    width.

    Raises:
        ValueError: an empty side, or states/actions of different widths (replay recorded for another robot).
    """
    n_replay, n_rec = len(replay.get("task", ())), len(recorded.get("task", ()))
    if n_replay == 0 or n_rec == 0:
        raise ValueError(f"mixing needs rows on both sides, got {n_replay} replayed and {n_rec} recorded")
    for key in ("state", "action"):
        a, b = np.asarray(replay[key]), np.asarray(recorded[key])
        if a.shape[1:] != b.shape[1:]:
            raise ValueError(f"the replayed episodes' {key} is {a.shape[1:]} per step, the recorded ones' "
                             f"{b.shape[1:]}: replay_dir must hold episodes of the same robot and state layout")
    keys = [k for k in recorded if k in replay and k != REPLAYED]
    out = {k: np.concatenate([np.asarray(replay[k]), np.asarray(recorded[k])]) for k in keys}
    if "episode_index" in out:
        shift = int(np.max(replay["episode_index"])) + 1
        out["episode_index"][n_replay:] += shift - int(np.min(recorded["episode_index"]))
    out[REPLAYED] = np.concatenate([np.ones(n_replay, bool), np.zeros(n_rec, bool)])
    return out


def stack_episodes(parts: Sequence[Mapping[str, np.ndarray]]) -> Transitions:
    """Row-wise concatenation of per-episode transitions (EpisodeCache's, each numbered from 0) with their
    ``episode_index`` renumbered to follow one another, so that (episode_index, step) stays unique."""
    if not parts:
        raise ValueError("no replayed episodes to stack")
    shifted, start = [], 0
    for part in parts:
        index = np.asarray(part["episode_index"], np.int64)
        shifted.append({**part, "episode_index": index - index.min() + start})
        start += int(index.max() - index.min()) + 1
    return {k: np.concatenate([np.asarray(p[k]) for p in shifted]) for k in shifted[0]}


def row_weights(replayed: np.ndarray, fraction: float) -> np.ndarray | None:
    """(N,) minibatch sampling weights: ``fraction`` of the mass spread evenly over the replayed rows, the rest over
    the recorded ones (sums to 1). None when nothing is replayed or ``fraction`` is 0 (uniform draws, unchanged)."""
    r = check_fraction(fraction)
    replayed = np.asarray(replayed, bool).reshape(-1)
    n_replay = int(replayed.sum())
    n_new = replayed.size - n_replay
    if r == 0.0 or n_replay == 0:
        return None
    if n_new == 0:
        raise ValueError("replay needs recorded rows beside the replayed ones: record a demonstration first")
    return np.where(replayed, r / n_replay, (1.0 - r) / n_new)


def recorded_rows(transitions: Mapping[str, np.ndarray]) -> Transitions:
    """``transitions`` without its replayed rows and without the :data:`REPLAYED` column (unchanged without it)."""
    if REPLAYED not in transitions:
        return dict(transitions)
    keep = ~np.asarray(transitions[REPLAYED], bool)
    return {k: np.asarray(v)[keep] for k, v in transitions.items() if k != REPLAYED}


def replay_cache(replay_dir: str | Path | None, fraction: float, action_space: str,
                 reads_states: bool = True) -> EpisodeCache | None:
    """The replayed store's per-episode transitions (each episode read once), or None without replay.

    Raises:
        ValueError: a fraction > 0 without a replay_dir, a replay_dir that is not a directory, or a backend whose
            transitions are not the store's states (``reads_states`` False: camera, Octo).
    """
    if check_fraction(fraction) == 0.0:
        return None
    if not replay_dir:
        raise ValueError(f"replay_fraction is {fraction} but replay_dir is empty: set replay_dir to an episode store "
                         "of pre-training demonstrations (`amf run --replay-fraction` writes the pre-trained "
                         "checkpoint's own), or replay_fraction to 0")
    if not reads_states:
        raise ValueError("replay_fraction > 0 needs the state policy (backend native, trunk state): the camera and "
                         "Octo backends fine-tune on cached embeddings that the replay does not read yet")
    replay_dir = Path(replay_dir)
    if not replay_dir.is_dir():
        raise ValueError(f"replay_dir {str(replay_dir)!r} is not a directory (an episode store of pre-training "
                         "demonstrations)")
    return EpisodeCache(replay_dir, action_space)
