"""The MuJoCo WidowX 250s (amf_ros/envs/widowx_sim/model.py) against the kinematics the driver's IK uses."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.envs.widowx_sim import model
from amf_ros.robots import wx250s
from amf_ros.robots.widowx import DEFAULT_ROTATION

mujoco = pytest.importorskip("mujoco")

CONTROL_PERIOD_S = 0.2  # BridgeData's 5 Hz


def _build(xml: str):
    m = mujoco.MjModel.from_xml_string(xml)
    d = mujoco.MjData(m)
    arm = [int(m.joint(n).qposadr[0]) for n in wx250s.ARM_JOINTS]
    return m, d, arm


def _steps(m, seconds: float) -> int:
    return int(round(seconds / m.opt.timestep))


def test_forward_kinematics_match_the_drivers_model_to_1mm():
    m, d, arm = _build(model.arm_only_xml())
    site = m.site(model.EE_SITE).id
    rng = np.random.default_rng(0)
    worst_pos = worst_rot = 0.0
    for _ in range(500):
        q = rng.uniform(wx250s.JOINT_LOWER, wx250s.JOINT_UPPER)
        d.qpos[arm] = q
        mujoco.mj_kinematics(m, d)
        T = wx250s.fk(q)
        worst_pos = max(worst_pos, float(np.linalg.norm(d.site_xpos[site] - T[:3, 3])))
        worst_rot = max(worst_rot, float(np.abs(d.site_xmat[site].reshape(3, 3) - T[:3, :3]).max()))
    assert worst_pos < 1e-3 and worst_rot < 1e-3, (worst_pos, worst_rot)


def test_joint_limits_and_finger_travel_are_the_drivers():
    m, _, _ = _build(model.arm_only_xml())
    for i, name in enumerate(wx250s.ARM_JOINTS):
        np.testing.assert_allclose(m.joint(name).range, [wx250s.JOINT_LOWER[i], wx250s.JOINT_UPPER[i]], atol=1e-6)
        np.testing.assert_allclose(m.actuator(model.ARM_ACTUATORS[i]).ctrlrange, m.joint(name).range, atol=1e-6)
    for finger in model.FINGER_JOINTS:
        np.testing.assert_allclose(m.joint(finger).range, wx250s.FINGER_LIMITS)


def test_position_actuators_track_5hz_joint_targets_like_the_servos():
    """A random walk of joint targets, one per control period (<= 0.08 rad per joint and step, below the
    servos' pi rad/s): each is reached to within 5 mrad before the next one comes."""
    m, d, arm = _build(model.arm_only_xml())
    q = wx250s.NEUTRAL_JOINTS.copy()
    d.qpos[arm] = q
    d.ctrl[:6] = q
    mujoco.mj_forward(m, d)
    rng = np.random.default_rng(1)
    errors = []
    for _ in range(30):
        q = np.clip(q + rng.uniform(-0.08, 0.08, 6), 0.8 * wx250s.JOINT_LOWER, 0.8 * wx250s.JOINT_UPPER)
        d.ctrl[:6] = q
        for _ in range(_steps(m, CONTROL_PERIOD_S)):
            mujoco.mj_step(m, d)
        errors.append(float(np.abs(d.qpos[arm] - q).max()))
    assert max(errors) < 5e-3, max(errors)


def _block_scene() -> str:
    """The arm on a plane (the table's collision bits) and a 3 cm block with an object's contact bits."""
    return f"""<mujoco><compiler angle="radian" autolimits="true"/>
      <option timestep="0.002" integrator="implicitfast" {model.CONTACT_OPTIONS}/>
      <default>{model.defaults_xml()}</default>
      <worldbody><geom name="table" type="plane" size="1 1 0.1" contype="1" conaffinity="1"/>{model.arm_xml()}
        <body name="block" pos="0.3 0.02 0.015"><freejoint/>
          <geom type="box" size="0.015 0.015 0.015" mass="0.05" {model.OBJECT_CONTACT} condim="4"/></body>
      </worldbody>{model.actuators_xml()}</mujoco>"""


def _drive(m, d, arm, q, targets, grip, substeps=5, on_step=None):
    """Move the tip along straight lines to each target (gripper down, driver IK), one 5 Hz period per substep."""
    site = m.site(model.EE_SITE).id
    for target in targets:
        start = d.site_xpos[site].copy()
        for i in range(1, substeps + 1):
            T = np.eye(4)
            T[:3, :3], T[:3, 3] = DEFAULT_ROTATION, start + (np.asarray(target) - start) * i / substeps
            sol = wx250s.ik(T, guess=q)
            assert sol.ok, target
            q = sol.q
            d.ctrl[:6], d.ctrl[6] = q, grip
            for _ in range(_steps(m, CONTROL_PERIOD_S)):
                mujoco.mj_step(m, d)
                if on_step is not None:
                    on_step()
    return q


def test_fingers_pressed_onto_the_table_still_close_and_only_the_fingertips_touch_it():
    """Menagerie-style contact: the tip aimed 5 mm below the table top stops on it (the frictionless fingertips
    carry the load; the high-friction pads never touch the table), and the fingers still close all the way."""
    table_xml = '<geom name="table" type="plane" size="1 1 0.1" contype="1" conaffinity="1"/>'
    m, d, arm = _build(model.arm_only_xml().replace("<worldbody>", "<worldbody>" + table_xml))
    left, right = (int(m.joint(f).qposadr[0]) for f in model.FINGER_JOINTS)
    q = wx250s.NEUTRAL_JOINTS.copy()
    d.qpos[arm], d.qpos[left], d.qpos[right] = q, 0.037, 0.037
    d.ctrl[:6], d.ctrl[6] = q, 0.037
    mujoco.mj_forward(m, d)
    table = m.geom("table").id
    touching = set()

    def record():
        for c in d.contact[: d.ncon]:
            if table in (c.geom1, c.geom2):
                touching.add(int(c.geom2 if c.geom1 == table else c.geom1))

    q = _drive(m, d, arm, q, [[0.3, -0.05, 0.05], [0.3, -0.05, -0.005]], 0.037, on_step=record)
    tip_z = d.site_xpos[m.site(model.EE_SITE).id][2]
    assert -0.002 < tip_z < 0.001, tip_z  # it stops on the table, pressing (soft contact: < 2 mm in)
    _drive(m, d, arm, q, [[0.3, -0.05, -0.005]], wx250s.FINGER_LIMITS[0], substeps=1, on_step=record)
    assert d.qpos[left] < wx250s.FINGER_LIMITS[0] + 1e-3 and d.qpos[right] < wx250s.FINGER_LIMITS[0] + 1e-3
    pads = {g for g in range(m.ngeom) if m.geom_contype[g] == 4}
    tips = {g for g in range(m.ngeom) if m.geom_condim[g] == 1 and m.geom_priority[g] == 1}
    assert len(pads) == 2 and len(tips) == 2
    assert touching and touching <= tips, (touching, tips)  # pads and links never touch the table here


def test_the_gripper_grasps_and_lifts_a_block_through_the_drivers_ik():
    """Gripper pointing down (BridgeData's zero rotation), IK from robots/wx250s.py: open, descend around a 3 cm
    block, close, lift 13 cm. The block comes up with the gripper; both fingers move together."""
    m, d, arm = _build(_block_scene())
    site = m.site(model.EE_SITE).id
    left, right = (int(m.joint(f).qposadr[0]) for f in model.FINGER_JOINTS)
    q = wx250s.NEUTRAL_JOINTS.copy()
    d.qpos[arm], d.qpos[left], d.qpos[right] = q, 0.037, 0.037
    d.ctrl[:6], d.ctrl[6] = q, 0.037
    mujoco.mj_forward(m, d)
    symmetry = []

    def move(target, grip, substeps=5):
        nonlocal q
        start = d.site_xpos[site].copy()
        for i in range(1, substeps + 1):
            T = np.eye(4)
            T[:3, :3], T[:3, 3] = DEFAULT_ROTATION, start + (np.asarray(target) - start) * i / substeps
            sol = wx250s.ik(T, guess=q)
            assert sol.ok, target
            q = sol.q
            d.ctrl[:6], d.ctrl[6] = q, grip
            for _ in range(_steps(m, CONTROL_PERIOD_S)):
                mujoco.mj_step(m, d)
            symmetry.append(abs(d.qpos[left] - d.qpos[right]))

    move([0.3, 0.02, 0.10], 0.037)
    move([0.3, 0.02, 0.012], 0.037)
    move([0.3, 0.02, 0.012], wx250s.FINGER_LIMITS[0], substeps=2)
    assert d.qpos[left] > wx250s.FINGER_LIMITS[0] + 0.005, "the fingers stop on the block"
    move([0.3, 0.02, 0.15], wx250s.FINGER_LIMITS[0])
    block = d.body("block").xpos
    assert block[2] > 0.12 and np.linalg.norm(block[:2] - d.site_xpos[site][:2]) < 0.01, block
    assert max(symmetry) < 2e-3, max(symmetry)
    print(f"block lifted to {block[2]:.3f} m; fingers apart by at most {1e3 * max(symmetry):.2f} mm")
