"""`amf bench selector-scaling`: time and peak memory of one full AMF criterion evaluation (all candidates).

Setting of the issue: 10 tasks, 50 steps per demonstration, feature dimension 7168 (Octo head's last layer), for
10, 100 and 400 collected demonstrations. Features are synthetic but structured like loss-gradient embeddings of a
smooth policy: random Fourier features (an RBF kernel in disguise) of (state along a smooth trajectory, task
embedding), so consecutive states have similar features. Weights are those of a deterministic policy (App. M,
Octo): the targets of task c are the states of c's demonstrations, the hallucinated demo of c' is one of c''s.

States are subsampled per demonstration to keep at most ``max_data_rows`` conditioned rows (``core/subsample.py``
keeps the scale of the criterion); for demo counts up to ``reference_up_to`` the full, unsubsampled criterion is
also computed and the Spearman rank correlation / argmin agreement of the two reported.

Run: ``amf bench selector-scaling [--out DIR] [--seeds REPEATS] [--config FILE]`` (``--seeds`` = timed repeats).
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import tracemalloc
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from amf_ros.bench.results import add_common_args, config_dict, format_table, load_config, save_figure, summarize
from amf_ros.core.criterion import feature_criterion
from amf_ros.core.subsample import keep_indices

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "config" / "bench" / "selector_scaling.yaml"


@dataclass
class SelectorScalingConfig:
    """Sizes of the timed problem (defaults = config/bench/selector_scaling.yaml = acceptance)."""

    demos: list[int] = field(default_factory=lambda: [10, 100, 400])
    seeds: int = 10  # timed repeats per demo count (after one warm-up)
    rounds: int = 1  # unused (common flag)
    jobs: int | None = None  # unused: BLAS uses the cores
    num_tasks: int = 10
    steps_per_demo: int = 50
    feature_dim: int = 7168
    max_data_rows: int = 600
    target_demos_per_task: int = 2
    candidate_demos_per_task: int = 2
    noise_var: float = 0.01
    prior_var: float = 1.0
    form: str = "log_variance"
    reference_up_to: int = 100
    blas_threads: int | None = 1  # None = the BLAS default (all cores)
    state_dim: int = 4
    task_embed_dim: int = 8
    lengthscale: float = 1.0

    def __post_init__(self) -> None:
        if not self.demos or min(self.demos) < 1:
            raise ValueError(f"demos must be positive counts, got {self.demos}")
        if self.seeds < 1 or self.max_data_rows < 1 or self.feature_dim < 1 or self.steps_per_demo < 1:
            raise ValueError(f"seeds, max_data_rows, feature_dim, steps_per_demo must be >= 1, got {self}")


class SyntheticEmbedder:
    """phi(state, task) = sqrt(2/D) cos(W [state, e_task] + b): random Fourier features, (rows, D) float64."""

    def __init__(self, cfg: SelectorScalingConfig, rng: np.random.Generator) -> None:
        dx = cfg.state_dim + cfg.task_embed_dim
        self.w = rng.normal(0.0, 1.0 / cfg.lengthscale, size=(dx, cfg.feature_dim))
        self.b = rng.uniform(0.0, 2.0 * np.pi, size=cfg.feature_dim)
        self.task_emb = rng.normal(0.0, 0.7, size=(cfg.num_tasks, cfg.task_embed_dim))
        self.goals = rng.normal(0.0, 1.0, size=(cfg.num_tasks, cfg.state_dim))
        self.cfg = cfg

    def states(self, task: int, rng: np.random.Generator) -> np.ndarray:
        """(H, S) a smooth noisy path from near the origin towards the task's goal."""
        h = self.cfg.steps_per_demo
        frac = 1.0 - 0.93 ** np.arange(h)
        start = rng.normal(0.0, 0.1, size=self.cfg.state_dim)
        return start + frac[:, None] * (self.goals[task] - start) + 0.02 * rng.normal(size=(h, self.cfg.state_dim))

    def __call__(self, states: np.ndarray, task: int) -> np.ndarray:
        x = np.concatenate([states, np.broadcast_to(self.task_emb[task], (states.shape[0], self.cfg.task_embed_dim))],
                           axis=1)
        return np.sqrt(2.0 / self.cfg.feature_dim) * np.cos(x @ self.w + self.b)


def build_problem(cfg: SelectorScalingConfig, n_demos: int, keep: int, seed: int = 0):
    """Criterion inputs for ``n_demos`` demonstrations (round-robin over tasks), ``keep`` states per demo.

    Returns data_phi (N, D), candidate_phi (per task: list of (k, D)), target_phi (K, D), target_weights (K,).
    """
    rng = np.random.default_rng(seed)
    emb = SyntheticEmbedder(cfg, rng)
    h = cfg.steps_per_demo
    tasks = np.arange(n_demos) % cfg.num_tasks
    paths = [emb.states(int(t), rng) for t in tasks]
    sel = keep_indices(h, keep)  # features are only computed at kept states (as a real embedder would)
    scale = np.sqrt(h / sel.size)  # = conditioning_rows' scaling: each kept row stands for h / k states
    data = np.concatenate([emb(p[sel], int(t)) * scale for p, t in zip(paths, tasks)])
    t_x, t_w, cands = [], [], []
    for c in range(cfg.num_tasks):
        own = [p for p, t in zip(paths, tasks) if t == c]
        if not own:
            raise ValueError(f"task {c} has no demonstration; use n_demos >= num_tasks, got {n_demos=}")
        n_t = min(len(own), cfg.target_demos_per_task)
        for p in own[:n_t]:
            t_x.append(emb(p[sel], c))
            t_w.append(np.full(sel.size, (h / sel.size) / (cfg.num_tasks * n_t)))  # = target_rows' weights
        cands.append([emb(p[sel], c) * scale for p in own[: cfg.candidate_demos_per_task]])
    return data, cands, np.concatenate(t_x), np.concatenate(t_w)


def states_per_demo(cfg: SelectorScalingConfig, n_demos: int) -> int:
    """Kept states per demonstration so that at most ``max_data_rows`` rows are conditioned on."""
    return int(np.clip(cfg.max_data_rows // n_demos, 1, cfg.steps_per_demo))


def time_one(cfg: SelectorScalingConfig, n_demos: int) -> dict:
    """Timed repeats for one demo count -> {"times_s": [...], "peak_mb", "keep", "rows", "input_mb"}."""
    keep = states_per_demo(cfg, n_demos)
    data, cands, tx, tw = build_problem(cfg, n_demos, keep)
    run = lambda: feature_criterion(data, cands, tx, tw, noise_var=cfg.noise_var,  # noqa: E731
                                    prior_var=cfg.prior_var, form=cfg.form)
    scores = run()  # warm-up
    times, cpu = [], []
    for _ in range(cfg.seeds):
        t0, c0 = time.perf_counter(), time.process_time()
        run()
        times.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    tracemalloc.start()
    run()
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    input_mb = (data.nbytes + tx.nbytes + sum(c.nbytes for cs in cands for c in cs)) / 2**20
    return {"times_s": times, "cpu_s": cpu, "peak_mb": peak / 2**20, "keep": keep, "rows": int(data.shape[0]),
            "targets": int(tx.shape[0]), "input_mb": input_mb, "scores": scores.tolist()}


def reference_agreement(cfg: SelectorScalingConfig, n_demos: int, sub_scores: Sequence[float]) -> dict:
    """Full (all 50 states) criterion vs the subsampled one: Spearman rho, argmin agreement, full time."""
    from scipy.stats import spearmanr

    data, cands, tx, tw = build_problem(cfg, n_demos, cfg.steps_per_demo)
    t0 = time.perf_counter()
    full = feature_criterion(data, cands, tx, tw, noise_var=cfg.noise_var, prior_var=cfg.prior_var, form=cfg.form)
    elapsed = time.perf_counter() - t0
    rho = float(spearmanr(full, sub_scores).statistic) if len(full) > 1 else 1.0
    spread = float(np.max(full) - np.min(full))
    regret = float(full[int(np.argmin(sub_scores))] - np.min(full))
    return {"demos": n_demos, "spearman": rho, "same_argmin": bool(np.argmin(full) == np.argmin(sub_scores)),
            "regret_fraction_of_spread": regret / spread if spread > 0 else 0.0,
            "full_time_s": elapsed, "full_scores": full.tolist(), "subsampled_scores": list(sub_scores),
            "max_rel_diff": float(np.max(np.abs(np.asarray(sub_scores) - full) / np.maximum(np.abs(full), 1e-12)))}


def run(cfg: SelectorScalingConfig, progress: bool = True) -> dict:
    from tqdm import tqdm

    import contextlib

    t0 = time.perf_counter()
    per = {}
    limit = contextlib.nullcontext()
    if cfg.blas_threads is not None:
        from amf_ros._optional import require

        limit = require("threadpoolctl", "blas_threads").threadpool_limits(limits=cfg.blas_threads)
    with limit:
        for n in tqdm(cfg.demos, desc="selector-scaling", disable=not progress):
            per[n] = time_one(cfg, n)
    refs = [reference_agreement(cfg, n, per[n]["scores"]) for n in cfg.demos if n <= cfg.reference_up_to]
    times = np.array([per[n]["times_s"] for n in cfg.demos]).T  # (repeats, len(demos))
    return {
        "benchmark": "selector-scaling", "config": config_dict(cfg), "metric": "seconds per criterion evaluation",
        "wall_time_s": time.perf_counter() - t0, "cpu_count": os.cpu_count(),
        "demos": list(cfg.demos),
        "p50_s": [float(np.percentile(per[n]["times_s"], 50)) for n in cfg.demos],
        "p90_s": [float(np.percentile(per[n]["times_s"], 90)) for n in cfg.demos],
        "peak_mb": [per[n]["peak_mb"] for n in cfg.demos],
        # CPU seconds (all threads) per evaluation: on a crowded machine, a better estimate of idle cost than wall time
        "cpu_p50_s": [float(np.percentile(per[n]["cpu_s"], 50)) for n in cfg.demos],
        "states_per_demo": [per[n]["keep"] for n in cfg.demos],
        "data_rows": [per[n]["rows"] for n in cfg.demos],
        "target_rows": [per[n]["targets"] for n in cfg.demos],
        "input_mb": [per[n]["input_mb"] for n in cfg.demos],
        "reference": refs,
        "methods": {"feature_criterion": summarize(cfg.demos, times)},
    }


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(prog="amf bench selector-scaling", description=__doc__.split("\n\n")[0])
    add_common_args(parser, out="results/selector_scaling")
    parser.add_argument("--demos", type=int, nargs="*", default=None, help="demonstration counts to time")
    args = parser.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = load_config(SelectorScalingConfig, args.config or DEFAULT_CONFIG, seeds=args.seeds, demos=args.demos)
    res = run(cfg)
    from amf_ros.bench.results import write_results

    path = write_results(Path(args.out), res)
    rows = [[n, k, r, p50, p90, c, mb] for n, k, r, p50, p90, c, mb in
            zip(res["demos"], res["states_per_demo"], res["data_rows"], res["p50_s"], res["p90_s"], res["cpu_p50_s"],
                res["peak_mb"])]
    print(format_table(["demos", "states/demo", "rows", "p50_s", "p90_s", "cpu_p50_s", "peak_mb"], rows,
                       floatfmt=".3f"))
    for ref in res["reference"]:
        print(f"subsampled vs full at {ref['demos']} demos: spearman {ref['spearman']:.3f}, same argmin "
              f"{ref['same_argmin']} (regret {ref['regret_fraction_of_spread']:.1%} of the score spread), "
              f"max rel diff {ref['max_rel_diff']:.3g}, full time {ref['full_time_s']:.2f} s")
    _plot(res, Path(args.out))
    print(f"wall time {res['wall_time_s']:.1f} s; results in {path}")
    return 0


def _plot(res: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(1, 2, figsize=(9, 3.2))
    ax[0].plot(res["demos"], res["p50_s"], "o-", label="p50")
    ax[0].plot(res["demos"], res["p90_s"], "s--", label="p90")
    ax[0].set_xlabel("collected demonstrations")
    ax[0].set_ylabel("seconds / criterion evaluation")
    ax[0].legend()
    ax[1].plot(res["demos"], res["peak_mb"], "o-")
    ax[1].set_xlabel("collected demonstrations")
    ax[1].set_ylabel("peak MB (tracemalloc)")
    for a in ax:
        a.grid(alpha=0.3)
    fig.tight_layout()
    save_figure(fig, out / "selector_scaling.png")
    plt.close(fig)
