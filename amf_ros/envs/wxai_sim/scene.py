"""The Bridge-style tabletop hosted by Trossen's own simulator (``trossen_arm_sim``), the WidowX AI in it.

Why the vendor's simulator: ``trossen_arm_sim.TrossenArmSimServer`` speaks the arm controller's wire protocol (TCP 50001
configuration, UDP 50000 joint cycle), so the unmodified ``trossen_arm`` driver connects to it as to the real arm and
the package's WidowX AI backend (:mod:`amf_ros.robots.wxai`) meets the vendor's protocol in every test. The scene is
MJCF that includes the vendor's arm model through the ``WIDOWX_XML`` placeholder, with the table, objects and camera of
the embedded WidowX 250 (:mod:`amf_ros.envs.widowx_sim.objects`); the table top is z = 0 of the arm's base, as there.

Physics runs in the simulator's own thread, paced to wall-clock time; everything this module reads or writes in the
model and data (placing objects, positions, the camera's scene) runs in a step hook, under the simulator's lock
(:meth:`TabletopHost.locked`), so it never races a physics step. The camera image is rendered from the simulator's own
model and data (MUJOCO_GL=osmesa or egl on a machine without a display).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from amf_ros.envs.widowx_sim.model import CONTACT_OPTIONS
from amf_ros.envs.widowx_sim.objects import BODIES
from amf_ros.envs.widowx_sim.scene import TABLE_HALF

HOST = "127.0.0.1"
"""Where the simulated controller listens first (loopback only: TCP 50001, UDP 50000, the real controller's ports,
which the driver cannot change). When another simulator holds them there, the next free loopback address
(127.0.0.2, ...) is taken: two simulators on one machine (two test sessions, two graphs) each get their own."""
LOOPBACK_HOSTS = tuple(f"127.0.0.{n}" for n in range(1, 255))
TIMESTEP_S = 0.002
CAMERA = "primary"
SHELF_Z = -0.3
"""Height of the shelf under the table top (metres, base frame) where the objects of the other tasks wait, out of
reach and hidden from the camera by the table."""


def scene_xml(bodies: Sequence[str], camera: bool = True) -> str:
    """A complete MJCF document: the vendor's arm (``WIDOWX_XML``), the table, the named objects (placed at reset)
    and, with ``camera``, the ``primary`` camera of the WidowX 250's tabletop."""
    parts = []
    for name in bodies:
        b = BODIES[name]
        joint = f'<freejoint name="{name}"/>' if b.free else ""
        parts.append(f'<body name="{name}" pos="0.3 0 {b.half_height}">{joint}{b.geoms}</body>')
    cam = (f'<camera name="{CAMERA}" pos="0.85 0.0 0.55" xyaxes="0 1 0 -0.55 0 0.835" fovy="50"/>' if camera else "")
    return f"""<mujoco model="wxai_tabletop">
  <include file="WIDOWX_XML"/>
  <option timestep="{TIMESTEP_S}" {CONTACT_OPTIONS}/>
  <visual><global offwidth="640" offheight="480"/><quality shadowsize="0"/></visual>
  <worldbody>
    <light pos="0.3 0 1.5" dir="0 0 -1" diffuse="0.8 0.8 0.8"/>
    <geom name="table" type="box" size="{TABLE_HALF[0]} {TABLE_HALF[1]} 0.01" pos="0.3 0 -0.01"
          rgba="0.72 0.6 0.45 1" friction="1 0.01 0.001"/>
    <geom name="shelf" type="box" size="0.3 0.4 0.01" pos="0.3 0 {SHELF_Z - 0.01}" rgba="0.5 0.5 0.5 1"/>
    {cam}
    {"".join(parts)}
  </worldbody>
</mujoco>"""


class TabletopHost:
    """trossen-arm-sim's simulator and controller server with a tabletop scene (see module doc).

    Args:
        bodies: objects of the scene (keys of :data:`~amf_ros.envs.widowx_sim.objects.BODIES`).
        camera: include the ``primary`` camera.
        host: address the controller server binds to ("" = the first free one of :data:`LOOPBACK_HOSTS`); the driver
            connects to :attr:`host`.
    """

    def __init__(self, bodies: Sequence[str], camera: bool = True, host: str = "") -> None:
        try:
            import mujoco
            from trossen_arm_sim import TrossenArmSimServer, WidowXSim
        except ImportError as exc:
            raise ImportError(f"the WidowX AI simulator needs trossen-arm-sim ({exc}); install: "
                              "pip install trossen-arm==1.11.0 trossen-arm-sim==0.2.3") from exc
        self._mj = mujoco
        self.bodies = tuple(bodies)
        with tempfile.TemporaryDirectory(prefix="amf_wxai_") as tmp:
            path = os.path.join(tmp, "scene.xml")
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(scene_xml(self.bodies, camera))
            self.sim = WidowXSim(path)
        self.m, self.d = self.sim.model, self.sim.data
        self._pending: list[tuple[Callable[[], Any], threading.Event, list]] = []
        self._pending_lock = threading.Lock()
        self.sim.add_step_hook(self._run_pending)
        self._renderer: Any = None
        self.sim.start()
        self.server: Any = None
        for candidate in (host,) if host else LOOPBACK_HOSTS:
            server = TrossenArmSimServer(self.sim, host=candidate)
            try:
                server.start()
            except OSError:  # its ports are taken at this address: the next one
                server.stop()
                continue
            self.server, self.host = server, candidate
            break
        if self.server is None:
            self.sim.stop()
            raise OSError(f"TCP 50001 / UDP 50000 are taken at {host or 'every loopback address'}: no simulated "
                          "controller can listen")

    def close(self) -> None:
        """Stop the controller server and the physics thread (the ports are free again)."""
        self.server.stop()
        self.sim.stop()
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # -- the simulator's lock ---------------------------------------------------------------------------------------
    def _run_pending(self) -> None:
        with self._pending_lock:
            jobs, self._pending = self._pending, []
        for fn, done, result in jobs:
            try:
                result.append((True, fn()))
            except Exception as exc:
                result.append((False, exc))
            done.set()

    def locked(self, fn: Callable[[], Any], timeout_s: float = 2.0) -> Any:
        """Run ``fn()`` after the next physics step, under the simulator's lock (a step hook); its result.

        Raises:
            TimeoutError: the physics thread did not step within ``timeout_s``.
        """
        done, result = threading.Event(), []
        with self._pending_lock:
            self._pending.append((fn, done, result))
        if not done.wait(timeout_s):
            raise TimeoutError(f"the simulator did not step within {timeout_s} s")
        ok, value = result[0]
        if not ok:
            raise value
        return value

    # -- the scene --------------------------------------------------------------------------------------------------
    def place(self, poses: Mapping[str, tuple[float, float, float]], arm_q: Sequence[float] | None = None,
              gripper_m: float | None = None) -> None:
        """Every object of ``poses`` at its ``(x, y, yaw)`` on the table at rest, every other one on the shelf; with
        ``arm_q`` (6,) the arm's joints and their position actuators' targets there too (and the gripper carriages at
        ``gripper_m``), at rest. A connected driver must command the same joints, or the controller's position loop
        pulls the arm back to its last target."""
        mj, m, d = self._mj, self.m, self.d
        spots = {name: (0.08 + 0.14 * (k % 4), -0.3 + 0.15 * (k // 4), 0.0, SHELF_Z)
                 for k, name in enumerate(n for n in self.bodies if n not in poses)}
        spots.update({name: (*pose, 0.0) for name, pose in poses.items()})

        def job() -> None:
            if arm_q is not None:
                for i, q in enumerate(arm_q):  # the position actuators' targets too: they act even in idle mode
                    j = m.joint(f"joint_{i}")
                    d.qpos[j.qposadr[0]] = q
                    d.qvel[j.dofadr[0]] = 0.0
                    d.ctrl[m.actuator(f"joint_{i}").id] = q
                if gripper_m is not None:
                    for name in ("left_carriage_joint", "right_carriage_joint"):
                        j = m.joint(name)
                        d.qpos[j.qposadr[0]] = gripper_m
                        d.qvel[j.dofadr[0]] = 0.0
                    d.ctrl[m.actuator("left_gripper").id] = gripper_m
            for name in self.bodies:
                x, y, yaw, z0 = spots[name]
                b = BODIES[name]
                quat = np.array([np.cos(yaw / 2), 0.0, 0.0, np.sin(yaw / 2)])
                if b.free:
                    j = m.joint(name)
                    d.qpos[j.qposadr[0]:j.qposadr[0] + 3] = (x, y, z0 + b.half_height + 0.001)
                    d.qpos[j.qposadr[0] + 3:j.qposadr[0] + 7] = quat
                    d.qvel[j.dofadr[0]:j.dofadr[0] + 6] = 0.0
                else:
                    body = m.body(name)
                    m.body_pos[body.id] = (x, y, z0 + b.half_height)
                    m.body_quat[body.id] = quat
            mj.mj_forward(m, d)

        self.locked(job)

    def snapshot(self, names: Sequence[str]) -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
        """``{name: (position (3,), rotation (3, 3), linear speed m/s)}`` of bodies, read in one step."""
        m, d = self.m, self.d

        def job() -> dict[str, tuple[np.ndarray, np.ndarray, float]]:
            out = {}
            for name in names:
                bid = m.body(name).id
                speed = 0.0
                if BODIES[name].free:
                    adr = int(m.joint(name).dofadr[0])
                    speed = float(np.linalg.norm(d.qvel[adr:adr + 3]))
                out[name] = (d.xpos[bid].copy(), d.xmat[bid].reshape(3, 3).copy(), speed)
            return out

        return self.locked(job)

    def ee_position(self) -> np.ndarray:
        """World position (3,) of the vendor model's ``ee_site`` (the end effector the driver's kinematics reports)."""
        return self.locked(lambda: self.d.site("ee_site").xpos.copy())

    def render(self, width: int = 256, height: int = 256, camera: str = CAMERA) -> np.ndarray:
        """RGB (height, width, 3) uint8 from a camera of the simulator's own model and data: the scene is copied
        under the lock (one step), drawn outside it."""
        if self._renderer is None or (self._renderer.width, self._renderer.height) != (width, height):
            if self._renderer is not None:
                self._renderer.close()
            self._renderer = self._mj.Renderer(self.m, height=height, width=width)
        renderer = self._renderer
        self.locked(lambda: renderer.update_scene(self.d, camera=camera))
        return np.asarray(renderer.render(), dtype=np.uint8).copy()
