"""Action spaces of policies (amf_ros/policies/action_spaces.py): Metaworld's native action <-> the wire action."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.policies.action_spaces import (
    METRES_PER_UNIT,
    action_space,
    eef7_to_native,
    native_to_eef7,
)


def test_action_conversion_scale_and_round_trip() -> None:
    a4 = np.array([0.5, -1.0, 0.25, -1.0])  # grab -1 = open
    a7 = native_to_eef7(a4)
    np.testing.assert_allclose(a7[:3], [0.005, -0.01, 0.0025])
    np.testing.assert_allclose(a7[3:6], 0.0)
    assert a7[6] == pytest.approx(1.0), "open gripper must map to 1"
    assert native_to_eef7(np.array([0, 0, 0, 1.0]))[6] == pytest.approx(0.0)
    rng = np.random.default_rng(0)
    for _ in range(20):
        x = rng.uniform(-1, 1, size=4)
        np.testing.assert_allclose(eef7_to_native(native_to_eef7(x)), x, atol=1e-12)
    # Out-of-range wire actions saturate like the arm does; rotation is ignored.
    big = np.array([0.05, 0, 0, 0.3, 0.3, 0.3, 0.5])
    np.testing.assert_allclose(eef7_to_native(big), [1.0, 0, 0, 0.0])
    assert METRES_PER_UNIT == 0.01
    with pytest.raises(ValueError, match=r"\(7,\)"):
        eef7_to_native(np.zeros(4))
    with pytest.raises(ValueError, match=r"\(4,\)"):
        native_to_eef7(np.zeros(7))


def test_the_registry_converts_recorded_wire_actions_to_each_space() -> None:
    rng = np.random.default_rng(1)
    native = rng.uniform(-0.9, 0.9, size=(5, 4))
    wire = np.stack([native_to_eef7(a) for a in native]).astype(np.float32)
    np.testing.assert_allclose(action_space("metaworld").from_wire_rows(wire), native, atol=1e-5)
    assert action_space("metaworld").from_wire_rows(wire).dtype == np.float32
    np.testing.assert_array_equal(action_space("eef7").from_wire_rows(wire), wire)
    np.testing.assert_array_equal(action_space("metaworld").to_wire(native[0]), native_to_eef7(native[0]))
    with pytest.raises(ValueError, match="7-D"):
        action_space("eef7").to_wire(np.zeros(4))
    with pytest.raises(ValueError, match="action_space must be one of"):
        action_space("joint")
