"""Action post-processing against hand-computed cases (Octo WidowX eval and SimplerEnv's Octo wrapper)."""

import math

import numpy as np
import pytest

from amf_ros.policies.postprocess import (
    ActionPostprocessor,
    PostprocessConfig,
    StickyGripper,
    TemporalEnsembler,
    WorkspaceBounds,
    axis_angle_to_rpy,
    eef7_to_simpler,
    gripper_to_simpler,
    matrix_to_rpy,
    normalize_actions,
    rpy_to_axis_angle,
    rpy_to_matrix,
    simpler_to_eef7,
    unnormalize_actions,
)

STATS = {"mean": [0.1, 0.2, 0.3, 0.0, 0.0, 0.0, 0.5], "std": [2.0, 1.0, 0.5, 1.0, 1.0, 1.0, 0.4],
         "mask": [True] * 6 + [False]}


def test_unnormalize_leaves_masked_gripper_raw_and_drops_padding_dims():
    a = np.array([[1.0, 1.0, 2.0, -1.0, 0.0, 3.0, 0.7, 99.0]])  # one padding dim beyond the 7 stats dims
    out = unnormalize_actions(a, STATS)
    np.testing.assert_allclose(out, [[2.1, 1.2, 1.3, -1.0, 0.0, 3.0, 0.7]])
    out_all = unnormalize_actions(a, STATS, mask_mode="all")  # SimplerEnv: gripper un-normalised too
    assert out_all[0, 6] == pytest.approx(0.7 * 0.4 + 0.5)


def test_unnormalize_bounds_and_roundtrip():
    stats = {"p01": [-1.0, 0.0], "p99": [1.0, 4.0], "mask": [True, True]}
    np.testing.assert_allclose(unnormalize_actions([[-1.0, 0.5]], stats, "bounds"), [[-1.0, 3.0]])
    x = np.array([[0.3, -0.2, 1.1, 0.0, 0.5, -0.5, 1.0]])
    back = unnormalize_actions(normalize_actions(x, STATS), STATS)
    np.testing.assert_allclose(back, x, atol=1e-7)
    with pytest.raises(ValueError, match="mask_mode"):
        unnormalize_actions(x, STATS, mask_mode="bogus")


def test_temporal_ensembler_uniform_hand_computed():
    ens = TemporalEnsembler(horizon=4, exp_weight=0.0)
    chunks = [np.arange(1, 5, dtype=float)[:, None] * 10 ** k for k in range(5)]  # chunk k = [1,2,3,4] * 10^k
    outs = [ens.add(c)[0] for c in chunks]
    assert outs[0] == 1.0
    assert outs[1] == pytest.approx((2 + 10) / 2)            # chunk0 row1, chunk1 row0
    assert outs[2] == pytest.approx((3 + 20 + 100) / 3)
    assert outs[3] == pytest.approx((4 + 30 + 200 + 1000) / 4)
    assert outs[4] == pytest.approx((40 + 300 + 2000 + 10000) / 4)  # chunk0 dropped (horizon 4)
    ens.reset()
    assert len(ens) == 0 and ens.add(chunks[3])[0] == 1000.0


def test_temporal_ensembler_exp_weight_favours_older_chunks():
    ens = TemporalEnsembler(horizon=4, exp_weight=math.log(2.0))
    ens.add(np.array([[0.0], [2.0], [0.0], [0.0]]))
    out = ens.add(np.array([[10.0], [0.0], [0.0], [0.0]]))
    assert out[0] == pytest.approx((1.0 * 2.0 + 0.5 * 10.0) / 1.5)  # oldest weight 1, newest weight 1/2
    with pytest.raises(ValueError, match="chunk"):
        ens.add(np.zeros((3, 1)))


def test_sticky_gripper():
    g = StickyGripper(num_steps=1)
    assert [g(v) for v in (0.9, 0.2, 0.6, 0.4)] == [1.0, 0.0, 1.0, 0.0]
    g = StickyGripper(num_steps=2)
    assert [g(v) for v in (0.2, 0.9, 0.2, 0.2, 0.9, 0.1)] == [1.0, 1.0, 1.0, 0.0, 0.0, 0.0]


def test_rpy_to_axis_angle_hand_computed():
    np.testing.assert_allclose(rpy_to_axis_angle([0.3, 0, 0]), [0.3, 0, 0], atol=1e-12)
    np.testing.assert_allclose(rpy_to_axis_angle([-0.3, 0, 0]), [-0.3, 0, 0], atol=1e-12)
    np.testing.assert_allclose(rpy_to_axis_angle([0, 0, 0.2]), [0, 0, 0.2], atol=1e-12)
    np.testing.assert_allclose(rpy_to_axis_angle([0, 0, 0]), [0, 0, 0])
    # roll = pitch = pi/2: Rz(0) Ry(pi/2) Rx(pi/2) is a 120 deg rotation about (1, 1, -1)/sqrt(3)... check by
    # quaternion product by hand: qy*qx = (c c, c s, s c, -s s) with c = s = sqrt(1/2) -> (1/2, 1/2, 1/2, -1/2)
    v = rpy_to_axis_angle([math.pi / 2, math.pi / 2, 0])
    np.testing.assert_allclose(v, np.array([1, 1, -1]) / math.sqrt(3) * (2 * math.pi / 3), atol=1e-12)


def test_rotation_conversions_agree():
    rng = np.random.default_rng(0)
    for rpy in rng.uniform(-1.0, 1.0, size=(20, 3)):
        R = rpy_to_matrix(rpy)
        np.testing.assert_allclose(matrix_to_rpy(R), rpy, atol=1e-10)
        np.testing.assert_allclose(axis_angle_to_rpy(rpy_to_axis_angle(rpy)), rpy, atol=1e-10)
    # rpy_to_matrix is Rz @ Ry @ Rx: a pure yaw of 90 deg maps x to y
    np.testing.assert_allclose(rpy_to_matrix([0, 0, math.pi / 2]) @ [1, 0, 0], [0, 1, 0], atol=1e-12)


def test_simpler_conversion_and_gripper():
    assert gripper_to_simpler(0.51) == 1.0 and gripper_to_simpler(0.5) == -1.0
    a = np.array([0.01, -0.02, 0.03, 0.1, 0.0, 0.0, 0.9])
    s = eef7_to_simpler(a)
    np.testing.assert_allclose(s, [0.01, -0.02, 0.03, 0.1, 0.0, 0.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(simpler_to_eef7(s), [0.01, -0.02, 0.03, 0.1, 0, 0, 1.0], atol=1e-12)


def test_workspace_bounds():
    wb = WorkspaceBounds()
    np.testing.assert_allclose(wb.clip_position([0.0, 0.0, 0.5]), [0.1, 0.0, 0.25])
    np.testing.assert_allclose(wb.clip_delta([0.1, -0.1, 0.0, 1.0, 0.0, -1.0, 2.0]),
                               [0.05, -0.05, 0.0, 0.25, 0.0, -0.25, 1.0])
    with pytest.raises(ValueError, match="low < high"):
        WorkspaceBounds(low=(0.5, 0, 0), high=(0.4, 1, 1))


def test_pipeline_widowx_and_simpler():
    chunk = np.zeros((4, 7))
    chunk[:, 0] = 1.0   # normalised +1 std in x -> 0.1 + 2.0
    chunk[:, 6] = 0.2   # gripper raw (mask False) -> closes
    pp = ActionPostprocessor(PostprocessConfig(target="widowx", stats=STATS))
    out = pp(chunk)
    np.testing.assert_allclose(out, [2.1, 0.2, 0.3, 0, 0, 0, 0.0])
    pp = ActionPostprocessor(PostprocessConfig(target="simpler", stats=STATS))
    np.testing.assert_allclose(pp(chunk), [2.1, 0.2, 0.3, 0, 0, 0, -1.0])
    # SimplerEnv's octo_model.py un-normalises the gripper too: 0.2 * 0.4 + 0.5 = 0.58 > 0.5 -> open (+1)
    pp = ActionPostprocessor(PostprocessConfig(target="simpler", stats=STATS, mask_mode="all"))
    assert pp(chunk)[6] == 1.0
