"""`amf run --robots N`: the AMF loop on a fleet of N simulated arms, one selector, one fine-tune per round.

Each round is Algorithm 1 with B = N, spread over the robots: every robot asks /fleet/next_task with its name at the
same instant (the selector conditions each request on the other robots' pending assignments, so concurrent requests
do not duplicate effort unless duplication is the most informative choice; ``--independent`` turns that off), resets
its own arm, records its demonstration with its own recorder into the shared store, all robots at once. Then the
fleet's trainer fine-tunes once on every robot's episodes and announces the checkpoint on /fleet/checkpoint; every
robot's policy_server adopts it; the evaluation scenes are split over the robots and run in parallel. The graph is
:func:`amf_ros.bringup.graph.fleet_plan`; design and measured numbers: docs/fleet.md.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from amf_ros.bringup import graph
from amf_ros.loop.nodes import DEMO_SEED_OFFSET, checked, node_overrides
from amf_ros.loop.report import evaluate

if TYPE_CHECKING:
    from amf_ros.ros.client import AMFClient

log = logging.getLogger("amf.run.fleet")


def _parallel(fns: Sequence[Any]) -> list[Any]:
    """Run the callables at the same time (one thread each); their results in order, the first error re-raised."""
    with ThreadPoolExecutor(max_workers=max(1, len(fns))) as pool:
        futures = [pool.submit(fn) for fn in fns]
        return [f.result() for f in futures]


def demonstrate(client: AMFClient, robot: str, r: int, k: int, seed: int, barrier: threading.Barrier | None) -> dict:
    """One robot's share of a round: ask (at the same instant as the others), reset, record, wait for the save."""
    if barrier is not None:
        barrier.wait(timeout=60.0)
    t0 = time.monotonic()
    d = client.next_task(robot=robot)
    client.reset(d.task, seed=DEMO_SEED_OFFSET + 100 * seed + 10 * r + k)
    ep = client.start_episode(d.task, d.instruction)
    info = client.wait_episode(ep.episode_id, timeout=300.0)
    return {"robot": robot, "task": d.task, "warm_start": bool(d.warm_start),
            "pending": [list(p) for p in zip(d.pending_robots, d.pending_tasks, strict=True)],
            "scores": dict(zip(d.tasks, map(float, d.scores), strict=True)),
            "demo_counts": dict(zip(d.tasks, map(int, d.demo_counts), strict=True)),
            "episode": {"id": info.episode_id, "steps": int(info.num_steps), "success": bool(info.success)},
            "demo_time_s": time.monotonic() - t0}


def evaluate_fleet(clients: dict[str, Any], tasks: Sequence[str], cfg: Any, max_steps: dict[str, int]) -> dict:
    """Every task's fixed evaluation scenes, split over the robots (task i -> robot i mod N), in parallel; the same
    scenes as `amf run` (EVAL_SEED_OFFSET + episode), so the numbers compare."""
    names = list(clients)
    share = {name: [t for i, t in enumerate(tasks) if names[i % len(names)] == name] for name in names}
    parts = _parallel([lambda n=n: evaluate(clients[n], share[n], cfg, max_steps) if share[n] else None
                       for n in names])
    out: dict[str, Any] = {"success": {}, "steps": {}, "failed_attempts": [], "by_robot": share}
    periods = []
    for part in parts:
        if part is None:
            continue
        out["success"].update(part["success"])
        out["steps"].update(part["steps"])
        out["failed_attempts"] += part["failed_attempts"]
        if np.isfinite(part["mean_period_s"]):
            periods.append(part["mean_period_s"])
    out["success"] = {t: out["success"][t] for t in tasks}
    out["mean_period_s"] = float(np.mean(periods)) if periods else float("nan")
    return out


def wait_adopted(clients: dict[str, Any], round_: int, timeout: float = 120.0) -> None:
    """Every robot's policy_server acts with ``round_`` (its re-announcement on /<robot>/checkpoint)."""
    for name, c in clients.items():
        c.wait_for(lambda c=c: any(int(m.round) >= round_ for m in c.seen.checkpoints), timeout,
                   f"{name}'s policy_server to adopt round {round_}")


def print_fleet_round(row: dict, tasks: Sequence[str]) -> None:
    """Print one round of the fleet loop as it ends: who demonstrated what, conditioned on what, and the success."""
    from amf_ros.outputs import format_table

    ev = row["evaluation"]["success"]
    if row["round"] == 0:
        print(f"\nround 0: pre-trained policy, mean success {np.nanmean(list(ev.values())):.3f}", flush=True)
        return
    demo_rows = [[d["robot"], d["task"] + (" (warm start)" if d["warm_start"] else ""),
                  ", ".join(f"{r}:{t}" for r, t in d["pending"]) or "-", d["episode"]["steps"],
                  f"{d['demo_time_s']:.1f}"] for d in row["demos"]]
    print(f"\nround {row['round']}: {len(row['demos'])} demonstrations in {row['demo_phase_s']:.1f} s, fine-tune "
          f"{row['fine_tune_s']:.1f} s (loss {row['fine_tune']['final_loss']:.4f}), round {row['round_time_s']:.0f} s\n"
          + format_table(["robot", "task", "conditioned on", "steps", "demo s"], demo_rows)
          + "\n" + "  ".join(f"{t} {ev[t]:.2f}" for t in tasks)
          + f"  | mean success {np.nanmean(list(ev.values())):.3f}", flush=True)


def run_fleet(cfg: Any, checkpoint: Path, run_dir: Path, instructions: dict[str, str], max_steps: dict[str, int],
              env: dict[str, str], results: dict) -> dict:
    """The fleet loop (module docstring); fills and returns ``results``."""
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.ros.client import AMFClient, rclpy_session

    names = graph.robot_names(cfg.robots)
    specs = graph.fleet_plan(cfg.robots, arm=cfg.arm, config=cfg.config, checkpoint=str(checkpoint.resolve()),
                             independent=cfg.independent)
    tasks = list(instructions)
    results["robots"] = names
    clients: dict[str, Any] = {}
    extra = node_overrides(run_dir, cfg, tasks=tasks)  # the candidates it evaluates
    for k, name in enumerate(names, start=1):  # each arm its own scenes and noise (after the run's seed: wins)
        for node in ("sim_bridge", "scripted_teleop"):
            extra[f"{name}.{node}"] = ["-p", f"seed:={cfg.seed * 100 + k}"]
    with rclpy_session(), NodeProcesses(specs, log_dir=run_dir / "logs", env=env, extra_args=extra) as procs:
        try:
            for name in names:
                clients[name] = AMFClient(f"amf_run_{name}", namespace=name,
                                          next_task_service=f"/{graph.FLEET_NAMESPACE}/next_task")
            fleet = AMFClient("amf_run_fleet", namespace=graph.FLEET_NAMESPACE)
            checked(procs, lambda: [c.wait_ready(timeout=cfg.startup_timeout_s) for c in clients.values()],
                    "bring-up of the robots")
            checked(procs, lambda: fleet.wait_ready(timeout=cfg.startup_timeout_s, sim=False, recorder=False),
                    "bring-up of the fleet's selector and trainer")
            row = {"round": 0, "evaluation": checked(procs, lambda: evaluate_fleet(clients, tasks, cfg, max_steps),
                                                    "evaluation of the pre-trained policy")}
            results["rounds"].append(row)
            print_fleet_round(row, tasks)
            for r in range(1, cfg.rounds + 1):
                t0 = time.monotonic()
                barrier = threading.Barrier(len(names))
                demos = checked(procs, lambda r=r, b=barrier: _parallel([
                    lambda n=n, k=k: demonstrate(clients[n], n, r, k, cfg.seed, b)
                    for k, n in enumerate(names)]), f"demonstrations of round {r}")
                t1 = time.monotonic()
                ft = fleet.fine_tune(steps=cfg.fine_tune_steps, timeout=1800.0)
                if not ft.ok:
                    raise RuntimeError(f"fine_tune failed: {ft.message}")
                t2 = time.monotonic()
                checked(procs, lambda r=r: wait_adopted(clients, r), f"checkpoint of round {r}")
                row = {"round": r, "demos": demos, "demo_phase_s": t1 - t0, "fine_tune_s": t2 - t1,
                       "fine_tune": {"checkpoint": ft.checkpoint, "final_loss": float(ft.final_loss),
                                     "alphas": dict(zip(ft.tasks, map(float, ft.alphas), strict=True))}}
                row["evaluation"] = checked(procs, lambda: evaluate_fleet(clients, tasks, cfg, max_steps),
                                            f"evaluation of round {r}")
                row["round_time_s"] = time.monotonic() - t0
                results["rounds"].append(row)
                print_fleet_round(row, tasks)
        finally:
            for c in clients.values():
                c.close()
            if "fleet" in locals():
                fleet.close()
    return results


def fleet_summary(results: dict) -> dict:
    """Throughput and data efficiency of a fleet run: demonstrations per minute of the demonstration phases and of
    the whole loop, success after each round and per demonstration."""
    rounds = results["rounds"][1:]
    demos = sum(len(r["demos"]) for r in rounds)
    demo_s = sum(r["demo_phase_s"] for r in rounds)
    loop_s = sum(r["round_time_s"] for r in rounds)
    mean = [float(np.nanmean(list(r["evaluation"]["success"].values()))) for r in results["rounds"]]
    per_robot = {name: [d["task"] for r in rounds for d in r["demos"] if d["robot"] == name]
                 for name in results.get("robots", [])}
    duplicates = sum(len(r["demos"]) - len({d["task"] for d in r["demos"]}) for r in rounds)
    return {"demonstrations": demos, "demos_per_min_demo_phase": 60.0 * demos / demo_s if demo_s else float("nan"),
            "demos_per_min_loop": 60.0 * demos / loop_s if loop_s else float("nan"),
            "mean_success": mean, "demos_after_round": [sum(len(r["demos"]) for r in rounds[:i])
                                                        for i in range(len(rounds) + 1)],
            "tasks_per_robot": per_robot, "same_task_twice_in_a_round": duplicates}


def write_fleet_outputs(results: dict, run_dir: Path) -> None:
    """results.json (with :func:`fleet_summary`) and amf_run.png: mean success per round and per demonstration,
    and which robot demonstrated which task."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from amf_ros.atomic import atomic_write_json
    from amf_ros.outputs import save_figure

    results["summary"] = fleet_summary(results)
    atomic_write_json(run_dir / "results.json", results)
    tasks, summary = results["tasks"], results["summary"]
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    ax1.plot(summary["demos_after_round"], summary["mean_success"], marker="o", color="k")
    ax1.set_xlabel("demonstrations (all robots)")
    ax1.set_ylabel("mean success")
    mode = "independent" if results["config"].get("independent") else "joint"
    ax1.set_title(f"amf run --robots {len(results['robots'])} ({mode} selection)")
    ax1.grid(alpha=0.3)
    width = 0.8 / max(1, len(results["robots"]))
    for j, robot in enumerate(results["robots"]):
        chosen = summary["tasks_per_robot"][robot]
        ax2.bar(np.arange(len(tasks)) + j * width, [chosen.count(t) for t in tasks], width, label=robot)
    ax2.set_xticks(np.arange(len(tasks)) + 0.4 - width / 2, tasks, rotation=30, ha="right")
    ax2.set_ylabel("demonstrations")
    ax2.set_title("tasks demonstrated per robot")
    ax2.legend(fontsize=8)
    save_figure(fig, run_dir / "amf_run.png")
    plt.close(fig)
