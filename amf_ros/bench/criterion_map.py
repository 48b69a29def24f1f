"""`amf bench criterion-map`: the didactic example of App. L (Fig. 14) on the 2D integrator.

Pre-train a GP policy on 50 noisy demonstrations of tasks drawn uniformly from the top half of the circle
(angles in [0, pi)). Then, for 100 candidate tasks evenly spaced around the whole circle: (row 2) the AMF-GP
criterion (targets = the 12 evaluation tasks, occupancy = the 50 trajectories reweighted by eq. 4), and (row 3)
the multi-task return after conditioning a copy of the pre-trained policy on one demonstration of that task.
Averaged over ``--seeds`` seeds. Expected (paper): lower criterion and larger return gain on the bottom half.

Run: ``amf bench criterion-map [--out DIR] [--seeds N] [--config FILE]``.
"""

from __future__ import annotations

import argparse
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from amf_ros._optional import has
from amf_ros.atomic import atomic_write_json
from amf_ros.bench.integrator import IntegratorSetup, evaluate
from amf_ros.bench.results import add_common_args, config_dict
from amf_ros.config_file import load_config
from amf_ros.envs.integrator import Integrator2D
from amf_ros.outputs import format_table, save_figure
from amf_ros.policies.gp import GPPolicy, GPScoreFn
from amf_ros.threads import limited_threads

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "config" / "bench" / "criterion_map.yaml"


@dataclass
class CriterionMapConfig(IntegratorSetup):
    """Defaults = config/bench/criterion_map.yaml (env and GP constants as in the integrator benchmark)."""

    seeds: int = 5
    rounds: int = 1  # unused (common flag)
    jobs: int | None = None  # unused
    pretrain_demos: int = 50
    num_candidates: int = 100
    num_eval_tasks: int = 12
    eval_episodes: int = 20
    form: str = "log_variance"

    def __post_init__(self) -> None:
        if self.seeds < 1 or self.pretrain_demos < 1 or self.num_candidates < 2:
            raise ValueError(f"seeds, pretrain_demos >= 1 and num_candidates >= 2 required, got {self}")


def run_seed(cfg: CriterionMapConfig, seed: int) -> dict:
    """One seed: pre-train angles, criterion per candidate (both forms), return before / after one demo each."""
    env, gp = cfg.env(), cfg.gp()
    rng = np.random.default_rng([seed, 0])
    pre_angles = rng.uniform(0.0, np.pi, size=cfg.pretrain_demos)
    policy = GPPolicy(gp, 2, 2, 2)
    trajs = []
    for a in pre_angles:
        d = env.demonstrate(a, rng)
        policy.add(d.states, d.goal, d.actions)
        trajs.append((d.states, d.actions, d.goal))
    cand = 2.0 * np.pi * np.arange(cfg.num_candidates) / cfg.num_candidates
    eval_angles = Integrator2D.evaluation_angles(cfg.num_eval_tasks)
    crit = {}
    for form in ("log_variance", "variance"):
        fn = GPScoreFn(policy, trajs, env.goals(eval_angles), None, form=form, normalize=cfg.normalize,
                       min_weight=cfg.min_weight, max_trajectories=cfg.max_trajectories)
        crit[form] = fn.scores_for_vectors(env.goals(cand))
    before, _ = evaluate(env, policy, eval_angles, cfg.eval_episodes, np.random.default_rng([seed, 2]))
    demo_rng = np.random.default_rng([seed, 3])
    after = []
    for a in cand:
        p = policy.copy()
        d = env.demonstrate(a, demo_rng)
        p.add(d.states, d.goal, d.actions)
        after.append(evaluate(env, p, eval_angles, cfg.eval_episodes, np.random.default_rng([seed, 2]))[0])
    return {"pretrain_angles": pre_angles.tolist(), "criterion": crit[cfg.form].tolist(),
            "criterion_log_variance": crit["log_variance"].tolist(), "criterion_variance": crit["variance"].tolist(),
            "return_before": before, "return_after": after}


def run(cfg: CriterionMapConfig, progress: bool = True) -> dict:
    """Average App. L's criterion and return-gain maps over ``cfg.seeds`` seeds; the results.json document."""
    from tqdm import tqdm

    t0 = time.perf_counter()
    # small matrices: one BLAS thread is much faster on a shared machine (when threadpoolctl can set it)
    with limited_threads(1, torch=False, blas=has("threadpoolctl")):
        runs = [run_seed(cfg, s) for s in tqdm(range(cfg.seeds), desc="criterion-map", disable=not progress)]
    angles = 2.0 * np.pi * np.arange(cfg.num_candidates) / cfg.num_candidates
    mean = lambda key: np.mean([r[key] for r in runs], axis=0)  # noqa: E731
    after, crit = mean("return_after"), mean("criterion")
    before = float(np.mean([r["return_before"] for r in runs]))
    bottom = angles >= np.pi
    summary = {
        "criterion_top": float(crit[~bottom].mean()), "criterion_bottom": float(crit[bottom].mean()),
        "gain_top": float(after[~bottom].mean() - before), "gain_bottom": float(after[bottom].mean() - before),
        "criterion_variance_top": float(mean("criterion_variance")[~bottom].mean()),
        "criterion_variance_bottom": float(mean("criterion_variance")[bottom].mean()),
        "return_criterion_spearman": _spearman(crit, after),
    }
    return {"benchmark": "criterion-map", "config": config_dict(cfg), "metric": "criterion and return after one demo",
            "wall_time_s": time.perf_counter() - t0,
            "task_angles": angles.tolist(), "criterion": crit.tolist(), "return_after": after.tolist(),
            "pretrain_angles": [a for r in runs for a in r["pretrain_angles"]],
            "criterion_log_variance": mean("criterion_log_variance").tolist(),
            "criterion_variance": mean("criterion_variance").tolist(),
            "return_before": before, "summary": summary,
            "per_seed": {k: [r[k] for r in runs] for k in ("criterion", "return_after", "return_before")}}


def _spearman(a: np.ndarray, b: np.ndarray) -> float:
    from scipy.stats import spearmanr

    return float(spearmanr(a, b).statistic)


def plot(res: dict, out: Path) -> Path:
    """Three rows like Fig. 14: pre-training task density, criterion, return after one demonstration."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ang = np.degrees(res["task_angles"])
    fig, ax = plt.subplots(3, 1, figsize=(6, 7), sharex=True)
    grid = np.linspace(0, 2 * np.pi, 361)
    pre = np.asarray(res["pretrain_angles"])
    d = np.abs(grid[:, None] - pre[None, :])
    d = np.minimum(d, 2 * np.pi - d)
    density = np.exp(-0.5 * (d / 0.2) ** 2).sum(axis=1) / (pre.size * 0.2 * np.sqrt(2 * np.pi))  # smoothed
    ax[0].fill_between(np.degrees(grid), density, alpha=0.5)
    ax[0].set_ylabel("pre-training\ntask density")
    ax[1].plot(ang, res["criterion"], color="C0")
    ax[1].set_ylabel(f"criterion\n({res['config']['form']}, lower = pick)")
    ax[2].plot(ang, res["return_after"], color="C2")
    ax[2].axhline(res["return_before"], color="k", ls="--", lw=1, label="before")
    ax[2].set_ylabel("return after\none demo")
    ax[2].set_xlabel("task angle (deg)")
    ax[2].legend(fontsize=8)
    for a in ax:
        a.grid(alpha=0.3)
    fig.tight_layout()
    path = save_figure(fig, out / "criterion_map.png")
    plt.close(fig)
    return path


def main(argv: Sequence[str]) -> int:
    """Command line of ``amf bench criterion-map``: run, write results.json and the plot, print the table."""
    parser = argparse.ArgumentParser(prog="amf bench criterion-map", description=__doc__.split("\n\n")[0])
    add_common_args(parser, out="results/criterion_map")
    args = parser.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = load_config(CriterionMapConfig, args.config or DEFAULT_CONFIG, seeds=args.seeds)
    res = run(cfg)
    out = Path(args.out)
    path = atomic_write_json(out / "results.json", res)
    s = res["summary"]
    print(format_table(["half", "criterion", "criterion (variance form)", "return gain"], [
        ["top (pre-trained)", s["criterion_top"], s["criterion_variance_top"], s["gain_top"]],
        ["bottom (not)", s["criterion_bottom"], s["criterion_variance_bottom"], s["gain_bottom"]]], floatfmt=".4f"))
    print(f"spearman(criterion, return after) = {s['return_criterion_spearman']:.3f}")
    plot(res, out)
    print(f"wall time {res['wall_time_s']:.1f} s; results in {path}")
    return 0
