"""Read a LeRobot dataset with lerobot's own LeRobotDataset and write down what it returned.

Runs in the side venv of scripts/lerobot_env.sh (lerobot 0.4.4, torch 2.10), never in the project's .venv, and
imports nothing of amf_ros: test/data/test_lerobot_reader.py exports with the project's exporter, starts this
script, and compares what it wrote with the episode store.

    <side python> test/support/lerobot_read.py ROOT OUT_DIR --backend pyav|torchcodec
        [--delta-episodes 2] [--delta-actions 4] [--meta-only]

Writes OUT_DIR/read.json (lengths, fps, keys, episode spans, tasks, stats, the warnings lerobot logged),
OUT_DIR/read.npz (one row per item of the dataset: indices, timestamp, state, action, stamp, flags) and
OUT_DIR/frames.npy (every decoded camera frame as (N, H, W, 3) uint8, written frame by frame). Then, as a policy's
training reads it, the first --delta-episodes episodes again with ``delta_timestamps`` (camera and state at the
previous and the current frame, --delta-actions actions from the current one): OUT_DIR/delta.npz (state, action and
their ``*_is_pad`` flags per item) and OUT_DIR/delta_frames.npy ((M, 2, H, W, 3) uint8).
"""

from __future__ import annotations

import argparse
import json
import logging
import time
import warnings
from pathlib import Path

import numpy as np
import torch
from lerobot.datasets.lerobot_dataset import LeRobotDataset, LeRobotDatasetMetadata

CAMERA = "observation.images.primary"


class _Collect(logging.Handler):
    """Keeps every WARNING or worse that lerobot (or a library under it) logs."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(f"{record.name}: {record.getMessage()}")


def _counted(messages: list[str]) -> list[str]:
    """Each distinct message once, with how often it came when more than once."""
    counts: dict[str, int] = {}
    for m in messages:
        counts[m] = counts.get(m, 0) + 1
    return [m if c == 1 else f"{m} (x{c})" for m, c in counts.items()]


def _memmap(path: Path, shape: tuple[int, ...]) -> np.ndarray:
    return np.lib.format.open_memmap(path, mode="w+", dtype=np.uint8, shape=shape)


def _to_uint8(img: torch.Tensor) -> np.ndarray:
    """(..., 3, H, W) float in [0, 1] -> (..., H, W, 3) uint8."""
    return np.round(img.movedim(-3, -1).numpy() * 255).astype(np.uint8)


def _read_with_deltas(args: argparse.Namespace, repo_id: str, fps: int, episodes) -> None:
    """The items of the first --delta-episodes episodes with delta_timestamps (see the module docstring)."""
    deltas = {CAMERA: [-1 / fps, 0.0], "observation.state": [-1 / fps, 0.0],
              "action": [k / fps for k in range(args.delta_actions)]}
    ds = LeRobotDataset(repo_id, root=args.root, video_backend=args.backend, delta_timestamps=deltas)
    stop = int(episodes[args.delta_episodes - 1]["dataset_to_index"])
    out = args.out
    keys = ("observation.state", "observation.state_is_pad", "action", "action_is_pad", f"{CAMERA}_is_pad")
    rows: dict[str, list] = {k: [] for k in keys}
    frames = None
    for i in range(stop):
        item = ds[i]
        for k in keys:
            rows[k].append(item[k].numpy())
        img = item[CAMERA]  # (2, 3, H, W)
        if frames is None:
            frames = _memmap(out / "delta_frames.npy", (stop, img.shape[0], img.shape[2], img.shape[3], 3))
        frames[i] = _to_uint8(img)
    if frames is not None:
        frames.flush()
    np.savez(out / "delta.npz", **{k.replace("observation.", "").replace(".", "_"): np.asarray(v)
                                   for k, v in rows.items()})


def main() -> None:
    """Read every item of the dataset at ROOT and write it under OUT_DIR."""
    ap = argparse.ArgumentParser()
    ap.add_argument("root", type=Path)
    ap.add_argument("out", type=Path)
    ap.add_argument("--backend", required=True, choices=["pyav", "torchcodec"])
    ap.add_argument("--delta-episodes", type=int, default=2, help="episodes read again with delta_timestamps")
    ap.add_argument("--delta-actions", type=int, default=4, help="actions per item in that pass")
    ap.add_argument("--meta-only", action="store_true", help="read the metadata, no item (read.json only)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    logged = _Collect()
    logging.getLogger().addHandler(logged)
    t0 = time.monotonic()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        repo_id = f"local/{args.root.name}"
        meta = LeRobotDatasetMetadata(repo_id, root=args.root)
        ds = LeRobotDataset(repo_id, root=args.root, video_backend=args.backend)
        n = 0 if args.meta_only else len(ds)
        rows: dict[str, list] = {k: [] for k in ("episode_index", "frame_index", "index", "timestamp", "state",
                                                 "action", "stamp_ns", "done", "success", "actor")}
        tasks: list[str] = []
        frames = None
        for i in range(n):
            item = ds[i]
            rows["episode_index"].append(int(item["episode_index"]))
            rows["frame_index"].append(int(item["frame_index"]))
            rows["index"].append(int(item["index"]))
            rows["timestamp"].append(float(item["timestamp"]))
            rows["state"].append(item["observation.state"].numpy())
            rows["action"].append(item["action"].numpy())
            rows["stamp_ns"].append(int(item["stamp_ns"]))
            rows["done"].append(bool(item["next.done"]))
            rows["success"].append(bool(item["next.success"]))
            rows["actor"].append(int(item["actor"]))
            tasks.append(item["task"])
            img = item[CAMERA]  # (3, H, W) float in [0, 1]
            if frames is None:
                frames = _memmap(args.out / "frames.npy", (n, img.shape[1], img.shape[2], img.shape[0]))
            frames[i] = _to_uint8(img)
        if frames is not None:
            frames.flush()
        if not args.meta_only:
            _read_with_deltas(args, repo_id, ds.fps, ds.meta.episodes)
    read_s = time.monotonic() - t0
    if not args.meta_only:
        np.savez(args.out / "read.npz", **{k: np.asarray(v) for k, v in rows.items()},
                 task=np.asarray(tasks))
    info = {
        "len": len(ds), "num_episodes": ds.num_episodes, "fps": ds.fps, "video_keys": ds.meta.video_keys,
        "episodes": [[int(r["dataset_from_index"]), int(r["dataset_to_index"])] for r in ds.meta.episodes],
        "total_episodes": meta.total_episodes, "meta_fps": meta.fps, "robot_type": meta.robot_type,
        "tasks": sorted(meta.tasks.index), "action_mean": np.asarray(meta.stats["action"]["mean"]).tolist(),
        "image_mean_shape": list(np.asarray(meta.stats[CAMERA]["mean"]).shape),
        "warnings": _counted(logged.messages + [f"{w.category.__name__}: {w.message}" for w in caught]),
        "read_s": read_s,
    }
    (args.out / "read.json").write_text(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
