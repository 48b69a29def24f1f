"""The output contract every `amf bench` shares: common flags, bootstrap CIs, results.json, curve plots (tables and
saving figures: :mod:`amf_ros.outputs`).

results.json = {"benchmark": str, "config": {...}, "metric": str, "wall_time_s": float,
                "methods": {name: {"rounds": [int], "mean": [float], "ci_low": [float], "ci_high": [float],
                                   "per_seed": [[float]]}}}
A benchmark with several settings writes {"benchmark", "config", "metric", "wall_time_s",
"settings": [{"name": str, "methods": {...}}, ...]}.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from amf_ros.atomic import atomic_write_json


def add_common_args(parser: argparse.ArgumentParser, *, out: str, seeds: int | None = None,
                    rounds: int | None = None, jobs: int | None = None) -> argparse.ArgumentParser:
    """Add --out/--seeds/--rounds/--jobs/--config; None defaults mean "take it from the config"."""
    parser.add_argument("--out", default=out, help=f"output directory (default: {out})")
    parser.add_argument("--seeds", type=int, default=seeds, help="number of random seeds (default: from config)")
    parser.add_argument("--rounds", type=int, default=rounds, help="selection rounds (default: from config)")
    parser.add_argument("--jobs", type=int, default=jobs,
                        help=f"parallel worker processes (default: number of cores, {os.cpu_count()})")
    parser.add_argument("--config", default=None,
                        help="YAML file overriding the default config (the acceptance numbers use the default)")
    return parser


def bootstrap_ci(per_seed: np.ndarray, level: float = 0.9, n_boot: int = 2000,
                 seed: int = 0) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Mean over seeds and a percentile-bootstrap CI of the mean, per column.

    Args:
        per_seed: (S, R) values, S seeds by R rounds.
        level: coverage of the interval (0.9 = 90% CI, as in the paper's plots).
        n_boot: bootstrap resamples of the seeds.
        seed: seed of the resampling, so that a results table is reproducible.
    Returns:
        mean, ci_low, ci_high, each (R,).
    """
    x = np.asarray(per_seed, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] == 0:
        raise ValueError(f"per_seed must be (seeds, rounds) with at least one seed, got shape {x.shape}")
    mean = x.mean(axis=0)
    if x.shape[0] == 1:
        return mean, mean.copy(), mean.copy()
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.shape[0], size=(n_boot, x.shape[0]))
    boot_means = x[idx].mean(axis=1)  # (n_boot, R)
    alpha = (1.0 - level) / 2.0
    return mean, np.quantile(boot_means, alpha, axis=0), np.quantile(boot_means, 1.0 - alpha, axis=0)


def summarize(rounds: Sequence[int], per_seed: np.ndarray, level: float = 0.9) -> dict[str, list]:
    """One method's entry of results.json from its (S, R) per-seed values."""
    mean, lo, hi = bootstrap_ci(per_seed, level=level)
    return {"rounds": [int(r) for r in rounds], "mean": mean.tolist(), "ci_low": lo.tolist(),
            "ci_high": hi.tolist(), "per_seed": np.asarray(per_seed, dtype=float).tolist()}


def demos_to_reach(success: np.ndarray, demos: np.ndarray, threshold: float) -> dict[str, Any]:
    """Demonstrations needed to reach a success rate (SAVE's and the AMF paper's headline form).

    Args:
        success: (S, R+1) success per seed and round (round 0 = before fine-tuning).
        demos: (S, R+1) fine-tuning demonstrations collected by each round.
        threshold: the success rate to reach.
    Returns:
        ``per_seed``: the demonstrations at each seed's first round with success >= threshold (None: never);
        ``reached``: how many seeds got there; ``mean_curve``: the same on the seed-mean curve (None: never);
        ``budget``: the most demonstrations any seed had.
    """
    success, demos = np.asarray(success, dtype=float), np.asarray(demos, dtype=float)
    if success.shape != demos.shape or success.ndim != 2:
        raise ValueError(f"success and demos must both be (seeds, rounds), got {success.shape} and {demos.shape}")

    def first(curve: np.ndarray, d: np.ndarray) -> float | None:
        hit = np.flatnonzero(curve >= threshold)
        return float(d[hit[0]]) if hit.size else None

    per_seed = [first(s, d) for s, d in zip(success, demos, strict=True)]
    return {"threshold": float(threshold), "per_seed": per_seed, "reached": sum(v is not None for v in per_seed),
            "mean_curve": first(success.mean(0), demos.mean(0)), "budget": float(demos.max()) if demos.size else 0.0}


def reach_text(reach: Mapping[str, Any] | None) -> str:
    """"12 (4/5 seeds)": demonstrations to the threshold on the mean curve (">25" if never), and how many seeds
    got there."""
    if not reach:
        return "-"
    head = f"{reach['mean_curve']:.0f}" if reach["mean_curve"] is not None else f">{reach['budget']:.0f}"
    return f"{head} ({reach['reached']}/{len(reach['per_seed'])} seeds)"


def config_dict(config: Any) -> dict[str, Any]:
    """A dataclass config as a JSON-able dict (for the "config" field)."""
    return dataclasses.asdict(config) if dataclasses.is_dataclass(config) else dict(config)


def write_results(out_dir: str | os.PathLike, results: Mapping[str, Any], name: str = "results.json") -> Path:
    """Atomically write results.json into ``out_dir`` (created if needed) and return its path."""
    for key in ("benchmark", "config", "metric", "wall_time_s"):
        if key not in results:
            raise ValueError(f"results is missing required key {key!r}")
    if "methods" not in results and "settings" not in results:
        raise ValueError("results needs 'methods' or 'settings'")
    return atomic_write_json(Path(out_dir) / name, dict(results))


def write_results_and_table(out_dir: str | os.PathLike, results: Mapping[str, Any], table: str) -> Path:
    """:func:`write_results`, and the benchmark's printed table beside it as table.txt (both atomic); returns the
    results.json path."""
    from amf_ros.atomic import atomic_write_text

    path = write_results(out_dir, results)
    atomic_write_text(Path(out_dir) / "table.txt", table + "\n")
    return path


def plot_methods(ax: Any, methods: Mapping[str, Mapping[str, Sequence[float]]], ylabel: str = "",
                 title: str = "", x: Mapping[str, Sequence[float]] | None = None, xlabel: str = "round") -> None:
    """Mean curve and shaded CI band per method on a matplotlib axis (the paper's Fig. 2/3 style).

    ``x``: per method, the x value of each round (e.g. demonstrations so far); default the rounds.
    """
    for name, m in methods.items():
        rounds = np.asarray(m["rounds"] if x is None else x[name])
        line, = ax.plot(rounds, m["mean"], label=name)
        ax.fill_between(rounds, m["ci_low"], m["ci_high"], alpha=0.2, color=line.get_color())
    ax.set_xlabel(xlabel)
    if ylabel:
        ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    ax.grid(alpha=0.3)
