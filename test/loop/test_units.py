"""Unit tests of the ROS-free pieces behind policy_server / task_selector / bring-up (no DDS)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from amf_ros.bringup import graph
from amf_ros.bringup.params import Param, schema, validate
from amf_ros.policies.checkpoint_dirs import newest_checkpoint, resolve_checkpoint, round_of


class _Policy:
    tasks = ["reach", "push"]

    def act(self, obs, task):
        return np.tile(np.array([[1.0, -0.5, 0.25, 1.0]]), (4, 1))  # native Metaworld action chunk (H=4, A=4)


def test_schema_param_checks() -> None:
    p = Param("rate", 5.0, "Hz.", range=(0.1, 10.0))
    assert p.check(5.0) == "" and "outside" in p.check(50.0) and "expected double" in p.check(5)
    with pytest.raises(ValueError, match="description"):
        Param("x", 1, " ")
    with pytest.raises(ValueError, match="not one of"):
        Param("mode", "c", "mode.", choices=("a", "b"))
    problems = validate("task_selector", {"selector": "greedy", "nosuch": 1, "noise_var": 1})
    assert len(problems) == 3, problems
    assert validate("policy_server", {"control_rate_hz": 20.0, "ensemble_horizon": 4}) == []
    for node in ("policy_server", "task_selector"):
        assert all(p.description for p in schema(node))


def test_chunk_actor_converts_native_chunks_to_wire_actions() -> None:
    from amf_ros.policies.chunk_actor import ChunkActor
    from amf_ros.runtime.policy_server import wire_action

    actor = ChunkActor(lambda obs: _Policy().act(obs, "reach"), wire_action("metaworld"), horizon=4)
    # native [1, -0.5, 0.25, grab 1] -> metres 0.01 per unit, gripper (1 - 1) / 2 = 0 (closed)
    np.testing.assert_allclose(actor(None), [0.01, -0.005, 0.0025, 0, 0, 0, 0.0])
    assert actor.action(actor.newest_step + 4) is None  # no chunk covers it
    with pytest.raises(ValueError, match="bad action chunk"):
        ChunkActor(lambda obs: np.full((4, 4), np.nan))(None)
    with pytest.raises(ValueError, match="eef7 needs 7-D"):
        wire_action("eef7")(np.zeros(4))


def test_checkpoint_discovery(tmp_path: Path) -> None:
    assert newest_checkpoint(tmp_path) is None
    with pytest.raises(ValueError, match="no checkpoint"):
        resolve_checkpoint("", str(tmp_path))
    for r in (2, 10, 9):
        (tmp_path / f"round_{r:04d}").mkdir()
    (tmp_path / "round_x").mkdir()
    assert newest_checkpoint(tmp_path).name == "round_0010" and round_of("round_0010") == 10
    assert round_of(tmp_path / "pretrained") == 0


def test_plan_overrides_and_ros_args() -> None:
    specs = {s.name: s for s in graph.plan("real", checkpoint="/c k", tasks=["a", "b"])}
    args = specs["task_selector"].ros_args()
    assert args[:6] == ["--ros-args", "-r", "__node:=task_selector", "-r", "__ns:=/amf", "--params-file"]
    assert "tasks:=['a', 'b']" in args and "checkpoint:='/c k'" in args
    with pytest.raises(ValueError, match="config file not found"):
        graph.plan("sim", config="nope.yaml")


def test_policy_runtime_without_data_says_so(tmp_path: Path) -> None:
    from amf_ros.runtime.policy_server import PolicyRuntime

    rt = PolicyRuntime(_Policy(), tmp_path / "ck", tmp_path / "out", tmp_path / "no_dataset")
    with pytest.raises(ValueError, match="no episodes"):
        rt.fine_tune(steps=3)
    assert not rt.fine_tuning  # the busy flag is released after an error


def test_amf_up_dry_run_prints_the_launch_plan(capsys) -> None:
    from amf_ros.bringup.up import main

    assert main(["config/sim.yaml", "--dry-run", "--checkpoint", "/ck"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [ln.split()[0].rsplit("/", 1)[-1] for ln in lines] == list(graph.node_names("sim"))
    assert all("--params-file" in ln and ln.split()[0].endswith(n)
               for ln, n in zip(lines, graph.node_names("sim"), strict=True))
    assert "checkpoint:='/ck'" in lines[2] and "checkpoint:='/ck'" in lines[3]


def test_amf_run_flags_and_config_validation(tmp_path: Path) -> None:
    from amf_ros.loop.nodes import node_overrides
    from amf_ros.loop.run import LoopConfig, build_parser

    args = build_parser().parse_args(["--rounds", "3", "--selector", "uniform"])
    assert args.rounds == 3 and args.selector == "uniform" and args.fine_tune_steps == LoopConfig().fine_tune_steps
    with pytest.raises(ValueError, match="rounds"):
        LoopConfig(rounds=0)
    with pytest.raises(ValueError, match="selector"):
        LoopConfig(selector="greedy")
    with pytest.raises(ValueError, match="head"):
        LoopConfig(head="transformer")
    with pytest.raises(ValueError, match="arm must be one of"):
        LoopConfig(arm="ur5")
    with pytest.raises(ValueError, match="batch_conditioning must be one of"):
        LoopConfig(batch_conditioning="real")
    assert build_parser().parse_args(["--arm", "widowx"]).arm == "widowx"

    from amf_ros.bringup.pretrained import pretrain_args, recipe_key

    assert recipe_key(pretrain_args(0, suite="widowx"), "widowx") != recipe_key(pretrain_args(0)), \
        "the WidowX pre-trained policy must not share a cache entry with Metaworld's"

    assert build_parser().parse_args([]).head == "diffusion"
    mlp, diffusion = pretrain_args(0, "mlp"), pretrain_args(0)
    assert mlp[-2:] == ["--head", "mlp"] and diffusion[-2:] == ["--head", "diffusion"]
    assert recipe_key(mlp) != recipe_key(diffusion), "the two heads must not share a cache entry"
    over = node_overrides(tmp_path, LoopConfig(selector="uniform", seed=3))
    assert f"dataset_dir:={tmp_path.resolve() / 'dataset'}" in over["policy_server"]
    assert "selector:=uniform" in over["task_selector"] and "selector:=uniform" not in over["policy_server"]
    assert not any("ensemble_members" in a or "selection_policy" in a for a in sum(over.values(), []))
    args = build_parser().parse_args(["--batch-conditioning", "recorded"])
    over = node_overrides(tmp_path, LoopConfig(batch_conditioning=args.batch_conditioning))
    assert "batch_conditioning:=recorded" in over["task_selector"]
    assert not any("batch_conditioning" in a for a in over["policy_server"])
    over = node_overrides(tmp_path, LoopConfig(selector="vfd"))  # the ensemble rules: a second head every round
    assert "ensemble_members:=2" in over["policy_server"] and "selection_policy:=latest" in over["task_selector"]
    assert "ensemble_members:=2" not in over["task_selector"]
    # `amf run` names its candidates (the pre-trained checkpoint's tasks, which it evaluates): the YAML's tasks_file
    # would serve more (issue 33: the served task set is the configuration's)
    over = node_overrides(tmp_path, LoopConfig(), tasks=["push", "reach"])
    assert over["task_selector"][-2:] == ["-p", "tasks:=[push, reach]"]
    assert not any("tasks:=" in a for a in over["policy_server"])
    # the run dir is its graph's workspace (its nodes' locks live there, not in an `amf up` graph's workspace)
    assert all(f"workspace:={tmp_path.resolve()}" in over[n] for n in ("policy_server", "task_selector",
                                                                        "demo_recorder"))


def test_amf_run_takes_the_arms_defaults_for_what_the_user_left_unset() -> None:
    from amf_ros.loop.run import ARM_DEFAULTS, LoopConfig, build_parser

    parse = build_parser().parse_args
    for argv in ([], ["--arm", "widowx"], ["--arm", "wxai"]):
        args = vars(parse(argv))
        cfg = LoopConfig(**args)
        want = ARM_DEFAULTS.get(args["arm"], ARM_DEFAULTS["metaworld"])
        assert {k: getattr(cfg, k) for k in want} == want, argv
    cfg = LoopConfig(**vars(parse(["--arm", "widowx", "--rounds", "5", "--eval-episodes", "0"])))
    assert (cfg.rounds, cfg.eval_episodes, cfg.eval_max_steps) == (5, 0, ARM_DEFAULTS["widowx"]["eval_max_steps"])


def test_amf_run_evaluation_retries_a_failed_run_once_and_records_it() -> None:
    """A transient run_policy failure (no observation on a starved machine) is retried on the same scene and kept
    in the results; a persistent one still stops the run with the node's message."""

    from amf_ros.loop.report import evaluate
    from amf_ros.loop.run import LoopConfig

    class Client:
        def __init__(self, fail_first: int) -> None:
            self.fail_left, self.resets = fail_first, []

        def reset(self, task: str, seed: int) -> None:
            self.resets.append((task, seed))

        def run_policy(self, task: str, max_steps: int, timeout: float):
            if self.fail_left > 0:
                self.fail_left -= 1
                return SimpleNamespace(ok=False, message="no observation for 2.0 s", success=False, steps=0,
                                       mean_period_s=0.0)
            return SimpleNamespace(ok=True, message="", success=task == "a", steps=7, mean_period_s=0.1)

    client = Client(fail_first=1)
    out = evaluate(client, ["a", "b"], LoopConfig(eval_episodes=1))
    assert out["success"] == {"a": 1.0, "b": 0.0}
    assert out["failed_attempts"] == [{"task": "a", "episode": 0, "message": "no observation for 2.0 s"}]
    assert client.resets[0] == client.resets[1], "the retry uses the same evaluation scene"
    with pytest.raises(RuntimeError, match="failed 2 times: no observation"):
        evaluate(Client(fail_first=2), ["a"], LoopConfig(eval_episodes=1))


def test_amf_run_outputs_without_evaluation_write_null_not_nan(tmp_path: Path) -> None:
    """--eval-episodes 0: nothing is evaluated; results.json says null (JSON has no NaN) instead of crashing."""
    import json

    from amf_ros.loop.report import write_outputs

    nan = float("nan")
    rounds = [{"round": r, "task": None if r == 0 else "reach", "evaluation": {"success": {"reach": nan, "push": nan}}}
              for r in range(3)]
    results = {"tasks": ["reach", "push"], "rounds": rounds, "config": {"eval_episodes": 0, "selector": "vfd"}}
    write_outputs(results, tmp_path)
    doc = json.loads((tmp_path / "results.json").read_text())
    assert doc["summary"]["mean_success"] == [None, None, None]
    assert doc["rounds"][2]["evaluation"]["success"] == {"reach": None, "push": None}
    assert (tmp_path / "amf_run.png").is_file()


def test_amf_run_splits_success_into_the_pre_trained_and_the_new_tasks(tmp_path: Path, capsys) -> None:
    """The table marks the tasks the generalist was pre-trained on and the summary follows both groups (issue 28:
    the main job shows the new tasks learned while the pre-trained ones are kept)."""
    import json

    from amf_ros.loop.report import print_round, split_success, write_outputs

    pre = {"spoon": 16, "carrot": 16, "stack": 0, "eggplant": 0}
    r0 = {"spoon": 1.0, "carrot": 2 / 3, "stack": 0.0, "eggplant": 1 / 3}
    r1 = {"spoon": 1.0, "carrot": 1.0, "stack": 2 / 3, "eggplant": 1.0}
    assert split_success(r0, pre) == pytest.approx({"pretrained": 5 / 6, "new": 1 / 6})
    assert split_success(r0, None) == {}
    rounds = [{"round": 0, "task": "", "evaluation": {"success": r0}},
              {"round": 1, "task": "stack", "warm_start": True, "episode": {"steps": 17}, "round_time_s": 3.0,
               "fine_tune": {"final_loss": 0.05}, "scores": {}, "demo_counts": {"stack": 0},
               "evaluation": {"success": r1}}]
    print_round(rounds[1], list(pre), pre)
    out = capsys.readouterr().out
    assert "pre-training demos" in out and "(pre-trained tasks 1.000, new tasks 0.833)" in out
    results = {"tasks": list(pre), "rounds": rounds, "pretrain_counts": pre,
               "config": {"eval_episodes": 3, "selector": "amf"}}
    write_outputs(results, tmp_path)
    summary = json.loads((tmp_path / "results.json").read_text())["summary"]
    assert summary["new_tasks_success"] == pytest.approx([1 / 6, 5 / 6])
    assert summary["pretrained_tasks_success"] == pytest.approx([5 / 6, 1.0])


def test_supervise_respawns_a_crashed_node_and_leaves_the_others_alone(tmp_path: Path) -> None:
    """The respawn policy of `amf up` (launch's respawn / respawn_delay / respawn_max_retries): a node that keeps
    crashing is restarted after the delay up to the retry limit, then left down; a node with respawn off stays down
    at once; a running node is untouched."""
    import sys
    import time

    from amf_ros.bringup.processes import NodeProcesses

    specs = [graph.NodeSpec("crashy", "crashy", "", respawn_delay_s=0.1, respawn_max_retries=2),
             graph.NodeSpec("once", "once", "", respawn=False),
             graph.NodeSpec("steady", "steady", "")]
    code = {"crashy": "raise SystemExit(3)", "once": "raise SystemExit(4)", "steady": "import time; time.sleep(60)"}
    nodes = NodeProcesses(specs, log_dir=tmp_path)
    nodes.command = lambda spec: [sys.executable, "-c", code[spec.name]]
    nodes.start()
    steady_pid = nodes.procs["steady"].pid
    try:
        lines: list[str] = []
        deadline = time.monotonic() + 20
        while len(nodes.given_up) < 2 and time.monotonic() < deadline:
            lines += nodes.supervise()
            time.sleep(0.05)
        assert nodes.given_up == {"crashy": 3, "once": 4}, lines
        assert nodes.restarts == {"crashy": 2}, lines
        assert nodes.procs["steady"].poll() is None and nodes.procs["steady"].pid == steady_pid
        assert any("crashy respawned (2/2)" in line for line in lines)
        assert any("once stays down (respawn off)" in line for line in lines)
    finally:
        nodes.stop(timeout=5)


def test_a_corrupt_newest_round_falls_back_to_the_one_before(tmp_path: Path) -> None:
    """One bad round (here: weights overwritten after the hash was recorded) never keeps a node down: the newest
    round that loads is used, with a warning naming the bad one and why; if none loads, the error lists each."""
    import shutil

    from ros_system_util import make_checkpoint

    from amf_ros.policies.loading import load_native, load_newest_good

    good = make_checkpoint(tmp_path / "src", ("reach", "push"))
    ckpts = tmp_path / "checkpoints"
    for r in (1, 2):
        shutil.copytree(good, ckpts / f"round_{r:04d}")
    weights = ckpts / "round_0002" / "weights.safetensors"
    weights.write_bytes(weights.read_bytes()[:-16] + b"\0" * 16)
    warnings: list[str] = []
    policy, path = load_newest_good(ckpts, load_native, warnings.append)
    assert path.name == "round_0001" and set(policy.tasks) == {"reach", "push"}
    assert len(warnings) == 1 and "round_0002" in warnings[0] and "sha256" in warnings[0].lower(), warnings
    assert load_newest_good(tmp_path / "none", load_native, warnings.append) is None
    shutil.rmtree(ckpts / "round_0001")
    with pytest.raises(ValueError, match="no checkpoint under .* loads: round_0002"):
        load_newest_good(ckpts, load_native, warnings.append)
