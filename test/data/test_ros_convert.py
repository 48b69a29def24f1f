"""Duck-typed message conversion: image encodings, compressed images, states, actions, rclpy messages."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
from build_products import missing_build_product
from data_helpers import header

from amf_ros._optional import has
from amf_ros.data import ros_convert as rc
from amf_ros.data.codec import encode_image

RGB = np.random.default_rng(0).integers(0, 256, (5, 7, 3), dtype=np.uint8)


def blank_image() -> SimpleNamespace:
    return SimpleNamespace(header=header(0), height=0, width=0, encoding="", is_bigendian=0, step=0, data=b"")


@pytest.mark.parametrize("encoding", ["rgb8", "bgr8", "rgba8", "bgra8"])
def test_color_encodings_round_trip(encoding):
    msg = rc.fill_image(blank_image(), RGB, encoding)
    assert rc.message_kind(msg) == "image"
    np.testing.assert_array_equal(rc.image_to_rgb(msg), RGB)


def test_mono8_is_replicated_and_row_padding_is_honoured():
    gray = RGB[:, :, 0]
    padded = np.zeros((5, 9), np.uint8)
    padded[:, :7] = gray
    msg = SimpleNamespace(header=header(0), height=5, width=7, encoding="mono8", is_bigendian=0, step=9,
             data=padded.tobytes())
    out = rc.image_to_rgb(msg)
    assert out.shape == (5, 7, 3)
    for c in range(3):
        np.testing.assert_array_equal(out[:, :, c], gray)


@pytest.mark.parametrize("encoding", ["yuv422", "16UC1", "bayer_rggb8"])
def test_unsupported_encoding_is_named(encoding):
    msg = SimpleNamespace(header=header(0), height=2, width=2, encoding=encoding, is_bigendian=0, step=4, data=bytes(8))
    with pytest.raises(ValueError, match=encoding):
        rc.image_to_rgb(msg)


def test_truncated_image_data():
    msg = rc.fill_image(blank_image(), RGB)
    msg.data = msg.data[:-1]
    with pytest.raises(ValueError, match="bytes"):
        rc.image_to_rgb(msg)


@pytest.mark.parametrize("codec", ["png", "jpeg"])
def test_compressed_image(codec):
    # A smooth image with distinct channels: JPEG keeps it within a few levels, and a channel swap would not.
    yy, xx = np.mgrid[0:32, 0:48]
    smooth = np.stack([xx * 5, yy * 7, np.full_like(xx, 200)], axis=2).astype(np.uint8)
    msg = SimpleNamespace(header=header(0), format=codec, data=encode_image(smooth, codec, jpeg_quality=95))
    kind, arr, _ = rc.to_array(msg)
    assert kind == "compressed_image" and arr.shape == smooth.shape
    assert np.abs(arr.astype(int) - smooth).max() <= (0 if codec == "png" else 12)
    msg.data = b"not an image"
    with pytest.raises(ValueError, match="CompressedImage"):
        rc.to_array(msg)


def test_states_actions_and_stamps():
    js = SimpleNamespace(header=header(1_500_000_000), name=["waist", "shoulder"], position=[0.1, -0.2], velocity=[],
                         effort=[])
    assert rc.stamp_ns(js) == 1_500_000_000
    kind, arr, names = rc.to_array(js)
    assert kind == "joint_state" and names == ["waist", "shoulder"] and arr.tolist() == [0.1, -0.2]
    sv = SimpleNamespace(header=header(0), names=["a"], values=[3.0])
    assert rc.to_array(sv)[0] == "state_vector"
    act = SimpleNamespace(header=header(0), translation=[1, 2, 3], rotation=[4, 5, 6], gripper=0.0)
    kind, arr, _ = rc.to_array(act)
    assert kind == "eef_delta_action" and arr.dtype == np.float32 and arr.tolist() == [1, 2, 3, 4, 5, 6, 0]
    with pytest.raises(ValueError, match="names"):
        rc.to_array(SimpleNamespace(header=header(0), names=["a", "b"], values=[1.0]))
    with pytest.raises(ValueError, match="unsupported message type"):
        rc.message_kind(SimpleNamespace(foo=1))


def test_rclpy_messages():
    if not has("sensor_msgs"):  # the ROS 2 wheels of scripts/setup.sh
        missing_build_product("ROS 2 message packages not installed (run scripts/setup.sh)")
    from sensor_msgs.msg import CompressedImage, Image, JointState

    img = rc.fill_image(Image(), RGB, "bgr8")
    np.testing.assert_array_equal(rc.image_to_rgb(img), RGB)
    img.encoding = "yuv422"
    with pytest.raises(ValueError, match="yuv422"):
        rc.image_to_rgb(img)
    comp = CompressedImage(format="png", data=encode_image(RGB, "png"))
    np.testing.assert_array_equal(rc.to_array(comp)[1], RGB)
    js = JointState(name=["a", "b"], position=[1.0, 2.0])
    js.header.stamp.sec, js.header.stamp.nanosec = 3, 7
    assert rc.stamp_ns(js) == 3_000_000_007 and rc.to_array(js)[1].tolist() == [1.0, 2.0]
    try:
        from amf_ros.msg import EefDeltaAction, StateVector
    except ImportError:
        missing_build_product("amf_ros interfaces not built (run scripts/setup.sh)")
    a = EefDeltaAction(translation=[0.01, 0.0, -0.01], rotation=[0.0, 0.1, 0.0], gripper=1.0)
    np.testing.assert_allclose(rc.to_array(a)[1], [0.01, 0, -0.01, 0, 0.1, 0, 1], rtol=1e-6)
    assert rc.to_array(StateVector(names=["x"], values=[2.0]))[1].tolist() == [2.0]
