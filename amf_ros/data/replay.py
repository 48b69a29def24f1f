"""Replay of pre-training data during fine-tuning: the one home of how replayed rows join the recorded ones.

Why: every current fine-tuning recipe mixes the pre-training data back in (uq_vla replays 50/50, Octo's and
LeRobot's fine-tuning mix datasets), so that a new task is learned without forgetting the old ones. With replay
fraction r, every fine-tuning minibatch draws r of its rows from the replayed pre-training episodes and 1 - r from
the recorded ones, whatever their sizes. AMF's replay-aware criterion (core/amf_nn.py, ``replay_fraction``) weighs
the data the same way, so policy_server and task_selector read the same two settings.

A mixed transitions dict carries the column :data:`REPLAYED` (bool, True on replayed rows); the fine-tune worker
turns it into minibatch weights with :func:`row_weights` and fits the adaptive prior's alpha(c) on the recorded rows
only (what the person demonstrated for the new round, as without replay).

A replay comes in two forms. The state policy's is an episode store (its states are what the store records). A
camera policy's states are its frozen encoders' projected embeddings, which only its own frames give; its
pre-training frames are not kept (two 256 x 256 cameras per step), so the states themselves are stored, once, in
:data:`STATES_FILE` (:class:`StateReplay`, written by :func:`write_state_replay`) with the key of the encoders and
projections that made them; a policy replays them only when its key is the same.
"""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from amf_ros.atomic import atomic_write_bytes
from amf_ros.data.tasks import episode_instructions
from amf_ros.data.transitions import EpisodeCache

Transitions = dict[str, np.ndarray]

REPLAYED = "replayed"
"""Bool column of a mixed transitions dict: True on the rows replayed from pre-training."""

STATES_FILE = "replay_states.npz"
"""A replay_dir holding this file replays stored policy states (:class:`StateReplay`), not an episode store."""

STATES_VERSION = 1
_COLUMNS = ("state", "action", "task", "episode_index", "step")


def replay_beside(checkpoint: str | Path) -> Path:
    """Where a pre-trained checkpoint's own replay lives: ``<checkpoint>_replay``, beside it (an episode store for
    the state policy, :data:`STATES_FILE` for a camera policy)."""
    checkpoint = Path(checkpoint)
    return checkpoint.parent / f"{checkpoint.name}_replay"


class ReplaySettingsError(ValueError):
    """The replay settings cannot work with this policy (a restart with the same parameters fails the same way)."""


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


class StateReplay:
    """Stored policy states of pre-training demonstrations (``<replay_dir>/replay_states.npz``): the camera
    policy's replay, read once. Same interface as the episode store's :class:`EpisodeCache` where the replay uses it.

    Attributes: ``dataset_dir`` (the replay_dir), ``state_key`` (what made the states), ``instructions`` ({task:
    instruction} of the replayed tasks).
    """

    def __init__(self, replay_dir: str | Path) -> None:
        self.dataset_dir = Path(replay_dir)
        path = self.dataset_dir / STATES_FILE
        try:
            with np.load(path, allow_pickle=False) as z:
                cols = {k: np.asarray(z[k]) for k in _COLUMNS}
                meta = json.loads(str(z["meta"]))
        except (OSError, ValueError, KeyError) as exc:
            raise ValueError(f"{path} is not a readable replay of stored states ({type(exc).__name__}: {exc}); "
                             "delete it to have it written again") from None
        if meta.get("version") != STATES_VERSION:
            raise ValueError(f"{path} has version {meta.get('version')!r}, this code reads {STATES_VERSION}")
        n = len(cols["task"])
        if n == 0 or any(len(v) != n for v in cols.values()) or cols["state"].ndim != 2:
            raise ValueError(f"{path}: columns of different lengths or an empty replay")
        self.state_key: str = str(meta.get("state_key", ""))
        self.instructions: dict[str, str] = dict(meta.get("instructions", {}))
        cols["task"] = cols["task"].astype(str)
        self._episodes = [(f"replay_{int(i):05d}", {k: v[cols["episode_index"] == i] for k, v in cols.items()})
                          for i in np.unique(cols["episode_index"])]

    def episodes(self) -> list[tuple[str, Transitions]]:
        """``[(episode id, transitions of that episode)]`` in stored order."""
        return list(self._episodes)


def write_state_replay(replay_dir: str | Path, transitions: Mapping[str, np.ndarray], state_key: str,
                       instructions: Mapping[str, str]) -> Path:
    """Store ``transitions`` (``state``, ``action``, ``task``, ``episode_index``, ``step``) as the replay of a policy
    whose states ``state_key`` names (atomically; ``replay_dir`` is created). Returns ``replay_dir``."""
    if not state_key:
        raise ValueError("a stored-state replay needs the key of what made its states")
    missing = [k for k in _COLUMNS if k not in transitions]
    if missing:
        raise ValueError(f"transitions lack {missing}")
    unknown = sorted({str(t) for t in transitions["task"]} - set(instructions))
    if unknown:
        raise ValueError(f"no instruction for the replayed task(s) {unknown}")
    out = Path(replay_dir)
    out.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    meta = {"version": STATES_VERSION, "state_key": state_key, "instructions": dict(instructions)}
    np.savez(buf, state=np.asarray(transitions["state"], np.float32),
             action=np.asarray(transitions["action"], np.float32),
             task=np.asarray(transitions["task"]).astype(str), episode_index=np.asarray(transitions["episode_index"],
                                                                                       np.int64),
             step=np.asarray(transitions["step"], np.int64), meta=np.asarray(json.dumps(meta)))
    atomic_write_bytes(out / STATES_FILE, buf.getvalue())
    return out


def replay_instructions(replay: EpisodeCache | StateReplay | None) -> dict[str, str]:
    """``{task: instruction}`` of the replayed tasks ({} without replay): what a fine-tune teaches a policy for a
    replayed task its checkpoint lacks."""
    if replay is None:
        return {}
    if isinstance(replay, StateReplay):
        return dict(replay.instructions)
    return episode_instructions(replay.dataset_dir)


def replay_cache(replay_dir: str | Path | None, fraction: float, action_space: str,
                 state_key: str | None = "") -> EpisodeCache | StateReplay | None:
    """The replayed pre-training episodes (each read once), or None without replay.

    Args:
        replay_dir: an episode store of pre-training demonstrations, or a folder with :data:`STATES_FILE`.
        fraction: the replay's share of every minibatch (0 = no replay: nothing is read or required).
        action_space: the policy's action space (an episode store's actions, data/transitions.py).
        state_key: what the caller's states are: "" = the episode store's recorded states (the state policy); a
            camera policy's :func:`~amf_ros.policies.camera_policy.camera_state_key` = the stored states of
            :data:`STATES_FILE` made with that key; None = states no replay holds (Octo's trunk embeddings).
    Raises:
        ReplaySettingsError: a fraction > 0 without a replay_dir, a replay_dir that is not a directory, a replay
            whose states are not the caller's (stored states of another key, or an episode store for a camera
            policy), or a caller whose states cannot be replayed.
    """
    if check_fraction(fraction) == 0.0:
        return None
    if not replay_dir:
        raise ReplaySettingsError(
            f"replay_fraction is {fraction} but replay_dir is empty: set replay_dir to the replay of the policy's "
            "pre-training demonstrations (`amf run --replay-fraction` writes the pre-trained checkpoint's own), or "
            "replay_fraction to 0")
    if state_key is None:
        raise ReplaySettingsError("replay_fraction > 0 needs the state policy or the camera policy: the Octo backend "
                                  "fine-tunes on cached trunk embeddings that the replay does not hold")
    replay_dir = Path(replay_dir)
    if not replay_dir.is_dir():
        raise ReplaySettingsError(f"replay_dir {str(replay_dir)!r} is not a directory (an episode store of "
                                  "pre-training demonstrations, or a camera policy's stored states)")
    if (replay_dir / STATES_FILE).is_file():
        try:
            replay = StateReplay(replay_dir)
        except ValueError as exc:  # unreadable: the same file is there after a restart
            raise ReplaySettingsError(str(exc)) from None
        if replay.state_key != state_key:
            whose = f"the camera policy whose states are {state_key!r}" if state_key else "the state policy"
            raise ReplaySettingsError(
                f"replay_dir {str(replay_dir)!r} holds states made with {replay.state_key!r}, not those of {whose}: "
                "use the replay written for this policy's own pre-training (`amf run --replay-fraction` writes it "
                "beside the pre-trained checkpoint)")
        return replay
    if state_key:
        raise ReplaySettingsError(
            f"replay_dir {str(replay_dir)!r} has no {STATES_FILE}: a camera policy replays the states stored with its "
            "pre-training (`amf run --replay-fraction` writes them beside the pre-trained camera checkpoint), not an "
            "episode store's")
    return EpisodeCache(replay_dir, action_space)
