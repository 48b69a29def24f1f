"""Evaluation through /amf/run_policy and the per-round table, results.json and plot of `amf run`."""

from __future__ import annotations

import logging
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping, Sequence

import numpy as np

from amf_ros.atomic import atomic_write_json
from amf_ros.loop.nodes import EVAL_SEED_OFFSET
from amf_ros.outputs import format_table, save_figure

if TYPE_CHECKING:
    from amf_ros.ros.client import AMFClient

log = logging.getLogger("amf.run")


def evaluate(client: AMFClient, tasks: Sequence[str], cfg: Any, max_steps: Mapping[str, int] | None = None,
             retries: int = 1) -> dict:
    """Success rate per task: reset the sim to fixed evaluation scenes and run the policy through run_policy.

    A run_policy that fails (ok=false: e.g. no observation within the timeout on a starved machine) is retried on
    the same scene up to ``retries`` times, with a warning; the failures are recorded, not hidden.

    Returns ``{"success": {task: rate}, "steps": {task: mean steps}, "mean_period_s": float,
    "failed_attempts": [{"task", "episode", "message"}]}``.
    """
    success, steps, periods, failures = {}, {}, [], []
    for task in tasks:
        wins, n_steps = [], []
        for e in range(cfg.eval_episodes):
            limit = cfg.eval_max_steps or int((max_steps or {}).get(task, 0))
            for attempt in range(retries + 1):
                client.reset(task, seed=EVAL_SEED_OFFSET + e)
                res = client.run_policy(task, max_steps=limit, timeout=600.0)
                if res.ok:
                    break
                failures.append({"task": task, "episode": e, "message": str(res.message)})
                if attempt == retries:
                    raise RuntimeError(f"run_policy {task} failed {retries + 1} times: {res.message}")
                log.warning("run_policy %s failed (%s); retrying the same scene", task, res.message)
            wins.append(bool(res.success))
            n_steps.append(int(res.steps))
            if res.mean_period_s > 0:
                periods.append(float(res.mean_period_s))
        success[task] = float(np.mean(wins)) if wins else float("nan")
        steps[task] = float(np.mean(n_steps)) if n_steps else float("nan")
    return {"success": success, "steps": steps, "failed_attempts": failures,
            "mean_period_s": float(np.mean(periods)) if periods else float("nan")}


def split_success(success: Mapping[str, float], pretrain_counts: Mapping[str, int] | None) -> dict[str, float]:
    """Mean success over the tasks pre-training covered and over the others ("pretrained", "new"); {} when the
    checkpoint says nothing about its pre-training (a checkpoint not made by `amf pretrain`)."""
    if not pretrain_counts:
        return {}
    out = {}
    for name, keep in (("pretrained", True), ("new", False)):
        vals = [v for t, v in success.items() if (pretrain_counts.get(t, 0) > 0) == keep and np.isfinite(v)]
        out[name] = float(np.mean(vals)) if vals else float("nan")
    return out


def print_round(row: Mapping[str, Any], tasks: Sequence[str],
                pretrain_counts: Mapping[str, int] | None = None) -> None:
    """One table per round: per task the score, pre-training and fine-tuning demo counts and success; then the
    round's summary line (with the pre-trained / new tasks' means when the pre-training counts are known)."""
    ev = row["evaluation"]["success"]
    scores, counts = row.get("scores", {}), row.get("demo_counts", {})
    pre = pretrain_counts or {}
    rows = [[("-> " if t == row.get("task") else "   ") + t, scores.get(t, float("nan")), pre.get(t, ""),
             counts.get(t, ""), ev.get(t, float("nan"))] for t in tasks]
    split = split_success(ev, pretrain_counts)
    tail = (f" (pre-trained tasks {split['pretrained']:.3f}, new tasks {split['new']:.3f})" if split else "")
    head = (f"round {row['round']}: pre-trained policy" if row["round"] == 0 else
            f"round {row['round']}: demonstrate '{row['task']}'"
            f"{' (warm start)' if row.get('warm_start') else ''}, episode {row['episode']['steps']} steps, "
            f"fine-tune loss {row['fine_tune']['final_loss']:.4f}, round {row['round_time_s']:.0f} s")
    print(f"\n{head}\n" + format_table(["task", "score", "pre-training demos", "demos before", "success"], rows)
          + f"\nmean success {np.nanmean(list(ev.values())):.3f}{tail}", flush=True)


def nan_to_null(obj: Any) -> Any:
    """A copy of JSON-able ``obj`` with NaN/inf floats as None: "not evaluated" (``--eval-episodes 0``) is null in
    results.json (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if np.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: nan_to_null(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [nan_to_null(v) for v in obj]
    return obj


def write_outputs(results: dict, run_dir: Path) -> None:
    """results.json, a summary table file and the plot (success per task and mean vs round; demo counts)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = results["tasks"]
    rounds = [r["round"] for r in results["rounds"]]
    succ = np.array([[r["evaluation"]["success"][t] for t in tasks] for r in results["rounds"]])  # (R, T)
    with np.errstate(all="ignore"), warnings.catch_warnings():  # --eval-episodes 0: nothing evaluated, all NaN
        warnings.simplefilter("ignore", RuntimeWarning)
        mean = np.nanmean(succ, axis=1)
    results["summary"] = {"mean_success": mean.tolist(),
                          "final_success": dict(zip(tasks, succ[-1].tolist(), strict=True)),
                          "chosen": [r["task"] for r in results["rounds"][1:]]}
    split = [split_success(r["evaluation"]["success"], results.get("pretrain_counts")) for r in results["rounds"]]
    if split and split[0]:
        results["summary"].update({f"{k}_tasks_success": [s[k] for s in split] for k in ("pretrained", "new")})
    atomic_write_json(run_dir / "results.json", nan_to_null(results))
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for j, t in enumerate(tasks):
        ax1.plot(rounds, succ[:, j], marker="o", alpha=0.5, label=t)
    ax1.plot(rounds, mean, color="k", linewidth=2.5, label="mean")
    ax1.set_xlabel("round")
    ax1.set_ylabel(f"success ({results['config']['eval_episodes']} eval episode(s) per task)")
    trunk = results["config"].get("trunk", "state")
    ax1.set_title(f"amf run: selector {results['config']['selector']}"
                  + ("" if trunk == "state" else f", trunk {trunk}"))
    ax1.legend(fontsize=7)
    ax1.grid(alpha=0.3)
    counts = {t: sum(1 for r in results["rounds"][1:] if r["task"] == t) for t in tasks}
    ax2.bar(range(len(tasks)), [counts[t] for t in tasks])
    ax2.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right")
    ax2.set_ylabel("demonstrations requested")
    ax2.set_title("tasks chosen by /amf/next_task")
    save_figure(fig, run_dir / "amf_run.png")
    plt.close(fig)
