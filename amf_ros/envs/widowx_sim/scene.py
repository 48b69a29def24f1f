"""A Bridge-style tabletop with the WidowX 250s (model.py) and primitive objects, and the arm as the xs_sdk sees it.

Why here: SIMPLER's WidowX scenes need a Vulkan GPU; this one runs on any CPU with MuJoCo (OSMesa for the camera).
The table top is the plane z = 0 of the robot's ``base_link`` frame (the arm stands on the table, as on the real
Bridge setup). The objects (:mod:`amf_ros.envs.widowx_sim.objects`) the gripper moves are free bodies; the
receptacles are fixed bodies placed at every reset, so a nudge never sends them off the table. Contact follows
MuJoCo Menagerie's wx250s (elliptic cones, impratio 10; :mod:`amf_ros.envs.widowx_sim.model`).

:class:`SimArm` is the arm's side of the Interbotix ``xs_sdk`` in position mode: ``joint_states()`` (names,
positions, velocities: the six arm joints and ``left_finger``/``right_finger`` in metres), ``command_arm(q)`` (the
``arm`` group command) and ``command_gripper(pwm)`` (the gripper's signed PWM: > 0 opens, < 0 closes, 0 holds),
then ``advance(seconds)`` of physics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from amf_ros.envs.widowx_sim import model
from amf_ros.envs.widowx_sim.objects import BODIES
from amf_ros.robots import wx250s

TIMESTEP_S = 0.002
TABLE_HALF = (0.35, 0.45)
"""Half extents (x, y) of the table top around (0.3, 0), metres."""


def scene_xml(bodies: Sequence[str], camera: bool = True) -> str:
    """A complete MJCF document: table, arm at the origin, the named objects (placed at reset), a camera."""
    parts = []
    for name in bodies:
        b = BODIES[name]
        joint = f'<freejoint name="{name}"/>' if b.free else ""
        parts.append(f'<body name="{name}" pos="0.3 0 {b.half_height}">{joint}{b.geoms}</body>')
    cam = ('<camera name="primary" pos="0.85 0.0 0.55" xyaxes="0 1 0 -0.55 0 0.835" fovy="50"/>' if camera else "")
    return f"""<mujoco model="wx250s_tabletop">
  <compiler angle="radian" autolimits="true"/>
  <option timestep="{TIMESTEP_S}" integrator="implicitfast" {model.CONTACT_OPTIONS}/>
  <visual><global offwidth="640" offheight="480"/><quality shadowsize="0"/></visual>
  <default>{model.defaults_xml()}</default>
  <worldbody>
    <light pos="0.3 0 1.5" dir="0 0 -1" diffuse="0.8 0.8 0.8"/>
    <geom name="table" type="box" size="{TABLE_HALF[0]} {TABLE_HALF[1]} 0.01" pos="0.3 0 -0.01"
          rgba="0.72 0.6 0.45 1" contype="1" conaffinity="1" friction="1 0.01 0.001"/>
    <geom name="floor" type="plane" size="2 2 0.1" pos="0 0 -0.75" rgba="0.5 0.5 0.5 1"/>
    {cam}
    {model.arm_xml()}
    {"".join(parts)}
  </worldbody>{model.actuators_xml()}
</mujoco>"""


class SimArm:
    """The wx250s in a tabletop scene, driven like the xs_sdk in position mode (see module doc).

    Args:
        bodies: objects of the scene (keys of :data:`BODIES`).
        camera: include the ``primary`` camera (256x256 renders through OSMesa on a CPU).
    """

    JOINT_NAMES = (*wx250s.ARM_JOINTS, *model.FINGER_JOINTS)

    def __init__(self, bodies: Sequence[str], camera: bool = True) -> None:
        import mujoco

        self._mj = mujoco
        self.bodies = tuple(bodies)
        self.m = mujoco.MjModel.from_xml_string(scene_xml(self.bodies, camera))
        self.d = mujoco.MjData(self.m)
        self._arm_q = [int(self.m.joint(n).qposadr[0]) for n in wx250s.ARM_JOINTS]
        self._arm_v = [int(self.m.joint(n).dofadr[0]) for n in wx250s.ARM_JOINTS]
        self._fingers_q = [int(self.m.joint(n).qposadr[0]) for n in model.FINGER_JOINTS]
        self._fingers_v = [int(self.m.joint(n).dofadr[0]) for n in model.FINGER_JOINTS]
        self._arm_ctrl = [int(self.m.actuator(a).id) for a in model.ARM_ACTUATORS]
        self._grip_ctrl = int(self.m.actuator(model.GRIPPER_ACTUATOR).id)
        self._site = int(self.m.site(model.EE_SITE).id)
        self._renderer = None

    # -- the xs_sdk side ---------------------------------------------------------------------------------------
    def joint_states(self) -> tuple[tuple[str, ...], np.ndarray, np.ndarray]:
        """(names, positions, velocities) as the xs_sdk's joint_states (arm in rad, fingers in m)."""
        pos = np.r_[self.d.qpos[self._arm_q], self.d.qpos[self._fingers_q]]
        vel = np.r_[self.d.qvel[self._arm_v], self.d.qvel[self._fingers_v]]
        return self.JOINT_NAMES, pos.astype(np.float64), vel.astype(np.float64)

    def command_arm(self, q: Sequence[float]) -> None:
        """The ``arm`` group's joint targets (6,), clipped to the joint limits as the servos' limits do."""
        q = np.clip(np.asarray(q, dtype=np.float64), wx250s.JOINT_LOWER, wx250s.JOINT_UPPER)
        if q.shape != (6,) or not np.all(np.isfinite(q)):
            raise ValueError(f"arm command must be 6 finite joint angles, got {q!r}")
        self.d.ctrl[self._arm_ctrl] = q

    def command_gripper(self, pwm: float) -> None:
        """The gripper's signed PWM: > 0 opens, < 0 closes, 0 holds where the fingers are."""
        lo, hi = wx250s.FINGER_LIMITS
        if pwm > 0:
            self.d.ctrl[self._grip_ctrl] = hi
        elif pwm < 0:
            self.d.ctrl[self._grip_ctrl] = lo
        else:
            self.d.ctrl[self._grip_ctrl] = float(self.d.qpos[self._fingers_q[0]])

    def advance(self, seconds: float) -> None:
        """Run the physics for ``seconds``."""
        for _ in range(max(1, int(round(seconds / self.m.opt.timestep)))):
            self._mj.mj_step(self.m, self.d)

    # -- scene -----------------------------------------------------------------------------------------------
    def reset(self, q: Sequence[float], poses: Mapping[str, tuple[float, float, float]]) -> None:
        """Arm at joints ``q`` with the gripper open, at rest; every object at its ``(x, y, yaw)``."""
        mj = self._mj
        mj.mj_resetData(self.m, self.d)
        q = np.asarray(q, dtype=np.float64)
        self.d.qpos[self._arm_q] = q
        self.d.ctrl[self._arm_ctrl] = q
        self.d.qpos[self._fingers_q] = wx250s.FINGER_LIMITS[1]
        self.d.ctrl[self._grip_ctrl] = wx250s.FINGER_LIMITS[1]
        for name in self.bodies:
            x, y, yaw = poses[name]
            b = BODIES[name]
            quat = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
            body = self.m.body(name)
            if b.free:
                adr = int(self.m.joint(name).qposadr[0])
                self.d.qpos[adr:adr + 3] = (x, y, b.half_height + 0.001)
                self.d.qpos[adr + 3:adr + 7] = quat
            else:
                self.m.body_pos[body.id] = (x, y, b.half_height)
                self.m.body_quat[body.id] = quat
        mj.mj_forward(self.m, self.d)
        self.advance(0.1)  # objects settle on the table

    def ee_pose(self) -> np.ndarray:
        """Pose (4, 4) of ``ee_gripper_link`` (the site), base frame."""
        T = np.eye(4)
        T[:3, :3] = self.d.site_xmat[self._site].reshape(3, 3)
        T[:3, 3] = self.d.site_xpos[self._site]
        return T

    def position(self, name: str) -> np.ndarray:
        """World position (3,) of an object's body origin."""
        return self.d.xpos[self.m.body(name).id].copy()

    def speed(self, name: str) -> float:
        """Linear speed of a free object, m/s (0 for a fixed one)."""
        if not BODIES[name].free:
            return 0.0
        adr = int(self.m.joint(name).dofadr[0])
        return float(np.linalg.norm(self.d.qvel[adr:adr + 3]))

    def render(self, width: int = 256, height: int = 256, camera: str = "primary") -> np.ndarray:
        """RGB (height, width, 3) uint8 from the scene camera (MUJOCO_GL=osmesa on a CPU)."""
        if self._renderer is None or (self._renderer.width, self._renderer.height) != (width, height):
            self._renderer = self._mj.Renderer(self.m, height=height, width=width)
        self._renderer.update_scene(self.d, camera=camera)
        return np.asarray(self._renderer.render(), dtype=np.uint8).copy()
