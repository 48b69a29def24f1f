"""The frozen camera encoder's embedding of every recorded frame, computed once and kept on disk next to the dataset.

The camera policy's counterpart of :mod:`amf_ros.data.octo_embeddings` (same layout, same reasoning): the encoder
(:mod:`amf_ros.policies.image_encoders`) is frozen, so a frame's embedding is the same in every round; a fine-tune,
the loss-gradient embeddings of AMF and alpha fitting read the cached file, and the encoder runs only on frames not
embedded yet. Unlike Octo's, the embedding does not depend on the instruction (the instruction's MiniLM embedding is
concatenated by the policy beside it, as for the state policy), so an entry is keyed by (episode, encoder key) only::

    <dataset_dir>_image_embeddings/<encoder key>/<episode>.npz    # embedding (T, D) float32 + meta JSON

An entry whose step count, image key or version differs is recomputed. A policy that also sees the wrist camera
keeps a second cache (its encoder key, the ``image_wrist`` stream) whose projected embeddings sit between the
primary camera's and the proprio. The files hold the raw embedding; the
transitions' ``state`` column is ``concat(projection(embedding) (T, K), proprio (T, P))`` with the checkpoint's frozen
projection (:class:`~amf_ros.policies.camera_policy.CameraProjection`; none = the raw (T, D)) and the proprio the first
``proprio_dims`` entries of the recorded ``observation/state`` (the WidowX: Octo's 8-D proprio), which is what a
camera policy of :mod:`amf_ros.policies.camera_policy` acts on. :meth:`ImageEmbeddingCache.for_checkpoint` builds the
cache a camera-policy checkpoint needs (its encoder key, projection, proprio width and camera stream).
"""

from __future__ import annotations

import io
import json
import threading
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from amf_ros.atomic import atomic_write_bytes
from amf_ros.data.octo_embeddings import embedded_transitions
from amf_ros.data.schema import OBS_PREFIX, STATE

CACHE_VERSION = 1


class ImageEmbeddingCache:
    """Camera-encoder embeddings of recorded frames, on disk next to the dataset (see module doc).

    Args:
        dataset_dir: the episode store.
        encoder_fn: returns the frozen encoder (``key``, ``feature_dim``, ``encode(images, batch_size)``); called only
            when an embedding is missing, so a process whose frames are all cached never loads it.
        encoder_key: the encoder's :attr:`~amf_ros.policies.image_encoders.PretrainedImageEncoder.key` (the cache
            folder), known without loading it (e.g. from the checkpoint's marker).
        image_key: the recorded camera stream the encoder sees (``image_primary``).
        proprio_dims: leading entries of ``observation/state`` placed beside the embedding (0 = none).
        batch_size: frames per encoder call (4: see ``image_encoders.ENCODE_BATCH``).
        project: ``(T, D) -> (T, K)`` applied to the cached embeddings in :meth:`transitions` (the checkpoint's
            frozen projection); None = the raw embedding.
        wrist: the wrist camera's cache (its own encoder key, stream and projection; ``proprio_dims`` 0): its
            projected embeddings go between this one's and the proprio, as the policy's state has them. None = the
            primary camera only.
    """

    def __init__(self, dataset_dir: str | Path, encoder_fn: Callable[[], Any], encoder_key: str,
                 image_key: str = "image_primary", proprio_dims: int = 8, batch_size: int = 4,
                 project: Callable[[np.ndarray], np.ndarray] | None = None,
                 wrist: ImageEmbeddingCache | None = None) -> None:
        if proprio_dims < 0 or batch_size < 1:
            raise ValueError(f"need proprio_dims >= 0 and batch_size >= 1, got {proprio_dims=} {batch_size=}")
        if not encoder_key or "/" in encoder_key:
            raise ValueError(f"encoder_key must be a non-empty folder name, got {encoder_key=}")
        self.dataset_dir = Path(dataset_dir)
        self.key = encoder_key
        self.root = self.dataset_dir.parent / f"{self.dataset_dir.name}_image_embeddings" / encoder_key
        self.encoder_fn = encoder_fn
        self.image_key = image_key[len(OBS_PREFIX):] if image_key.startswith(OBS_PREFIX) else image_key
        self.proprio_dims, self.batch_size = int(proprio_dims), int(batch_size)
        self.project = project
        self.wrist = wrist
        self.computed = 0
        """Episodes embedded by the encoder (not read from disk) by this object."""
        self._lock = threading.Lock()

    @classmethod
    def for_checkpoint(cls, dataset_dir: str | Path, checkpoint: str | Path, batch_size: int = 4
                       ) -> ImageEmbeddingCache:
        """The cache of a camera-policy checkpoint's encoder, projection, proprio width and camera stream (the
        encoder is loaded only when a frame is not cached yet); ValueError for a checkpoint without the marker."""
        from amf_ros.policies.camera_policy import MARKER, read_marker, read_projection

        spec = read_marker(checkpoint)
        if spec is None:
            raise ValueError(f"{checkpoint} has no {MARKER}: not a camera-policy checkpoint")
        wrist = None
        if spec.wrist:
            wrist = cls(dataset_dir, spec.load_wrist_encoder, spec.wrist_key, image_key=spec.wrist_image_key,
                        proprio_dims=0, batch_size=batch_size, project=read_projection(checkpoint, wrist=True))
        return cls(dataset_dir, spec.load_encoder, spec.key, image_key=spec.image_key, proprio_dims=spec.proprio_dims,
                   batch_size=batch_size, project=read_projection(checkpoint), wrist=wrist)

    def path(self, episode_id: str) -> Path:
        """Cache file of one episode's embeddings."""
        return self.root / f"{episode_id}.npz"

    def _read(self, path: Path, num_steps: int) -> np.ndarray | None:
        try:
            with np.load(path) as z:
                emb, meta = z["embedding"], json.loads(str(z["meta"]))
        except (OSError, ValueError, KeyError):
            return None
        ok = (meta.get("version") == CACHE_VERSION and meta.get("image_key") == self.image_key
              and meta.get("key") == self.key and emb.ndim == 2 and emb.shape[0] == num_steps)
        return emb if ok else None

    def episode(self, store: Any, episode_id: str) -> tuple[np.ndarray, Any]:
        """((T, D) float32 embeddings, the episode loaded without images) of one committed episode."""
        emb, ep = self._embed(store, episode_id)
        return emb, (ep if ep is not None else store.load(episode_id, images=False))

    def _embed(self, store: Any, episode_id: str) -> tuple[np.ndarray, Any]:
        """(embeddings, the episode if it had to be loaded with its frames, else None): the cached file, or the
        encoder on the recorded frames (then written to the cache)."""
        meta = store.meta(episode_id)
        path = self.path(episode_id)
        with self._lock:
            emb = self._read(path, meta.num_steps) if path.is_file() else None
            if emb is not None:
                return emb, None
            try:
                ep = store.load(episode_id, images=[self.image_key])
            except ValueError as exc:  # EpisodeValidationError: e.g. recorded without a camera
                raise ValueError(f"episode {episode_id!r}: cannot read the camera stream {self.image_key!r} the "
                                 f"camera policy is trained on ({exc})") from exc
            emb = np.asarray(self.encoder_fn().encode(ep.observation[self.image_key], batch_size=self.batch_size),
                             np.float32)
            if emb.shape[0] != len(ep):
                raise ValueError(f"encoder gave {emb.shape[0]} embeddings for {len(ep)} frames of {episode_id!r}")
            buf = io.BytesIO()
            meta_json = json.dumps({"version": CACHE_VERSION, "episode": episode_id, "image_key": self.image_key,
                                    "key": self.key})
            np.savez(buf, embedding=emb, meta=np.asarray(meta_json))
            atomic_write_bytes(path, buf.getvalue())
            self.computed += 1
            return emb, ep

    def transitions(self, tasks: Sequence[str] = (), episode_ids: Sequence[str] | None = None,
                    cancelled: Callable[[], bool] | None = None) -> dict[str, np.ndarray] | None:
        """Transitions with ``state`` = concat(projected embedding, proprio) (N, K + P) and ``action`` = the recorded
        7-D EefDeltaAction; None if the store has no (matching) episode. ``cancelled`` is polled before every episode
        (True -> :class:`~amf_ros.policies.fine_tuning.FineTuneCancelledError`; what was embedded stays cached)."""
        if self.wrist is None:
            return embedded_transitions(self.dataset_dir, self.episode, self._state, tasks, episode_ids, cancelled)
        return embedded_transitions(self.dataset_dir, self._both, self._state, tasks, episode_ids, cancelled)

    def _both(self, store: Any, episode_id: str) -> tuple[tuple[np.ndarray, np.ndarray], Any]:
        """((primary (T, D), wrist (T, Dw)) embeddings, the episode) of one committed episode."""
        assert self.wrist is not None
        emb, ep = self.episode(store, episode_id)
        wrist, _ = self.wrist._embed(store, episode_id)  # the episode's steps are loaded once, above
        return (emb, wrist), ep

    def _state(self, eid: str, emb: np.ndarray | tuple[np.ndarray, np.ndarray], ep: Any) -> np.ndarray:
        """One episode's state rows: the projected embedding (then the wrist camera's, when there is one), then the
        first ``proprio_dims`` of its state."""
        parts = []
        if isinstance(emb, tuple):
            assert self.wrist is not None
            emb, wrist = emb
            parts.append(self.wrist._state(eid, wrist, ep))
        n = len(ep)
        proprio = np.zeros((n, 0), np.float32)
        if self.proprio_dims:
            if STATE not in ep.steps:
                raise ValueError(f"episode {eid!r} has no {STATE!r} to take the proprio from")
            proprio = np.asarray(ep.steps[STATE], np.float32).reshape(n, -1)[:, :self.proprio_dims]
            if proprio.shape[1] != self.proprio_dims:
                raise ValueError(f"episode {eid!r}: {STATE!r} has {proprio.shape[1]} entries, the camera "
                                 f"policy takes the first {self.proprio_dims}")
        if self.project is not None:
            emb = np.asarray(self.project(emb), np.float32)
        return np.concatenate([emb, *parts, proprio], axis=1)
