"""What the camera policy's supervised projection is fitted to keep (amf_ros/training/camera.py demo_targets,
fit_projection): the demonstrator's own next moves, from its labels and proprio only."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.training.camera import TARGET_HORIZONS, CameraDemo, CameraPretrainConfig, demo_targets, fit_projection


def _demo(n: int = 12, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    actions = np.zeros((n, 7), np.float32)
    actions[:, :3] = rng.uniform(-0.02, 0.02, size=(n, 3))
    actions[:, 6] = 1.0
    actions[5:, 6] = 0.0  # the gripper closes at step 5
    proprio = np.zeros((n, 8), np.float32)
    proprio[:, :3] = np.cumsum(actions[:, :3], axis=0) + [0.3, 0.0, 0.1]
    return actions, proprio


def test_targets_are_future_moves_grasp_and_release():
    actions, proprio = _demo()
    t = demo_targets(actions, proprio)
    h = len(TARGET_HORIZONS)
    assert t.shape == (12, 3 * h + 7) and t.dtype == np.float32
    tol = 1e-6  # float32 sums of a dozen numbers below 0.1
    k = TARGET_HORIZONS.index(4)
    np.testing.assert_allclose(t[2, 3 * k:3 * k + 3], actions[2:6, :3].sum(0), atol=tol)
    k = TARGET_HORIZONS.index(16)  # past the end: what is left
    np.testing.assert_allclose(t[3, 3 * k:3 * k + 3], actions[3:, :3].sum(0), atol=tol)
    np.testing.assert_array_equal(t[:, 3 * h], actions[:, 6])
    # grasp = the first step whose gripper command differs from the first (5), release = the last frame
    np.testing.assert_allclose(t[0, 3 * h + 1:3 * h + 4], proprio[5, :3] - proprio[0, :3], atol=tol)
    np.testing.assert_allclose(t[7, 3 * h + 4:], proprio[-1, :3] - proprio[7, :3], atol=tol)
    assert np.abs(t[5, 3 * h + 1:3 * h + 4]).max() < tol  # at the grasp: nothing left to go


def test_targets_reject_mismatched_lengths():
    actions, proprio = _demo()
    with pytest.raises(ValueError, match="expected actions"):
        demo_targets(actions, proprio[:-1])


def test_fit_projection_width_and_pca_fallback():
    demos = []
    rng = np.random.default_rng(0)
    for i in range(6):
        actions, proprio = _demo(seed=i)
        emb = rng.normal(size=(len(actions), 30)).astype(np.float32)
        emb[:, 0] = actions[:, 0] * 50  # one embedding dimension carries the next move
        demos.append(CameraDemo("t", i, emb, proprio, actions, True))
    sup = fit_projection(demos, 8, supervised_dim=3)
    pca = fit_projection(demos, 8)
    assert sup.dim == pca.dim == 8
    np.testing.assert_allclose(sup.matrix[:, 3:], fit_projection(demos, 5).matrix, rtol=1e-5, atol=1e-6)
    # the first supervised column leans on the informative dimension far more than PCA's first column does
    assert abs(sup.matrix[0, 0]) / np.abs(sup.matrix[:, 0]).max() > 0.9
    assert abs(pca.matrix[0, 0]) / np.abs(pca.matrix[:, 0]).max() < 0.5
    assert fit_projection(demos, 2, supervised_dim=3).dim == 2  # at most K supervised columns


def test_config_rejects_too_many_supervised_columns():
    with pytest.raises(ValueError, match="supervised_dim"):
        CameraPretrainConfig(supervised_dim=3 * len(TARGET_HORIZONS) + 8)
