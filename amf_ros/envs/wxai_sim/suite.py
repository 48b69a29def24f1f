"""The WidowX AI on the embedded WidowX's tasks, in Trossen's simulator, driven by Trossen's driver over loopback.

What is shared with the embedded WidowX 250 (:mod:`amf_ros.envs.widowx_sim.suite`, subclassed here): the task files
(SIMPLER's four by default), the object layouts drawn from a seed, the scripted experts, the success test and the 14-D
observation (Octo's 8-D proprio, then the moved object's and the receptacle's positions). What differs: the arm is
Trossen's model in trossen-arm-sim (:class:`~amf_ros.envs.wxai_sim.scene.TabletopHost`), and every action goes through
the package's WidowX AI backend (:class:`~amf_ros.robots.wxai.WXAIArm`: action gate, per-step and workspace bounds,
the vendor's Cartesian command and IK, e-stop) and the unmodified ``trossen_arm`` driver, over the controller's
TCP/UDP protocol on 127.0.0.1.

Time is wall-clock time: the simulator runs in real time, so :meth:`WXAISimSuite.step_eef7` sends the action and
returns the observation one control period (0.2 s) after it was sent; an episode of 60 actions takes 12 s. One scene
holds every object of the task set (those of other tasks wait on a shelf under the table), so switching
tasks is a reset, not a new simulator: the controller's ports are bound once.
"""

from __future__ import annotations

import atexit
import time
from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any

import numpy as np

from amf_ros.envs.widowx_sim.suite import PERIOD_S, WidowXSimSuite, WidowXTaskSpec, sample_poses
from amf_ros.envs.wxai_sim.scene import TabletopHost
from amf_ros.robots.widowx import state_to_pose
from amf_ros.robots.wxai import NEUTRAL_POSE, WXAIArm, WXAIConfig, matrix_to_pose6, require_trossen_arm

SETTLE_S = 0.15
"""Wall-clock time objects settle after a reset, s."""


class _SceneView:
    """The scene as :meth:`WidowXSimSuite.solved` reads it (``position``, ``speed``, ``m``, ``d.xmat``), copied from
    the simulator in one step."""

    def __init__(self, host: TabletopHost, names: Sequence[str]) -> None:
        self._bodies = host.snapshot(names)
        self.m = host.m
        xmat = np.zeros((host.m.nbody, 9))
        for name, (_, rot, _) in self._bodies.items():
            xmat[host.m.body(name).id] = rot.reshape(9)
        self.d = SimpleNamespace(xmat=xmat)

    def position(self, name: str) -> np.ndarray:
        return self._bodies[name][0].copy()

    def speed(self, name: str) -> float:
        return self._bodies[name][2]


class WXAISimSuite(WidowXSimSuite):
    """The sim_bridge backend of ``robot:=wxai_sim`` (the protocol of :class:`WidowXSimSuite`; see module doc).

    Args:
        tasks: task specs (default: config/tasks/widowx_sim.yaml).
        camera: build the ``primary`` camera.
        config: the WidowX AI backend's settings (default: its defaults at 5 Hz; ``ip`` is ignored: the simulated
            controller listens on 127.0.0.1, or the next free loopback address if that one is taken).
    """

    def __init__(self, tasks: Sequence[WidowXTaskSpec] | None = None, camera: bool = True,
                 config: WXAIConfig | None = None) -> None:
        super().__init__(tasks, camera=camera)
        cfg = config if config is not None else WXAIConfig(control_period_s=PERIOD_S)
        bodies = sorted({name for s in self.specs.values() for name in (s.source, s.target)})
        self.host = TabletopHost(bodies, camera=camera)
        self.wxai = WXAIArm(WXAIConfig(**{**cfg.__dict__, "ip": self.host.host}))
        try:
            self.wxai.connect()
            self.neutral_q = self._neutral_joints()
        except BaseException:
            self.close()
            raise
        self.driver: Any = None  # the view of the arm WidowXSimSuite's methods read (adapter.gripper, stopped)
        self._view()
        self._last_cmd = 0.0
        self._closed = False
        # at exit, before the server's threads die: the driver's own cleanup would wait 20 s for a dead controller
        atexit.register(self.close)

    def close(self) -> None:
        """Release the driver, stop the controller server and the physics (the ports are free again); idempotent."""
        if getattr(self, "_closed", False):
            return
        self._closed = True
        try:
            self.wxai.close()
        finally:
            self.host.close()

    def _neutral_joints(self) -> np.ndarray:
        """Joints of the start pose (:data:`NEUTRAL_POSE`, gripper down), solved by the vendor's IK (a 1 s move)."""
        ta = require_trossen_arm()
        pose = state_to_pose([*NEUTRAL_POSE, 0.0, 0.0, 0.0])
        self.wxai.driver.set_cartesian_positions(matrix_to_pose6(pose), ta.InterpolationSpace.joint, 1.0, True)
        return np.asarray(list(self.wxai.driver.get_arm_positions()), dtype=np.float64)

    def _view(self) -> None:
        self.driver = SimpleNamespace(adapter=SimpleNamespace(gripper=self.wxai.gripper,
                                                              limits=SimpleNamespace(workspace=self.wxai.workspace)),
                                      stopped=self.wxai.stopped)

    # -- the backend protocol ---------------------------------------------------------------------------------------
    @property
    def arm(self) -> _SceneView:
        """The current task's objects as the success test reads them (a copy taken in one physics step)."""
        spec = self._spec(self._current)
        return _SceneView(self.host, (spec.source, spec.target))

    def reset(self, task: str, seed: int) -> np.ndarray:
        """Start an episode of ``task`` with the object poses of ``seed``: the arm at the start pose with the gripper
        open (commanded through the driver and placed there at rest), the other objects on the shelf."""
        spec = self._spec(task)
        self._current = task
        poses = sample_poses(spec, seed)
        open_m = self.wxai.config.gripper_open_m
        if not self.wxai.stopped:
            self.wxai.driver.set_all_positions([*self.neutral_q, open_m], 0.0, False)
            self.host.place(poses, arm_q=self.neutral_q, gripper_m=open_m)
        else:  # the e-stop is latched across episodes: the arm stays where it holds
            self.host.place(poses)
        time.sleep(SETTLE_S)
        self.wxai.observe()
        self.wxai.reset()
        self.steps, self.success = 0, False
        self._last_cmd = time.monotonic()
        return self._observe()

    def step_eef7(self, action7: Sequence[float]) -> tuple[np.ndarray, bool, bool]:
        """Send one EefDeltaAction vector through the WidowX AI backend and the driver; the observation one control
        period after the command was sent."""
        if self._current is None:
            raise RuntimeError("call reset(task, seed) first")
        now_ns = time.time_ns()
        self.wxai.on_action(np.asarray(action7, dtype=np.float64), now_ns, now_ns)
        sent = time.monotonic()
        time.sleep(max(0.0, sent + PERIOD_S - time.monotonic()))
        self._last_cmd = sent
        obs = self._observe()
        self.steps += 1
        self.success = self.success or self.solved()
        return obs, self.success, self.done

    def estop(self, engage: bool) -> str:
        """The backend's e-stop: engage (the arm holds, every action is refused) or release."""
        _, message = self.wxai.estop(bool(engage))
        self._view()
        return message

    def render(self, width: int = 256, height: int = 256, camera: str = "primary") -> np.ndarray:
        """RGB (height, width, 3) uint8 from the scene camera, drawn from the simulator's own model and data."""
        return self.host.render(width, height, camera)

    def _observe(self) -> np.ndarray:
        proprio = self.wxai.observe()
        self._view()
        spec = self._spec(self._current)
        scene = self.host.snapshot((spec.source, spec.target))
        self._obs = np.concatenate([proprio, scene[spec.source][0], scene[spec.target][0]])
        return self._obs.astype(np.float32)
