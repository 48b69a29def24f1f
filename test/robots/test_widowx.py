"""wx250s kinematics (FK/IK round trip, Jacobian) and the real-arm adapter (BridgeData action semantics, limits)."""

import numpy as np
import pytest

from amf_ros.policies.postprocess import WorkspaceBounds
from amf_ros.robots import widowx, wx250s
from amf_ros.robots.kinematics import exp6, jacobian_space, log6, trans_inv

NAMES = [*wx250s.ARM_JOINTS, "gripper", "left_finger", "right_finger"]


def _js(q, finger=0.037):
    return NAMES, [*q, 0.0, finger, -finger]


def test_fk_home_and_waist_rotation():
    np.testing.assert_allclose(wx250s.fk(np.zeros(6)), wx250s.M_HOME, atol=1e-12)
    T = wx250s.fk(np.array([np.pi / 2, 0, 0, 0, 0, 0]))
    np.testing.assert_allclose(T[:3, 3], [0.0, 0.458325, 0.36065], atol=1e-9)
    # elbow/shoulder geometry: rotating the wrist_angle joint by +90 deg points the gripper down (+y axis rotation)
    T = wx250s.fk(np.array([0, 0, 0, 0, np.pi / 2, 0]))
    np.testing.assert_allclose(T[:3, 0], [0, 0, -1], atol=1e-9)


def test_space_jacobian_matches_finite_differences():
    q = np.array([0.3, -0.4, 0.5, 0.2, 1.0, -0.3])
    J = jacobian_space(wx250s.SLIST, q)
    T0 = wx250s.fk(q)
    eps = 1e-6
    for i in range(6):
        dq = q.copy()
        dq[i] += eps
        twist = log6(wx250s.fk(dq) @ trans_inv(T0)) / eps  # space-frame twist
        np.testing.assert_allclose(twist, J[:, i], atol=1e-4)


def test_exp6_log6_inverse():
    S = np.array([0.0, 1.0, 0.0, -0.36, 0.0, 0.05])
    T = exp6(S, 0.7)
    np.testing.assert_allclose(log6(T), S * 0.7, atol=1e-10)


def test_ik_round_trip_random_reachable_poses():
    rng = np.random.default_rng(0)
    solved = 0
    for _ in range(15):
        q = rng.uniform(wx250s.JOINT_LOWER * 0.6, wx250s.JOINT_UPPER * 0.6)
        T = wx250s.fk(q)
        res = wx250s.ik(T, guess=q + rng.normal(0, 0.1, 6))
        assert res.ok, q
        np.testing.assert_allclose(wx250s.fk(res.q), T, atol=2e-3)
        assert wx250s.within_limits(res.q)
        solved += 1
    assert solved == 15
    far = np.eye(4)
    far[:3, 3] = [1.0, 0.0, 0.3]  # 1 m away: out of reach
    assert not wx250s.ik(far).ok


def test_state_conventions():
    T = widowx.state_to_pose([0.3, 0.0, 0.15, 0.0, 0.0, 0.0])
    np.testing.assert_allclose(T[:3, :3], widowx.DEFAULT_ROTATION)
    s = np.array([0.25, -0.05, 0.1, 0.1, -0.2, 0.3])
    np.testing.assert_allclose(widowx.pose_to_state(widowx.state_to_pose(s), 0.4), [*s, 0.4], atol=1e-12)
    p = widowx.proprio(widowx.state_to_pose(s), 0.4)
    assert p.shape == (8,) and p[6] == 0.0 and p[7] == 0.4
    q, g = widowx.parse_joint_state(*_js(np.zeros(6), finger=0.026))
    assert g == pytest.approx(0.5)
    with pytest.raises(ValueError, match="lacks arm joints"):
        widowx.parse_joint_state(["waist"], [0.0])


def _adapter_at(state, **limits):
    res = wx250s.ik(widowx.state_to_pose(state), guess=wx250s.NEUTRAL_JOINTS)
    assert res.ok
    ad = widowx.WidowXAdapter(widowx.WidowXLimits(**limits))
    ad.observe(*_js(res.q))
    return ad


def test_adapter_translation_and_rotation_follow_bridge_semantics():
    ad = _adapter_at([0.3, 0.0, 0.15, 0, 0, 0], max_joint_speed=3.0)
    cmd = ad.apply([0.01, -0.02, 0.005, 0, 0, 0, 1.0])
    s = widowx.pose_to_state(wx250s.fk(cmd.arm), 1.0)
    np.testing.assert_allclose(s[:3], [0.31, -0.02, 0.155], atol=2e-3)
    assert cmd.ik_ok and cmd.gripper_open and cmd.gripper_pwm > 0
    ad.observe(*_js(cmd.arm))
    cmd = ad.apply([0, 0, 0, 0, 0, 0.2, 0.0])  # yaw about the end effector: position stays, yaw += 0.2
    s2 = widowx.pose_to_state(wx250s.fk(cmd.arm), 0.0)
    np.testing.assert_allclose(s2[:3], s[:3], atol=2e-3)
    assert s2[5] == pytest.approx(s[5] + 0.2, abs=3e-3)
    assert not cmd.gripper_open and cmd.gripper_pwm < 0


def test_adapter_workspace_delta_and_speed_limits():
    ad = _adapter_at([0.3, 0.0, 0.15, 0, 0, 0],
                     workspace=WorkspaceBounds(low=(0.1, -0.15, 0.14), high=(0.45, 0.25, 0.25)), max_joint_speed=3.0)
    cmd = ad.apply([0.0, 0.0, -0.04, 0, 0, 0, 1.0])
    assert cmd.workspace_clipped
    assert wx250s.fk(cmd.arm)[2, 3] == pytest.approx(0.14, abs=2e-3)
    ad = _adapter_at([0.3, 0.0, 0.15, 0, 0, 0], max_joint_speed=3.0)
    cmd = ad.apply([0.5, 0, 0, 0, 0, 0, 1.0])  # per-step bound: 0.05 m
    assert wx250s.fk(cmd.arm)[0, 3] == pytest.approx(0.35, abs=2e-3)
    ad = _adapter_at([0.3, 0.0, 0.15, 0, 0, 0], max_joint_speed=0.1, period_s=0.2)
    q0 = ad.q.copy()
    cmd = ad.apply([0.05, 0, 0, 0, 0, 0, 1.0])
    assert cmd.speed_limited
    assert np.max(np.abs(cmd.arm - q0)) == pytest.approx(0.02, abs=1e-9)


def test_adapter_emergency_stop_and_ik_failure():
    ad = _adapter_at([0.3, 0.0, 0.15, 0, 0, 0])
    ad.emergency_stop(True)
    assert ad.stopped and ad.apply([0.01, 0, 0, 0, 0, 0, 1]) is None
    hold = ad.hold_command()
    np.testing.assert_allclose(hold.arm, ad.q)
    ad.emergency_stop(False)
    assert ad.apply([0.01, 0, 0, 0, 0, 0, 1]) is not None
    big = WorkspaceBounds(low=(-2, -2, -2), high=(2, 2, 2), max_translation=1.0)
    ad = _adapter_at([0.3, 0.0, 0.15, 0, 0, 0], workspace=big)
    last = ad.q.copy()
    cmd = ad.apply([0.9, 0, 0, 0, 0, 0, 1])  # 1.2 m away: unreachable -> hold
    assert not cmd.ik_ok
    np.testing.assert_allclose(cmd.arm, last)
    with pytest.raises(ValueError, match="7 finite"):
        ad.apply([0.0] * 6)
