"""CameraProjection (amf_ros/policies/camera_policy.py): the whitened PCA and the supervised projection that keeps
what the targets need when the embedding's variance is elsewhere."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.policies.camera_policy import CameraProjection


def _nuisance_data(n: int = 600, d: int = 40, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Embeddings whose 10 loud dimensions (std 10) are nuisance and whose target lives on a quiet one (std 0.5)."""
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, d))
    x[:, :10] *= 10.0
    x[:, 10:] *= 0.5
    y = np.stack([x[:, 25], x[:, 25] + 0.1 * rng.normal(size=n)], axis=1)
    return x, y


def _r2(features: np.ndarray, target: np.ndarray) -> float:
    """Share of the target's variance a least-squares fit on the features explains."""
    a = np.hstack([features, np.ones((len(features), 1))])
    coef, *_ = np.linalg.lstsq(a, target, rcond=None)
    return 1.0 - float(np.var(target - a @ coef) / np.var(target))


def test_supervised_directions_keep_what_pca_drops():
    x, y = _nuisance_data()
    pca = CameraProjection.fit(x, 4)
    sup = CameraProjection.fit_supervised(x, y, supervised_dim=1, pca_dim=3)
    assert sup.matrix.shape == (40, 4) and sup.dim == pca.dim == 4
    # PCA-4 keeps the loud nuisance dimensions, the one supervised direction the quiet target
    assert _r2(pca(x), y[:, 0]) < 0.2
    assert _r2(sup(x), y[:, 0]) > 0.95
    # the PCA columns beside it are the plain whitened PCA's
    np.testing.assert_allclose(sup.matrix[:, 1:], CameraProjection.fit(x, 3).matrix, rtol=1e-5, atol=1e-6)


def test_supervised_columns_are_whitened_and_generalise():
    x, y = _nuisance_data()
    sup = CameraProjection.fit_supervised(x, y, supervised_dim=2, pca_dim=5)
    z = sup(x)
    # unit variance over the fitting frames (float32 matrix: a loose bound), zero mean
    np.testing.assert_allclose(z.std(0), 1.0, rtol=1e-3)
    assert np.abs(z.mean(0)).max() < 1e-3
    xt, yt = _nuisance_data(seed=1)  # fresh frames of the same process
    assert _r2(sup(xt)[:, :2], yt[:, 0]) > 0.9


def test_supervised_projection_round_trips(tmp_path):
    x, y = _nuisance_data()
    sup = CameraProjection.fit_supervised(x, y, supervised_dim=2, pca_dim=2)
    path = tmp_path / "p.npz"
    path.write_bytes(sup.to_bytes())
    back = CameraProjection.from_file(path)
    np.testing.assert_array_equal(back.matrix, sup.matrix)
    np.testing.assert_array_equal(back(x), sup(x))


@pytest.mark.parametrize("kwargs", [dict(supervised_dim=0, pca_dim=3), dict(supervised_dim=3, pca_dim=3),
                                    dict(supervised_dim=1, pca_dim=40), dict(supervised_dim=1, pca_dim=2, ridge=0.0)])
def test_supervised_projection_rejects_bad_sizes(kwargs):
    x, y = _nuisance_data()
    with pytest.raises(ValueError):
        CameraProjection.fit_supervised(x, y, **kwargs)
    with pytest.raises(ValueError, match="targets"):
        CameraProjection.fit_supervised(x, y[:10], 1, 2)
