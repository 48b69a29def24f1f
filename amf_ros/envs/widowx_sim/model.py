"""A MuJoCo model of the WidowX 250 6DOF (wx250s), built from the kinematic facts in ``amf_ros/robots/wx250s.py``.

Why generated, not a copied URDF: the joint axes and their positions are read off the same screw axes ``SLIST``
and home pose ``M_HOME`` that the driver's IK uses, so the model and the IK cannot disagree (a test checks the
forward kinematics to 1 mm); the limits and finger travel are the same constants. Links are primitive capsules and
boxes sized from the published link lengths (shoulder 110.65 mm above the base, upper arm 250 mm with a 49.75 mm
offset, forearm 250 mm, wrist to gripper tip 158.575 mm). Every arm joint has a position actuator and gravity
compensation, as the Dynamixel servos tracking joint targets in the xs_sdk's position mode; the two fingers slide
symmetrically (an equality constraint) and one position actuator drives them, as the xs_sdk's gripper.

Frames: the model's ``base_link`` sits at ``base_pos`` in the world with the same orientation; joint values are
the Interbotix ones (``ARM_JOINTS`` order); the site ``ee_gripper`` is ``ee_gripper_link``.

Contact (the settings of MuJoCo Menagerie's ``trossen_wx250s``, not its files: elliptic friction cones and impratio 10
in the scene's ``<option>``, extra gripper collision geometry at the fingertips). Three collision groups, as
``contype``/``conaffinity`` bits: the table (1), the arm's links (2) and what a hand picks up (objects, 4 with 1):

- the finger pads (high friction) touch only objects (bit 4), never the table: a gripper pressed onto the table
  still closes, as a real one does when a teleoperator pushes the fingertips down to pick up a flat spoon;
- a frictionless fingertip under each pad (Menagerie adds small spheres at the fingertips, ``left_g0``/``left_g1``;
  here a 2 mm sole of the pad's footprint) touches the table and objects: the fingertips stop on what they press on
  and slide over it while the fingers close or open;
- links touch the table and objects, not each other.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from amf_ros.robots import wx250s

CONTACT_OPTIONS = 'cone="elliptic" impratio="10"'
"""Global contact options (Menagerie's trossen_wx250s): elliptic friction cones, friction 10x stiffer than normal
force in the solver (impratio), so a squeezed object does not creep out of the pads."""
ARM_ACTUATORS = tuple(f"{j}_pos" for j in wx250s.ARM_JOINTS)
GRIPPER_ACTUATOR = "gripper_pos"
EE_SITE = "ee_gripper"
FINGER_JOINTS = ("left_finger", "right_finger")
ARM_KP = 300.0  # N m / rad, with damping 10: a 5 Hz control step of <= 0.08 rad is tracked to < 1 mrad in 0.2 s
PAD_INSET = 0.009
"""Finger pad centre inside its finger frame (m): pad faces 1 mm apart when closed (finger at 0.015), 46 mm open."""
FINGER_KP = 400.0  # N / m: ~9 N squeeze at full travel, the gripper's order of magnitude
TIP = 0.002
"""Height of the fingertip (m): a frictionless sole under each pad, its lowest face at the ``ee_gripper`` tip.
Whatever the fingers press down on (the table, the top of a block) touches it, so the fingers still open and close;
the pads above it (38 mm long, 24 mm wide, 10 mm thick) grip."""
OBJECT_CONTACT = 'contype="5" conaffinity="5"'
"""Collision bits of anything the gripper may hold or touch (objects and receptacles): the pads touch only these."""

WRIST_CAMERA = "wrist"
"""Name of the camera on the gripper (prefixed as the arm's bodies): a wrist camera as on BridgeData's WidowX rigs."""
WRIST_CAMERA_POS = (0.0, 0.0, 0.07)
"""Its position in the gripper_link frame (m): 7 cm above the gripper's housing, between the fingers' roots."""
WRIST_CAMERA_LOOK = (0.18, 0.0, -0.02)
"""The point it looks at in the gripper_link frame: ahead of and below the fingertips, so the fingers, the object
being approached and what lies beyond are in view (chosen by eye; docs/ros-robot.md "A wrist camera")."""
WRIST_CAMERA_FOVY = 75.0
"""Its vertical field of view, degrees (a wide-angle wrist camera)."""


def wrist_camera_xml(prefix: str = "") -> str:
    """The ``<camera>`` element of the wrist camera (inside ``gripper_link``; it moves with the gripper). MuJoCo
    cameras look along their -z axis with +y up in the image: x is the gripper's -y (the image's right is the
    gripper's right seen from behind), y completes the frame."""
    pos, look = np.asarray(WRIST_CAMERA_POS), np.asarray(WRIST_CAMERA_LOOK)
    z = -(look - pos) / np.linalg.norm(look - pos)
    x = np.array([0.0, -1.0, 0.0]) - np.array([0.0, -1.0, 0.0]).dot(z) * z
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    axes = " ".join(f"{v:.5f}" for v in (*x, *y))
    return f'<camera name="{prefix}{WRIST_CAMERA}" pos="{_fmt(pos)}" xyaxes="{axes}" fovy="{WRIST_CAMERA_FOVY:g}"/>'


def joint_points() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Axis (3,) and one point on it (3,), in the base frame at the home pose, for every arm joint.

    A revolute screw axis [omega; v] has v = -omega x p for any point p on the axis; the point closest to the
    base origin is p = omega x v (|omega| = 1).
    """
    out = {}
    for i, name in enumerate(wx250s.ARM_JOINTS):
        omega, v = wx250s.SLIST[:3, i], wx250s.SLIST[3:, i]
        out[name] = (omega.copy(), np.cross(omega, v))
    return out


def _fmt(v: Sequence[float]) -> str:
    return " ".join(f"{float(x):.6g}" for x in v)


def arm_xml(base_pos: Sequence[float] = (0.0, 0.0, 0.0), prefix: str = "") -> str:
    """The arm as an MJCF ``<body>`` tree (to place in a ``<worldbody>``), with names prefixed by ``prefix``."""
    pts = joint_points()
    shoulder = pts["shoulder"][1]
    elbow, wrist = pts["elbow"][1], pts["wrist_angle"][1]  # y axes: the points are the links' ends
    # The roll axes run along x at the elbow's height; any point on them will do: inside the forearm and the wrist.
    roll = pts["forearm_roll"][1] + np.array([elbow[0] + 0.1, 0.0, 0.0])
    rotate = pts["wrist_rotate"][1] + np.array([wrist[0] + 0.065, 0.0, 0.0])
    ee = wx250s.M_HOME[:3, 3]
    lo, hi = wx250s.JOINT_LOWER, wx250s.JOINT_UPPER
    j = {n: i for i, n in enumerate(wx250s.ARM_JOINTS)}
    p = prefix

    def joint(name: str) -> str:
        return (f'<joint name="{p}{name}" axis="{_fmt(pts[name][0])}" range="{lo[j[name]]:.6f} {hi[j[name]]:.6f}" '
                f'class="wx_arm"/>')

    def finger(side: str, sign: int) -> str:
        """A finger sliding outward along ``sign`` * y, its pad inset toward the other finger."""
        fmin, fmax = wx250s.FINGER_LIMITS
        x = ee[0] - rotate[0] - 0.02  # the pads end at the tip (ee_gripper_link)
        y = -sign * PAD_INSET
        # gripper x points down the fingers: the pad spans [-0.02, 0.02 - TIP] of the finger frame, the tip below it
        return (f'<body name="{p}{side}_finger_link" pos="{x:.6g} 0 0" gravcomp="1">'
                f'<joint name="{p}{side}_finger" type="slide" axis="0 {sign} 0" range="{fmin} {fmax}" '
                f'class="wx_finger"/><geom class="wx_pad" type="box" size="{0.02 - TIP / 2:.6g} 0.005 0.012" '
                f'pos="{-TIP / 2:.6g} {y:.6g} 0" mass="0.03"/><geom class="wx_tip" type="box" '
                f'size="{TIP / 2:.6g} 0.005 0.012" pos="{0.02 - TIP / 2:.6g} {y:.6g} 0"/></body>')

    return f"""
    <body name="{p}base_link" pos="{_fmt(base_pos)}">
      <geom class="wx_link" type="box" size="0.06 0.06 0.0175" pos="0 0 0.0175" mass="0.5"/>
      <body name="{p}shoulder_link" gravcomp="1">
        {joint("waist")}
        <geom class="wx_link" type="cylinder" size="0.04 0.03" pos="0 0 0.065" mass="0.48"/>
        <body name="{p}upper_arm_link" pos="{_fmt(shoulder)}" gravcomp="1">
          {joint("shoulder")}
          <geom class="wx_link" type="capsule" size="0.022" fromto="0 0 0 {_fmt(elbow - shoulder)}" mass="0.43"/>
          <body name="{p}upper_forearm_link" pos="{_fmt(elbow - shoulder)}" gravcomp="1">
            {joint("elbow")}
            <geom class="wx_link" type="capsule" size="0.02" fromto="0 0 0 {_fmt(roll - elbow)}" mass="0.23"/>
            <body name="{p}lower_forearm_link" pos="{_fmt(roll - elbow)}" gravcomp="1">
              {joint("forearm_roll")}
              <geom class="wx_link" type="capsule" size="0.018" fromto="0 0 0 {_fmt(wrist - roll)}" mass="0.23"/>
              <body name="{p}wrist_link" pos="{_fmt(wrist - roll)}" gravcomp="1">
                {joint("wrist_angle")}
                <geom class="wx_link" type="capsule" size="0.018" fromto="0 0 0 {_fmt(rotate - wrist)}" mass="0.08"/>
                <body name="{p}gripper_link" pos="{_fmt(rotate - wrist)}" gravcomp="1">
                  {joint("wrist_rotate")}
                  <geom class="wx_link" type="box" size="0.025 0.045 0.02" pos="0.03 0 0" mass="0.1"/>
                  {wrist_camera_xml(p)}
                  <site name="{p}{EE_SITE}" pos="{_fmt(ee - rotate)}" size="0.004" rgba="1 0 0 1"/>
                  {finger("left", 1)}
                  {finger("right", -1)}
                </body>
              </body>
            </body>
          </body>
        </body>
      </body>
    </body>"""


def defaults_xml() -> str:
    """The ``<default>`` classes the arm uses (joint damping, link, finger-pad and fingertip contact).

    Links and fingertips have contype 2 and conaffinity 1: they touch the table and objects (contype 1) but not
    each other, as the real arm's links never meet within its joint limits. Pads have contype and conaffinity 4:
    they touch objects (:data:`OBJECT_CONTACT`) and nothing else (module doc)."""
    return """
    <default class="wx_arm"><joint damping="10.0" armature="0.05"/></default>
    <default class="wx_finger"><joint damping="5.0" armature="0.01"/></default>
    <default class="wx_link"><geom rgba="0.15 0.15 0.15 1" contype="2" conaffinity="1" group="1"/></default>
    <default class="wx_pad"><geom rgba="0.3 0.3 0.3 1" friction="1.5 0.01 0.001" condim="4" solref="0.01 1"
                                  contype="4" conaffinity="4" group="1"/></default>
    <default class="wx_tip"><geom rgba="0.2 0.2 0.2 1" condim="1" priority="1" mass="0.001"
                                  contype="2" conaffinity="1" group="1"/></default>"""


def actuators_xml(prefix: str = "") -> str:
    """Position actuators of the six arm joints and the gripper, plus the finger coupling: stiff (4 ms), as the
    real gripper's linkage, so a grasped object cannot push the fingers apart by more than about a millimetre."""
    lo, hi = wx250s.JOINT_LOWER, wx250s.JOINT_UPPER
    fmin, fmax = wx250s.FINGER_LIMITS
    p = prefix
    arm = "\n".join(
        f'<position name="{p}{a}" joint="{p}{jn}" kp="{ARM_KP}" ctrlrange="{lo[i]:.6f} {hi[i]:.6f}" '
        f'forcerange="-50 50"/>' for i, (a, jn) in enumerate(zip(ARM_ACTUATORS, wx250s.ARM_JOINTS, strict=True)))
    return f"""
  <equality><joint joint1="{p}right_finger" joint2="{p}left_finger" polycoef="0 1 0 0 0" solref="0.004 1"/></equality>
  <actuator>
    {arm}
    <position name="{p}{GRIPPER_ACTUATOR}" joint="{p}left_finger" kp="{FINGER_KP}" ctrlrange="{fmin} {fmax}"
              forcerange="-10 10"/>
  </actuator>"""


def arm_only_xml(base_pos: Sequence[float] = (0.0, 0.0, 0.0)) -> str:
    """A complete MJCF document holding only the arm (kinematics checks, tracking tests)."""
    return f"""<mujoco model="wx250s">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="0.002" integrator="implicitfast" {CONTACT_OPTIONS}/>
  <default>{defaults_xml()}</default>
  <worldbody>{arm_xml(base_pos)}
  </worldbody>{actuators_xml()}
</mujoco>"""
