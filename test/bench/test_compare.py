"""`amf bench compare`: results of different batch sizes on one axis of demonstrations (no training)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from amf_ros.bench import compare
from amf_ros.bench.metaworld import MetaworldBenchConfig, summarize_runs
from amf_ros.bench.results import write_results
from amf_ros.training.pretrain import allocation_counts


def _results(tmp: Path, name: str, b: int, rounds: int, seeds: int = 3, gain: float = 0.05,
             first_seed: int = 0) -> Path:
    """A results.json whose success is 0.5 + gain x (fine-tuning demonstrations) (+ 0.01 x seed), whatever the
    method."""
    cfg = MetaworldBenchConfig(seeds=seeds, rounds=rounds, demos_per_round=b, allocations=["mismatched"],
                               methods=["amf", "uniform+prior"])
    pc = allocation_counts(cfg.tasks, "mismatched", cfg.pretrain_demos)
    pre = [{"allocation": "mismatched", "seed": s, "counts": pc, "time_s": 1.0,
            "success": {t: 0.5 for t in cfg.tasks}} for s in range(seeds)]
    runs = []
    for s in range(seeds):
        for m in cfg.methods:
            counts = {t: 0 for t in cfg.tasks}
            rows = []
            for r in range(1, rounds + 1):
                for k in range(b):
                    counts[cfg.tasks[(r * b + k) % len(cfg.tasks)]] += 1
                value = min(1.0, 0.5 + gain * sum(counts.values()) + 0.01 * s)
                rows.append({"round": r, "selected": [], "warm_start": False, "scores": {}, "counts": dict(counts),
                             "success": {t: value for t in cfg.tasks}, "alpha": {t: 0.5 for t in cfg.tasks}})
            runs.append({"allocation": "mismatched", "seed": s, "method": m, "rounds": rows, "time_s": 1.0})
    settings = summarize_runs(cfg, {"pretrain": pre, "runs": runs})
    doc = {"benchmark": "metaworld", "config": {"demos_per_round": b, "replay_fraction": 0.0,
                                                "success_threshold": 0.9, "tasks": cfg.tasks, "seeds": seeds,
                                                "first_seed": first_seed},
           "metric": "success", "wall_time_s": 1.0, "settings": settings}
    return write_results(tmp / name, doc)


def test_curves_meet_at_equal_total_demonstrations(tmp_path: Path) -> None:
    b1, b5 = _results(tmp_path, "b1", 1, 10), _results(tmp_path, "b5", 5, 2)
    doc = compare.compare([b1, b5], methods=["amf"])
    assert [c["label"] for c in doc["curves"]] == ["b1", "b5"]
    assert doc["shared_demos"] == [5.0, 10.0]  # B=1 has 1..10, B=5 has 5 and 10
    for at in doc["at_shared_demos"]:
        assert at["success"]["5.0"][0] == pytest.approx(0.76) and at["success"]["10.0"][0] == pytest.approx(1.0)
    r1, r5 = (c["demos_to_reach"] for c in doc["curves"])
    assert r1["mean_curve"] == 8.0 and r1["reached"] == 3  # 0.5 + 0.05 x 8 = 0.9
    assert r5["mean_curve"] == 10.0  # 0.75 at 5 demos, 1.0 at 10: B=5 can only stop at multiples of 5
    text = compare.table(doc)
    assert "b1/mismatched/amf" in text and "@10 demos" in text


def test_main_writes_json_and_figures_and_refuses_bad_files(tmp_path: Path, capsys) -> None:
    b1 = _results(tmp_path, "b1", 1, 4)
    out = tmp_path / "cmp"
    assert compare.main([str(b1), "--labels", "one", "--out", str(out)]) == 0
    doc = json.loads((out / "compare.json").read_text())
    assert {c["method"] for c in doc["curves"]} == {"amf", "uniform+prior"}
    assert (out / "success_vs_demos.png").stat().st_size > 10_000 and (out / "demos_to_reach.png").exists()
    bad = tmp_path / "bad.json"
    bad.write_text("{\"benchmark\": \"integrator\", \"methods\": {}}")
    with pytest.raises(ValueError, match="no 'settings'"):
        compare.compare([bad])
    with pytest.raises(ValueError, match="no curve matched"):
        compare.compare([b1], methods=["vfd"])
    with pytest.raises(ValueError, match="2 labels for 1"):
        compare.compare([b1], labels=["a", "b"])


def test_curves_on_the_same_seeds_are_compared_seed_by_seed(tmp_path: Path) -> None:
    """The paired difference: B = 5 at gain 0.04 against B = 1 at 0.05 on the same 3 seeds is -0.05 at 5
    demonstrations in every seed (0.70 + 0.01 s vs 0.75 + 0.01 s), with a CI of zero width; a run on other seeds is
    not paired."""
    base = _results(tmp_path, "b1", 1, 10)
    slower = _results(tmp_path, "b5", 5, 2, gain=0.04)
    elsewhere = _results(tmp_path, "other", 5, 2, first_seed=3)
    doc = compare.compare([base, slower, elsewhere], methods=["amf"])
    pairs = doc["paired_vs_first"]
    assert list(pairs) == ["b5/mismatched/amf"]  # "other" ran seeds 3-5
    at5 = pairs["b5/mismatched/amf"]["at"]["5.0"]
    assert at5["mean"] == pytest.approx(-0.05) and at5["ci_high"] - at5["ci_low"] == pytest.approx(0.0, abs=1e-12)
    assert (at5["up"], at5["level"], at5["down"]) == (0, 0, 3)
    assert "minus b1/mismatched/amf, paired" in compare.paired_table(doc)
    assert (tmp_path / "out" / "paired_difference.png") in compare.plot(doc, tmp_path / "out")
