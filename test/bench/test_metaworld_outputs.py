"""`amf bench metaworld` bookkeeping without training: allocations, configs, aggregation, plots, table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from amf_ros.bench.metaworld import METHODS, MetaworldBenchConfig, demo_scene, plot_all, summarize_runs, table
from amf_ros.bench.results import write_results
from amf_ros.config_file import load_config
from amf_ros.training.pretrain import PretrainConfig, allocation_counts


def test_allocation_counts_mismatched_and_uniform() -> None:
    tasks = ["a", "b", "c", "d"]
    assert allocation_counts(tasks, "mismatched", 16) == {"a": 8, "b": 8, "c": 0, "d": 0}
    assert allocation_counts(tasks, "uniform", 16) == {"a": 4, "b": 4, "c": 4, "d": 4}
    assert allocation_counts(tasks + ["e"], "mismatched", 10) == {"a": 4, "b": 3, "c": 3, "d": 0, "e": 0}
    assert sum(allocation_counts(tasks, "uniform", 15).values()) == 15
    with pytest.raises(ValueError, match="allocation"):
        allocation_counts(tasks, "skewed", 16)


def test_configs_refuse_bad_values(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="unknown methods"):
        MetaworldBenchConfig(methods=["amf", "oracle"])
    with pytest.raises(ValueError, match="rounds"):
        MetaworldBenchConfig(rounds=0)
    with pytest.raises(ValueError, match="selection_copy"):
        MetaworldBenchConfig(selection_copy="latest")
    with pytest.raises(ValueError, match="allocation"):
        PretrainConfig(allocation="half")
    bad = tmp_path / "c.yaml"
    bad.write_text("roundz: 3\n")
    with pytest.raises(ValueError, match="roundz"):
        load_config(MetaworldBenchConfig, bad)
    good = tmp_path / "g.yaml"
    good.write_text("rounds: 3\nmethods: [amf, uniform]\n")
    cfg = load_config(MetaworldBenchConfig, good, seeds=2)
    assert (cfg.rounds, cfg.methods, cfg.seeds) == (3, ["amf", "uniform"], 2)
    assert cfg.pretrain_config("uniform", 4).seed == 4


def test_demo_scenes_are_paired_across_methods_and_distinct_across_tasks() -> None:
    s1, r1 = demo_scene(3, 1, 0)
    s2, r2 = demo_scene(3, 1, 0)
    assert s1 == s2 and r1.normal() == r2.normal()
    assert len({demo_scene(3, t, k)[0] for t in range(4) for k in range(5)}) == 20


def _fake_raw(cfg: MetaworldBenchConfig) -> dict:
    """Synthetic job records: success grows with the demo count of each task."""
    rng = np.random.default_rng(0)
    pre, runs = [], []
    for alloc in cfg.allocations:
        pc = allocation_counts(cfg.tasks, alloc, cfg.pretrain_demos)
        for s in range(cfg.seeds):
            pre.append({"allocation": alloc, "seed": s, "counts": pc, "time_s": 1.0,
                        "success": {t: min(1.0, pc[t] / 8) for t in cfg.tasks}})
            for m in cfg.methods:
                counts = {t: 0 for t in cfg.tasks}
                rows = []
                for r in range(1, cfg.rounds + 1):
                    t = cfg.tasks[int(rng.integers(len(cfg.tasks)))]
                    counts[t] += 1
                    rows.append({"round": r, "selected": [t], "warm_start": False, "scores": {t: 0.0},
                                 "counts": dict(counts), "success": {k: min(1.0, (pc[k] + counts[k]) / 8)
                                                                     for k in cfg.tasks},
                                 "alpha": {k: 0.5 for k in cfg.tasks} if METHODS[m][1] else {}})
                runs.append({"allocation": alloc, "seed": s, "method": m, "rounds": rows, "time_s": 2.0})
    return {"pretrain": pre, "runs": runs}


def test_summary_follows_the_results_contract_and_plots(tmp_path: Path) -> None:
    cfg = MetaworldBenchConfig(seeds=3, rounds=4)
    settings = summarize_runs(cfg, _fake_raw(cfg))
    assert [s["name"] for s in settings] == ["mismatched", "uniform"]
    mis = settings[0]
    assert mis["pretrained_tasks"] == cfg.tasks[:2]
    for m in cfg.methods:
        entry = mis["methods"][m]
        assert entry["rounds"] == list(range(5)) and np.shape(entry["per_seed"]) == (3, 5)
        assert entry["mean"][0] == pytest.approx(0.5)  # two tasks at 8/8, two at 0/8
        assert all(lo <= mu + 1e-12 and mu <= hi + 1e-12
                   for lo, mu, hi in zip(entry["ci_low"], entry["mean"], entry["ci_high"], strict=True))
        assert sum(mis["demo_counts"][m][t]["mean"][-1] for t in cfg.tasks) == pytest.approx(4)
    assert set(mis["alpha"]) == {m for m in cfg.methods if METHODS[m][1]}
    results = {"benchmark": "metaworld", "config": {}, "metric": "success", "wall_time_s": 1.0, "settings": settings}
    path = write_results(tmp_path, results)
    assert json.loads(path.read_text())["settings"][1]["name"] == "uniform"
    pngs = plot_all(cfg, settings, tmp_path)
    assert {p.name for p in pngs} == {"fig3_success.png", "fig12_per_task_mismatched.png",
                                      "fig12_per_task_uniform.png", "fig11_alpha.png", "demos_to_reach.png",
                                      "demos_per_task.png"}
    for m in cfg.methods:  # 4 rounds of 1 demo each from 0.5: the threshold 0.9 is never reached
        reach = mis["demos_to_reach"][m]
        assert reach["reached"] == 0 and reach["mean_curve"] is None and reach["budget"] == 4
    assert all(p.stat().st_size > 10_000 for p in pngs)
    text = table(cfg, settings)
    assert "uniform+prior" in text and "mismatched" in text


def test_config_file_matches_the_code_defaults() -> None:
    import dataclasses

    path = Path(__file__).resolve().parents[2] / "config" / "bench" / "metaworld.yaml"
    assert dataclasses.asdict(load_config(MetaworldBenchConfig, path)) == dataclasses.asdict(MetaworldBenchConfig())
    for name in ("metaworld_smoke.yaml", "metaworld_paper.yaml", "metaworld_ablation_selection_copy.yaml",
                 "metaworld_peers.yaml", "metaworld_ablation_uncertainty.yaml", "metaworld_batch.yaml"):
        load_config(MetaworldBenchConfig, path.parent / name)  # valid keys and values


def test_demos_to_reach_counts_demonstrations_at_the_first_crossing() -> None:
    from amf_ros.bench.results import demos_to_reach

    success = np.array([[0.5, 0.8, 0.9, 0.85, 0.95],   # crosses at round 2 (10 demos), dips after: first crossing
                        [0.5, 0.6, 0.7, 0.8, 0.87]])   # never
    demos = np.array([[0, 5, 10, 15, 20]] * 2, dtype=float)
    r = demos_to_reach(success, demos, 0.9)
    assert r["per_seed"] == [10.0, None] and r["reached"] == 1 and r["budget"] == 20.0
    assert r["mean_curve"] == 20.0  # the mean curve (0.5, 0.7, 0.8, 0.825, 0.91) crosses at the last round
    with pytest.raises(ValueError, match="seeds, rounds"):
        demos_to_reach(success, demos[:, :3], 0.9)
