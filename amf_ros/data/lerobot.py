"""LeRobot v3.0 datasets: export an episode store as one, and import one into an episode store.

The format is the one ``LeRobotDataset`` in the ``lerobot`` package (0.4.x) reads and writes. It is written here
with pyarrow and PyAV rather than with lerobot's own writer, because lerobot pins ``torch<2.11`` and this project
runs torch 2.13: the two cannot share one environment (``docs/data.md`` says how the export was checked against
lerobot's reader)::

    OUT/
      meta/info.json                          codebase_version "v3.0", fps, features, paths, totals
      meta/tasks.parquet                      task string (pandas index) -> task_index
      meta/stats.json                         per-feature min/max/mean/std/count/q01..q99 (images per channel)
      meta/episodes/chunk-000/file-000.parquet  one row per episode: length, its rows in data/, its span in
                                              every video file, per-episode stats, and amf_ros's own columns
      data/chunk-000/file-000.parquet         one row per frame (low-dimensional features)
      videos/<camera>/chunk-000/file-000.mp4  all episodes of one camera back to back, frame i at i / fps

Store keys map to LeRobot's names: ``action`` -> ``action``, ``observation/state`` -> ``observation.state``,
``observation/image_primary`` -> ``observation.images.primary``, ``observation/<x>`` -> ``observation.<x>``.
Every frame also carries ``stamp_ns`` (when it was recorded), ``actor`` (who acted: 0 a person, 1 the policy; a
goal a person took over, amf_ros/data/schema.py), ``next.done`` (last frame) and ``next.success`` (last frame of a
successful demonstration). LeRobot's ``task`` is the language instruction; the task key, the
verdict and the rest of the episode's metadata travel in the episode columns ``success`` and ``amf_meta`` (JSON),
so an export imports back into the same episodes.

Timestamps are ``frame_index / fps`` with ``fps`` the rate the episodes were recorded at (their
``control_rate_hz``); an episode whose measured step rate disagrees with it is refused, not silently re-stamped
(the fault of lerobot#2786, "recorded at lower frequency but stamped at a higher frequency").
"""

from __future__ import annotations

import json
import logging
import os
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from amf_ros._optional import require
from amf_ros.atomic import atomic_write_text
from amf_ros.data.codec import VIDEO_ENCODERS, VideoFileWriter, iter_video_frames, resize_images
from amf_ros.data.export_select import check_consistent, image_keys_of, plan_export, staged_directory
from amf_ros.data.schema import (
    ACTION,
    ACTION_NATIVE,
    OBS_PREFIX,
    STAMP,
    STATE,
    EpisodeMeta,
    actors,
    is_image_key,
)
from amf_ros.data.store import Episode, EpisodeStore

log = logging.getLogger(__name__)

CODEBASE_VERSION = "v3.0"
CHUNK_FILE = "chunk-{chunk_index:03d}/file-{file_index:03d}"
DATA_PATH = "data/" + CHUNK_FILE + ".parquet"
VIDEO_PATH = "videos/{video_key}/" + CHUNK_FILE + ".mp4"
EPISODES_PATH = "meta/episodes/" + CHUNK_FILE + ".parquet"
QUANTILES = {"q01": 0.01, "q10": 0.10, "q50": 0.50, "q90": 0.90, "q99": 0.99}
EEF_ACTION_NAMES = ["x", "y", "z", "roll", "pitch", "yaw", "gripper"]
INDEX_FEATURES = ("timestamp", "frame_index", "episode_index", "index", "task_index")
IMAGES_PREFIX = "observation.images."
RATE_TOLERANCE = 0.2  # measured step rate may differ from the declared fps by this fraction


# -- names ---------------------------------------------------------------------------------------------------
def lerobot_key(store_key: str) -> str:
    """LeRobot feature name of an episode-store key
    (``observation/image_primary`` -> ``observation.images.primary``)."""
    if is_image_key(store_key):
        cam = store_key[len(OBS_PREFIX + "image"):].lstrip("_") or "image"
        return IMAGES_PREFIX + cam
    if store_key.startswith(OBS_PREFIX):
        return "observation." + store_key[len(OBS_PREFIX):]
    return store_key


def store_key(feature: str) -> str:
    """Episode-store key of a LeRobot feature name; inverse of :func:`lerobot_key` (``observation.image``, the
    single-camera name of older datasets, becomes ``observation/image_primary``)."""
    if feature.startswith(IMAGES_PREFIX):
        cam = feature[len(IMAGES_PREFIX):]
        return OBS_PREFIX + ("image" if cam == "image" else f"image_{cam}")
    if feature == "observation.image":
        return OBS_PREFIX + "image_primary"
    if feature.startswith("observation."):
        return OBS_PREFIX + feature[len("observation."):]
    return feature


# -- export --------------------------------------------------------------------------------------------------
@dataclass
class LeRobotExportConfig:
    """Options of the LeRobot export."""

    fps: int | None = None  # None = the episodes' recording rate (they must share one)
    video_codec: str = "av1"  # "av1" (libsvtav1, LeRobot's default) or "h264"
    crf: int = 30  # constant quality (LeRobot's default 30)
    gop: int = 2  # key-frame interval (LeRobot's default 2: cheap random access)
    image_size: tuple[int, int] | None = None  # (H, W) to resize images to; None = as recorded
    include_unsuccessful: bool = True  # the success flag is exported, so failed demonstrations can go too
    tasks: Sequence[str] | None = None  # only these task keys (None = all)
    robot_type: str | None = None  # info.json robot_type (None = the first episode's robot)
    check_rate: bool = True  # refuse episodes whose measured rate differs from fps by > RATE_TOLERANCE
    data_file_mb: float = 100.0  # start a new data parquet beyond this size (LeRobot's default)
    video_file_mb: float = 200.0  # start a new MP4 per camera beyond this size (LeRobot's default)

    def __post_init__(self) -> None:
        if self.video_codec not in VIDEO_ENCODERS:
            raise ValueError(f"video_codec must be one of {sorted(VIDEO_ENCODERS)}, got {self.video_codec!r}")
        if self.fps is not None and (int(self.fps) != self.fps or self.fps < 1):
            raise ValueError(f"fps must be a positive integer (LeRobot stores an integer rate), got {self.fps}")
        if self.image_size is not None:
            self.image_size = (int(self.image_size[0]), int(self.image_size[1]))
        if self.gop < 1 or not 0 <= self.crf <= 63:
            raise ValueError(f"need gop >= 1 and 0 <= crf <= 63, got gop={self.gop} crf={self.crf}")


@dataclass
class LeRobotExportResult:
    """What an export wrote."""

    path: Path
    episodes: int
    frames: int
    fps: int
    num_bytes: int
    skipped: dict[str, str]  # episode id -> why it was not exported


def _integer_rate(rate: float, what: str) -> int:
    if abs(rate - round(rate)) > 1e-6 or round(rate) < 1:
        raise ValueError(f"{what} is recorded at {rate} Hz; LeRobot stores an integer frame rate")
    return int(round(rate))


def measured_rate_hz(stamps_ns: np.ndarray) -> float | None:
    """Step rate of an episode from its step stamps (median period), None with fewer than 2 steps."""
    if len(stamps_ns) < 2:
        return None
    return 1e9 / float(np.median(np.diff(np.asarray(stamps_ns, dtype=np.int64))))


def _check_rate(ep: Episode, fps: int) -> None:
    declared = _integer_rate(ep.meta.control_rate_hz, f"episode {ep.episode_id!r}")
    if declared != fps:
        raise ValueError(f"episode {ep.episode_id!r} was recorded at {declared} Hz, the dataset at {fps} Hz: one "
                         "LeRobot dataset has one rate (export each rate separately with --task or fps)")
    rate = measured_rate_hz(ep.steps[STAMP])
    if rate is not None and abs(rate - fps) > RATE_TOLERANCE * fps:
        raise ValueError(f"episode {ep.episode_id!r}: its steps came at {rate:.2f} Hz but it is declared "
                         f"{fps} Hz; exporting would stamp frames at a rate they were not recorded at "
                         "(pass check_rate=False / --no-rate-check to export anyway)")


def _stats(values: np.ndarray) -> dict[str, np.ndarray]:
    """LeRobot's per-feature statistics over axis 0 (frames)."""
    v = np.asarray(values, dtype=np.float64)
    out = {"min": v.min(axis=0), "max": v.max(axis=0), "mean": v.mean(axis=0), "std": v.std(axis=0),
           "count": np.asarray([len(v)], dtype=np.int64)}
    out.update({name: np.quantile(v, q, axis=0) for name, q in QUANTILES.items()})
    return out


def _image_stats(frames: np.ndarray, max_frames: int = 100, max_side: int = 150) -> dict[str, np.ndarray]:
    """Per-channel statistics of a camera in [0, 1], shape (3, 1, 1), over at most ``max_frames`` evenly spaced
    frames downsampled to about ``max_side`` pixels (as LeRobot samples: exact enough to normalise with)."""
    idx = np.unique(np.linspace(0, len(frames) - 1, min(len(frames), max_frames)).round().astype(int))
    stride = max(1, max(frames.shape[1:3]) // max_side)
    px = frames[idx, ::stride, ::stride].reshape(-1, 3).astype(np.float64) / 255.0
    s = _stats(px)
    return {k: (v if k == "count" else v.reshape(3, 1, 1)) for k, v in s.items()} | {
        "count": np.asarray([len(idx)], dtype=np.int64)}


def aggregate_stats(per_episode: list[dict[str, dict[str, np.ndarray]]]) -> dict[str, dict[str, np.ndarray]]:
    """Dataset statistics from per-episode ones: exact min/max/mean/std (pooled), count-weighted quantiles
    (an approximation, as LeRobot's own aggregation)."""
    out: dict[str, dict[str, np.ndarray]] = {}
    for key in per_episode[0]:
        parts = [p[key] for p in per_episode]
        n = np.asarray([float(p["count"][0]) for p in parts])
        w = (n / n.sum()).reshape((-1,) + (1,) * np.ndim(parts[0]["mean"]))
        means = np.stack([p["mean"] for p in parts])
        mean = (w * means).sum(axis=0)
        var = (w * (np.stack([p["std"] for p in parts]) ** 2 + (means - mean) ** 2)).sum(axis=0)
        agg = {"min": np.min([p["min"] for p in parts], axis=0), "max": np.max([p["max"] for p in parts], axis=0),
               "mean": mean, "std": np.sqrt(var), "count": np.asarray([int(n.sum())], dtype=np.int64)}
        agg.update({q: (w * np.stack([p[q] for p in parts])).sum(axis=0) for q in QUANTILES})
        out[key] = agg
    return out


def _jsonable(stats: dict[str, dict[str, np.ndarray]]) -> dict[str, dict[str, Any]]:
    return {k: {s: np.asarray(v).tolist() for s, v in d.items()} for k, d in stats.items()}


class _Files:
    """Chunk/file numbering of one kind of file: a new file once the current one passes ``limit_mb``."""

    def __init__(self, limit_mb: float, chunks_size: int = 1000) -> None:
        self.chunk, self.file, self.limit, self.chunks_size = 0, 0, limit_mb * 1e6, chunks_size

    def full(self, size_bytes: float) -> bool:
        return size_bytes >= self.limit

    def advance(self) -> None:
        self.file += 1
        if self.file == self.chunks_size:
            self.chunk, self.file = self.chunk + 1, 0

    def path(self, root: Path, template: str, **kw: Any) -> Path:
        p = root / template.format(chunk_index=self.chunk, file_index=self.file, **kw)
        p.parent.mkdir(parents=True, exist_ok=True)
        return p


class _VideoStream:
    """One camera's MP4 files: episodes appended back to back, a new file once one passes the size limit."""

    def __init__(self, root: Path, key: str, cfg: LeRobotExportConfig, fps: int, shape: tuple[int, int, int]):
        self.root, self.key, self.cfg, self.fps, self.shape = root, key, cfg, fps, shape
        self.files = _Files(cfg.video_file_mb)
        self.writer: VideoFileWriter | None = None

    def add_episode(self, frames: np.ndarray) -> dict[str, Any]:
        path = self.writer.path if self.writer is not None else None  # (created at the first packet out)
        if path is not None and os.path.exists(path) and self.files.full(os.path.getsize(path)):
            self.writer.close()
            self.writer = None
            self.files.advance()
        if self.writer is None:
            path = self.files.path(self.root, VIDEO_PATH, video_key=self.key)
            self.writer = VideoFileWriter(path, self.cfg.video_codec, self.fps, self.shape[0], self.shape[1],
                                          crf=self.cfg.crf, gop=self.cfg.gop)
        start = self.writer.frames
        for i, f in enumerate(frames):
            self.writer.add(f, key=i == 0)
        col = f"videos/{self.key}/"
        return {col + "chunk_index": self.files.chunk, col + "file_index": self.files.file,
                col + "from_timestamp": start / self.fps, col + "to_timestamp": self.writer.frames / self.fps}

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


def _feature(dtype: str, shape: Sequence[int], names: Any = None) -> dict[str, Any]:
    return {"dtype": dtype, "shape": [int(s) for s in shape], "names": names}


def _features(ep: Episode, spec: dict[str, Any], image_keys: Sequence[str], fps: int,
              cfg: LeRobotExportConfig) -> dict[str, dict[str, Any]]:
    """info.json features of the export, in LeRobot's order (data first, index columns last)."""
    feats: dict[str, dict[str, Any]] = {}
    if spec["state"] is not None:
        names = ep.meta.state_names if len(ep.meta.state_names) == spec["state"] else None
        feats["observation.state"] = _feature("float32", [spec["state"]], names)
    for key in _lowdim_keys(ep):
        if key != STATE:
            arr = ep.steps[key]
            feats[lerobot_key(key)] = _feature("float32", arr.shape[1:] or (1,))
    feats["action"] = _feature("float32", [spec["action"]], EEF_ACTION_NAMES if spec["action"] == 7 else None)
    if ACTION_NATIVE in ep.steps:
        feats[ACTION_NATIVE] = _feature("float32", ep.steps[ACTION_NATIVE].shape[1:])
    for cam in image_keys:
        h, w, c = spec["images"][cam]
        feats[lerobot_key(OBS_PREFIX + cam)] = {
            "dtype": "video", "shape": [h, w, c], "names": ["height", "width", "channels"],
            "info": {"video.height": h, "video.width": w, "video.codec": cfg.video_codec, "video.pix_fmt": "yuv420p",
                     "video.is_depth_map": False, "video.fps": fps, "video.channels": c, "has_audio": False}}
    feats["stamp_ns"] = _feature("int64", [1])
    feats["actor"] = _feature("int64", [1])
    feats["next.done"] = _feature("bool", [1])
    feats["next.success"] = _feature("bool", [1])
    feats["timestamp"] = _feature("float32", [1])
    for k in INDEX_FEATURES[1:]:
        feats[k] = _feature("int64", [1])
    return feats


def _lowdim_keys(ep: Episode) -> list[str]:
    """Observation keys exported as data columns: the state and any other numeric observation."""
    return sorted(k for k in ep.steps if k.startswith(OBS_PREFIX) and not is_image_key(k))


def _hf_feature(ft: dict[str, Any]) -> dict[str, Any]:
    """The Hugging Face ``datasets`` type of a LeRobot feature (as lerobot's get_hf_features_from_features)."""
    value = {"dtype": ft["dtype"], "_type": "Value"}
    if list(ft["shape"]) == [1]:
        return value
    if len(ft["shape"]) != 1:
        raise ValueError(f"only scalar and 1-D data features are exported, got shape {ft['shape']}")
    return {"feature": value, "length": int(ft["shape"][0]), "_type": "List"}


def _arrow_type(pa: Any, ft: dict[str, Any]) -> Any:
    scalar = {"float32": pa.float32(), "float64": pa.float64(), "int64": pa.int64(), "bool": pa.bool_()}[ft["dtype"]]
    return scalar if list(ft["shape"]) == [1] else pa.list_(scalar, int(ft["shape"][0]))


def _frame_columns(ep: Episode, feats: dict[str, dict[str, Any]], fps: int, episode_index: int, first_index: int,
                   task_index: int) -> dict[str, np.ndarray]:
    """The data-file columns of one episode."""
    n = len(ep)
    success = ep.meta.success is True
    cols: dict[str, np.ndarray] = {}
    for key in [*_lowdim_keys(ep), ACTION, ACTION_NATIVE]:
        if key in ep.steps:
            cols[lerobot_key(key)] = np.asarray(ep.steps[key], dtype=np.float32).reshape(n, -1)
    done = np.zeros(n, dtype=bool)
    done[-1] = True
    cols.update({"stamp_ns": np.asarray(ep.steps[STAMP], dtype=np.int64), "actor": actors(ep.steps).astype(np.int64),
                 "next.done": done,
                 "next.success": done & success,
                 "timestamp": (np.arange(n) / fps).astype(np.float32), "frame_index": np.arange(n, dtype=np.int64),
                 "episode_index": np.full(n, episode_index, dtype=np.int64),
                 "index": np.arange(first_index, first_index + n, dtype=np.int64),
                 "task_index": np.full(n, task_index, dtype=np.int64)})
    return {k: v for k, v in cols.items() if k in feats}


def _table(pa: Any, cols: dict[str, np.ndarray], feats: dict[str, dict[str, Any]], metadata: dict[bytes, bytes]):
    arrays, fields = [], []
    for name, ft in feats.items():
        if name not in cols:
            continue
        typ = _arrow_type(pa, ft)
        v = cols[name]
        arrays.append(pa.array(list(v), type=typ) if v.ndim > 1 else pa.array(v.reshape(-1), type=typ))
        fields.append(pa.field(name, typ))
    return pa.Table.from_arrays(arrays, schema=pa.schema(fields, metadata=metadata))


def _meta_json(meta: EpisodeMeta) -> str:
    """The episode's metadata, minus the store's chunk bookkeeping, as the ``amf_meta`` column."""
    d = meta.to_json()
    d.pop("chunks", None)
    return json.dumps(d, sort_keys=True)


def _episode_row(ep: Episode, episode_index: int, task: str, data_loc: dict[str, Any],
                 video_loc: dict[str, Any], stats: dict[str, dict[str, np.ndarray]]) -> dict[str, Any]:
    row: dict[str, Any] = {"episode_index": episode_index, "tasks": [task], "length": len(ep), **data_loc,
                           **video_loc}
    for key, st in stats.items():
        for name, v in st.items():
            row[f"stats/{key}/{name}"] = np.asarray(v).tolist()
    row.update({"meta/episodes/chunk_index": 0, "meta/episodes/file_index": 0, "success": ep.meta.success,
                "amf_meta": _meta_json(ep.meta)})
    return row


def _write_tasks(pa: Any, pq: Any, path: Path, tasks: list[str]) -> None:
    """meta/tasks.parquet as pandas writes a DataFrame indexed by the task string (lerobot reads it so)."""
    pandas_meta = {"index_columns": ["__index_level_0__"],
                   "column_indexes": [{"name": None, "field_name": None, "pandas_type": "unicode",
                                       "numpy_type": "object", "metadata": {"encoding": "UTF-8"}}],
                   "columns": [{"name": "task_index", "field_name": "task_index", "pandas_type": "int64",
                                "numpy_type": "int64", "metadata": None},
                               {"name": None, "field_name": "__index_level_0__", "pandas_type": "unicode",
                                "numpy_type": "object", "metadata": None}],
                   "attributes": {}, "creator": {"library": "pyarrow", "version": pa.__version__}}
    schema = pa.schema([pa.field("task_index", pa.int64()), pa.field("__index_level_0__", pa.large_string())],
                       metadata={b"pandas": json.dumps(pandas_meta).encode()})
    table = pa.Table.from_arrays([pa.array(range(len(tasks)), pa.int64()), pa.array(tasks, pa.large_string())],
                                 schema=schema)
    pq.write_table(table, path)


def export_lerobot(store: EpisodeStore | str | os.PathLike, out_dir: str | os.PathLike,
                   config: LeRobotExportConfig | None = None, overwrite: bool = False,
                   progress: bool = False) -> LeRobotExportResult:
    """Write the selected episodes of ``store`` as a LeRobot v3.0 dataset at ``out_dir`` (atomically: a temporary
    directory renamed into place, so a crash leaves no half dataset).

    Raises:
        ValueError: nothing to export, ``out_dir`` exists (without ``overwrite``), episodes disagree on features
            or rate, a rate is not an integer, or an episode's measured rate contradicts its declared one.
    """
    pa = require("pyarrow", "LeRobot export")
    pq = require("pyarrow.parquet", "LeRobot export")
    cfg = config or LeRobotExportConfig()
    target = Path(out_dir)
    store, ids, skipped = plan_export(store, cfg.tasks, cfg.include_unsuccessful, target, overwrite)
    image_keys = image_keys_of(store, ids[0])
    fps = cfg.fps or _integer_rate(store.meta(ids[0]).control_rate_hz, f"episode {ids[0]!r}")
    with staged_directory(target) as tmp:
        videos: dict[str, _VideoStream] = {}
        data_writer = None
        try:
            spec: dict[str, Any] = {}
            feats: dict[str, dict[str, Any]] = {}
            tasks: list[str] = []
            rows: list[dict[str, Any]] = []
            per_episode_stats: list[dict[str, dict[str, np.ndarray]]] = []
            data_files, data_bytes, total = _Files(cfg.data_file_mb), 0, 0
            bar = _progress(ids, progress, "export lerobot")
            for episode_index, eid in enumerate(bar):
                ep = store.load(eid, images=True)
                check_consistent(ep, spec, image_keys, cfg.image_size)
                if cfg.check_rate:
                    _check_rate(ep, fps)
                if not feats:
                    feats = _features(ep, spec, image_keys, fps, cfg)
                    hf = {"info": {"features": {k: _hf_feature(f) for k, f in feats.items() if f["dtype"] != "video"}}}
                    arrow_meta = {b"huggingface": json.dumps(hf).encode()}
                if ep.meta.instruction not in tasks:
                    tasks.append(ep.meta.instruction)
                cols = _frame_columns(ep, feats, fps, episode_index, total, tasks.index(ep.meta.instruction))
                missing = [k for k, f in feats.items() if f["dtype"] != "video" and k not in cols]
                if missing:
                    raise ValueError(f"episode {eid!r} lacks {missing}, which the first episode has")
                table = _table(pa, cols, feats, arrow_meta)
                if data_writer is not None and data_files.full(data_bytes):
                    data_writer.close()
                    data_writer, data_bytes = None, 0
                    data_files.advance()
                if data_writer is None:
                    data_writer = pq.ParquetWriter(data_files.path(tmp, DATA_PATH), table.schema, compression="snappy")
                data_writer.write_table(table)
                data_bytes += table.nbytes
                stats = {k: _stats(v.reshape(len(ep), -1) if v.ndim > 1 else v.reshape(-1, 1))
                         for k, v in cols.items()}
                video_loc: dict[str, Any] = {}
                for cam in image_keys:
                    key = lerobot_key(OBS_PREFIX + cam)
                    frames = ep.steps[OBS_PREFIX + cam]
                    if cfg.image_size is not None:
                        frames = resize_images(frames, cfg.image_size)
                    if key not in videos:
                        videos[key] = _VideoStream(tmp, key, cfg, fps, tuple(spec["images"][cam]))
                    video_loc.update(videos[key].add_episode(frames))
                    stats[key] = _image_stats(frames)
                data_loc = {"data/chunk_index": data_files.chunk, "data/file_index": data_files.file,
                            "dataset_from_index": total, "dataset_to_index": total + len(ep)}
                rows.append(_episode_row(ep, episode_index, ep.meta.instruction, data_loc, video_loc, stats))
                per_episode_stats.append(stats)
                total += len(ep)
            data_writer.close()
            data_writer = None
            for v in videos.values():
                v.close()
            _write_episodes(pa, pq, tmp / EPISODES_PATH.format(chunk_index=0, file_index=0), rows)
            _write_tasks(pa, pq, tmp / "meta" / "tasks.parquet", tasks)
            atomic_write_text(tmp / "meta" / "stats.json",
                              json.dumps(_jsonable(aggregate_stats(per_episode_stats)), indent=4))
            robot = cfg.robot_type if cfg.robot_type is not None else (store.meta(ids[0]).robot or None)
            info = {"codebase_version": CODEBASE_VERSION, "robot_type": robot, "total_episodes": len(ids),
                    "total_frames": total, "total_tasks": len(tasks), "chunks_size": 1000,
                    "data_files_size_in_mb": int(cfg.data_file_mb), "video_files_size_in_mb": int(cfg.video_file_mb),
                    "fps": fps, "splits": {"train": f"0:{len(ids)}"}, "data_path": DATA_PATH,
                    "video_path": VIDEO_PATH if image_keys else None, "features": feats}
            atomic_write_text(tmp / "meta" / "info.json", json.dumps(info, indent=4))
            num_bytes = sum(p.stat().st_size for p in tmp.rglob("*") if p.is_file())
        except BaseException:
            if data_writer is not None:
                data_writer.close()
            for v in videos.values():
                try:
                    v.close()
                except Exception:  # the original error matters, not the cleanup's
                    pass
            raise
    log.info("exported %d episodes (%d frames at %d Hz) to %s", len(ids), total, fps, target)
    return LeRobotExportResult(target, len(ids), total, fps, num_bytes, skipped)


def _write_episodes(pa: Any, pq: Any, path: Path, rows: list[dict[str, Any]]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    columns = {k: [r.get(k) for r in rows] for k in rows[0]}
    types = {"tasks": pa.list_(pa.string()), "success": pa.bool_(), "amf_meta": pa.string()}
    table = pa.table({k: pa.array(v, type=types.get(k)) for k, v in columns.items()})
    pq.write_table(table, path, compression="snappy")


def _progress(items: Sequence[Any], enabled: bool, desc: str) -> Any:
    if not enabled:
        return items
    from tqdm import tqdm

    return tqdm(items, desc=desc, unit="episode")


# -- import --------------------------------------------------------------------------------------------------
@dataclass
class LeRobotImportResult:
    """What an import added to the store."""

    episodes: list[str]  # ids of the new episodes, in the source's order
    frames: int
    skipped: dict[int, str] = field(default_factory=dict)  # source episode index -> why it was not imported


def task_key_of(task: str) -> str:
    """A task key for a LeRobot task string that carries no amf_ros task ("Pick the cube!" -> "pick-the-cube")."""
    key = re.sub(r"[^a-z0-9]+", "-", task.lower()).strip("-")[:64].strip("-")
    return key or "task"


class _VideoCursor:
    """Reads one camera's episodes in dataset order: each file decoded once, front to back."""

    def __init__(self, root: Path, key: str, fps: int, video_path: str) -> None:
        self.root, self.key, self.fps, self.template = root, key, fps, video_path
        self._path: Path | None = None
        self._frames: Iterator[tuple[float, np.ndarray]] | None = None
        self._pending: tuple[float, np.ndarray] | None = None
        self._time = -1.0

    def frames(self, chunk: int, file: int, t0: float, n: int, episode: int) -> np.ndarray:
        path = self.root / self.template.format(video_key=self.key, chunk_index=chunk, file_index=file)
        half = 0.5 / self.fps
        if path != self._path or t0 - half < self._time:  # another file, or going back: start over
            if not path.is_file():
                raise ValueError(f"episode {episode}: video file {path} is missing")
            self._path, self._frames, self._pending, self._time = path, iter_video_frames(path), None, -1.0
        out: list[np.ndarray] = []
        while len(out) < n:
            item = self._pending or next(self._frames, None)
            self._pending = None
            if item is None:
                raise ValueError(f"episode {episode}: {path} ends after {len(out)} of its {n} frames of "
                                 f"{self.key} (from {t0:.3f} s)")
            t, frame = item
            self._time = t
            if t < t0 - half:
                continue
            out.append(frame)
        return np.stack(out)


def _read_parquets(pq: Any, folder: Path) -> Any:
    pa = require("pyarrow", "LeRobot import")
    files = sorted(folder.glob("*/*.parquet"))
    if not files:
        raise ValueError(f"no parquet file under {folder}")
    return pa.concat_tables([pq.read_table(f) for f in files], promote_options="default")


def _read_tasks(pq: Any, path: Path) -> dict[int, str]:
    t = pq.read_table(path).to_pydict()
    names = t.get("task") or t.get("__index_level_0__")
    if names is None:
        raise ValueError(f"{path}: no task column (expected 'task' or the pandas index)")
    return dict(zip((int(i) for i in t["task_index"]), names, strict=True))


def read_info(root: str | os.PathLike) -> dict[str, Any]:
    """meta/info.json of a LeRobot dataset; ValueError unless it is a v3.x dataset."""
    path = Path(root) / "meta" / "info.json"
    if not path.is_file():
        raise FileNotFoundError(f"{root} is not a LeRobot dataset: no meta/info.json")
    info = json.loads(path.read_text())
    version = str(info.get("codebase_version", "?"))
    if not version.startswith("v3."):
        raise ValueError(f"{root} is a LeRobot {version} dataset; only v3.x is read (convert it with lerobot's "
                         "lerobot.datasets.v30.convert_dataset_v21_to_v30)")
    return info


def import_lerobot(src: str | os.PathLike, store: EpisodeStore, *, task: str | None = None,
                   success: bool | None = None, episodes: Sequence[int] | None = None,
                   progress: bool = False) -> LeRobotImportResult:
    """Add the episodes of a local LeRobot v3 dataset to ``store``.

    Args:
        src: the dataset's root directory (with ``meta/info.json``).
        store: episode store to add to; images are stored with its ``image_codec``.
        task: task key for every episode (default: the one recorded by amf_ros, else derived from the task string).
        success: verdict for episodes that carry none (default: amf_ros's verdict, else ``next.success`` on the
            last frame, else unknown).
        episodes: only these source episode indices (default all).
        progress: show a progress bar (tqdm) over the episodes.
    Raises:
        ValueError / FileNotFoundError: not a v3 dataset, no ``action`` feature, missing or short files.
    """
    pq = require("pyarrow.parquet", "LeRobot import")
    root = Path(src)
    info = read_info(root)
    feats: dict[str, dict[str, Any]] = info["features"]
    if "action" not in feats:
        raise ValueError(f"{root}: no 'action' feature; amf_ros episodes need one")
    fps = int(info["fps"])
    tasks = _read_tasks(pq, root / "meta" / "tasks.parquet")
    eps = _read_parquets(pq, root / "meta" / "episodes").to_pylist()
    eps.sort(key=lambda r: int(r["episode_index"]))
    data_cols = [k for k, f in feats.items() if f["dtype"] not in ("video", "image", "string")]
    data = _read_parquets(pq, root / "data").select(data_cols)
    order = np.argsort(np.asarray(data.column("index").to_numpy()), kind="stable")
    columns = {k: _column(data.column(k), order) for k in data_cols}
    position = {int(i): p for p, i in enumerate(columns["index"])}
    video_keys = [k for k, f in feats.items() if f["dtype"] == "video"]
    image_keys = [k for k, f in feats.items() if f["dtype"] == "image"]
    if image_keys:
        raise ValueError(f"{root}: image features {image_keys} (PNG per frame) are not supported; "
                         "re-encode them as video")
    cursors = {k: _VideoCursor(root, k, fps, info["video_path"]) for k in video_keys}
    wanted = None if episodes is None else {int(e) for e in episodes}
    known = set(store.episode_ids())
    result = LeRobotImportResult([], 0)
    for row in _progress(eps, progress, "import lerobot"):
        index = int(row["episode_index"])
        if wanted is not None and index not in wanted:
            continue
        amf = json.loads(row["amf_meta"]) if row.get("amf_meta") else {}
        if amf.get("episode_id") in known:
            result.skipped[index] = f"episode {amf['episode_id']} is already in the store"
            continue
        lo, hi = int(row["dataset_from_index"]), int(row["dataset_to_index"])
        if lo not in position or hi - 1 not in position:
            raise ValueError(f"episode {index}: rows {lo}..{hi - 1} are missing from {root / 'data'}")
        rows = slice(position[lo], position[hi - 1] + 1)
        n = hi - lo
        steps = {k: v[rows] for k, v in columns.items()}
        images = {}
        for key in video_keys:
            col = f"videos/{key}/"
            images[store_key(key)[len(OBS_PREFIX):]] = cursors[key].frames(
                int(row[col + "chunk_index"]), int(row[col + "file_index"]), float(row[col + "from_timestamp"]),
                n, index)
        eid = _write_episode(store, root, index, row, amf, steps, images, feats, fps, tasks, task, success)
        result.episodes.append(eid)
        result.frames += n
        known.add(eid)
    return result


def _column(col: Any, order: np.ndarray) -> np.ndarray:
    """A data column as numpy, rows in ``order``: (N,) for scalars, (N, L) for fixed-size lists."""
    col = col.combine_chunks()
    width = getattr(col.type, "list_size", None)
    if width is not None:
        values = col.flatten().to_numpy(zero_copy_only=False).reshape(-1, width)
    elif str(col.type).startswith(("list", "large_list")):
        values = np.asarray(col.to_pylist())
    else:
        values = col.to_numpy(zero_copy_only=False)
    return values[order]


def _write_episode(store: EpisodeStore, root: Path, index: int, row: dict[str, Any], amf: dict[str, Any],
                   steps: dict[str, np.ndarray], images: dict[str, np.ndarray], feats: dict[str, dict[str, Any]],
                   fps: int, tasks: dict[int, str], task: str | None, success: bool | None) -> str:
    n = len(steps["index"])
    task_string = tasks.get(int(steps["task_index"][0]), row["tasks"][0] if row.get("tasks") else "")
    if success is None:  # the source's own verdict, unknown (None) included, before next.success
        if amf or "success" in row:
            success = amf["success"] if amf else row["success"]
        elif "next.success" in steps:
            success = bool(steps["next.success"][-1])
    if "stamp_ns" in steps:
        stamps = steps["stamp_ns"].astype(np.int64)
    else:
        stamps = np.round(steps["timestamp"].astype(np.float64) * 1e9).astype(np.int64) + 1
    extra = dict(amf.get("extra", {}))
    extra["imported_from"] = {"format": f"lerobot {CODEBASE_VERSION}", "path": str(root.resolve()),
                              "episode_index": index}
    lowdim = {store_key(k): steps[k] for k in feats
              if k.startswith("observation.") and feats[k]["dtype"] not in ("video", "image")}
    writer = store.begin(task or amf.get("task") or task_key_of(task_string), amf.get("instruction", task_string),
                         robot=amf.get("robot", ""), control_rate_hz=float(fps), topics=amf.get("topics"),
                         state_names=amf.get("state_names") or (feats.get("observation.state", {}).get("names")
                                                                if isinstance(feats.get("observation.state", {})
                                                                              .get("names"), list) else None),
                         operator_note=amf.get("operator_note", ""), extra=extra,
                         episode_id=amf.get("episode_id"))
    try:
        for t in range(n):
            obs = {k[len(OBS_PREFIX):]: v[t] for k, v in lowdim.items()}
            obs.update({cam: frames[t] for cam, frames in images.items()})
            writer.add_step(obs, steps["action"][t], stamp_ns=int(stamps[t]),
                            action_native=steps[ACTION_NATIVE][t] if ACTION_NATIVE in steps else None,
                            actor=int(steps["actor"][t]) if "actor" in steps else None)
        writer.commit(success, sync_stats=amf.get("sync_stats"))
    except BaseException:
        writer.discard()
        raise
    return writer.episode_id
