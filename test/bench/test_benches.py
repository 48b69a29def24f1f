"""The three benchmarks end to end on tiny configs (output contract), and config YAML = dataclass defaults."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import yaml

from amf_ros.bench import criterion_map, integrator, selector_scaling

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("module, cls, name", [
    (integrator, integrator.IntegratorBenchConfig, "integrator.yaml"),
    (selector_scaling, selector_scaling.SelectorScalingConfig, "selector_scaling.yaml"),
    (criterion_map, criterion_map.CriterionMapConfig, "criterion_map.yaml"),
])
def test_default_yaml_equals_dataclass_defaults(module, cls, name):
    path = ROOT / "config" / "bench" / name
    assert module.DEFAULT_CONFIG == path
    loaded = yaml.safe_load(path.read_text())
    assert loaded == dataclasses.asdict(cls()), "config/bench yaml and dataclass defaults disagree"


def _write(tmp_path, **cfg):
    p = tmp_path / "cfg.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return str(p)


def test_integrator_bench_contract(tmp_path, capsys):
    cfg = _write(tmp_path, allocations=[2, 12], eval_episodes=2,
                 methods=["amf_gp", "amf_gp_variance", "uniform", "round_robin", "rebalancing"])
    out = tmp_path / "out"
    assert integrator.main(["--out", str(out), "--seeds", "2", "--rounds", "14", "--jobs", "1",
                            "--config", cfg]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["benchmark"] == "integrator" and res["wall_time_s"] > 0 and res["config"]["rounds"] == 14
    assert [s["name"] for s in res["settings"]] == ["2/12", "12/12"]
    for s in res["settings"]:
        for m in ("amf_gp", "uniform", "round_robin", "rebalancing"):
            v = s["methods"][m]
            assert v["rounds"] == list(range(15)) and np.array(v["per_seed"]).shape == (2, 15)
            lo, mu, hi = (np.array(v[k]) for k in ("ci_low", "mean", "ci_high"))
            assert np.all(lo <= mu + 1e-12) and np.all(mu <= hi + 1e-12)
            assert sum(s["final_counts_mean"][m]) == 14
        # warm start: amf demonstrates each of the 12 tasks once in rounds 1-12; rounds 13-14 use the criterion
        assert min(s["final_counts_mean"]["amf_gp"]) >= 1
        # returns improve with demonstrations
        assert s["methods"]["amf_gp"]["mean"][-1] > s["methods"]["amf_gp"]["mean"][0]
    assert (out / "returns.png").exists() and (out / "fig2.png").exists() and (out / "entropy.png").exists()
    assert "amf_gp" in capsys.readouterr().out


def test_integrator_methods_share_pretraining_and_are_seeded():
    cfg = integrator.IntegratorBenchConfig(rounds=2, eval_episodes=2)
    a = integrator.run_method(cfg, 6, 0, "uniform")
    b = integrator.run_method(cfg, 6, 0, "round_robin")
    c = integrator.run_method(cfg, 6, 0, "uniform")
    assert a["returns"][0] == b["returns"][0]  # same pre-trained policy and evaluation noise at round 0
    assert a["returns"] == c["returns"]  # deterministic given the seed


def test_selector_scaling_contract_small(tmp_path):
    cfg = _write(tmp_path, demos=[10, 20], feature_dim=64, steps_per_demo=10, max_data_rows=40, seeds=3,
                 episode_repeats=2, batch_repeats=2, reference_up_to=20)
    out = tmp_path / "ss"
    assert selector_scaling.main(["--out", str(out), "--config", cfg]) == 0
    res = json.loads((out / "results.json").read_text())
    assert res["demos"] == [10, 20] and set(res["engines"]) == {"exact", "subsampled"}
    exact, sub = res["engines"]["exact"], res["engines"]["subsampled"]
    for e in (exact, sub):
        for key in ("call_p50_s", "call_p99_s", "batch_p50_s", "batch_recorded_p50_s", "episode_p50_s", "build_s",
                    "state_mb", "peak_build_mb", "peak_call_mb", "peak_episode_mb", "spearman", "same_argmin",
                    "max_rel_diff"):
            assert len(e[key]) == 2, key
        assert all(p99 >= p50 > 0 for p50, p99 in zip(e["call_p50_s"], e["call_p99_s"], strict=True))
        assert all(len(b) == 5 for b in e["batch"])  # B = 5 greedy picks
        assert all(-1.0 <= r <= 1.0 for r in e["spearman"])
    assert exact["states_per_demo"] == [10, 10] and exact["data_rows"] == [100, 200]
    assert sub["states_per_demo"] == [4, 2] and sub["data_rows"] == [40, 40]
    # the exact engine is the brute force up to round-off
    assert max(exact["max_rel_diff"]) < 1e-9 and all(exact["same_argmin"]) and min(exact["spearman"]) > 0.999
    assert [m["space"] for m in res["cost_model"]] == exact["space"]
    assert set(res["methods"]) == {"exact", "subsampled"} and (out / "selector_scaling.png").exists()


def test_criterion_map_small(tmp_path):
    cfg = _write(tmp_path, seeds=1, pretrain_demos=20, num_candidates=12, eval_episodes=2)
    out = tmp_path / "cm"
    assert criterion_map.main(["--out", str(out), "--config", cfg]) == 0
    res = json.loads((out / "results.json").read_text())
    for key in ("task_angles", "criterion", "return_after"):
        assert len(res[key]) == 12
    assert len(res["pretrain_angles"]) == 20 and all(0 <= a < np.pi for a in res["pretrain_angles"])
    s = res["summary"]
    assert s["criterion_bottom"] < s["criterion_top"]  # the undemonstrated half is preferred
    assert (out / "criterion_map.png").exists()


def test_integrator_random_shooting_candidates():
    cfg = integrator.IntegratorBenchConfig(rounds=14, eval_episodes=2, candidates="shooting", shooting_budget=6)
    res = integrator.run_method(cfg, 6, 0, "amf_gp")
    # warm start covers the 12 evaluation tasks once; the last two rounds pick among 6 random angles
    assert sum(res["counts"]) + res["off_grid"] == 14 and min(res["counts"]) >= 1 and res["off_grid"] >= 1
    assert np.all(np.isfinite(res["returns"]))


def test_faults_results_and_table_without_a_graph(tmp_path):
    """The fault bench's results pass the results contract and its table shows every probe with its verdict (the
    probes themselves run over DDS: test/ros_system/test_fault_probes.py)."""
    from amf_ros.bench import faults
    from amf_ros.bench.results import write_results

    probes = [faults.Probe("sim_bridge SIGKILL mid-goal: goal ends", "1", 0.25, 0.26, True, "observation stale"),
              faults.Probe("... actions applied after SIGCONT", "3", 0, 1, False, "count")]
    results = faults.summarize(faults.FaultConfig(), probes, 12.0)
    write_results(tmp_path, results)
    saved = json.loads((tmp_path / "results.json").read_text())
    assert (saved["passed"], saved["total"]) == (1, 2)
    assert [p["verdict"] for p in saved["settings"]] == ["pass", "FAIL"]
    text = faults.table(saved)
    assert "SIGKILL mid-goal" in text and "FAIL" in text and "0.26" in text
    md = faults.markdown(saved).splitlines()
    assert md[2] == "| sim_bridge SIGKILL mid-goal: goal ends | 1 | 0.25 s | 0.26 s | pass | observation stale |"
    assert md[3] == "| ... actions applied after SIGCONT | 3 | 0 | 1 | FAIL | count |"
