"""demo_recorder's input adapters without ROS: duck-typed messages in, validated messages/arrays out."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from amf_ros.runtime import recorder_inputs as inputs


def stamp():
    return SimpleNamespace(stamp=SimpleNamespace(sec=1, nanosec=5))


def test_eef_delta_and_state_pass_the_message_on_after_checking_it():
    act = SimpleNamespace(header=stamp(), translation=[0.01, 0.0, -0.02], rotation=[0.0, 0.1, 0.0], gripper=1.0)
    conv = inputs.ACTION_CONVERTERS["eef_delta"](0.2, 1.0)
    assert conv(act) is act
    bad = SimpleNamespace(header=stamp(), translation=[0.01, float("nan"), 0.0], rotation=[0, 0, 0], gripper=1.0)
    with pytest.raises(ValueError, match="NaN"):
        conv(bad)
    state = SimpleNamespace(header=stamp(), names=["a", "b"], values=[1.0, 2.0])
    assert inputs.STATE_CONVERTERS["state_vector"](state) is state
    with pytest.raises(ValueError, match="2 names but 1 values"):
        inputs.STATE_CONVERTERS["state_vector"](SimpleNamespace(header=stamp(), names=["a", "b"], values=[1.0]))
    joints = SimpleNamespace(header=stamp(), name=["j"], position=[float("inf")], velocity=[], effort=[])
    with pytest.raises(ValueError, match="NaN/inf"):
        inputs.STATE_CONVERTERS["joint_state"](joints)


def test_twist_is_integrated_over_one_control_period():
    conv = inputs.twist_to_eef7(period_s=0.2, gripper=0.0)
    msg = SimpleNamespace(header=stamp(), twist=SimpleNamespace(linear=SimpleNamespace(x=0.1, y=-0.05, z=0.0),
                                                                angular=SimpleNamespace(x=0.0, y=0.0, z=1.0)))
    np.testing.assert_allclose(conv(msg), [0.02, -0.01, 0.0, 0.0, 0.0, 0.2, 0.0], rtol=1e-6)
    assert conv(msg).dtype == np.float32
    with pytest.raises(ValueError, match="period_s"):
        inputs.twist_to_eef7(period_s=0.0, gripper=1.0)


def test_image_encodings_and_unsupported_encoding():
    rgb = np.arange(2 * 3 * 3, dtype=np.uint8).reshape(2, 3, 3)
    bgr = SimpleNamespace(header=stamp(), height=2, width=3, encoding="bgr8", is_bigendian=0, step=9,
             data=rgb[:, :, ::-1].tobytes())
    np.testing.assert_array_equal(inputs.image(bgr), rgb)
    yuv = SimpleNamespace(header=stamp(), height=2, width=3, encoding="yuv422", is_bigendian=0, step=6, data=bytes(12))
    with pytest.raises(ValueError, match="yuv422"):
        inputs.image(yuv)


def test_widowx_proprio_from_joint_states():
    from amf_ros.robots import wx250s

    names = list(wx250s.ARM_JOINTS) + [wx250s.FINGER_JOINT]
    msg = SimpleNamespace(header=stamp(), name=names, position=[0.0] * len(names), velocity=[], effort=[])
    proprio = inputs.widowx_proprio(msg)
    assert proprio.shape == (8,) and proprio.dtype == np.float32 and np.isfinite(proprio).all()
    with pytest.raises(ValueError, match="lacks arm joints"):
        inputs.widowx_proprio(SimpleNamespace(header=stamp(), name=["x"], position=[0.0], velocity=[], effort=[]))
