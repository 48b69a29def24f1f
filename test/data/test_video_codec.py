"""Video storage of camera streams (image_codec h264 / av1): store round trip, frame order, odd sizes, crash
recovery, corrupt chunks. Lossy, so images are compared by PSNR: a camera-like frame (smooth shading, sensor
noise of sigma 2, i.e. ~42 dB if the codec only dropped the noise) at crf 23 decodes well above the 32 dB asserted
here; a decode with wrong frames, order or colours falls far below it."""

from __future__ import annotations

import os

import numpy as np
import pytest

from amf_ros.data import codec as codec_lib
from amf_ros.data.store import EpisodeStore, StoreConfig

pytest.importorskip("av", reason="PyAV is in requirements/base.txt")


def frames(n: int, h: int = 48, w: int = 64) -> np.ndarray:
    """Camera-like frames: smooth shading, a soft blob that moves 5 px per frame, sensor noise (sigma 2)."""
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    out = np.empty((n, h, w, 3), np.uint8)
    for k in range(n):
        blob = 90 * np.exp(-((xx - 8 - 5 * k) ** 2 + (yy - h / 2) ** 2) / 40.0)
        shade = [120 + 50 * np.sin(2 * np.pi * (xx / w + c / 3)) + 30 * np.cos(2 * np.pi * yy / h) for c in range(3)]
        img = np.stack([shade[0] + blob, shade[1], shade[2] - 0.5 * blob], -1) + rng.normal(0, 2, (h, w, 3))
        out[k] = np.clip(img, 0, 255).astype(np.uint8)
    return out


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


def steps_with(images: np.ndarray) -> list[dict]:
    return [{"observation": {"state": np.full(4, k, np.float32), "image_primary": im},
             "action": np.full(7, k, np.float32), "stamp_ns": 1_000 + k * 200_000_000} for k, im in enumerate(images)]


@pytest.mark.parametrize("codec", ["h264", "av1"])
@pytest.mark.parametrize("hw", [(48, 64), (47, 63)])  # odd sizes: padded for yuv420p, cropped on decode
def test_store_round_trip_keeps_every_frame_in_order(tmp_path, codec, hw):
    images = frames(11, *hw)
    store = EpisodeStore(tmp_path, StoreConfig(image_codec=codec, chunk_steps=4))
    path = store.write_episode("t", "i", steps_with(images), success=True)
    ep = store.load(path.name)
    assert ep.meta.image_codec == {"observation/image_primary": codec}
    got = ep.observation["image_primary"]
    assert got.shape == images.shape and got.dtype == np.uint8
    for k in range(len(images)):
        assert psnr(got[k], images[k]) > 32.0, (k, psnr(got[k], images[k]))
        assert int(np.argmax([psnr(got[k], im) for im in images])) == k  # its own frame, not a neighbour
    np.testing.assert_array_equal(ep.steps["action"][:, 0], np.arange(11))


def test_video_is_much_smaller_than_png_for_camera_frames(tmp_path):
    images = frames(25, 96, 128)
    sizes = {}
    for codec in ("png", "h264"):
        store = EpisodeStore(tmp_path / codec, StoreConfig(image_codec=codec, chunk_steps=25))
        path = store.write_episode("t", "i", steps_with(images), success=True)
        sizes[codec] = sum(f.stat().st_size for f in path.glob("chunk-*.npz"))
    assert sizes["h264"] * 3 < sizes["png"], sizes


@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_a_crashed_video_episode_is_recovered_with_its_codec(tmp_path, codec):
    store = EpisodeStore(tmp_path, StoreConfig(image_codec=codec, chunk_steps=3, threaded=False))
    images = frames(7)
    w = store.begin("t", "crashed")
    for s in steps_with(images):
        w.add_step(s["observation"], s["action"], stamp_ns=s["stamp_ns"])
    w.close()  # the process died: two complete chunks on disk, step 6 only in memory
    result = store.recover(w.episode_id)
    assert result.action == "recovered" and result.num_steps == 6
    ep = store.load(w.episode_id)
    assert ep.meta.recovered and ep.meta.image_codec == {"observation/image_primary": codec}
    assert min(psnr(a, b) for a, b in zip(ep.observation["image_primary"], images[:6], strict=True)) > 32.0


def test_corrupt_video_bytes_and_bad_settings_get_clear_errors():
    good = codec_lib.encode_stack(frames(3), "h264")
    assert set(good) == {"@video", "@shape"} and good["@shape"].tolist() == [3, 48, 64]
    broken = {"k@video": good["@video"][: len(good["@video"]) // 3], "k@shape": good["@shape"]}
    with pytest.raises(ValueError, match="video chunk|corrupt"):
        codec_lib.decode_stack(broken, "k")
    with pytest.raises(ValueError, match="frames"):
        codec_lib.decode_stack({"k@video": good["@video"], "k@shape": np.array([4, 48, 64])}, "k")
    with pytest.raises(ValueError, match="RGB uint8"):
        codec_lib.encode_video(np.zeros((2, 8, 8), np.uint8), "h264")
    with pytest.raises(ValueError, match="video_crf"):
        StoreConfig(image_codec="h264", video_crf=60)
    StoreConfig(image_codec="av1", video_crf=60)


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="Linux scheduling API")
@pytest.mark.parametrize("codec", ["h264", "av1"])
def test_encoding_leaves_the_threads_scheduling_policy_alone(codec):
    """libsvtav1 switches the thread that opens it to SCHED_FIFO where it may (root): that wedged the ROS nodes
    this process started afterwards. encode_video restores the policy."""
    before = os.sched_getscheduler(0)
    codec_lib.encode_video(frames(2), codec)
    assert os.sched_getscheduler(0) == before
