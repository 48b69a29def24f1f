"""`amf bench compare`: several `amf bench metaworld|widowx` results on one axis of demonstrations.

Why: runs with different batch sizes B (1 demonstration per round vs 5), with and without replay, or on another task
set are separate results.json files whose rounds mean different things; what a user compares is success against the
number of demonstrations collected, and the demonstrations needed to reach a success rate (SAVE's and the AMF
paper's headline form). Every curve is one (results file, pre-training allocation, method).

Run: ``amf bench compare A/results.json B/results.json [--labels a b] [--methods amf] [--out DIR]``; writes
compare.json, success_vs_demos.png and demos_to_reach.png, and prints a table. Curves run on the same seeds as the
first curve are also compared with it seed by seed: the paired difference (paired_difference.png and a second table),
whose CI is much narrower than the two curves' overlapping ones when the seeds share their pre-training and scenes,
as every method of a run does.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from amf_ros.bench.results import bootstrap_ci, demos_to_reach, reach_text
from amf_ros.outputs import format_table, save_figure


def curves(doc: dict[str, Any], label: str, methods: Sequence[str] | None = None,
           threshold: float | None = None) -> list[dict[str, Any]]:
    """One entry per (allocation, method) of a metaworld/widowx results document: success per seed and round, the
    demonstrations collected by each round, and the demonstrations to reach ``threshold`` (default: the run's)."""
    cfg = doc.get("config", {})
    thr = float(threshold if threshold is not None else cfg.get("success_threshold", 0.9))
    out = []
    for st in doc["settings"]:
        for m, entry in st["methods"].items():
            if methods and m not in methods:
                continue
            success = np.asarray(entry["per_seed"], dtype=float)  # (S, R+1)
            demos = np.sum([np.asarray(c["per_seed"], dtype=float) for c in st["demo_counts"][m].values()], axis=0)
            out.append({"label": label, "setting": st["name"], "method": m, "tasks": cfg.get("tasks"),
                        "seeds": seed_list(cfg, len(success)),
                        "demos_per_round": cfg.get("demos_per_round", 1),
                        "replay_fraction": cfg.get("replay_fraction", 0.0),
                        "demos": demos.mean(0).tolist(), "success_per_seed": success.tolist(),
                        "mean": entry["mean"], "ci_low": entry["ci_low"], "ci_high": entry["ci_high"],
                        "demos_to_reach": demos_to_reach(success, demos, thr)})
    return out


def seed_list(cfg: dict[str, Any], count: int) -> list[int] | None:
    """The seeds of a run's per-seed rows, in order (a merged run's ``seed_list``, else first_seed ..); None when the
    config does not say (then the run is paired with nothing)."""
    if "seed_list" in cfg:
        seeds = [int(s) for s in cfg["seed_list"]]
    elif "first_seed" in cfg and "seeds" in cfg:
        seeds = list(range(int(cfg["first_seed"]), int(cfg["first_seed"]) + int(cfg["seeds"])))
    else:
        return None
    return seeds if len(seeds) == count else None


def paired(base: dict[str, Any], other: dict[str, Any], xs: Sequence[float]) -> dict[str, Any] | None:
    """``other`` minus ``base`` seed by seed at each demonstration count of ``xs``: mean difference, its 90%
    bootstrap CI over seeds, and how many seeds went up / stayed level / went down. None unless both ran the same
    seeds."""
    if base["seeds"] is None or base["seeds"] != other["seeds"]:
        return None
    out = {}
    for x in xs:
        cols = [round_at(c, x) for c in (base, other)]
        if None in cols:
            continue
        diff = (np.asarray(other["success_per_seed"])[:, cols[1]]
                - np.asarray(base["success_per_seed"])[:, cols[0]])
        mean, lo, hi = bootstrap_ci(diff[:, None])
        out[str(x)] = {"mean": float(mean[0]), "ci_low": float(lo[0]), "ci_high": float(hi[0]),
                       "up": int(np.sum(diff > 1e-9)), "level": int(np.sum(np.abs(diff) <= 1e-9)),
                       "down": int(np.sum(diff < -1e-9))}
    return {"base": name_of(base), "seeds": base["seeds"], "at": out}


def round_at(curve: dict[str, Any], n: float) -> int | None:
    """The first round of a curve with exactly ``n`` demonstrations (seed mean), None if it has none."""
    return next((i for i, d in enumerate(curve["demos"]) if abs(d - n) < 1e-9), None)


def at_demos(curve: dict[str, Any], n: float) -> tuple[float, float, float] | None:
    """(mean, ci_low, ci_high) of a curve's success at exactly ``n`` demonstrations, None if it has no such round."""
    i = round_at(curve, n)
    if i is None:
        return None
    per_seed = np.asarray(curve["success_per_seed"])[:, i]
    mean, lo, hi = bootstrap_ci(per_seed[:, None])
    return float(mean[0]), float(lo[0]), float(hi[0])


def shared_demos(entries: Sequence[dict[str, Any]]) -> list[float]:
    """Demonstration counts (> 0) at which every curve has a round: where "equal total demonstrations" holds."""
    common = None
    for e in entries:
        xs = {round(d, 9) for d in e["demos"] if d > 0}
        common = xs if common is None else common & xs
    return sorted(common or [])


def compare(paths: Sequence[str | Path], labels: Sequence[str] | None = None, methods: Sequence[str] | None = None,
            threshold: float | None = None) -> dict[str, Any]:
    """The comparison document of several results.json files (see the module docstring)."""
    if labels is not None and len(labels) != len(paths):
        raise ValueError(f"{len(labels)} labels for {len(paths)} results files")
    entries: list[dict[str, Any]] = []
    for i, p in enumerate(paths):
        path = Path(p)
        try:
            doc = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"cannot read results file {str(path)!r}: {exc}") from exc
        if "settings" not in doc:
            raise ValueError(f"{path} is not a metaworld/widowx results.json (no 'settings')")
        entries += curves(doc, labels[i] if labels else path.parent.name, methods, threshold)
    if not entries:
        raise ValueError(f"no curve matched methods {list(methods or [])} in {[str(p) for p in paths]}")
    xs = shared_demos(entries)
    pairs = [(name_of(e), paired(entries[0], e, xs)) for e in entries[1:]]
    return {"benchmark": "compare", "inputs": [str(p) for p in paths], "shared_demos": xs,
            "paired_vs_first": {name: p for name, p in pairs if p is not None},
            "threshold": entries[0]["demos_to_reach"]["threshold"],
            "curves": entries, "at_shared_demos": [{"label": e["label"], "setting": e["setting"],
                                                    "method": e["method"],
                                                    "success": {str(x): at_demos(e, x) for x in xs}}
                                                   for e in entries]}


def name_of(e: dict[str, Any]) -> str:
    """A curve's unique name in tables and plots: label/setting/method."""
    return f"{e['label']}/{e['setting']}/{e['method']}"


def table(doc: dict[str, Any], max_columns: int = 5) -> str:
    """Per curve: B, replay, final demos and success (90% CI), success at shared demo counts, demos to reach."""
    xs = doc["shared_demos"][-max_columns:]
    rows = []
    for e, at in zip(doc["curves"], doc["at_shared_demos"], strict=True):
        cells = [f"{v[0]:.3f}" if (v := at["success"][str(x)]) else "-" for x in xs]
        rows.append([name_of(e), e["demos_per_round"], e["replay_fraction"], f"{e['demos'][-1]:.0f}",
                     f"{e['mean'][-1]:.3f} [{e['ci_low'][-1]:.2f}, {e['ci_high'][-1]:.2f}]", *cells,
                     reach_text(e["demos_to_reach"])])
    return format_table(["curve", "B", "replay", "demos", "final success [90% CI]",
                         *[f"@{x:g} demos" for x in xs], f"demos to {doc['threshold']:g}"], rows)


def paired_table(doc: dict[str, Any], max_columns: int = 5) -> str:
    """Per curve run on the first curve's seeds: its paired difference from it at the shared demo counts ("" when
    no curve is)."""
    pairs = doc.get("paired_vs_first", {})
    if not pairs:
        return ""
    xs = doc["shared_demos"][-max_columns:]
    rows = []
    for name, p in pairs.items():
        cells = [f"{v['mean']:+.3f} [{v['ci_low']:+.2f}, {v['ci_high']:+.2f}] {v['up']}/{v['level']}/{v['down']}"
                 if (v := p["at"].get(str(x))) else "-" for x in xs]
        rows.append([name, len(p["seeds"]), *cells])
    base = next(iter(pairs.values()))["base"]
    return format_table([f"minus {base}, paired", "seeds", *[f"@{x:g} (up/level/down)" for x in xs]], rows)


def plot(doc: dict[str, Any], out: Path) -> list[Path]:
    """success_vs_demos.png (mean and 90% CI per curve), demos_to_reach.png (bars + seeds) and, where curves are
    paired with the first, paired_difference.png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    # one colour per curve (tab20: grids of 10+ rules), one line style per input label
    colours = [plt.get_cmap("tab20")(i % 20) for i in range(len(doc["curves"]))]
    labels = list(dict.fromkeys(e["label"] for e in doc["curves"]))
    styles = ["-", "--", ":", "-."]
    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for e, colour in zip(doc["curves"], colours, strict=True):
        ax.plot(e["demos"], e["mean"], marker="o", ms=3, label=name_of(e), color=colour,
                ls=styles[labels.index(e["label"]) % len(styles)])
        ax.fill_between(e["demos"], e["ci_low"], e["ci_high"], alpha=0.10, color=colour)
    ax.axhline(doc["threshold"], color="grey", lw=0.8, ls="--")
    ax.set_xlabel("fine-tuning demonstrations")
    ax.set_ylabel("success rate (all tasks)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    paths = [save_figure(fig, out / "success_vs_demos.png")]
    plt.close(fig)

    fig, ax = plt.subplots(figsize=(max(4.0, 0.8 * len(doc["curves"])), 3.6))
    for i, e in enumerate(doc["curves"]):
        r = e["demos_to_reach"]
        ax.bar(i, r["mean_curve"] if r["mean_curve"] is not None else r["budget"], color=colours[i], alpha=0.5,
               hatch=None if r["mean_curve"] is not None else "//")
        jitter = np.linspace(-0.2, 0.2, max(2, len(r["per_seed"])))[:len(r["per_seed"])]
        for dx, v in zip(jitter, r["per_seed"], strict=True):
            ax.plot(i + dx, r["budget"] if v is None else v, "o", color=colours[i], ms=4,
                    mfc="none" if v is None else colours[i])
    ax.set_xticks(range(len(doc["curves"])), [name_of(e) for e in doc["curves"]], rotation=30, ha="right",
                  fontsize=7)
    ax.set_ylabel(f"demonstrations to success {doc['threshold']:g}")
    ax.set_title("hatched / hollow: not reached within the budget", fontsize=8)
    ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    paths.append(save_figure(fig, out / "demos_to_reach.png"))
    plt.close(fig)
    if doc.get("paired_vs_first"):
        paths.append(_plot_paired(doc, out, colours[1:], plt))
    return paths


def _plot_paired(doc: dict[str, Any], out: Path, colours: list[Any], plt: Any) -> Path:
    """paired_difference.png: each paired curve minus the first, seed by seed, with its 90% CI, per demo count."""
    names = [name_of(e) for e in doc["curves"][1:]]
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    for k, (name, p) in enumerate(doc["paired_vs_first"].items()):
        xs = sorted(float(x) for x in p["at"])
        v = [p["at"][str(x)] for x in xs]
        colour = colours[names.index(name)] if name in names else None
        shift = 0.15 * (k - (len(doc["paired_vs_first"]) - 1) / 2)  # side by side where curves share a count
        ax.errorbar(np.array(xs) + shift, [d["mean"] for d in v],
                    yerr=[[d["mean"] - d["ci_low"] for d in v], [d["ci_high"] - d["mean"] for d in v]],
                    marker="o", ms=4, capsize=3, color=colour, label=f"{name} ({len(p['seeds'])} seeds)")
    ax.axhline(0.0, color="grey", lw=0.8)
    ax.set_xlabel("fine-tuning demonstrations")
    ax.set_ylabel(f"success minus {next(iter(doc['paired_vs_first'].values()))['base']}", fontsize=8)
    ax.set_title("paired by seed, 90% bootstrap CI", fontsize=8)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    path = save_figure(fig, out / "paired_difference.png")
    plt.close(fig)
    return path


def main(argv: Sequence[str]) -> int:
    """Command line of ``amf bench compare``: write compare.json and its plots, print the table."""
    from amf_ros.atomic import atomic_write_json

    parser = argparse.ArgumentParser(prog="amf bench compare", description=__doc__.split("\n\n")[0])
    parser.add_argument("results", nargs="+", help="results.json files of amf bench metaworld / widowx")
    parser.add_argument("--labels", nargs="+", default=None, help="one label per file (default: its folder name)")
    parser.add_argument("--methods", nargs="+", default=None, help="only these methods")
    parser.add_argument("--threshold", type=float, default=None, help="success rate to reach (default: the run's)")
    parser.add_argument("--out", default="results/compare", help="output folder")
    args = parser.parse_args(list(argv))
    try:
        doc = compare(args.results, args.labels, args.methods, args.threshold)
    except ValueError as exc:
        parser.error(str(exc))
    out = Path(args.out)
    path = atomic_write_json(out / "compare.json", doc)
    plots = plot(doc, out)
    print(table(doc))
    if pairs := paired_table(doc):
        print(pairs)
    print(f"wrote {path}, {', '.join(p.name for p in plots)}")
    return 0
