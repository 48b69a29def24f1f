"""`amf bench integrator`: AMF-GP vs uniform vs round_robin on the paper's 2D integrator (Fig. 2 and Fig. 6).

For each pre-training allocation k/12 (12 noisy demonstrations spread over the first k evaluation tasks, a
contiguous arc of the circle), each seed and each method: condition a GP policy on the pre-training data, then for
`rounds` rounds select a task, collect one noisy expert demonstration and condition on it. Every round (and before
the first) the policy is evaluated: multi-task return over 20 stochastic episodes per evaluation task, and mean
policy entropy over the visited states. Methods of one (allocation, seed) share pre-training data and noise streams.

Run: ``amf bench integrator [--out DIR] [--seeds N] [--rounds N] [--jobs N] [--config FILE]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

import numpy as np

from amf_ros._optional import has
from amf_ros.atomic import atomic_write_bytes, atomic_write_json, atomic_write_text
from amf_ros.bench.results import add_common_args, config_dict, plot_methods, summarize, write_results
from amf_ros.config_file import load_config
from amf_ros.core.selectors import make_selector
from amf_ros.envs.integrator import Integrator2D, IntegratorConfig, Trajectory
from amf_ros.outputs import format_table, save_figure
from amf_ros.policies.gp import GPPolicy, GPPolicyConfig, GPScoreFn
from amf_ros.threads import limited_threads

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "config" / "bench" / "integrator.yaml"

#: method name -> (selector name, criterion form or None)
METHODS: dict[str, tuple[str, str | None]] = {
    "amf_gp": ("amf", "log_variance"),
    "amf_gp_variance": ("amf", "variance"),
    "uniform": ("uniform", None),
    "round_robin": ("round_robin", None),
    "rebalancing": ("rebalancing", None),
}


@dataclass
class IntegratorSetup:
    """The integrator, the GP policy and the criterion's importance weighting: shared by every integrator
    benchmark (this one and criterion-map) so both read the same flat YAML keys."""

    normalize: str = "self"
    """Importance weights per task: "self" (self-normalised) or "mean" (App. E's plain average)."""
    min_weight: float = 1e-3
    """Importance weights below this fraction of a task's largest weight are dropped (core/occupancy.py)."""
    max_trajectories: int | None = 8
    """Keep at most this many heaviest trajectories per task (App. E); None = all."""
    horizon: int = 5
    radius: float = 1.0
    expert_gain: float = 0.5
    expert_noise_std: float = 0.1
    state_lengthscale: float = 0.5
    task_lengthscale: float = 0.5
    amplitude: float = 0.25
    noise_var: float = 0.01

    def env(self) -> Integrator2D:
        return Integrator2D(IntegratorConfig(self.horizon, self.radius, self.expert_gain, self.expert_noise_std))

    def gp(self) -> GPPolicyConfig:
        return GPPolicyConfig(self.state_lengthscale, self.task_lengthscale, self.amplitude, self.noise_var)


@dataclass
class IntegratorBenchConfig(IntegratorSetup):
    """Everything the integrator benchmark depends on (defaults = config/bench/integrator.yaml = acceptance)."""

    seeds: int = 10
    rounds: int = 40
    jobs: int | None = None
    allocations: list[int] = field(default_factory=lambda: list(range(1, 13)))
    methods: list[str] = field(default_factory=lambda: ["amf_gp", "amf_gp_variance", "uniform", "round_robin"])
    num_tasks: int = 12
    pretrain_demos: int = 12
    eval_episodes: int = 20
    batch_size: int = 1
    candidates: str = "finite"
    shooting_budget: int = 100
    log_prob_clip: list[float] = field(default_factory=lambda: [-12.0, 0.0])

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.rounds < 1:
            raise ValueError(f"seeds and rounds must be >= 1, got {self.seeds=}, {self.rounds=}")
        bad = [a for a in self.allocations if not 1 <= a <= self.num_tasks]
        if bad or not self.allocations:
            raise ValueError(f"allocations must be in 1..{self.num_tasks}, got {self.allocations}")
        unknown = [m for m in self.methods if m not in METHODS]
        if unknown or not self.methods:
            raise ValueError(f"unknown methods {unknown}; choose from {list(METHODS)}")
        if self.candidates not in ("finite", "shooting"):
            raise ValueError(f"candidates must be 'finite' or 'shooting', got {self.candidates=}")
        if self.batch_size < 1 or self.eval_episodes < 1 or self.pretrain_demos < 0:
            raise ValueError(f"batch_size/eval_episodes must be >= 1, pretrain_demos >= 0, got {self}")
        if len(self.log_prob_clip) != 2:
            raise ValueError(f"log_prob_clip must be [low, high], got {self.log_prob_clip}")


def task_key(angle: float) -> str:
    """Candidate key of a task angle (selectors work on string keys)."""
    return f"{angle:.10f}"


def pretrain_angles(cfg: IntegratorBenchConfig, allocation: int) -> np.ndarray:
    """(pretrain_demos,) task angles of the pre-training demonstrations: round-robin over the first k tasks."""
    angles = Integrator2D.evaluation_angles(cfg.num_tasks)
    return angles[np.arange(cfg.pretrain_demos) % allocation]


def evaluate(env: Integrator2D, policy: GPPolicy, angles: np.ndarray, episodes: int,
             rng: np.random.Generator) -> tuple[float, float]:
    """Mean multi-task return (``episodes`` per task) and mean policy entropy over the visited states."""
    goals = np.repeat(env.goals(angles), episodes, axis=0)
    states, _, returns = env.rollout(lambda s, g, r: policy.act(s, g, r), goals, rng)
    flat_goals = np.repeat(goals, env.config.horizon, axis=0)
    entropy = policy.entropy(states.reshape(-1, 2), flat_goals)
    return float(returns.mean()), float(entropy.mean())


def run_method(cfg: IntegratorBenchConfig, allocation: int, seed: int, method: str) -> dict:
    """One (allocation, seed, method) run -> {"returns": [R+1], "entropy": [R+1], "counts": {...}, "time_s"}."""
    t0, c0 = time.perf_counter(), time.process_time()
    env = cfg.env()
    eval_angles = Integrator2D.evaluation_angles(cfg.num_tasks)
    keys = [task_key(a) for a in eval_angles]
    angle_of = dict(zip(keys, eval_angles, strict=True))
    streams = [np.random.default_rng([seed, allocation, i]) for i in range(4)]
    pre_rng, demo_rng, eval_rng, sel_rng = streams
    policy = GPPolicy(cfg.gp(), env.state_dim, env.task_dim, env.action_dim)
    pre = pretrain_angles(cfg, allocation)
    for a in pre:
        d = env.demonstrate(a, pre_rng)
        policy.add(d.states, d.goal, d.actions)
    pre_counts = {k: int(np.sum(np.isclose(pre, angle_of[k]))) for k in keys}
    selector_name, form = METHODS[method]
    selector = make_selector(selector_name)
    collected: list[Trajectory] = []
    counts: dict[str, int] = {k: 0 for k in keys}
    returns, entropies, off_grid = [], [], 0
    r, h = evaluate(env, policy, eval_angles, cfg.eval_episodes, eval_rng)
    returns.append(r), entropies.append(h)
    for _ in range(cfg.rounds):
        candidates, score_fn = keys, None
        if selector_name == "amf" and collected and all(counts[k] > 0 for k in keys):
            if cfg.candidates == "shooting":
                shots = sel_rng.uniform(0.0, 2.0 * np.pi, size=cfg.shooting_budget)
                candidates = [task_key(a) for a in shots]
            score_fn = GPScoreFn(policy, [(t.states, t.actions, t.goal) for t in collected], env.goals(eval_angles),
                                 lambda k: env.goals(float(k))[0], form=form or "log_variance",
                                 normalize=cfg.normalize, log_prob_clip=tuple(cfg.log_prob_clip),
                                 min_weight=cfg.min_weight, max_trajectories=cfg.max_trajectories)
        sel = selector.select(candidates, counts, sel_rng, batch_size=cfg.batch_size, score_fn=score_fn,
                              pretrain_counts=pre_counts)
        for k in sel.tasks:
            d = env.demonstrate(float(k), demo_rng)
            collected.append(d)
            if k in counts:
                counts[k] += 1
            else:
                off_grid += 1
            policy.add(d.states, d.goal, d.actions)
        r, h = evaluate(env, policy, eval_angles, cfg.eval_episodes, eval_rng)
        returns.append(r), entropies.append(h)
    return {"returns": returns, "entropy": entropies, "counts": [counts[k] for k in keys], "off_grid": off_grid,
            "time_s": time.perf_counter() - t0, "cpu_s": time.process_time() - c0}


def _job(args: tuple[IntegratorBenchConfig, int, int]) -> tuple[int, int, dict[str, dict]]:
    cfg, allocation, seed = args
    # small matrices (<= ~300 rows): multi-threaded OpenBLAS on a shared 2-core machine was measured ~9x slower
    # (spin-waiting) than one thread per process; without threadpoolctl the BLAS keeps its own threads
    with limited_threads(1, torch=False, blas=has("threadpoolctl")):
        return allocation, seed, {m: run_method(cfg, allocation, seed, m) for m in cfg.methods}


def run(cfg: IntegratorBenchConfig, jobs: int, progress: bool = True) -> dict:
    """All allocations x seeds x methods (parallel over (allocation, seed)); returns the results.json dict."""
    from tqdm import tqdm

    t0 = time.perf_counter()
    work = [(cfg, a, s) for a in cfg.allocations for s in range(cfg.seeds)]
    out: dict[tuple[int, int], dict[str, dict]] = {}
    bar = tqdm(total=len(work), desc="integrator (allocation x seed)", disable=not progress)
    if jobs > 1:
        import multiprocessing as mp

        with mp.get_context("fork").Pool(jobs) as pool:
            for a, s, res in pool.imap_unordered(_job, work):
                out[(a, s)] = res
                bar.update()
    else:
        for item in work:
            a, s, res = _job(item)
            out[(a, s)] = res
            bar.update()
    bar.close()
    rounds = list(range(cfg.rounds + 1))
    settings = []
    for a in cfg.allocations:
        runs = [out[(a, s)] for s in range(cfg.seeds)]
        settings.append({
            "name": f"{a}/{cfg.num_tasks}",
            "methods": {m: summarize(rounds, np.array([r[m]["returns"] for r in runs])) for m in cfg.methods},
            "entropy": {m: summarize(rounds, np.array([r[m]["entropy"] for r in runs])) for m in cfg.methods},
            "final_counts_mean": {m: np.mean([r[m]["counts"] for r in runs], axis=0).tolist() for m in cfg.methods},
            "run_time_s": {m: [r[m]["time_s"] for r in runs] for m in cfg.methods},
            "run_cpu_s": {m: [r[m]["cpu_s"] for r in runs] for m in cfg.methods},
        })
    cpu = sum(sum(v) for s in settings for v in s["run_cpu_s"].values())
    return {"benchmark": "integrator", "config": config_dict(cfg), "metric": "multi-task return",
            "wall_time_s": time.perf_counter() - t0, "jobs": jobs, "cpu_time_s": cpu,
            "idle_estimate_s": cpu / jobs, "settings": settings}


def round_floats(obj, digits: int = 5):
    """Round every float in a JSON-able structure to ``digits`` significant digits (keeps results.json small)."""
    if isinstance(obj, float):
        return float(f"{obj:.{digits}g}")
    if isinstance(obj, dict):
        return {k: round_floats(v, digits) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [round_floats(v, digits) for v in obj]
    return obj


def window_mean(method: dict, lo: int, hi: int) -> float:
    """Mean over seeds and over rounds lo..hi (inclusive) of one method's curve."""
    rounds = np.asarray(method["rounds"])
    sel = (rounds >= lo) & (rounds <= hi)
    return float(np.mean(np.asarray(method["mean"])[sel]))


def table(results: dict) -> str:
    """Per allocation and method: mean return over rounds 10..R, final mean and its 90% CI, final entropy."""
    rows = []
    last = results["config"]["rounds"]
    for s in results["settings"]:
        for m, v in s["methods"].items():
            rows.append([s["name"], m, window_mean(v, 10, last), v["mean"][-1], v["ci_low"][-1], v["ci_high"][-1],
                         s["entropy"][m]["mean"][-1]])
    return format_table(["alloc", "method", f"ret r10-{last}", "final", "ci_low", "ci_high", "entropy"], rows)


def _shrink_png(path: Path) -> Path:
    """Re-save a PNG with a 256-colour palette (3-4x smaller, same look) so results can live in the repo."""
    from amf_ros._optional import has

    if has("PIL"):
        import io

        from PIL import Image

        with Image.open(path) as im:
            buf = io.BytesIO()
            im.convert("RGB").quantize(colors=256).save(buf, format="PNG", optimize=True)
        atomic_write_bytes(path, buf.getvalue())
    return path


def plots(results: dict, out: Path) -> list[Path]:
    """returns.png / entropy.png (one panel per allocation, like Fig. 6) and fig2.png (6/12 and 12/12)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    paths = []
    settings = results["settings"]
    for key, label, fname in (("methods", "return", "returns.png"), ("entropy", "policy entropy", "entropy.png")):
        cols = min(4, len(settings))
        rows = int(np.ceil(len(settings) / cols))
        fig, axes = plt.subplots(rows, cols, figsize=(3.2 * cols, 2.4 * rows), squeeze=False)
        for ax, s in zip(axes.ravel(), settings, strict=False):
            plot_methods(ax, s[key], ylabel=label, title=f"{s['name']} tasks pre-trained")
        for ax in axes.ravel()[len(settings):]:
            ax.axis("off")
        axes.ravel()[0].legend(fontsize=7)
        fig.tight_layout()
        paths.append(_shrink_png(save_figure(fig, out / fname)))
        plt.close(fig)
    chosen = [s for s in settings if s["name"].split("/")[0] in ("6", "12")] or settings[:2]
    fig, axes = plt.subplots(2, len(chosen), figsize=(5 * len(chosen), 6), squeeze=False)
    for j, s in enumerate(chosen):
        plot_methods(axes[0, j], s["methods"], ylabel="return", title=f"{s['name']} tasks pre-trained")
        plot_methods(axes[1, j], s["entropy"], ylabel="policy entropy")
    axes[0, 0].legend(fontsize=7)
    fig.tight_layout()
    paths.append(_shrink_png(save_figure(fig, out / "fig2.png")))
    plt.close(fig)
    return paths


def main(argv: Sequence[str]) -> int:
    """Command line of ``amf bench integrator``: run, write results.json, table.txt and the plots."""
    parser = argparse.ArgumentParser(prog="amf bench integrator", description=__doc__.split("\n\n")[0])
    add_common_args(parser, out="results/integrator")
    parser.add_argument("--allocations", type=int, nargs="*", default=None, help="subset of k in k/12")
    parser.add_argument("--methods", nargs="*", default=None, help=f"subset of {list(METHODS)}")
    parser.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    args = parser.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = load_config(IntegratorBenchConfig, args.config or DEFAULT_CONFIG, seeds=args.seeds, rounds=args.rounds,
                      jobs=args.jobs, allocations=args.allocations, methods=args.methods)
    jobs = max(1, cfg.jobs or os.cpu_count() or 1)
    results = run(cfg, jobs)
    out = Path(args.out)
    # Same contract as results.write_results, written without indentation (120 x 4 per-seed curves: ~5x smaller).
    path = write_results(out, round_floats(results))
    atomic_write_json(path, round_floats(results), indent=None)
    text = table(results)
    print(text)
    atomic_write_text(out / "table.txt", text + "\n")
    if not args.no_plots:
        plots(results, out)
    print(f"\nwall time {results['wall_time_s']:.1f} s with {jobs} jobs (CPU time {results['cpu_time_s']:.0f} s, "
          f"i.e. ~{results['idle_estimate_s']:.0f} s on {jobs} idle cores); results in {path}")
    return 0


__all__ = ["IntegratorBenchConfig", "METHODS", "main", "run", "run_method"]
