"""EpisodeWriter: one episode written chunk by chunk into ``.partial-<id>/``, committed by rename.

Layout of the partial directory while it is written::

    .partial-<id>/
      writer.lock                  flock'ed by the live writer from begin to commit/discard/close (WriterLock)
      start.json                   the episode's metadata at start
      chunk-000000.npz ...         K steps each, written as .chunk-NNNNNN.npz.<random>.tmp, fsynced, renamed
      verdict.json                 written first by commit: the operator's success and note
      steps.npz, meta.json         written last by commit, then the directory is renamed into the dataset

Every chunk file (K steps, images encoded by a background thread) is written to a temp file, fsynced and
renamed, so a crash loses at most the steps not yet in a chunk (a chunk killed between write and rename is
adopted by recovery, :mod:`amf_ros.data.store`). The lock tells recovery whether the writer is alive: the kernel
releases it when the process dies, also by SIGKILL. ``verdict.json`` keeps the operator's verdict for recovery
when the rest of the commit fails (disk full). After the rename, commit removes ``writer.lock`` and
``verdict.json`` (a crash in between leaves them in the committed episode, where readers ignore them).
"""

from __future__ import annotations

import fcntl
import hashlib
import io
import json
import logging
import os
import queue
import shutil
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from amf_ros.atomic import atomic_write_bytes, atomic_write_json, default_mode, fsync_dir
from amf_ros.data import codec as _codec
from amf_ros.data.schema import (
    ACTION,
    ACTION_NATIVE,
    ACTOR,
    ACTOR_NAMES,
    OBS_PREFIX,
    STAMP,
    STAMP_PREFIX,
    EpisodeMeta,
    EpisodeValidationError,
    is_image_key,
    text_limit_problem,
    validate_steps,
)

log = logging.getLogger(__name__)

PARTIAL_PREFIX = ".partial-"
LOCK_FILE = "writer.lock"
VERDICT_FILE = "verdict.json"

# What a partial episode's writer.lock says about its writer (PartialEpisode.writer).
WRITER_ALIVE = "alive"  # lock held: a live EpisodeWriter (or a recovery under way) owns the directory
WRITER_GONE = "gone"  # lock file there and free: the writer ended (closed, failed, exited or killed) for sure
WRITER_UNKNOWN = "unknown"  # no lock file (written before writer.lock existed): only the directory's age tells


@dataclass
class StoreConfig:
    """How episodes are written (reading needs no config: every episode says how it was written)."""

    image_codec: str = "png"  # "png" (lossless), "jpeg" (lossy, ~10x smaller), "raw", "h264" or "av1" (video/chunk)
    jpeg_quality: int = 95  # 1..100, used when image_codec == "jpeg"
    video_crf: int = 23  # constant quality of h264 (0-51) / av1 (0-63): lower = better and larger
    png_level: int = 1  # 0..9 zlib level (1: fastest real compression, ~25-60 ms per 640x480 frame)
    chunk_steps: int = 25  # steps per chunk file = most steps a crash can lose (25 = 5 s at 5 Hz)
    threaded: bool = True  # encode and write chunks on a background thread (add_step stays cheap)
    encode_threads: int = 2  # threads encoding the images of a chunk (PNG at 30 Hz 640x480 needs ~2 cores)
    max_pending_chunks: int = 4  # chunks queued for the writer thread before add_step blocks (back-pressure)

    def __post_init__(self) -> None:
        if self.image_codec not in _codec.CODECS:
            raise ValueError(f"image_codec must be one of {_codec.CODECS}, got {self.image_codec=}")
        if not 1 <= self.jpeg_quality <= 100:
            raise ValueError(f"jpeg_quality must be in [1, 100], got {self.jpeg_quality=}")
        if not 0 <= self.video_crf <= 51 + 12 * (self.image_codec == "av1"):
            raise ValueError(f"video_crf must be in [0, 51] (h264) or [0, 63] (av1), got {self.video_crf=}")
        if not 0 <= self.png_level <= 9:
            raise ValueError(f"png_level must be in [0, 9], got {self.png_level=}")
        if self.chunk_steps < 1:
            raise ValueError(f"chunk_steps must be >= 1, got {self.chunk_steps=}")
        if self.encode_threads < 1:
            raise ValueError(f"encode_threads must be >= 1, got {self.encode_threads=}")
        if self.max_pending_chunks < 1:
            raise ValueError(f"max_pending_chunks must be >= 1, got {self.max_pending_chunks=}")


class StoreWriteError(OSError):
    """Writing an episode failed (disk full, I/O error); the episode is not committed."""


def new_episode_id(now: float | None = None) -> str:
    """Sortable unique id: ``ep_YYYYmmdd_HHMMSS_mmm_<6 hex>`` (UTC)."""
    now = time.time() if now is None else now
    stamp = time.strftime("%Y%m%d_%H%M%S", time.gmtime(now))
    return f"ep_{stamp}_{int(now * 1000) % 1000:03d}_{uuid.uuid4().hex[:6]}"


def _npz_bytes(arrays: Mapping[str, np.ndarray]) -> bytes:
    buf = io.BytesIO()
    np.savez(buf, **arrays)
    return buf.getvalue()


def _load_npz(path: Path, episode: str) -> dict[str, np.ndarray]:
    try:
        with np.load(path, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except FileNotFoundError:
        raise EpisodeValidationError(episode, "file", f"missing {path.name}") from None
    except Exception as exc:  # zipfile.BadZipFile, ValueError (pickled object), OSError ...
        raise EpisodeValidationError(episode, "file", f"cannot read {path.name}: {exc}") from exc


def read_verdict(partial_dir: Path) -> dict[str, Any] | None:
    """The ``verdict.json`` a failed commit left (``{"success", "operator_note", "num_steps"}``), or None if
    there is none or it is unreadable (then recovery falls back to ``success=None``)."""
    try:
        obj = json.loads((partial_dir / VERDICT_FILE).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        log.warning("%s: ignoring unreadable %s: %s", partial_dir.name, VERDICT_FILE, exc)
        return None
    if not isinstance(obj, dict) or not isinstance(obj.get("success"), (bool, type(None))) \
            or not isinstance(obj.get("operator_note"), (str, type(None))):
        log.warning("%s: ignoring %s with unexpected content %r", partial_dir.name, VERDICT_FILE, obj)
        return None
    return obj


def tidy_committed(episode_dir: Path) -> None:
    """Remove the writer's bookkeeping (writer.lock, verdict.json) from a just-committed episode directory."""
    for name in (LOCK_FILE, VERDICT_FILE):
        try:
            (episode_dir / name).unlink(missing_ok=True)
        except OSError as exc:  # harmless leftovers: readers never look at them
            log.warning("%s: could not remove %s: %s", episode_dir.name, name, exc)


class WriterLock:
    """An exclusive ``flock`` on ``<partial dir>/writer.lock``: held by the live writer of that episode (or by a
    recovery or discard at work on it).

    Why flock: the kernel drops it with the holder's last descriptor, also on SIGKILL, so a free lock proves that
    the writer is gone whatever the directory's age; and it belongs to an open file description, so a second
    ``open`` in the same process sees it held too (a POSIX ``fcntl`` record lock would not). A process forked
    while holding it shares it (it stays held while either lives).
    """

    def __init__(self, fd: int) -> None:
        self._fd: int | None = fd

    @classmethod
    def create(cls, directory: Path) -> WriterLock:
        """Create ``directory/writer.lock`` already locked (locked under a temp name, then renamed: the name
        never exists unlocked while its writer lives)."""
        fd, tmp = tempfile.mkstemp(prefix=f".{LOCK_FILE}.", suffix=".tmp", dir=directory)
        try:
            os.fchmod(fd, default_mode())
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # a fresh file nobody else has opened: never blocks
            os.rename(tmp, directory / LOCK_FILE)
        except BaseException:
            os.close(fd)
            Path(tmp).unlink(missing_ok=True)
            raise
        return cls(fd)

    @classmethod
    def probe(cls, directory: Path) -> tuple[str, WriterLock | None]:
        """(WRITER_ALIVE | WRITER_GONE | WRITER_UNKNOWN, lock): with WRITER_GONE the caller now holds the lock
        (so nobody else recovers or discards the episode meanwhile) and must :meth:`release` it."""
        try:
            fd = os.open(directory / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            return WRITER_UNKNOWN, None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return WRITER_ALIVE, None
        except BaseException:
            os.close(fd)
            raise
        return WRITER_GONE, cls(fd)

    def release(self) -> None:
        """Close the descriptor, which drops the lock (idempotent)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __del__(self) -> None:  # a writer dropped without close() must not look alive for the process's life
        self.release()


def _package_version() -> str:
    try:
        from amf_ros import __version__
    except ImportError:  # pragma: no cover
        return ""
    return __version__


class EpisodeWriter:
    """Writes one episode into ``.partial-<id>/`` chunk by chunk; :meth:`commit` renames it into place.

    Not thread-safe: one producer calls add_step/commit (the background thread only writes chunks).

    Args:
        root: the dataset directory (:class:`amf_ros.data.store.EpisodeStore` creates writers with its own).
        meta: the episode's metadata at start; config: chunking and image settings.
        on_commit: called with the final metadata once the episode is renamed into place (the store refreshes
            its index; a failure there does not undo the commit).
    """

    def __init__(self, root: Path, meta: EpisodeMeta, config: StoreConfig,
                 on_commit: Callable[[EpisodeMeta], None] | None = None) -> None:
        self._root = root
        self._on_commit = on_commit
        self._config = config
        self.meta = meta
        self.path = root / f"{PARTIAL_PREFIX}{meta.episode_id}"
        self.path.mkdir(parents=False, exist_ok=False)
        self._lock: WriterLock | None = None
        try:
            self._lock = WriterLock.create(self.path)
            fsync_dir(root)
            atomic_write_json(self.path / "start.json", meta.to_json())
        except OSError as exc:  # e.g. the disk is already full: leave nothing behind
            shutil.rmtree(self.path, ignore_errors=True)
            if self._lock is not None:
                self._lock.release()
            raise StoreWriteError(exc.errno, f"episode {meta.episode_id}: cannot start: {exc.strerror or exc}") from exc
        self._keys: dict[str, tuple[tuple[int, ...], np.dtype]] | None = None
        self._lowdim: dict[str, list[np.ndarray]] = {}
        self._pending: list[dict[str, np.ndarray]] = []
        self._chunks: list[dict[str, Any]] = []
        self._next_chunk = 0
        self._num_steps = 0
        self._last_stamp: int | None = None
        self._error: BaseException | None = None
        self._closed = False
        self.blocked_s = 0.0  # time add_step spent waiting for the writer thread (back-pressure)
        self._queue: queue.Queue | None = None
        self._thread: threading.Thread | None = None
        self._pool = ThreadPoolExecutor(config.encode_threads) if config.encode_threads > 1 else None
        self._map = self._pool.map if self._pool is not None else map
        if config.threaded:
            self._queue = queue.Queue(maxsize=config.max_pending_chunks)
            self._thread = threading.Thread(target=self._worker, name=f"episode-writer-{meta.episode_id}",
                                            daemon=True)
            self._thread.start()

    # -- producer side -------------------------------------------------------------------------------------
    @property
    def episode_id(self) -> str:
        """Id of the episode being written (its directory name once committed)."""
        return self.meta.episode_id

    @property
    def num_steps(self) -> int:
        """Control steps accepted so far (including those still queued for the background writer)."""
        return self._num_steps

    @property
    def actors(self) -> list[int]:
        """The ``actor`` of every step so far (empty when the episode does not record it)."""
        return [int(a) for a in self._lowdim.get(ACTOR, [])]

    def add_step(self, observation: Mapping[str, Any], action: Any, *, stamp_ns: int | None = None,
                 stamps: Mapping[str, int] | None = None, action_native: Any = None, actor: int | None = None) -> int:
        """Append one control step; returns the number of steps so far.

        Args:
            observation: ``{"state": (S,), "image_primary": (H, W, 3) uint8, ...}`` (keys without prefix).
            action: (A,) action taken at this step (7-D EefDeltaAction for the robot).
            stamp_ns: time of the step; strictly increasing; default: now.
            stamps: each stream's own timestamp, e.g. ``{"action": ..., "observation/state": ...}``.
            action_native: optional (A',) native action of a simulator.
            actor: who sent the action (schema ``actor``: ACTOR_HUMAN or ACTOR_POLICY); None = not recorded (the
                episode then counts as all-human). Given at one step, it must be given at every step.
        Raises:
            ValueError: inconsistent keys/shapes, NaN/inf, non-increasing stamp (the step is not added).
            StoreWriteError: an earlier chunk could not be written (e.g. disk full).
        """
        self._check_open()
        step: dict[str, np.ndarray] = {ACTION: np.asarray(action, dtype=np.float32).reshape(-1)}
        if action_native is not None:
            step[ACTION_NATIVE] = np.asarray(action_native, dtype=np.float32).reshape(-1)
        for key, value in observation.items():
            full = OBS_PREFIX + key
            arr = np.asarray(value)
            if is_image_key(full):
                if arr.dtype != np.uint8 or arr.ndim != 3 or arr.shape[2] != 3:
                    raise ValueError(f"episode {self.episode_id}: observation {key!r} must be an RGB uint8 "
                                     f"image (H, W, 3), got {arr.dtype} {arr.shape}")
            elif key == "state":
                arr = arr.astype(np.float32).reshape(-1)
            step[full] = arr
        stamp = time.time_ns() if stamp_ns is None else int(stamp_ns)
        if self._last_stamp is not None and stamp <= self._last_stamp:
            raise ValueError(f"episode {self.episode_id}: stamp_ns must increase, got {stamp} after "
                             f"{self._last_stamp}")
        step[STAMP] = np.asarray(stamp, dtype=np.int64)
        for stream, value in (stamps or {}).items():
            step[STAMP_PREFIX + stream] = np.asarray(int(value), dtype=np.int64)
        if actor is not None:
            if int(actor) not in ACTOR_NAMES:
                raise ValueError(f"episode {self.episode_id}: actor must be one of {sorted(ACTOR_NAMES)}, "
                                 f"got {actor!r}")
            step[ACTOR] = np.asarray(int(actor), dtype=np.uint8)
        self._check_consistent(step)
        for key in step:
            if is_image_key(key):
                self.meta.image_codec.setdefault(key, self._config.image_codec)
        self._last_stamp = stamp
        for key, arr in step.items():
            if not is_image_key(key):
                self._lowdim.setdefault(key, []).append(arr)
        self._pending.append(step)
        self._num_steps += 1
        if len(self._pending) >= self._config.chunk_steps:
            self._flush()
        return self._num_steps

    def commit(self, success: bool | None, operator_note: str | None = None,
               extra: Mapping[str, Any] | None = None, sync_stats: Mapping[str, int] | None = None) -> Path:
        """Write verdict.json, the last chunk, steps.npz and meta.json, then rename the episode into place.

        Returns the committed episode directory. On failure the episode stays partial (recoverable with this
        verdict, :meth:`EpisodeStore.recover`), the writer is closed and this raises (StoreWriteError for I/O).
        """
        if self._closed:
            raise ValueError(f"episode {self.episode_id} is closed (committed, discarded or failed)")
        too_long = text_limit_problem(operator_note=operator_note or "")
        if too_long:  # refused before anything is written: the episode stays open, to commit with a shorter note
            raise ValueError(f"episode {self.episode_id}: {too_long}")
        if self._num_steps == 0:
            raise ValueError(f"episode {self.episode_id}: cannot commit an episode with no steps (discard it)")
        try:
            return self._commit(success, operator_note, extra, sync_stats)
        except BaseException:
            self.close()  # releases the lock: a recovery may take the partial episode from here
            raise

    def _commit(self, success: bool | None, operator_note: str | None, extra: Mapping[str, Any] | None,
                sync_stats: Mapping[str, int] | None) -> Path:
        self._save_verdict(success, operator_note)  # first: also when an earlier chunk already failed
        self._raise_if_failed()
        self._flush()
        self._drain()
        self._raise_if_failed()
        n = self._num_steps
        steps = {k: np.stack(v) for k, v in self._lowdim.items()}
        steps["is_first"] = np.arange(n) == 0
        steps["is_last"] = np.arange(n) == n - 1
        steps["is_terminal"] = steps["is_last"] & bool(success)
        meta = self.meta
        meta.success = success
        meta.num_steps = n
        meta.chunks = list(self._chunks)
        meta.ended_unix = time.time()
        if operator_note is not None:
            meta.operator_note = operator_note
        if extra:
            meta.extra.update(extra)
        if sync_stats:
            meta.sync_stats = {k: int(v) for k, v in sync_stats.items()}
        validate_steps(steps, self.episode_id, num_steps=n, state_names=meta.state_names or None)
        final = self._root / self.episode_id
        try:
            atomic_write_bytes(self.path / "steps.npz", _npz_bytes(steps))
            atomic_write_json(self.path / "meta.json", meta.to_json())
            os.rename(self.path, final)
            fsync_dir(self._root)
        except OSError as exc:
            raise StoreWriteError(exc.errno, f"episode {self.episode_id}: commit failed, left partial "
                                  f"at {self.path}: {exc.strerror or exc}") from exc
        self._closed = True
        self.path = final
        tidy_committed(final)
        self._release_lock()
        if self._on_commit is not None:
            self._on_commit(meta)
        return final

    def _save_verdict(self, success: bool | None, operator_note: str | None) -> None:
        """verdict.json: the operator's word survives a commit that fails later (recover() reads it)."""
        verdict = {"success": None if success is None else bool(success), "operator_note": operator_note,
                   "num_steps": self._num_steps}
        try:
            atomic_write_json(self.path / VERDICT_FILE, verdict)
        except OSError as exc:  # the commit may still succeed (meta.json holds the verdict too): go on
            log.warning("episode %s: could not save %s before the commit: %s", self.episode_id, VERDICT_FILE, exc)

    def discard(self) -> None:
        """Drop the episode: stop the writer thread and delete its partial directory."""
        if self._closed and not self.path.name.startswith(PARTIAL_PREFIX):
            raise ValueError(f"episode {self.episode_id} is already committed at {self.path}")
        self._closed = True
        self._drain()
        shutil.rmtree(self.path, ignore_errors=True)
        self._release_lock()

    def close(self) -> None:
        """Stop the writer thread and release the lock without committing or deleting (the episode stays
        partial, recoverable at once)."""
        self._drain()
        self._closed = True
        self._release_lock()

    def __enter__(self) -> "EpisodeWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._closed:
            self.close()

    # -- internals -------------------------------------------------------------------------------------------
    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.release()

    def _check_open(self) -> None:
        if self._closed:
            raise ValueError(f"episode {self.episode_id} is closed (committed, discarded or failed)")
        self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._error is not None:
            err = self._error
            if isinstance(err, OSError):
                raise StoreWriteError(err.errno, f"episode {self.episode_id}: writing a chunk failed: "
                                      f"{err.strerror or err}") from err
            raise StoreWriteError(f"episode {self.episode_id}: writing a chunk failed: {err!r}") from err

    def _check_consistent(self, step: Mapping[str, np.ndarray]) -> None:
        if self._keys is None:
            self._keys = {k: (v.shape, v.dtype) for k, v in step.items()}
        elif set(step) != set(self._keys):
            raise ValueError(f"episode {self.episode_id}: step keys {sorted(step)} differ from the first "
                             f"step's {sorted(self._keys)}")
        for key, arr in step.items():
            shape, dtype = self._keys[key]
            if arr.shape != shape:
                raise ValueError(f"episode {self.episode_id}: {key!r} has shape {arr.shape}, earlier steps {shape}")
            if np.issubdtype(arr.dtype, np.floating) and not np.isfinite(arr).all():
                raise ValueError(f"episode {self.episode_id}: {key!r} contains NaN/inf at step {self._num_steps}")

    def _flush(self) -> None:
        if not self._pending:
            return
        steps, self._pending = self._pending, []
        job = (self._next_chunk, steps)
        self._next_chunk += 1
        if self._queue is None:
            self._write_chunk(*job)
            self._raise_if_failed()
            return
        t0 = time.perf_counter()
        self._queue.put(job)
        self.blocked_s += time.perf_counter() - t0

    def _drain(self) -> None:
        if self._queue is not None and self._thread is not None and self._thread.is_alive():
            self._queue.put(None)
            self._thread.join()
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
            self._map = map

    def _worker(self) -> None:
        assert self._queue is not None
        while True:
            job = self._queue.get()
            if job is None:
                return
            if self._error is None:
                self._write_chunk(*job)

    def _write_chunk(self, index: int, steps: list[dict[str, np.ndarray]]) -> None:
        try:
            arrays: dict[str, np.ndarray] = {}
            for key in steps[0]:
                stacked = np.stack([s[key] for s in steps])
                if is_image_key(key):
                    codec = self.meta.image_codec[key]
                    for suffix, arr in _codec.encode_stack(stacked, codec, self._config.jpeg_quality,
                                                           self._config.png_level, self._map,
                                                           self._config.video_crf).items():
                        arrays[key + suffix] = arr
                else:
                    arrays[key] = stacked
            data = _npz_bytes(arrays)
            name = f"chunk-{index:06d}.npz"
            atomic_write_bytes(self.path / name, data)
            self._chunks.append({"file": name, "num_steps": len(steps), "sha256": hashlib.sha256(data).hexdigest()})
        except BaseException as exc:
            log.error("episode %s: chunk %d failed: %s", self.episode_id, index, exc)
            self._error = exc
