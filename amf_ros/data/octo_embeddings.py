"""The Octo trunk's embedding of every recorded frame, computed once and kept on disk next to the dataset.

Why: only Octo's action head is fine-tuned and scored; the trunk is frozen, so each frame's embedding is the same
every round. policy_server fills the cache when it fine-tunes and task_selector reads the same files, so Octo runs
once per frame (task_selector loads the trunk only for frames not embedded yet). Why in data/: the cache is a derived
view of the episode store (it reads the store, the trunk is passed in), and data/ may use the policies layer below.

An entry is keyed by (episode, Octo checkpoint, instruction, window settings) and stored as
``<dataset_dir>_octo_embeddings/<checkpoint key>/<episode>-<instruction hash>.npz``; an entry whose step count
differs from the episode is recomputed.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from amf_ros.atomic import atomic_write_bytes
from amf_ros.policies.octo.heads import checkpoint_key

CACHE_VERSION = 1


def _instr_hash(instruction: str) -> str:
    return hashlib.sha256(instruction.encode()).hexdigest()[:12]


class EmbeddingCache:
    """Octo embeddings of recorded frames, on disk next to the dataset (see module doc).

    Args:
        dataset_dir: the episode store.
        octo_checkpoint: the Octo checkpoint the trunk is loaded from (part of the key).
        trunk_fn: returns the trunk; called only when an embedding is missing (task_selector loads Octo lazily).
        instructions: ``{task: instruction}`` the policy acts with (the embedding depends on it).
        image_key, wrist_key: recorded image streams fed to the trunk (wrist "" = none).
        batch_size: frames per trunk call.
    """

    def __init__(self, dataset_dir: str | Path, octo_checkpoint: str, trunk_fn: Callable[[], Any],
                 instructions: Mapping[str, str], image_key: str = "image_primary", wrist_key: str = "",
                 batch_size: int = 16) -> None:
        self.dataset_dir = Path(dataset_dir)
        self.key = checkpoint_key(octo_checkpoint)
        self.root = self.dataset_dir.parent / f"{self.dataset_dir.name}_octo_embeddings" / self.key
        self.trunk_fn = trunk_fn
        self.instructions = dict(instructions)
        self.image_key, self.wrist_key, self.batch_size = image_key, wrist_key, int(batch_size)
        self.computed = 0  # episodes embedded by the trunk (not read from disk) in this process
        self._lock = threading.Lock()

    def path(self, episode_id: str, instruction: str) -> Path:
        """Cache file of one episode's embeddings under ``instruction`` (a changed instruction gets a new file)."""
        return self.root / f"{episode_id}-{_instr_hash(instruction)}.npz"

    def _read(self, path: Path, num_steps: int, instruction: str) -> np.ndarray | None:
        try:
            with np.load(path) as z:
                emb, meta = z["embedding"], json.loads(str(z["meta"]))
        except (OSError, ValueError, KeyError):
            return None
        ok = (meta.get("version") == CACHE_VERSION and meta.get("instruction") == instruction
              and meta.get("image_key") == self.image_key and meta.get("wrist_key") == self.wrist_key
              and emb.ndim == 2 and emb.shape[0] == num_steps)
        return emb if ok else None

    def instruction(self, task: str, recorded: str) -> str:
        """The instruction the policy acts with for ``task`` (the recorded one for a task outside the set)."""
        return self.instructions.get(task, recorded)

    def episode(self, store: Any, episode_id: str) -> tuple[np.ndarray, Any]:
        """((T, E) embeddings, loaded episode without images) of one committed episode."""
        meta = store.meta(episode_id)
        instruction = self.instruction(meta.task, meta.instruction)
        path = self.path(episode_id, instruction)
        with self._lock:
            emb = self._read(path, meta.num_steps, instruction) if path.is_file() else None
            if emb is not None:
                return emb, store.load(episode_id, images=False)
            keys = [self.image_key] + ([self.wrist_key] if self.wrist_key else [])
            try:
                ep = store.load(episode_id, images=keys)
            except ValueError as exc:  # EpisodeValidationError: e.g. recorded without a camera
                raise ValueError(f"episode {episode_id!r}: cannot read the camera stream(s) {keys} the Octo policy "
                                 f"is fine-tuned on ({exc})") from exc
            obs = ep.observation
            wrist = obs[self.wrist_key] if self.wrist_key else None
            emb = np.asarray(self.trunk_fn().embed_episode(obs[self.image_key], instruction, wrist=wrist,
                                                          batch_size=self.batch_size), np.float32)
            buf = io.BytesIO()
            meta_json = json.dumps({"version": CACHE_VERSION, "instruction": instruction, "episode": episode_id,
                                    "image_key": self.image_key, "wrist_key": self.wrist_key, "key": self.key})
            np.savez(buf, embedding=emb, meta=np.asarray(meta_json))
            atomic_write_bytes(path, buf.getvalue())
            self.computed += 1
            return emb, ep

    def transitions(self, tasks: Sequence[str] = (), episode_ids: Sequence[str] | None = None,
                    cancelled: Callable[[], bool] | None = None) -> dict[str, np.ndarray] | None:
        """Transitions with ``state`` = Octo embeddings (N, E) and ``action`` = recorded 7-D EefDeltaAction;
        None if the store has no (matching) episode. ``cancelled`` is polled before every episode (True ->
        :class:`~amf_ros.policies.fine_tuning.FineTuneCancelledError`; the episodes embedded so far stay cached)."""
        return embedded_transitions(self.dataset_dir, self.episode, lambda _eid, emb, _ep: emb, tasks, episode_ids,
                                    cancelled)


def embedded_transitions(dataset_dir: Path, episode: Callable[[Any, str], tuple[np.ndarray, Any]],
                         state: Callable[[str, np.ndarray, Any], np.ndarray], tasks: Sequence[str] = (),
                         episode_ids: Sequence[str] | None = None,
                         cancelled: Callable[[], bool] | None = None,
                         actors: str = "human") -> dict[str, np.ndarray] | None:
    """The transitions of a store's episodes from a per-frame embedding cache (Octo's trunk, the camera policy's
    frozen encoder): ``episode(store, id)`` -> (embeddings (N, E), the episode), ``state(id, embeddings, episode)``
    -> the policy's state rows (N, S); ``action`` = the recorded 7-D EefDeltaAction. None if the store has no
    (matching) episode or none has a training step. ``cancelled`` is polled before every episode (True ->
    :class:`~amf_ros.policies.fine_tuning.FineTuneCancelledError`; the episodes embedded so far stay cached).
    ``actors``: the training rule of :func:`amf_ros.data.transitions.load_transitions` (a person's steps by
    default, each contiguous run its own ``episode_index``; every frame is embedded and cached either way)."""
    from amf_ros.data.schema import ACTOR
    from amf_ros.data.schema import actors as actor_column
    from amf_ros.data.store import EpisodeStore
    from amf_ros.data.transitions import append_runs, demonstration_runs
    from amf_ros.policies.fine_tuning import FineTuneCancelledError

    demonstration_runs(np.zeros(0), actors)  # ValueError for an unknown rule, before any embedding
    if not Path(dataset_dir).is_dir():
        return None
    store = EpisodeStore(dataset_dir, create=False)
    ids = list(episode_ids) if episode_ids is not None else store.episode_ids()
    if tasks:
        ids = [e for e in ids if store.meta(e).task in set(tasks)]
    if not ids:
        return None
    cols: dict[str, list[np.ndarray]] = {"state": [], "action": [], "task": [], "episode_index": [], "step": [],
                                         ACTOR: []}
    used = 0
    for i, eid in enumerate(ids):
        if cancelled is not None and cancelled():
            raise FineTuneCancelledError(f"fine-tune cancelled while embedding episode {i + 1} of {len(ids)} "
                                         "(nothing saved)")
        emb, ep = episode(store, eid)
        n = len(ep)
        rows = {"state": state(eid, emb, ep), "action": np.asarray(ep.steps["action"], np.float32).reshape(n, -1)}
        used = append_runs(cols, rows, actor_column(ep.steps), ep.meta.task, actors, used)
    if not used:
        return None
    return {k: np.concatenate(v) for k, v in cols.items()}
