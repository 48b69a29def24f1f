"""`amf bench perf-finetune`: head fine-tuning speed on cached trunk embeddings vs running the trunk every step.

Why: the trunk is frozen (DESIGN.md), so every recorded frame's trunk features are computed once and cached; this
benchmark shows what that buys, side by side on the same model and batch in one run, and what computing AMF
embeddings for 10,000 frames costs. Each case runs in its own spawned process so its peak memory (ru_maxrss) is
its own. Repeats play the role of seeds in results.json (mean and bootstrap CI over repeats).

    amf bench perf-finetune [--out runs/bench/perf-finetune] [--seeds 3] [--steps 100] [--frames 10000]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import resource
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from amf_ros.bench.results import add_common_args, config_dict, summarize, write_results_and_table
from amf_ros.config_file import load_config
from amf_ros.outputs import format_table


@dataclass
class PerfFinetuneConfig:
    """Settings of the benchmark (written into results.json)."""

    steps: int = 100
    """Timed fine-tuning steps per repeat (after 5 warm-up steps)."""
    batch_size: int = 256
    """Minibatch size (paper and Octo: 256)."""
    frames: int = 10_000
    """Recorded frames in the synthetic dataset (embedding time is measured on all of them)."""
    episode_length: int = 100
    """Frames per synthetic episode."""
    image_size: int = 64
    """Side of the square RGB frames fed to the image trunk."""
    state_dim: int = 39
    """Width of the state vector (Metaworld's)."""
    action_dim: int = 7
    """A (EefDeltaAction)."""
    repeats: int = 3
    """Timing repeats per case (the 'seeds' of results.json)."""
    threads: int = 1
    """torch intra-op threads per case process."""
    embedding_draws: int = 4
    """Fixed diffusion draws per frame for gradient embeddings."""

    def __post_init__(self) -> None:
        for name in ("steps", "batch_size", "frames", "episode_length", "image_size", "state_dim", "action_dim",
                     "repeats", "threads", "embedding_draws"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"PerfFinetuneConfig.{name} must be >= 1, got {getattr(self, name)=}")


def _transitions(cfg: PerfFinetuneConfig, trunk: str) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    n = cfg.frames
    data = {"action": rng.normal(size=(n, cfg.action_dim)).astype(np.float32),
            "episode_index": np.arange(n) // cfg.episode_length, "step": np.arange(n) % cfg.episode_length,
            "task": np.asarray([f"task{i % 4}" for i in range(n // cfg.episode_length)])[
                np.arange(n) // cfg.episode_length]}
    if trunk == "image":
        data["image"] = rng.integers(0, 256, size=(n, cfg.image_size, cfg.image_size, 3), dtype=np.uint8)
    else:
        data["state"] = rng.normal(size=(n, cfg.state_dim)).astype(np.float32)
    return data


def _peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _case(name: str, cfg_dict: dict[str, Any]) -> dict[str, Any]:
    """One case in a fresh process; returns timings and this process's peak RSS."""
    import torch

    from amf_ros.policies.agent import PolicyConfig, TaskConditionedPolicy
    from amf_ros.policies.diffusion_head import DiffusionActionHead, DiffusionHeadConfig
    from amf_ros.policies.finetune import TrainConfig, train_head
    from amf_ros.threads import limit_threads

    cfg = PerfFinetuneConfig(**cfg_dict)
    limit_threads(cfg.threads)
    out: dict[str, Any] = {"case": name, "rss_start_mb": _peak_mb()}
    if name == "octo_small_head":
        head = DiffusionActionHead(DiffusionHeadConfig.octo_small(action_dim=cfg.action_dim))
        emb = torch.randn(cfg.frames, 384)
        chunks = torch.randn(cfg.frames, 4, cfg.action_dim)
        train_head(head, lambda idx: emb[idx], chunks, None, 5, TrainConfig(batch_size=cfg.batch_size))
        rates = []
        for r in range(cfg.repeats):
            res = train_head(head, lambda idx: emb[idx], chunks, None, cfg.steps,
                             TrainConfig(batch_size=cfg.batch_size, seed=r))
            rates.append(res.steps_per_s)
        from amf_ros.policies.embeddings import EmbeddingConfig, compute_embeddings

        ecfg = EmbeddingConfig(draws=cfg.embedding_draws)
        compute_embeddings(head, emb[:8], chunks[:8], None, ecfg)  # warm-up
        t0 = time.perf_counter()
        phi = compute_embeddings(head, emb, chunks, None, ecfg)
        out["embed_warm_s"] = time.perf_counter() - t0  # readouts are the cache here: no trunk to run
        out["embedding_dim"] = int(phi.shape[1])
        out.update(cached=rates, params=sum(p.numel() for p in head.parameters()))
        out["peak_rss_mb"] = _peak_mb()
        return out
    trunk = "image" if name.startswith("image") else "state"
    pcfg = PolicyConfig(head="diffusion", trunk=trunk, task_encoder="hash", action_horizon=4,
                        batch_size=cfg.batch_size, embedding_draws=cfg.embedding_draws, num_threads=cfg.threads)
    tasks = {f"task{i}": f"task number {i}" for i in range(4)}
    policy = TaskConditionedPolicy(pcfg, state_dim=cfg.state_dim, action_dim=cfg.action_dim, tasks=tasks)
    data = _transitions(cfg, trunk)
    policy.fit_normalizers(data)
    warm = {k: v[:8].copy() for k, v in data.items()}  # one-time imports/allocations, on frames not in `data`
    warm[trunk] = warm[trunk] + (1 if trunk == "image" else 0.5)
    policy.embed(warm)
    t0 = time.perf_counter()
    phi = policy.embed(data)  # cold: trunk on every frame + embeddings
    out["embed_cold_s"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    policy.embed(data)  # warm: trunk features from the cache
    out["embed_warm_s"] = time.perf_counter() - t0
    out["embedding_dim"] = int(phi.shape[1])
    out["cache_mb"] = len(policy.cache) * policy.trunk.feature_dim * 4 / 2 ** 20
    policy.fit(data, 5, cached=True)
    policy.fit(data, 5, cached=False)
    cached, trunk_every_step = [], []
    for r in range(cfg.repeats):  # interleaved so that machine load hits both sides alike
        cached.append(policy.fit(data, cfg.steps, cached=True, seed=r).steps_per_s)
        trunk_every_step.append(policy.fit(data, cfg.steps, cached=False, seed=r).steps_per_s)
    out.update(cached=cached, trunk_every_step=trunk_every_step, head_params=sum(
        p.numel() for p in policy.head.parameters()), trunk_params=sum(p.numel() for p in policy.trunk.parameters()))
    out["peak_rss_mb"] = _peak_mb()
    return out


CASES = {
    "image": "image trunk (CNN, {s}x{s} RGB) + diffusion head (hidden 128, 2 blocks, H=4)",
    "state": "state trunk ({d}-d) + diffusion head (hidden 128, 2 blocks, H=4)",
    "octo_small_head": "Octo-Small-sized diffusion head (1.7 M params) on cached 384-d readouts",
}


def main(argv: Sequence[str]) -> int:
    """Run all cases, write results.json and table.txt under --out, print the table."""
    parser = argparse.ArgumentParser(prog="amf bench perf-finetune", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, out="runs/bench/perf-finetune")
    parser.add_argument("--steps", type=int, default=None, help="timed steps per repeat (default 100)")
    parser.add_argument("--frames", type=int, default=None, help="frames in the dataset (default 10000)")
    parser.add_argument("--image-size", type=int, default=None, help="image side (default 64)")
    parser.add_argument("--cases", default=",".join(CASES), help=f"comma list of {list(CASES)}")
    args = parser.parse_args(list(argv))
    cfg = load_config(PerfFinetuneConfig, args.config, steps=args.steps, frames=args.frames,
                      image_size=args.image_size, repeats=args.seeds)
    names = [c for c in args.cases.split(",") if c]
    unknown = sorted(set(names) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; choose from {list(CASES)}")
    t_start = time.perf_counter()
    ctx = mp.get_context("spawn")  # cases run one after another (--jobs is ignored): timings must not compete
    raw = []
    for name in names:
        with ProcessPoolExecutor(max_workers=1, mp_context=ctx) as pool:
            raw.append(pool.submit(_case, name, config_dict(cfg)).result())
        print(f"[perf-finetune] {name}: done", flush=True)
    settings, rows = [], []
    for res in raw:
        label = CASES[res["case"]].format(s=cfg.image_size, d=cfg.state_dim)
        methods = {"cached trunk embeddings": summarize([0], np.asarray(res["cached"])[:, None])}
        if "trunk_every_step" in res:
            methods["trunk every step"] = summarize([0], np.asarray(res["trunk_every_step"])[:, None])
        extra = {k: v for k, v in res.items() if k not in ("cached", "trunk_every_step")}
        settings.append({"name": label, "methods": methods, "details": extra})
        ce = float(np.mean(res["cached"]))
        te = float(np.mean(res["trunk_every_step"])) if "trunk_every_step" in res else None

        def cell(v: float | None) -> float | str:
            return "-" if v is None else v

        rows.append([res["case"], ce, cell(te), cell(None if te is None else ce / te),
                     cell(res.get("embed_cold_s")), cell(res.get("embed_warm_s")), res["peak_rss_mb"]])
    results = {"benchmark": "perf-finetune", "config": config_dict(cfg), "metric": "fine-tuning steps per second",
               "wall_time_s": time.perf_counter() - t_start, "settings": settings,
               "notes": f"batch {cfg.batch_size}; {cfg.frames} frames; embed_* = seconds for policy.embed on all "
                        f"frames (cold: trunk + gradient embeddings; warm: cached trunk); peak_rss_mb per case "
                        f"process; {cfg.threads} torch thread(s)"}
    table = format_table(["case", "steps/s cached", "steps/s trunk", "speed-up", "embed cold s", "embed warm s",
                          "peak RSS MB"], rows, floatfmt=".2f")
    path = write_results_and_table(args.out, results, table)
    print(table)
    print(f"wrote {path}")
    return 0
