"""The Interbotix WidowX 250 6DOF (wx250s): kinematic model and joint limits.

Sources (read, not copied): Interbotix ``interbotix_xs_modules/xs_robot/mr_descriptions.py`` class ``wx250s``
(screw axes ``Slist`` and home pose ``M`` of ``ee_gripper_link`` in ``base_link``), joint limits from
``interbotix_xsarm_descriptions/urdf/wx250s.urdf.xacro`` and joint order from ``interbotix_xsarm_control/config/
wx250s.yaml``. The same robot is the one BridgeData V2 and Octo's WidowX evaluation use.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from amf_ros.robots.kinematics import fk_space, ik_space, wrap_angles

ARM_JOINTS = ("waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate")
"""Joint order of the ``arm`` group (JointGroupCommand.cmd and the IK solution)."""
GRIPPER_JOINT = "gripper"
FINGER_JOINT = "left_finger"
"""Prismatic finger joint reported in joint_states; its position (m) measures the gripper opening."""

# Columns [omega; v] of the space-frame screw axes (mr_descriptions.py wx250s, transposed there too).
SLIST = np.array([[0.0, 0.0, 1.0, 0.0, 0.0, 0.0],
                  [0.0, 1.0, 0.0, -0.11065, 0.0, 0.0],
                  [0.0, 1.0, 0.0, -0.36065, 0.0, 0.04975],
                  [1.0, 0.0, 0.0, 0.0, 0.36065, 0.0],
                  [0.0, 1.0, 0.0, -0.36065, 0.0, 0.29975],
                  [1.0, 0.0, 0.0, 0.0, 0.36065, 0.0]]).T
M_HOME = np.array([[1.0, 0.0, 0.0, 0.458325],
                   [0.0, 1.0, 0.0, 0.0],
                   [0.0, 0.0, 1.0, 0.36065],
                   [0.0, 0.0, 0.0, 1.0]])

_PI_OFFSET = 1e-5
JOINT_LOWER = np.array([-np.pi + _PI_OFFSET, np.radians(-108), np.radians(-123), -np.pi + _PI_OFFSET,
                        np.radians(-100), -np.pi + _PI_OFFSET])
JOINT_UPPER = np.array([np.pi - _PI_OFFSET, np.radians(114), np.radians(92), np.pi - _PI_OFFSET,
                        np.radians(123), np.pi - _PI_OFFSET])
JOINT_VELOCITY_LIMIT = np.full(6, np.pi)
"""URDF velocity limits, rad/s (every arm joint: pi)."""
FINGER_LIMITS = (0.015, 0.037)
"""left_finger travel, metres (closed, open), from the URDF."""

# Interbotix' IK seeds (arm.py: zeros, waist -120 deg, waist +120 deg) plus BridgeData's neutral pose.
NEUTRAL_JOINTS = np.array([-0.13192235, -0.76238847, 0.44485444, -0.01994175, 1.7564081, -0.15953401])
IK_SEEDS = (NEUTRAL_JOINTS, np.zeros(6), np.array([np.radians(-120), 0, 0, 0, 0, 0]),
            np.array([np.radians(120), 0, 0, 0, 0, 0]))


def fk(q: np.ndarray) -> np.ndarray:
    """Pose (4, 4) of ``ee_gripper_link`` in ``base_link`` for arm joints q (6,)."""
    q = np.asarray(q, dtype=float)
    if q.shape != (6,):
        raise ValueError(f"wx250s has 6 arm joints, got {q.shape=}")
    return fk_space(M_HOME, SLIST, q)


def within_limits(q: np.ndarray, tol: float = 1e-3) -> bool:
    """True if every joint of q (6,) is inside its URDF limits (Interbotix rounds to 1e-3 rad)."""
    q = np.asarray(q, dtype=float)
    return bool(np.all(q >= JOINT_LOWER - tol) and np.all(q <= JOINT_UPPER + tol))


@dataclass
class IKResult:
    """Outcome of :func:`ik`: joints (6,), whether a solution within limits was found, and the seed used."""

    q: np.ndarray
    ok: bool
    seed_index: int


def ik(T_target: np.ndarray, guess: np.ndarray | None = None, eomg: float = 1e-3, ev: float = 1e-3) -> IKResult:
    """Joint angles reaching ``T_target`` (4, 4), within joint limits; tries ``guess`` first, then IK_SEEDS.

    Mirrors ``InterbotixArmXSInterface.set_ee_pose_matrix``: modern-robotics IK per seed, wrap angles, and
    reject solutions outside the limits.
    """
    T = np.asarray(T_target, dtype=float)
    if T.shape != (4, 4):
        raise ValueError(f"target pose must be (4, 4), got {T.shape=}")
    seeds = ([np.asarray(guess, float)] if guess is not None else []) + list(IK_SEEDS)
    q = seeds[0]
    for i, seed in enumerate(seeds):
        q, converged = ik_space(SLIST, M_HOME, T, seed, eomg=eomg, ev=ev)
        if converged:
            q = wrap_angles(q)
            if within_limits(q):
                return IKResult(q=q, ok=True, seed_index=i)
    return IKResult(q=q, ok=False, seed_index=-1)


def finger_to_gripper(finger_position: float) -> float:
    """left_finger position (m) -> normalised opening in [0, 1] (1 = open), BridgeData's gripper state."""
    lo, hi = FINGER_LIMITS
    return float(np.clip((finger_position - lo) / (hi - lo), 0.0, 1.0))
