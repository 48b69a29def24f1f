"""Crash-safe episode store: one directory per episode, committed atomically by rename.

Layout of a dataset directory::

    DATASET/
      index.json                     a cache of the episode list, rebuilt from the directories at will
      ep_20261122_001500_123_ab12cd/ a committed episode (readers only ever see these)
        meta.json                    EpisodeMeta (written last, before the rename)
        steps.npz                    all low-dimensional arrays of the schema (action, state, flags, stamps)
        chunk-000000.npz             steps [0, K): the same low-dim arrays + images (PNG/JPEG packed, or raw)
        chunk-000001.npz             ...
      .partial-ep_.../               an episode being written (or left behind by a crash)
        writer.lock                  flock'ed while its writer lives (the kernel releases it when the writer dies)
        start.json                   its metadata at start (task, instruction, ...)
        chunk-*.npz                  every K steps, each written to a temp file, fsynced and renamed
        .chunk-NNNNNN.npz.*.tmp      the chunk being written (complete if the writer died before the rename)
        verdict.json                 the operator's success and note, written first by commit

Why this shape: a recorder killed at any instant leaves (a) committed episodes untouched (nothing writes into them
again), and (b) a ``.partial-*`` directory whose complete chunks can be committed by :meth:`EpisodeStore.recover`
(``recovered=True``; ``success`` from verdict.json if a commit got that far and every step it counted was recovered,
else None: a prefix may have lost the steps that solved the task) or removed by :meth:`EpisodeStore.discard_partial`.
Whether its writer is still alive is read from writer.lock (:class:`amf_ros.data.writer.WriterLock`): held = alive,
never touched; free = dead, recoverable at any age; absent (older layout) = the directory's age decides. A full disk
raises from ``add_step``/``commit`` and leaves only the partial directory. No pickle anywhere
(``allow_pickle=False``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from amf_ros.atomic import atomic_write_bytes, atomic_write_json, fsync_dir
from amf_ros.data import codec as _codec
from amf_ros.data.schema import (
    ACTION,
    OBS_PREFIX,
    EpisodeMeta,
    EpisodeValidationError,
    is_image_key,
    text_limit_problem,
    validate_meta,
    validate_steps,
)
from amf_ros.data.writer import (
    PARTIAL_PREFIX,
    WRITER_ALIVE,
    WRITER_GONE,
    WRITER_UNKNOWN,
    EpisodeWriter,
    StoreConfig,
    StoreWriteError,
    WriterLock,
    _load_npz,
    _npz_bytes,
    _package_version,
    new_episode_id,
    read_verdict,
    tidy_committed,
)

__all__ = ["WRITER_ALIVE", "WRITER_GONE", "WRITER_UNKNOWN", "Episode", "EpisodeStore", "EpisodeWriter",
           "PartialEpisode", "RecoveryResult", "StoreConfig", "StoreScan", "StoreWriteError", "new_episode_id"]

log = logging.getLogger(__name__)

_CHUNK_RE = re.compile(r"^chunk-(\d{6})\.npz$")
_TEMP_CHUNK_RE = re.compile(r"^\.(chunk-\d{6}\.npz)\..+\.tmp$")  # atomic_write_bytes' temp name of a chunk


@dataclass
class Episode:
    """A loaded episode: metadata plus the flat step arrays of the schema (see :mod:`amf_ros.data.schema`)."""

    meta: EpisodeMeta
    steps: dict[str, np.ndarray]
    path: Path

    @property
    def episode_id(self) -> str:
        """Id of the episode, from its meta.json."""
        return self.meta.episode_id

    def __len__(self) -> int:
        return int(self.steps[ACTION].shape[0])

    @property
    def observation(self) -> dict[str, np.ndarray]:
        """Observation arrays keyed without the ``observation/`` prefix (``state``, ``image_primary``...)."""
        return {k[len(OBS_PREFIX):]: v for k, v in self.steps.items() if k.startswith(OBS_PREFIX)}


@dataclass
class PartialEpisode:
    """An episode directory that was never committed (writer still running, crashed, or out of disk)."""

    episode_id: str
    path: Path
    task: str | None  # None if even start.json is unreadable
    complete_chunks: int  # including a fully written temp chunk that recover() would adopt
    num_steps: int  # steps in complete chunks = what recover() would commit
    age_s: float  # seconds since the directory was last modified
    writer: str = WRITER_UNKNOWN  # WRITER_ALIVE (lock held: never recovered), WRITER_GONE or WRITER_UNKNOWN (no lock)


@dataclass
class RecoveryResult:
    """What :meth:`EpisodeStore.recover` did with one partial episode."""

    episode_id: str
    action: str  # "recovered" | "ignored"
    reason: str
    num_steps: int = 0
    path: Path | None = None


@dataclass
class StoreScan:
    """A full look at a dataset directory: complete, partial and invalid episodes."""

    episodes: list[EpisodeMeta] = field(default_factory=list)
    partial: list[PartialEpisode] = field(default_factory=list)
    invalid: list[EpisodeValidationError] = field(default_factory=list)


class EpisodeStore:
    """A dataset directory of episodes. Safe for one writer and any number of readers (even across processes).

    Example::

        store = EpisodeStore("data/demos", StoreConfig(image_codec="jpeg"))
        with store.begin("carrot", "put the carrot on the plate", robot="widowx250s") as w:
            for obs, act in steps:
                w.add_step(obs, act)
            w.commit(success=True)
        ep = store.load(store.episode_ids()[-1])
    """

    def __init__(self, root: str | os.PathLike, config: StoreConfig | None = None, create: bool = True) -> None:
        self.root = Path(root)
        self.config = config or StoreConfig()
        if not self.root.is_dir():
            if not create:
                raise FileNotFoundError(f"no dataset directory at {self.root}")
            self.root.mkdir(parents=True, exist_ok=True)

    # -- writing ---------------------------------------------------------------------------------------------
    def begin(self, task: str, instruction: str, *, robot: str = "", control_rate_hz: float = 5.0,
              topics: Mapping[str, str] | None = None, state_names: Sequence[str] | None = None,
              operator_note: str = "", extra: Mapping[str, Any] | None = None,
              episode_id: str | None = None) -> EpisodeWriter:
        """Start a new episode; returns its writer (call ``commit`` or ``discard`` on it)."""
        if not task:
            raise ValueError(f"task must be a non-empty task key, got {task=}")
        too_long = text_limit_problem(task=task, instruction=instruction, operator_note=operator_note, robot=robot,
                                      episode_id=episode_id or "")
        if too_long:
            raise ValueError(f"cannot start an episode: {too_long}")
        meta = EpisodeMeta(episode_id=episode_id or new_episode_id(), task=task, instruction=instruction,
                           robot=robot, control_rate_hz=float(control_rate_hz), topics=dict(topics or {}),
                           state_names=list(state_names or []), operator_note=operator_note,
                           created_unix=time.time(), package_version=_package_version(), extra=dict(extra or {}))
        validate_meta(meta)
        return EpisodeWriter(self.root, meta, self.config, on_commit=self._after_commit)

    def write_episode(self, task: str, instruction: str, steps: Sequence[Mapping[str, Any]],
                      success: bool | None = True, **begin_kwargs: Any) -> Path:
        """Convenience: write a whole episode from a list of ``{"observation", "action", ...}`` dicts."""
        writer = self.begin(task, instruction, **begin_kwargs)
        try:
            for s in steps:
                writer.add_step(s["observation"], s["action"], stamp_ns=s.get("stamp_ns"),
                                stamps=s.get("stamps"), action_native=s.get("action_native"), actor=s.get("actor"))
            return writer.commit(success)
        except BaseException:
            writer.discard()
            raise

    # -- reading ---------------------------------------------------------------------------------------------
    def episode_ids(self) -> list[str]:
        """Ids of committed episodes, oldest first."""
        return sorted(p.name for p in self.root.iterdir()
                      if p.is_dir() and not p.name.startswith(".") and (p / "meta.json").is_file())

    def __len__(self) -> int:
        return len(self.episode_ids())

    def meta(self, episode_id: str) -> EpisodeMeta:
        """Read and validate one episode's meta.json."""
        path = self.root / episode_id / "meta.json"
        try:
            obj = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise EpisodeValidationError(episode_id, "file", f"no committed episode at {path.parent}") from None
        except (OSError, ValueError) as exc:
            raise EpisodeValidationError(episode_id, "file", f"cannot read meta.json: {exc}") from exc
        meta = EpisodeMeta.from_json(obj, episode_id)
        if meta.episode_id != episode_id:
            raise EpisodeValidationError(episode_id, "meta.episode_id", f"says {meta.episode_id!r}")
        return meta

    def load(self, episode_id: str, *, images: bool | Sequence[str] = True, validate: bool = True,
             verify_checksums: bool = False) -> Episode:
        """Load one committed episode.

        Args:
            episode_id: the committed episode to load.
            images: True = decode every image key, False = none, or the keys to decode (``"image_primary"``).
            validate: run the schema checks (shapes, dtypes, stamps, NaN).
            verify_checksums: re-hash the chunk files against meta.json (catches bit rot).
        Raises:
            EpisodeValidationError: naming the episode and the field.
        """
        meta = self.meta(episode_id)
        ep_dir = self.root / episode_id
        steps = _load_npz(ep_dir / "steps.npz", episode_id)
        want = self._image_keys(meta, images)
        chunk_arrays: list[dict[str, np.ndarray]] = []
        if want or verify_checksums:
            total = 0
            for chunk in meta.chunks:
                path = ep_dir / chunk["file"]
                if verify_checksums:
                    try:
                        digest = hashlib.sha256(path.read_bytes()).hexdigest()
                    except FileNotFoundError:
                        raise EpisodeValidationError(episode_id, "file", f"missing {chunk['file']}") from None
                    if digest != chunk.get("sha256"):
                        raise EpisodeValidationError(episode_id, "file", f"{chunk['file']} checksum mismatch")
                if want:
                    chunk_arrays.append(_load_npz(path, episode_id))
                total += int(chunk["num_steps"])
            if total != meta.num_steps:
                raise EpisodeValidationError(episode_id, "meta.chunks", f"chunks hold {total} steps, "
                                             f"meta.num_steps says {meta.num_steps}")
        for key in want:
            try:
                frames = [_codec.decode_stack(arrs, key) for arrs in chunk_arrays]
            except KeyError:
                raise EpisodeValidationError(episode_id, key, "missing from a chunk") from None
            except ValueError as exc:
                raise EpisodeValidationError(episode_id, key, str(exc)) from exc
            steps[key] = np.concatenate(frames) if frames else np.zeros((0, 0, 0, 3), np.uint8)
        if validate:
            validate_steps(steps, episode_id, num_steps=meta.num_steps, state_names=meta.state_names or None)
        return Episode(meta=meta, steps=steps, path=ep_dir)

    def episodes(self, *, images: bool | Sequence[str] = False, tasks: Sequence[str] | None = None,
                 validate: bool = True) -> Iterator[Episode]:
        """Iterate over committed episodes (optionally of some tasks), oldest first."""
        for eid in self.episode_ids():
            if tasks is not None and self.meta(eid).task not in tasks:
                continue
            yield self.load(eid, images=images, validate=validate)

    @staticmethod
    def _image_keys(meta: EpisodeMeta, images: bool | Sequence[str]) -> list[str]:
        if images is True:
            return sorted(meta.image_codec)
        if images is False:
            return []
        keys = []
        for k in images:
            full = k if k.startswith(OBS_PREFIX) else OBS_PREFIX + k
            if full not in meta.image_codec:
                raise EpisodeValidationError(meta.episode_id, full, f"no such image key (have "
                                             f"{sorted(meta.image_codec)})")
            keys.append(full)
        return keys

    # -- whole-store views -------------------------------------------------------------------------------
    def partial(self) -> list[PartialEpisode]:
        """Episodes that were started but never committed (being written now, or left by a crash)."""
        out = []
        now = time.time()
        for p in sorted(self.root.glob(PARTIAL_PREFIX + "*")):
            if not p.is_dir():
                continue
            eid = p.name[len(PARTIAL_PREFIX):]
            task = None
            try:
                task = json.loads((p / "start.json").read_text(encoding="utf-8")).get("task")
            except (OSError, ValueError, AttributeError):
                pass
            try:
                writer, lock = WriterLock.probe(p)
                if lock is not None:
                    lock.release()
                # a live writer renames its own temp chunk; only a dead one's would be adopted
                chunks = self._chunk_prefix(p, adopt_temp=writer != WRITER_ALIVE)
                age = now - p.stat().st_mtime
            except FileNotFoundError:  # committed or discarded while we looked
                continue
            out.append(PartialEpisode(eid, p, task, len(chunks), sum(n for _, n in chunks), age, writer))
        return out

    def scan(self, validate: bool = True, verify_checksums: bool = False) -> StoreScan:
        """Look at every directory: valid episodes, invalid ones (with the error) and partial ones."""
        result = StoreScan(partial=self.partial())
        for eid in self.episode_ids():
            try:
                if validate:
                    meta = self.load(eid, images=False, verify_checksums=verify_checksums).meta
                else:
                    meta = self.meta(eid)
            except EpisodeValidationError as exc:
                result.invalid.append(exc)
                continue
            result.episodes.append(meta)
        return result

    def rebuild_index(self) -> Path:
        """Rewrite index.json from the episode directories (it is only a cache; the directories are the truth)."""
        entries = []
        for eid in self.episode_ids():
            try:
                m = self.meta(eid)
            except EpisodeValidationError as exc:
                log.warning("%s", exc)
                continue
            entries.append({"episode_id": m.episode_id, "task": m.task, "instruction": m.instruction,
                            "success": m.success, "num_steps": m.num_steps, "created_unix": m.created_unix,
                            "recovered": m.recovered})
        return atomic_write_json(self.root / "index.json", {"episodes": entries})

    def index(self) -> list[dict[str, Any]]:
        """The episode list from index.json, rebuilt first if it does not match the directories."""
        path = self.root / "index.json"
        ids = self.episode_ids()
        try:
            entries = json.loads(path.read_text(encoding="utf-8"))["episodes"]
            if [e["episode_id"] for e in entries] == ids:
                return entries
        except (OSError, ValueError, KeyError, TypeError):
            pass
        self.rebuild_index()
        return json.loads(path.read_text(encoding="utf-8"))["episodes"]

    def _after_commit(self, meta: EpisodeMeta) -> None:
        try:
            self.rebuild_index()
        except OSError as exc:  # the episode is committed; a stale index is rebuilt on the next read
            log.warning("index.json not updated after committing %s: %s", meta.episode_id, exc)

    # -- crash recovery ----------------------------------------------------------------------------------
    @staticmethod
    def _chunk_prefix(partial_dir: Path, adopt_temp: bool = True) -> list[tuple[Path, int]]:
        """(file, steps) of the chunks a recovery commits, in order, up to the first gap or unreadable chunk.

        Atomic renames make each chunk-NNNNNN.npz all-or-nothing. A gap may be filled (``adopt_temp``) by a temp
        file of that very chunk, written completely by a writer killed before its rename: see
        :func:`_complete_temp_chunk`.
        """
        names = {p.name for p in partial_dir.iterdir()}
        out: list[tuple[Path, int]] = []
        keys: set[str] | None = None
        for index in range(len(names) + 1):
            path = partial_dir / f"chunk-{index:06d}.npz"
            if path.name in names:
                try:
                    with np.load(path, allow_pickle=False) as z:
                        n, found = int(z[ACTION].shape[0]), set(z.files)
                except Exception:
                    break
            elif adopt_temp and (temp := _complete_temp_chunk(partial_dir, path.name, keys)) is not None:
                path, n, found = temp
            else:
                break
            keys = found if keys is None else keys
            out.append((path, n))
        return out

    def recover(self, episode_id: str, min_age_s: float = 0.0) -> RecoveryResult:
        """Commit the complete chunks of a partial episode whose writer is gone (``recovered=True``).

        ``success`` comes from verdict.json when a commit got that far and the recovered steps are all the steps it
        counted (the last step is recorded); otherwise success is None (unknown: the lost steps may be the ones that
        solved the task, or failed it) and a cut-short verdict is kept in ``extra["operator_verdict"]``. The
        operator note comes from verdict.json whenever it is there. A partial whose writer.lock is held (writer
        alive) is never touched; one whose lock is free is recovered at any age; one without writer.lock (older
        layout) only once untouched for ``min_age_s``. An episode without a readable start.json or without any
        complete chunk is ignored (left in place) and the result says why; :meth:`discard_partial` removes it.
        """
        src = self.root / f"{PARTIAL_PREFIX}{episode_id}"
        if not src.is_dir():
            raise ValueError(f"no partial episode {episode_id!r} in {self.root}")
        writer, lock = WriterLock.probe(src)
        try:  # the lock, now ours, keeps a second recovery (another process) off this episode
            if writer == WRITER_ALIVE:
                return RecoveryResult(episode_id, "ignored", "writer alive (lock held)")
            if writer == WRITER_UNKNOWN and time.time() - src.stat().st_mtime < min_age_s:
                return RecoveryResult(episode_id, "ignored",
                                      f"no writer.lock and modified less than {min_age_s} s ago (writer alive?)")
            return self._recover(src, episode_id)
        finally:
            if lock is not None:
                lock.release()

    def _recover(self, src: Path, episode_id: str) -> RecoveryResult:
        try:
            meta = EpisodeMeta.from_json(json.loads((src / "start.json").read_text(encoding="utf-8")), episode_id)
        except (OSError, ValueError) as exc:
            return RecoveryResult(episode_id, "ignored", f"start.json unreadable: {exc}")
        parts: list[dict[str, np.ndarray]] = []
        chunks: list[dict[str, Any]] = []
        temps: list[tuple[Path, Path]] = []  # (temp file, the chunk file it becomes) to adopt
        for path, _ in self._chunk_prefix(src):
            try:
                arrays = _load_npz(path, episode_id)
            except EpisodeValidationError as exc:
                log.warning("recover %s: stopping at %s: %s", episode_id, path.name, exc)
                break
            temp = _TEMP_CHUNK_RE.match(path.name)
            name = temp.group(1) if temp else path.name
            if temp:
                temps.append((path, src / name))
            parts.append(arrays)
            chunks.append({"file": name, "num_steps": int(arrays[ACTION].shape[0]),
                           "sha256": hashlib.sha256(path.read_bytes()).hexdigest()})
        if not parts:
            return RecoveryResult(episode_id, "ignored", "no complete chunk was written before the writer stopped")
        verdict = read_verdict(src)
        lowdim_keys = [k for k in parts[0] if "@" not in k and not is_image_key(k)]
        steps = {k: np.concatenate([p[k] for p in parts]) for k in lowdim_keys}
        n = int(steps[ACTION].shape[0])
        # Only an episode with every step it had at the commit ends in a terminal success.
        whole = verdict is not None and verdict.get("num_steps") == n
        steps["is_first"] = np.arange(n) == 0
        steps["is_last"] = np.arange(n) == n - 1
        steps["is_terminal"] = steps["is_last"] & bool(whole and verdict["success"])
        for key in parts[0]:
            base = key.split("@")[0]
            if is_image_key(base):
                meta.image_codec[base] = "raw" if "@" not in key else self._guess_codec(parts[0], base)
        meta.success = verdict["success"] if whole else None
        if verdict is not None and not whole:
            meta.extra["operator_verdict"] = {"success": verdict["success"], "num_steps": verdict.get("num_steps")}
        if verdict is not None and verdict.get("operator_note") is not None:
            meta.operator_note = verdict["operator_note"]
        meta.recovered = True
        meta.num_steps = n
        meta.chunks = chunks
        meta.ended_unix = time.time()
        try:
            validate_steps(steps, episode_id, num_steps=n, state_names=meta.state_names or None)
        except EpisodeValidationError as exc:
            return RecoveryResult(episode_id, "ignored", f"complete chunks fail validation: {exc}")
        for temp_path, chunk_path in temps:  # made durable by the directory fsync of the writes below
            os.rename(temp_path, chunk_path)
        for stale in src.glob(".*.tmp"):
            stale.unlink(missing_ok=True)
        kept = {c["file"] for c in chunks}
        for path in src.iterdir():
            if _CHUNK_RE.match(path.name) and path.name not in kept:
                path.unlink()
        atomic_write_bytes(src / "steps.npz", _npz_bytes(steps))
        atomic_write_json(src / "meta.json", meta.to_json())
        final = self.root / episode_id
        os.rename(src, final)
        fsync_dir(self.root)
        tidy_committed(final)
        self._after_commit(meta)
        reason = f"{len(parts)} complete chunk(s)" + (f", {len(temps)} adopted from a temp file" if temps else "")
        if verdict is not None and whole:
            reason += f", operator's verdict kept (success={meta.success})"
        elif verdict is not None:
            reason += (f", {n} of the {verdict.get('num_steps')} steps of the operator's verdict "
                       f"(success={verdict['success']}): success unknown")
        return RecoveryResult(episode_id, "recovered", reason, n, final)

    @staticmethod
    def _guess_codec(arrays: Mapping[str, np.ndarray], key: str) -> str:
        if key + "@video" in arrays:
            return _codec.video_codec_of(np.asarray(arrays[key + "@video"]))
        head = np.asarray(arrays[key + "@data"][:4]).tobytes()
        return "png" if head.startswith(b"\x89PNG") else "jpeg"

    def recover_all(self, min_age_s: float = 0.0) -> list[RecoveryResult]:
        """:meth:`recover` every partial episode."""
        return [self.recover(p.episode_id, min_age_s) for p in self.partial()]

    def discard_partial(self, episode_id: str) -> None:
        """Delete a partial episode directory (refused while its writer is alive: writer.lock held)."""
        src = self.root / f"{PARTIAL_PREFIX}{episode_id}"
        if not src.is_dir():
            raise ValueError(f"no partial episode {episode_id!r} in {self.root}")
        writer, lock = WriterLock.probe(src)
        if writer == WRITER_ALIVE:
            raise ValueError(f"partial episode {episode_id!r}: writer alive (lock held); not discarded")
        try:
            shutil.rmtree(src)
        finally:
            if lock is not None:
                lock.release()


def _steps_in_chunk(arrays: Mapping[str, np.ndarray]) -> int | None:
    """The step count every array of a chunk agrees on (packed images: offsets n + 1 ending at the data size),
    or None if they disagree."""
    action = arrays.get(ACTION)
    if action is None or action.ndim < 1 or action.shape[0] < 1:
        return None
    n = int(action.shape[0])
    for key, arr in arrays.items():
        if key.endswith("@offsets"):
            data = arrays.get(key[:-len("@offsets")] + "@data")
            if data is None or arr.shape != (n + 1,) or int(arr[-1]) != data.size:
                return None
        elif not key.endswith("@data") and (arr.ndim < 1 or arr.shape[0] != n):
            return None
    return n


def _complete_temp_chunk(partial_dir: Path, name: str, keys: set[str] | None) -> tuple[Path, int, set[str]] | None:
    """A temp file of chunk ``name`` (``.chunk-NNNNNN.npz.<random>.tmp``) that was written completely: it reads
    back (every member of the zip, CRC-checked; a truncated one does not), has the keys of the earlier chunks
    (``keys``; None = no earlier chunk) and one step count. Returns (file, steps, keys) or None."""
    for tmp in sorted(partial_dir.glob(f".{name}.*.tmp")):
        try:
            arrays = _load_npz(tmp, partial_dir.name[len(PARTIAL_PREFIX):])
        except EpisodeValidationError:
            continue
        n = _steps_in_chunk(arrays)
        if n is not None and (keys is None or set(arrays) == keys):
            return tmp, n, set(arrays)
    return None
