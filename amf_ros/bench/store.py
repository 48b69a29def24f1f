"""`amf bench store`: episode-store write rate, dropped frames, read throughput, bytes per step per codec.

What is measured, per image codec (raw, png, jpeg, and video per chunk: h264, av1):

* **paced write**: a 640x480x3 camera at 30 Hz for ``duration_s`` (wall-clock paced). The camera has a
  queue of depth 1: a frame still waiting when the next one arrives is dropped. ``dropped_frames`` counts
  them all; ``dropped_by_store`` those lost right after an ``add_step`` that took longer than a frame
  period (the acceptance number is 0); the rest are the producer being scheduled late on a busy CPU.
  Each step also carries a state and a 7-D action, as the recorder writes them. Reported: achieved rate,
  add_step latency (mean, p99, max), time blocked on the writer thread, commit time.
* **max write**: the same frames unpaced, as fast as the store takes them, commit included (the headroom
  over 30 Hz). ``sustains_rate`` = no store drops and max write >= the camera rate: a short paced run can show
  zero drops while a backlog grows in the writer queue (then ``commit_s`` is long).
* **bytes per step**: episode directory size / steps.
* **fidelity**: PSNR of every stored frame of the unpaced episode against the frame written ("exact" = lossless).
* **read**: ``load_transitions`` of the episode with images (decode time, steps/s), then random
  fine-tuning batches of ``batch_size`` (state, action, image resized to 256x256 once) from memory.

Frames are synthetic but compress like a camera image: a smooth background, moving coloured objects and
+-3 levels of sensor noise (pure noise would make PNG look worse than it is; flat colour, better).
"""

from __future__ import annotations

import argparse
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from amf_ros.bench.results import config_dict, write_results
from amf_ros.config_file import load_config
from amf_ros.data.codec import CODECS
from amf_ros.data.store import EpisodeStore, StoreConfig
from amf_ros.data.transitions import load_transitions
from amf_ros.outputs import format_table


@dataclass
class StoreBenchConfig:
    """Defaults are the acceptance setting (640x480x3 at 30 Hz)."""

    width: int = 640
    height: int = 480
    rate_hz: float = 30.0  # camera rate of the paced write
    duration_s: float = 10.0  # paced write length
    max_write_frames: int = 150  # frames of the unpaced write
    codecs: list[str] = field(default_factory=lambda: ["raw", "png", "jpeg", "h264", "av1"])
    chunk_steps: int = 30  # 1 s of frames per chunk file
    png_level: int = 1
    encode_threads: int = 2
    jpeg_quality: int = 95
    video_crf: int = 23
    batch_size: int = 256
    read_batches: int = 200
    train_image_size: int = 256  # images are resized once for fine-tuning batches (Octo: 256x256)
    seed: int = 0

    def __post_init__(self) -> None:
        if self.width < 8 or self.height < 8 or self.rate_hz <= 0 or self.duration_s <= 0:
            raise ValueError(f"bad frame/rate settings: {self.width=}, {self.height=}, {self.rate_hz=}, "
                             f"{self.duration_s=}")
        for c in self.codecs:
            StoreConfig(image_codec=c, video_crf=self.video_crf)  # validates the name


class FrameSource:
    """Deterministic camera-like RGB frames (H, W, 3) uint8."""

    def __init__(self, height: int, width: int, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        yy, xx = np.mgrid[0:height, 0:width].astype(np.float32)
        self.background = np.stack([80 + 60 * xx / width, 90 + 50 * yy / height,
                                    np.full_like(xx, 110)], axis=2).astype(np.float32)
        self.noise = rng.integers(-3, 4, size=(8, height, width, 3)).astype(np.float32)
        self.objects = [(rng.uniform(0, width), rng.uniform(0, height), rng.uniform(20, 70),
                         rng.integers(0, 256, 3).astype(np.float32), rng.uniform(-6, 6, 2)) for _ in range(5)]
        self.h, self.w = height, width

    def frame(self, k: int) -> np.ndarray:
        """Frame ``k`` of the synthetic camera stream: moving discs on a gradient, with noise so codecs cannot cheat."""
        img = self.background.copy()
        for x, y, r, color, v in self.objects:
            cx, cy = (x + v[0] * k) % self.w, (y + v[1] * k) % self.h
            x0, x1 = int(max(cx - r, 0)), int(min(cx + r, self.w))
            y0, y1 = int(max(cy - r, 0)), int(min(cy + r, self.h))
            img[y0:y1, x0:x1] = color
        img += self.noise[k % len(self.noise)]
        return np.clip(img, 0, 255).astype(np.uint8)


def _dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def _step(k: int, frame: np.ndarray) -> tuple[dict[str, np.ndarray], np.ndarray]:
    state = np.array([np.sin(0.1 * k), np.cos(0.1 * k), 0.01 * k, 0, 0, 0, 1, 0], np.float32)
    action = np.array([0.01, 0, -0.01, 0, 0, 0.05, 1], np.float32)
    return {"state": state, "image_primary": frame}, action


def paced_write(store: EpisodeStore, frames: list[np.ndarray], cfg: StoreBenchConfig) -> dict[str, Any]:
    """Write a wall-clock-paced camera stream with a depth-1 frame queue; count dropped frames."""
    n = int(round(cfg.duration_s * cfg.rate_hz))
    dt = 1.0 / cfg.rate_hz
    writer = store.begin("bench", "benchmark episode", control_rate_hz=cfg.rate_hz)
    latencies, dropped, by_store, written = [], 0, 0, 0
    t0 = time.perf_counter() + 0.05
    prev_latency = 0.0
    for k in range(n):
        target = t0 + k * dt
        now = time.perf_counter()
        if now < target:
            time.sleep(target - now)
        elif now >= target + dt:  # frame k+1 has arrived: frame k was overwritten in the depth-1 queue
            dropped += 1
            # The store is to blame if the last add_step took longer than a frame period; otherwise the
            # producer itself was scheduled late (a busy, shared CPU).
            by_store += int(prev_latency >= dt)
            continue
        obs, act = _step(k, frames[k % len(frames)])
        a = time.perf_counter()
        writer.add_step(obs, act, stamp_ns=int((t0 + k * dt) * 1e9))
        prev_latency = time.perf_counter() - a
        latencies.append(prev_latency)
        written += 1
    span = time.perf_counter() - t0
    c0 = time.perf_counter()
    path = writer.commit(True)
    commit_s = time.perf_counter() - c0
    lat = np.asarray(latencies) * 1e3
    return {"episode_id": path.name, "frames_offered": n, "frames_written": written, "dropped_frames": dropped,
            "dropped_by_store": by_store, "dropped_by_scheduling": dropped - by_store,
            "achieved_hz": written / span, "add_step_ms_mean": float(lat.mean()),
            "add_step_ms_p99": float(np.percentile(lat, 99)), "add_step_ms_max": float(lat.max()),
            "blocked_on_writer_s": writer.blocked_s, "commit_s": commit_s,
            "bytes_per_step": _dir_bytes(path) / max(written, 1)}


def max_write(store: EpisodeStore, frames: list[np.ndarray], cfg: StoreBenchConfig) -> dict[str, Any]:
    """Unpaced: how many frames per second the store sustains, commit (all data durable) included."""
    writer = store.begin("bench", "benchmark episode (unpaced)", control_rate_hz=cfg.rate_hz)
    t0 = time.perf_counter()
    for k in range(cfg.max_write_frames):
        obs, act = _step(k, frames[k % len(frames)])
        writer.add_step(obs, act, stamp_ns=k + 1)
    path = writer.commit(True)
    wall = time.perf_counter() - t0
    nbytes = _dir_bytes(path)
    return {"episode_id": path.name, "frames": cfg.max_write_frames, "max_write_hz": cfg.max_write_frames / wall,
            "write_mb_s": nbytes / wall / 1e6, "bytes_per_step": nbytes / cfg.max_write_frames}


def fidelity(store: EpisodeStore, episode_id: str, frames: list[np.ndarray]) -> dict[str, float]:
    """PSNR (dB) of every stored frame of an unpaced episode (step k holds frame k) against the frame written;
    None = every frame exact (JSON has no infinity)."""
    got = store.load(episode_id).observation["image_primary"]
    mse = np.array([np.mean((g.astype(np.float64) - frames[k % len(frames)]) ** 2) for k, g in enumerate(got)])
    if not mse.any():
        return {"psnr_db_mean": None, "psnr_db_min": None, "exact": True}
    psnr = 10 * np.log10(255.0 ** 2 / np.maximum(mse, 1e-12))  # an exact frame among lossy ones: ~148 dB
    return {"psnr_db_mean": float(np.mean(psnr)), "psnr_db_min": float(np.min(psnr)), "exact": False}


def read_throughput(store: EpisodeStore, episode_id: str, cfg: StoreBenchConfig) -> dict[str, Any]:
    """Load one episode into fine-tuning transitions, then draw random batches from memory."""
    t0 = time.perf_counter()
    data = load_transitions(store, episode_ids=[episode_id], image_key="image_primary")
    load_s = time.perf_counter() - t0
    n = len(data["action"])
    t0 = time.perf_counter()
    low = load_transitions(store, episode_ids=[episode_id])
    lowdim_s = time.perf_counter() - t0
    from amf_ros.data.codec import resize_images

    size = cfg.train_image_size
    t0 = time.perf_counter()
    images = resize_images(data["image"], (size, size))
    resize_s = time.perf_counter() - t0
    rng = np.random.default_rng(cfg.seed)
    t0 = time.perf_counter()
    checksum = 0.0
    for _ in range(cfg.read_batches):
        idx = rng.integers(0, n, cfg.batch_size)
        batch = {"state": data["state"][idx], "action": data["action"][idx], "image": images[idx]}
        checksum += float(batch["image"][:, 0, 0, 0].sum())  # touch the data
    batch_s = time.perf_counter() - t0
    return {"steps": n, "load_with_images_s": load_s, "load_steps_per_s": n / load_s,
            "load_lowdim_steps_per_s": len(low["action"]) / lowdim_s, "resize_s": resize_s,
            "batches_per_s": cfg.read_batches / batch_s,
            "samples_per_s": cfg.read_batches * cfg.batch_size / batch_s}


def run(cfg: StoreBenchConfig, work_dir: Path) -> dict[str, dict[str, Any]]:
    """All measurements for every codec (stores are created under ``work_dir``)."""
    src = FrameSource(cfg.height, cfg.width, cfg.seed)
    frames = [src.frame(k) for k in range(int(cfg.rate_hz * 2))]  # 2 s of distinct frames, cycled
    results: dict[str, dict[str, Any]] = {}
    for codec in cfg.codecs:
        store = EpisodeStore(work_dir / codec, StoreConfig(image_codec=codec, chunk_steps=cfg.chunk_steps,
                                                           png_level=cfg.png_level, jpeg_quality=cfg.jpeg_quality,
                                                           video_crf=cfg.video_crf,
                                                           encode_threads=cfg.encode_threads))
        paced = paced_write(store, frames, cfg)
        unpaced = max_write(store, frames, cfg)
        read = read_throughput(store, paced["episode_id"], cfg)
        # Zero drops over a short run can hide a growing backlog (the writer queue absorbs it and commit
        # pays); the rate is sustained only if the store dropped nothing and writes faster than the camera.
        results[codec] = {"paced_write": paced, "max_write": unpaced, "read": read,
                          "fidelity": fidelity(store, unpaced["episode_id"], frames),
                          "sustains_rate": bool(paced["dropped_by_store"] == 0
                                                and unpaced["max_write_hz"] >= cfg.rate_hz)}
    return results


def main(argv: Sequence[str]) -> int:
    """`amf bench store [--out DIR] [--duration S] [--codecs ...] [--config FILE] [--keep]`."""
    ap = argparse.ArgumentParser(prog="amf bench store", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="runs/bench/store", help="output directory (default runs/bench/store)")
    ap.add_argument("--config", default=None, help="YAML overriding StoreBenchConfig fields")
    ap.add_argument("--duration", type=float, default=None, help="paced write length, s (default 10)")
    ap.add_argument("--codecs", nargs="+", default=None, choices=list(CODECS))
    ap.add_argument("--keep", action="store_true", help="keep the benchmark episodes under OUT/stores")
    args = ap.parse_args(list(argv))
    cfg = load_config(StoreBenchConfig, args.config, duration_s=args.duration, codecs=args.codecs)
    out = Path(args.out)
    work = out / "stores"
    shutil.rmtree(work, ignore_errors=True)
    t0 = time.perf_counter()
    try:
        results = run(cfg, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    wall = time.perf_counter() - t0
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    write_results(out, {"benchmark": "store", "config": config_dict(cfg),
                        "metric": "dropped frames at 30 Hz (want 0), write/read rates, bytes per step",
                        "wall_time_s": wall, "cpu_count": os.cpu_count(), "loadavg_1min_at_end": load,
                        "methods": results})
    rows = []
    for codec, r in results.items():
        p, m, rd = r["paced_write"], r["max_write"], r["read"]
        rows.append([codec, f"{p['frames_written']}/{p['frames_offered']}",
                     f"{p['dropped_frames']} ({p['dropped_by_store']})", p["achieved_hz"],
                     p["add_step_ms_p99"], p["commit_s"], m["max_write_hz"], "yes" if r["sustains_rate"] else "NO",
                     p["bytes_per_step"] / 1e3,
                     "exact" if r["fidelity"]["exact"] else f"{r['fidelity']['psnr_db_min']:.1f}",
                     rd["load_steps_per_s"], rd["samples_per_s"]])
    print(format_table(["codec", "written", "dropped (by store)", "paced Hz", "add_step p99 ms", "commit s",
                        "max write Hz", f"sustains {cfg.rate_hz:g} Hz", "kB/step", "PSNR min dB", "load steps/s",
                        "batch samples/s"], rows, floatfmt=".1f"))
    print(f"{cfg.width}x{cfg.height}x3 at {cfg.rate_hz:g} Hz for {cfg.duration_s:g} s; {os.cpu_count()} CPUs, "
          f"load {load:.1f}; wall {wall:.1f} s -> {out / 'results.json'}")
    return 0
