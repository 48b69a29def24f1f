"""`amf pretrain --suite widowx` and `amf bench widowx`: the embedded WidowX through the suite-generic engine.

Determinism and the mismatched allocation of pre-training, the fixed action normalisation, the expert-noise model
(labels noise-free, noisy demonstrations still mostly succeed), batched lockstep evaluation, the config defaults,
the cache key of a WidowX checkpoint, and a smoke run of the whole benchmark.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mujoco")
pytest.importorskip("torch")

from amf_ros.bench.metaworld import METHODS, MetaworldBenchConfig, bench_config, widowx_main
from amf_ros.envs.metaworld_rollouts import EvalPool, collect_demo, collect_demos
from amf_ros.envs.suites import get_suite
from amf_ros.envs.widowx_sim.suite import scripted_action
from amf_ros.envs.widowx_sim.task_env import NOISE_STD, WidowXTaskEnv
from amf_ros.training.pretrain import PretrainConfig, pretrain

CONFIGS = Path(__file__).resolve().parents[2] / "config" / "bench"
TASKS = list(get_suite("widowx").default_tasks)
TINY = {"suite": "widowx", "demos": 4, "steps": 20, "task_encoder": "hash", "seed": 1}


def test_pretraining_is_deterministic_for_a_seed() -> None:
    import torch

    a, b = pretrain(PretrainConfig(**TINY)), pretrain(PretrainConfig(**TINY))
    c = pretrain(PretrainConfig(**{**TINY, "seed": 2}))
    for (k, x), (_, y) in zip(a.policy.head.state_dict().items(), b.policy.head.state_dict().items(), strict=True):
        assert torch.equal(x, y), k
    assert a.loss_curve == b.loss_curve and a.loss_curve != c.loss_curve
    assert torch.equal(a.policy.trunk.std, b.policy.trunk.std) and torch.equal(a.policy.trunk.mean, b.policy.trunk.mean)


def test_mismatched_pretraining_covers_only_the_first_half_with_fixed_action_scale() -> None:
    res = pretrain(PretrainConfig(**{**TINY, "steps": 1}))
    assert res.counts == {"spoon_on_towel": 2, "carrot_on_plate": 2, "stack_cube": 0, "eggplant_in_basket": 0}
    assert sorted({d.task for d in res.demos}) == ["carrot_on_plate", "spoon_on_towel"]
    norm = res.policy.action_normalizer  # from the action bounds, not fitted on the two tasks' demonstrations
    np.testing.assert_array_equal(norm.std, np.float32([0.05, 0.05, 0.05, 0.25, 0.25, 0.25, 0.5]))
    np.testing.assert_array_equal(norm.mean, np.float32([0, 0, 0, 0, 0, 0, 0.5]))
    assert norm.normalize(np.float32([0.05, -0.05, 0, 0.25, 0, 0, 0])).tolist() == [1, -1, 0, 1, 0, 0, -1]
    assert set(res.policy.tasks) == set(TASKS)
    std = res.policy.trunk.std.numpy()  # demonstration + exploration states; 0.05 floor (e.g. the constant pad)
    assert std[6] == pytest.approx(0.05) and np.all(std[:3] > 0.05), std


def test_noisy_demos_have_noise_free_labels_and_mostly_succeed() -> None:
    suite = get_suite("widowx")
    envs = {s.key: suite.make_env(s) for s in suite.load_tasks(TASKS)}
    demos = collect_demos(envs, {t: 3 for t in TASKS}, seed=0, noise_std=suite.noise_std)
    assert suite.noise_std == NOISE_STD
    for d in demos:
        diff = d.actions - d.expert_actions
        assert np.abs(diff[:, :3]).max() > 0, "the translation is perturbed"
        np.testing.assert_array_equal(diff[:, 3:], 0.0)  # rotation and gripper stay the expert's
        spec = envs[d.task].spec
        labels = np.stack([scripted_action(o, spec, 0.05) for o in d.obs])
        np.testing.assert_allclose(d.expert_actions, labels, atol=1e-5)
    ok = sum(d.success for d in demos)
    assert ok >= 10, f"only {ok}/12 noisy scripted demonstrations succeeded"
    clean = collect_demo(envs["stack_cube"], 5)
    np.testing.assert_array_equal(clean.actions, clean.expert_actions)


def test_eval_pool_steps_every_task_in_lockstep_with_one_batched_call() -> None:
    specs = get_suite("widowx").load_tasks(TASKS)
    by_key = {s.key: s for s in specs}
    calls: list[int] = []

    def scripted(obs: np.ndarray, tasks: list[str]) -> np.ndarray:
        calls.append(len(tasks))
        return np.stack([scripted_action(o, by_key[t], 0.05) for o, t in zip(obs, tasks, strict=True)])

    pool = EvalPool(specs, slots=2, suite="widowx")
    assert len(pool.envs) == 8 and all(isinstance(e, WidowXTaskEnv) for e in pool.envs)
    success = pool.evaluate(scripted, 2, seed=0)
    assert success == {t: 1.0 for t in TASKS}
    assert calls[0] == 8 and len(calls) < 40, calls  # one call per lockstep step, ~18 steps per episode
    with pytest.raises(ValueError, match=r"\(4, 7\)"):
        pool.evaluate(lambda obs, tasks: np.zeros((len(tasks), 4)), 1)


def test_config_file_matches_the_code_defaults_for_the_suite() -> None:
    from amf_ros.config_file import load_config

    path = CONFIGS / "widowx.yaml"
    assert dataclasses.asdict(bench_config("widowx", path)) == dataclasses.asdict(bench_config("widowx"))
    cfg = bench_config("widowx")
    assert (cfg.suite, cfg.tasks, cfg.allocations) == ("widowx", TASKS, ["mismatched"])
    assert cfg.methods == ["amf", "uniform+prior", "uniform", "rebalancing"] and cfg.seeds == 5
    assert cfg.noise_std == NOISE_STD and (cfg.pretrain_demos, cfg.pretrain_steps) == (32, 3000)
    assert cfg.pretrain_config("mismatched", 0).counts() == dict(zip(TASKS, [16, 16, 0, 0], strict=True))
    assert cfg.pretrain_config("mismatched", 3).suite == "widowx"
    smoke = bench_config("widowx", CONFIGS / "widowx_smoke.yaml", rounds=3)
    assert (smoke.suite, smoke.seeds, smoke.rounds, smoke.task_encoder) == ("widowx", 1, 3, "hash")
    with pytest.raises(ValueError, match="amf bench metaworld"):
        bench_config("widowx", CONFIGS / "metaworld.yaml")
    with pytest.raises(ValueError, match="suite"):
        MetaworldBenchConfig(suite="franka")
    # the Metaworld defaults are untouched by the suite field
    mw = load_config(MetaworldBenchConfig, None)
    assert (mw.suite, mw.noise_std, mw.tasks[0], mw.rounds) == ("metaworld", 0.1, "faucet-open", 12)


def test_widowx_checkpoints_have_their_own_cache_key() -> None:
    from amf_ros.bringup.pretrained import pretrain_args, recipe_key

    mw, wx = pretrain_args(0), pretrain_args(0, suite="widowx")
    assert "--suite" not in mw and wx[-2:] == ["--suite", "widowx"]
    assert recipe_key(wx, "widowx") != recipe_key(mw) and recipe_key(wx, "widowx") == recipe_key(wx, "widowx")
    sources = get_suite("widowx").sources
    assert "config/tasks/widowx_sim.yaml" in sources and "amf_ros/envs/widowx_sim" in sources


def test_smoke_run_writes_results_with_the_four_methods_and_cis(tmp_path: Path) -> None:
    out = tmp_path / "wx"
    assert widowx_main(["--config", str(CONFIGS / "widowx_smoke.yaml"), "--jobs", "1", "--no-progress",
                        "--out", str(out)]) == 0
    doc = json.loads((out / "results.json").read_text())
    assert doc["benchmark"] == "widowx" and doc["config"]["suite"] == "widowx"
    (setting,) = doc["settings"]
    assert setting["name"] == "mismatched" and setting["pretrain_counts"] == {"carrot_on_plate": 2, "stack_cube": 0}
    assert set(setting["methods"]) == {"amf", "uniform+prior", "uniform", "rebalancing"}
    for name, entry in setting["methods"].items():
        assert entry["rounds"] == [0, 1, 2] and np.shape(entry["per_seed"]) == (1, 3), name
        assert all(lo <= mu <= hi for lo, mu, hi in zip(entry["ci_low"], entry["mean"], entry["ci_high"], strict=True))
    assert set(setting["alpha"]) == {m for m in setting["methods"] if METHODS[m][1]}
    raw = json.loads((out / "raw_runs.json").read_text())
    assert len(raw["pretrain"]) == 1 and len(raw["runs"]) == 4
    for png in ("fig3_success.png", "fig12_per_task_mismatched.png", "fig11_alpha.png"):
        assert (out / png).stat().st_size > 10_000
