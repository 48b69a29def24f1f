"""`amf pretrain` and one benchmark run on a tiny budget: determinism, checkpoint, normalization, selection."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("metaworld")
pytest.importorskip("torch")

from amf_ros.bench.metaworld import MetaworldBenchConfig, amf_score_fn, demo_scene, load_for_method, method_job
from amf_ros.envs.metaworld_rollouts import collect_demo, collect_demos, demos_to_transitions
from amf_ros.envs.metaworld_suite import MetaworldTaskEnv, load_tasks
from amf_ros.training.pretrain import PretrainConfig, main, pretrain

TASKS = ["faucet-open", "drawer-close", "push", "drawer-open"]
TINY = dict(tasks=TASKS, demos=4, steps=300, task_encoder="hash", seed=1)


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("pre") / "ckpt"
    args = ["--out", str(out), "--steps", "300", "--seed", "1", "--config", str(_tiny_yaml(out.parent))]
    assert main(args) == 0
    return out


def _tiny_yaml(folder: Path) -> Path:
    path = folder / "tiny.yaml"
    path.write_text(f"tasks: {TASKS}\ndemos: 4\ntask_encoder: hash\n")
    return path


def test_pretrain_writes_a_verified_checkpoint_with_its_recipe(checkpoint: Path) -> None:
    from amf_ros.policies.agent import TaskConditionedPolicy

    info = json.loads((checkpoint / "pretrain.json").read_text())
    assert info["pretrain_counts"] == {"faucet-open": 2, "drawer-close": 2, "push": 0, "drawer-open": 0}
    assert info["loss_last"] < info["loss_first"] / 5, "pre-training must reduce the BC loss"
    policy = TaskConditionedPolicy.load(checkpoint)
    assert policy.prior is not None, "the pre-trained head is kept as the adaptive prior"
    assert sorted(policy.tasks) == sorted(TASKS)
    # Corruption is detected by the policy library's verification.
    weights = checkpoint.parent / "corrupt"
    import shutil

    shutil.copytree(checkpoint, weights)
    blob = bytearray((weights / "weights.safetensors").read_bytes())
    blob[-1] ^= 0xFF
    (weights / "weights.safetensors").write_bytes(bytes(blob))
    with pytest.raises(ValueError):
        TaskConditionedPolicy.load(weights)


def test_pretraining_is_deterministic_for_a_seed() -> None:
    import torch

    a = pretrain(PretrainConfig(**{**TINY, "steps": 20}))
    b = pretrain(PretrainConfig(**{**TINY, "steps": 20}))
    c = pretrain(PretrainConfig(**{**TINY, "steps": 20, "seed": 2}))
    for (k, x), (_, y) in zip(a.policy.head.state_dict().items(), b.policy.head.state_dict().items(), strict=True):
        assert torch.equal(x, y), k
    assert a.loss_curve == b.loss_curve and a.loss_curve != c.loss_curve


def test_unseen_tasks_are_not_saturated_and_actions_are_not_rescaled(checkpoint: Path) -> None:
    from amf_ros.policies.agent import TaskConditionedPolicy

    policy = TaskConditionedPolicy.load(checkpoint)
    np.testing.assert_array_equal(policy.action_normalizer.std, np.ones(4, dtype=np.float32))
    specs = load_tasks(keys=["push", "drawer-open"])
    envs = {s.key: MetaworldTaskEnv(s) for s in specs}
    states = demos_to_transitions(collect_demos(envs, {"push": 1, "drawer-open": 1}, seed=9))["state"]
    feats = policy.trunk.encode_frames({"state": states}).numpy()
    assert np.abs(feats).max() < policy.trunk.clip, "unseen-task states must not hit the clip"


def test_criterion_prefers_a_task_the_pretrained_policy_does_not_know(checkpoint: Path) -> None:
    cfg = MetaworldBenchConfig(tasks=TASKS, task_encoder="hash")
    specs = load_tasks(keys=TASKS)
    envs = {s.key: MetaworldTaskEnv(s) for s in specs}
    demos = []
    for i, t in enumerate(TASKS):
        scene, rng = demo_scene(0, i, 0)
        demos.append(collect_demo(envs[t], scene, 0.1, rng))
    policy = load_for_method(str(checkpoint), False, cfg)
    score_fn = amf_score_fn(policy, demos, [True] * 4, cfg)
    scores = dict(zip(TASKS, score_fn(TASKS, []), strict=True))
    norms = score_fn.last_info["mean_sq_norm_phi"]
    assert min(norms["push"], norms["drawer-open"]) > 5 * max(norms["faucet-open"], norms["drawer-close"])
    assert min(scores, key=scores.get) in ("push", "drawer-open"), scores
    # conditioning on a second push demonstration makes push less informative than before
    scene, rng = demo_scene(0, 2, 1)
    more = demos + [collect_demo(envs["push"], scene, 0.1, rng)]
    after = dict(zip(TASKS, amf_score_fn(policy, more, [True] * 4 + [False], cfg)(TASKS, []), strict=True))
    assert after["push"] - after["drawer-open"] > scores["push"] - scores["drawer-open"]


def test_replay_aware_criterion_asks_later_for_the_replayed_tasks(checkpoint: Path) -> None:
    """amf-replay conditions on the replayed pre-training demonstrations (faucet-open and drawer-close here): each
    pre-trained task must fall behind each new task compared with the paper's criterion (scores: lower = first)."""
    from amf_ros.training.pretrain import pretraining_demos

    cfg = MetaworldBenchConfig(tasks=TASKS, task_encoder="hash", replay_fraction=0.5, pretrain_demos=4)
    envs = {s.key: MetaworldTaskEnv(s) for s in load_tasks(keys=TASKS)}
    demos = [collect_demo(envs[t], *_scene_and_noise(i)) for i, t in enumerate(TASKS)]
    replay = pretraining_demos(cfg.pretrain_config("mismatched", 1))
    assert {d.task for d in replay} == {"faucet-open", "drawer-close"}
    policy = load_for_method(str(checkpoint), False, cfg)
    paper = dict(zip(TASKS, amf_score_fn(policy, demos, [True] * 4, cfg)(TASKS, []), strict=True))
    fn = amf_score_fn(policy, demos, [True] * 4, cfg, replay)
    aware = dict(zip(TASKS, fn(TASKS, []), strict=True))
    assert fn.last_info["replayed_episodes"] == len(replay)
    for old in ("faucet-open", "drawer-close"):
        for new in ("push", "drawer-open"):
            assert aware[old] - aware[new] > paper[old] - paper[new], (paper, aware)


def _scene_and_noise(i: int):
    scene, rng = demo_scene(0, i, 0)
    return scene, 0.1, rng


@pytest.mark.slow
@pytest.mark.parametrize("method", ["amf", "rebalancing"])
def test_a_short_run_warm_starts_counts_and_logs(checkpoint: Path, method: str) -> None:
    cfg = MetaworldBenchConfig(tasks=TASKS, task_encoder="hash", rounds=5, finetune_steps=20, alpha_steps=10,
                               eval_episodes=1, eval_slots=1, pretrain_demos=4)
    out = method_job(cfg, "mismatched", 0, method, str(checkpoint))
    rows = out["rounds"]
    assert [sum(r["counts"].values()) for r in rows] == [1, 2, 3, 4, 5]
    picked = [r["selected"][0] for r in rows]
    if method == "amf":
        assert sorted(picked[:4]) == sorted(TASKS) and all(r["warm_start"] for r in rows[:4])
        assert not rows[4]["warm_start"] and rows[4]["phi_sq_norm"] is not None
    else:  # privileged: the tasks without pre-training demonstrations come first
        assert set(picked[:2]) == {"push", "drawer-open"}
    for r in rows:
        assert set(r["success"]) == set(TASKS) and all(0.0 <= v <= 1.0 for v in r["success"].values())
        assert set(r["alpha"]) == set(TASKS) and all(0.0 <= a <= 1.0 for a in r["alpha"].values())


@pytest.mark.slow
def test_replay_aware_amf_runs_rounds_with_replay(checkpoint: Path) -> None:
    """amf-replay through method_job with 50/50 replay: the warm start, then scored picks of the criterion that
    conditions on the replayed pre-training demonstrations (tested above), fine-tuning with replay every round."""
    cfg = MetaworldBenchConfig(tasks=TASKS, task_encoder="hash", rounds=5, finetune_steps=20, alpha_steps=10,
                               eval_episodes=1, eval_slots=1, pretrain_demos=4, replay_fraction=0.5)
    rows = method_job(cfg, "mismatched", 1, "amf-replay", str(checkpoint))["rounds"]
    assert sorted(r["selected"][0] for r in rows[:4]) == sorted(TASKS) and all(r["warm_start"] for r in rows[:4])
    last = rows[4]
    assert not last["warm_start"] and set(last["scores"]) == set(TASKS) and last["phi_sq_norm"] is not None
    assert last["selected"][0] == min(last["scores"], key=last["scores"].get)


def test_uniform_without_prior_has_no_alpha(checkpoint: Path) -> None:
    cfg = MetaworldBenchConfig(tasks=TASKS, task_encoder="hash", rounds=1, finetune_steps=5, eval_episodes=1,
                               eval_slots=1, pretrain_demos=4)
    policy = load_for_method(str(checkpoint), False, cfg)
    assert not policy.uses_prior
    out = method_job(dataclasses.replace(cfg), "mismatched", 0, "uniform", str(checkpoint))
    assert out["rounds"][0]["alpha"] == {}


@pytest.mark.slow
def test_progress_warm_starts_then_scores_from_its_evaluation_history(checkpoint: Path) -> None:
    cfg = MetaworldBenchConfig(tasks=TASKS, task_encoder="hash", rounds=5, finetune_steps=20, alpha_steps=10,
                               eval_episodes=1, eval_slots=1, pretrain_demos=4, methods=["progress"])
    # the pre-trained evaluation as pretrain_job reports it: the pre-trained tasks solved, the new ones not
    pre = {"faucet-open": 1.0, "drawer-close": 1.0, "push": 0.0, "drawer-open": 0.0}
    out = method_job(cfg, "mismatched", 0, "progress", str(checkpoint), pre)
    rows = out["rounds"]
    assert sorted(r["selected"][0] for r in rows[:4]) == sorted(TASKS) and all(r["warm_start"] for r in rows[:4])
    last = rows[4]
    assert not last["warm_start"] and set(last["scores"]) == set(TASKS)
    # score = -(predicted gain of one more demonstration), a success difference: in [-1, 0] up to rounding
    assert all(-1.0 - 1e-9 <= v <= 1e-9 for v in last["scores"].values()), last["scores"]
    assert last["selected"][0] == min(last["scores"], key=last["scores"].get)
    # the scores are progress_score_fn's on the history the job must have fed: the pre-trained evaluation at 0
    # demonstrations, then every round's evaluation at that round's counts
    from amf_ros.core.progress import Evaluation, progress_score_fn

    history = [Evaluation(t, 0, pre[t], 1) for t in TASKS] + [
        Evaluation(t, r["counts"][t], r["success"][t], 1) for r in rows[:4] for t in TASKS]
    expected = progress_score_fn(history, rows[3]["counts"])(TASKS, [])
    np.testing.assert_allclose([last["scores"][t] for t in TASKS], expected, rtol=0, atol=1e-12)
