"""`amf bench fleet`: what a second robot buys (issue 17), measured with `amf run --robots N` on the embedded WidowX.

Per seed, side by side in one run (the same pre-trained policy, scenes and machine load): one robot, two robots with
joint selection (each request conditioned on the other robot's pending assignment: Algorithm 1 with B = 2 spread
over the fleet), and two robots with independent per-robot selection. Reported: demonstrations per wall-clock minute
(of the demonstration phases and of the whole loop, fine-tune and evaluation included) and the ratio two robots /
one; mean success after each round against the number of demonstrations, with 90% bootstrap CIs over seeds; how
often both robots demonstrated the same task in a round. Outputs: results.json, a table, fleet.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from pathlib import Path
from typing import Sequence

import numpy as np

from amf_ros.bench.results import bootstrap_ci, write_results
from amf_ros.outputs import format_table, save_figure
from amf_ros.policies.fine_tuning import FINE_TUNE

log = logging.getLogger("amf.bench.fleet")

SETTINGS = {"1 robot": {"robots": 1, "independent": False},
            "2 robots, joint": {"robots": 2, "independent": False},
            "2 robots, independent": {"robots": 2, "independent": True}}


@dataclasses.dataclass
class FleetBenchConfig:
    """Budget of `amf bench fleet` (defaults = the numbers in docs/fleet.md)."""

    arm: str = "widowx"
    seeds: int = 3
    rounds: int = 5
    """Rounds per run: 1 robot -> 5 demonstrations, 2 robots -> 10."""
    eval_episodes: int = 2
    eval_max_steps: int = 40
    """Step limit of an evaluation episode (the scripted expert needs ~17 steps; the task's limit is 60)."""
    fine_tune_steps: int = FINE_TUNE.steps
    settings: tuple[str, ...] = tuple(SETTINGS)


def run(cfg: FleetBenchConfig, out: Path) -> dict:
    """Run ``amf run`` once per seed and setting (interleaved), write results.json and fleet.png."""
    from amf_ros.loop.run import LoopConfig, run_loop

    t0 = time.monotonic()
    runs: dict[str, list[dict]] = {name: [] for name in cfg.settings}
    for seed in range(cfg.seeds):
        for name in cfg.settings:  # interleaved: every setting sees the same machine conditions
            loop = LoopConfig(rounds=cfg.rounds, arm=cfg.arm, eval_episodes=cfg.eval_episodes, seed=seed,
                              eval_max_steps=cfg.eval_max_steps,
                              fine_tune_steps=cfg.fine_tune_steps, out=str(out / "runs"), **SETTINGS[name])
            log.info("seed %d: %s", seed, name)
            res = run_loop(loop)
            runs[name].append({"seed": seed, "run_dir": res["run_dir"], "wall_time_s": res["wall_time_s"],
                               **res["summary"]})
    results = {"benchmark": "fleet", "config": dataclasses.asdict(cfg), "metric": "success",
               "wall_time_s": time.monotonic() - t0, "settings": summarize(runs), "runs": runs}
    write_results(out, results)
    plot(results, out / "fleet.png")
    return results


def summarize(runs: dict[str, list[dict]]) -> dict[str, dict]:
    """Per setting: mean success per round with its 90% CI and the throughput, averaged over seeds."""
    out = {}
    for name, per_seed in runs.items():
        succ = np.array([r["mean_success"] for r in per_seed])  # (seeds, rounds + 1)
        _, low, high = bootstrap_ci(succ)
        out[name] = {"demos_after_round": per_seed[0]["demos_after_round"], "mean_success": succ.mean(0).tolist(),
                     "ci_low": np.asarray(low).tolist(), "ci_high": np.asarray(high).tolist(),
                     "demos_per_min_demo_phase": float(np.mean([r["demos_per_min_demo_phase"] for r in per_seed])),
                     "demos_per_min_loop": float(np.mean([r["demos_per_min_loop"] for r in per_seed])),
                     "same_task_twice_in_a_round": int(sum(r["same_task_twice_in_a_round"] for r in per_seed)),
                     "wall_time_s": float(np.mean([r["wall_time_s"] for r in per_seed]))}
    return out


def table(results: dict) -> str:
    """The results table: throughput against one robot and final success per setting."""
    s = results["settings"]
    one = s.get("1 robot", {})
    rows = []
    for name, m in s.items():
        k = len(m["mean_success"]) - 1
        ratio = m["demos_per_min_loop"] / one["demos_per_min_loop"] if one else float("nan")
        rows.append([name, m["demos_after_round"][-1], f"{m['demos_per_min_demo_phase']:.1f}",
                     f"{m['demos_per_min_loop']:.2f}", f"{ratio:.2f}",
                     f"{m['mean_success'][k]:.3f} [{m['ci_low'][k]:.2f}, {m['ci_high'][k]:.2f}]",
                     m["same_task_twice_in_a_round"], f"{m['wall_time_s']:.0f}"])
    return format_table(["setting", "demos", "demos/min (demo phase)", "demos/min (loop)", "loop ratio vs 1 robot",
                         "final mean success [90% CI]", "same task twice", "wall s"], rows)


def plot(results: dict, path: Path) -> None:
    """Mean success (90% CI band) against demonstrations, one curve per setting."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 4))
    for name, m in results["settings"].items():
        x = m["demos_after_round"]
        ax.plot(x, m["mean_success"], marker="o", label=name)
        ax.fill_between(x, m["ci_low"], m["ci_high"], alpha=0.15)
    ax.set_xlabel("demonstrations (all robots)")
    ax.set_ylabel("mean success (90% CI over seeds)")
    ax.set_title(f"amf bench fleet: {results['config']['arm']}, {results['config']['seeds']} seeds")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    save_figure(fig, path)
    plt.close(fig)


def main(argv: Sequence[str]) -> int:
    """Command line of ``amf bench fleet``: run the settings, print the table."""
    p = argparse.ArgumentParser(prog="amf bench fleet", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="docs/results/fleet")
    p.add_argument("--seeds", type=int, default=None)
    p.add_argument("--rounds", type=int, default=None)
    p.add_argument("--eval-episodes", type=int, default=None)
    p.add_argument("--settings", nargs="+", choices=list(SETTINGS), default=None)
    args = p.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="[amf bench fleet] %(message)s")
    over = {k: v for k, v in {"seeds": args.seeds, "rounds": args.rounds, "eval_episodes": args.eval_episodes,
                              "settings": tuple(args.settings) if args.settings else None}.items() if v is not None}
    cfg = FleetBenchConfig(**over)
    results = run(cfg, Path(args.out))
    print("\n" + table(results) + f"\n\nwall time {results['wall_time_s']:.0f} s; {args.out}/results.json, fleet.png")
    return 0
