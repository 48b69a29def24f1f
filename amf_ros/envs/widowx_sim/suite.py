"""SIMPLER's four WidowX tasks on the embedded tabletop, driven through the same arm logic as widowx_driver.

Why through the arm's logic: every action takes the real arm's path. An EefDeltaAction (7,) (BridgeData convention:
metres and radians per step, gripper 1 = open) goes to :class:`~amf_ros.robots.widowx_arm.WidowXArm` (action gate,
workspace and per-step limits, IK, joint-speed limit, e-stop, PWM gripper: what widowx_driver runs on the real arm),
whose joint targets and gripper PWM drive :class:`~amf_ros.envs.widowx_sim.scene.SimArm` as they would drive the
xs_sdk; the observation is the arm logic's answer to the arm's joint_states (Octo's 8-D proprio). Simulated time
advances one control period (0.2 s, 5 Hz) per action and stamps the actions, so the action gate sees what a live
arm's would.

Tasks come from config/tasks/widowx_sim.yaml (the keys of config/tasks/simpler_widowx.yaml). Each reset draws the
object poses from the seed; success is the moved object resting, released, on (in) its receptacle. The scripted
expert (:meth:`WidowXSimSuite.expert_action`) grasps and places with the same 7-D actions a teleoperator sends.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from amf_ros.data.task_set import load_task_set
from amf_ros.envs.task_suite import TaskSuite
from amf_ros.envs.widowx_sim.scene import BODIES, SimArm
from amf_ros.robots import wx250s
from amf_ros.robots.widowx import PROPRIO_NAMES
from amf_ros.robots.widowx_arm import ArmCommands, WidowXArm, WidowXArmConfig

_DEFAULT_TASKS_FILE = Path(__file__).resolve().parents[3] / "config" / "tasks" / "widowx_sim.yaml"
PERIOD_S = 0.2
"""Control period: BridgeData's 5 Hz."""
REGION = ((0.22, 0.36), (-0.13, 0.15))
"""(x range, y range) objects are placed in, metres in the base frame (inside Octo's WidowX workspace box)."""
LANDING = {"plate": ("round", 0.055), "towel": ("square", 0.055), "yellow_block": ("square", 0.014),
           "basket": ("square", 0.045)}
"""Where the moved object's centre must land on each receptacle: a disc radius or a square's half side, metres."""
TOP = {"plate": 0.008, "towel": 0.004, "yellow_block": 0.04, "basket": 0.006}
"""Height of each receptacle's supporting surface above the table, metres."""


@dataclass(frozen=True)
class WidowXTaskSpec:
    """One task of the embedded WidowX (a row of config/tasks/widowx_sim.yaml)."""

    key: str
    instruction: str
    source: str
    target: str
    max_steps: int = 60

    def __post_init__(self) -> None:
        if self.source not in BODIES or not BODIES[self.source].free:
            raise ValueError(f"source must be a movable object of {sorted(k for k, b in BODIES.items() if b.free)}, "
                             f"got {self.source!r}")
        if self.target not in LANDING:
            raise ValueError(f"target must be one of {sorted(LANDING)}, got {self.target!r}")
        if not 1 <= int(self.max_steps) <= 1000:
            raise ValueError(f"max_steps must be in [1, 1000], got {self.max_steps=}")


def load_tasks(path: str | os.PathLike | None = None, keys: Sequence[str] | None = None) -> list[WidowXTaskSpec]:
    """The task list (YAML ``{tasks: [{key, instruction, source, target, max_steps}, ...]}``)."""
    return load_task_set(path if path is not None else _DEFAULT_TASKS_FILE, keys, "WidowX").typed(WidowXTaskSpec)


def sample_poses(spec: WidowXTaskSpec, seed: int) -> dict[str, tuple[float, float, float]]:
    """Object poses ``{name: (x, y, yaw)}`` drawn from ``seed``: both in :data:`REGION`, far enough apart that the
    gripper reaching one never touches the other."""
    rng = np.random.default_rng([seed, 20261124])
    (x0, x1), (y0, y1) = REGION
    for _ in range(1000):
        src = (rng.uniform(x0, x1), rng.uniform(y0, y1), rng.uniform(-0.4, 0.4))
        tgt = (rng.uniform(x0, x1), rng.uniform(y0, y1), rng.uniform(-0.4, 0.4))
        if np.hypot(src[0] - tgt[0], src[1] - tgt[1]) >= 0.06 + BODIES[spec.target].radius + 0.03:
            return {spec.source: src, spec.target: tgt}
    raise RuntimeError(f"no object layout found for seed {seed}")  # pragma: no cover - the region is wide enough


OBJECT_NAMES = ("object_x", "object_y", "object_z", "receptacle_x", "receptacle_y", "receptacle_z")
"""What follows the 8-D proprio in the observation: the moved object's and the receptacle's positions (base frame)."""
STATE_NAMES = (*PROPRIO_NAMES, *OBJECT_NAMES)
"""The embedded WidowX's observation (14,): Octo's proprio, then the scene facts a camera would show."""
CLEAR_Z = 0.12
"""Carrying height of the gripper tip, m."""
ALIGNED = 0.015
"""Horizontal distance (m) within which the gripper stops travelling at height and descends, centring on the way:
wider than the jitter of a noisy operator, so noise delays the expert instead of trapping it."""
CENTRED = 0.008
"""Horizontal distance (m) within which the gripper closes on the object or opens over the receptacle."""
AT_HEIGHT = 0.003
"""Height (m) above the grasp or place height at which the gripper closes or opens."""


def scripted_action(obs: np.ndarray, spec: WidowXTaskSpec, max_step: float) -> np.ndarray:
    """The scripted grasp-and-place expert: an EefDeltaAction (7,) from the observation (14,) alone.

    Why stateless (as Metaworld's scripted policies): the same expert runs inside the suite and in scripted_teleop,
    which sees only the published observation, and a policy cloned from it learns a function of the state. The phase
    is read off the state: the object is *held* when it sits between the fingers and they are closed on it.
    Not held: rise, move above the object, descend, close. Held: rise, carry the object over the receptacle, lower
    it, open. The gripper is turned straight down on the way; each move is at most ``max_step`` per axis.
    """
    obs = np.asarray(obs, dtype=np.float64)
    ee, grip, src, tgt = obs[:3], obs[7], obs[8:11], obs[11:14]
    a = np.zeros(7)
    a[3:6] = np.clip(-obs[3:6], -0.25, 0.25)  # straight down (rpy 0 relative to DEFAULT_ROTATION)
    to_src = np.hypot(*(src[:2] - ee[:2]))
    held = grip < 0.9 and to_src < 0.02 and abs(src[2] - ee[2]) < 0.02
    if held:
        over = ee[:2] + (tgt[:2] - src[:2])  # where the gripper goes so that the object ends above the receptacle
        off = np.hypot(*(over - ee[:2]))
        place_z = TOP[spec.target] + BODIES[spec.source].half_height + 0.02
        if off > ALIGNED:  # carry at the clearance height (rise first)
            waypoint = (*over, CLEAR_Z) if ee[2] >= CLEAR_Z - 0.01 else (*ee[:2], CLEAR_Z)
        elif ee[2] > place_z + AT_HEIGHT or off > CENTRED:  # lower it, centring on the way
            waypoint = (*over, place_z)
        else:
            waypoint, a[6] = None, 1.0  # release
    else:
        a[6] = 1.0
        grasp_z = max(src[2], 0.006)
        above = grasp_z + 0.07
        if to_src > ALIGNED:  # move above the object (rise first)
            waypoint = (*src[:2], above) if ee[2] >= above - 0.01 else (*ee[:2], above)
        elif ee[2] > grasp_z + AT_HEIGHT or to_src > CENTRED:  # descend, centring on the way
            waypoint = (*src[:2], grasp_z)
        else:
            waypoint, a[6] = None, 0.0  # close
    if waypoint is not None:
        a[:3] = np.clip(np.asarray(waypoint) - ee, -max_step, max_step)
    return a


class WidowXSimSuite(TaskSuite):
    """The embedded WidowX: the sim_bridge backend protocol (``task_keys``, ``task``, ``instruction``, ``reset``,
    ``step_eef7``, ``render``, ``state_names``) plus ``expert_action`` and ``success``.

    Args:
        tasks: task specs (default: config/tasks/widowx_sim.yaml).
        camera: build the ``primary`` camera (rendering needs MUJOCO_GL=osmesa on a CPU).
        arm_config: the settings the simulated arm's logic runs under (default: widowx_driver's defaults with the
            control period :data:`PERIOD_S`).
    """

    state_names = STATE_NAMES

    def __init__(self, tasks: Sequence[WidowXTaskSpec] | None = None, camera: bool = True,
                 arm_config: WidowXArmConfig | None = None) -> None:
        super().__init__(tasks if tasks is not None else load_tasks(), "WidowX")
        self.camera = camera
        self.arm_config = arm_config if arm_config is not None else WidowXArmConfig(control_period_s=PERIOD_S)
        self._arms: dict[str, SimArm] = {}
        self.driver: WidowXArm | None = None
        """The arm's logic (widowx_driver's, without ROS), new every episode."""
        self.steps = 0
        self.success = False
        self.sim_time_ns = 0
        self._obs: np.ndarray | None = None

    # -- protocol (task_keys, task, instruction: TaskSuite) ---------------------------------------------------------
    @property
    def arm(self) -> SimArm:
        """The simulated arm of the current task."""
        if self._current is None:
            raise RuntimeError("call reset(task, seed) first")
        return self._arms[self._current]

    def reset(self, task: str, seed: int) -> np.ndarray:
        """Start an episode of ``task`` with the object poses of ``seed``; the arm at BridgeData's neutral pose."""
        spec = self._spec(task)
        if task not in self._arms:
            self._arms[task] = SimArm((spec.source, spec.target), camera=self.camera)
        self._current = task
        self.arm.reset(wx250s.NEUTRAL_JOINTS, sample_poses(spec, seed))
        stopped = self.driver.stopped if self.driver is not None else None  # the e-stop is latched across episodes
        self.driver = WidowXArm(self.arm_config)
        if stopped is not None:
            self.driver.adapter.emergency_stop(stopped)
        self.steps, self.success = 0, False
        self.sim_time_ns += int(1e9)
        return self._observe()

    def step_eef7(self, action7: Sequence[float]) -> tuple[np.ndarray, bool, bool]:
        """Apply one EefDeltaAction vector through the arm's logic, run one control period of physics."""
        if self.driver is None:
            raise RuntimeError("call reset(task, seed) first")
        out = self.driver.on_action(np.asarray(action7, dtype=np.float64), self.sim_time_ns, self.sim_time_ns)
        self._command(out)
        self.arm.advance(PERIOD_S)
        self.sim_time_ns += int(PERIOD_S * 1e9)
        obs = self._observe()
        self.steps += 1
        self.success = self.success or self.solved()
        return obs, self.success, self.done

    def refusal(self) -> str:
        """Why the next action would not move the arm ("" = it would): sim_bridge then does not step, count or
        echo it, as widowx_driver echoes only the actions it sent to the arm."""
        return "e-stop engaged (release it first)" if self.driver is not None and self.driver.stopped else ""

    @property
    def estopped(self) -> bool:
        """True while the arm's e-stop is engaged (it stays engaged across episodes, as on the real arm)."""
        return self.driver is not None and self.driver.stopped

    def estop(self, engage: bool) -> str:
        """widowx_driver's e-stop service: engage (hold the arm where it is, drop every action) or release."""
        if self.driver is None:
            raise RuntimeError("call reset(task, seed) first")
        out, message = self.driver.estop(bool(engage))
        self._command(out)
        return message

    @property
    def done(self) -> bool:
        """True once the task is solved or the episode reached its step budget."""
        return self.success or self.steps >= self._spec(self._current).max_steps

    def render(self, width: int = 256, height: int = 256, camera: str = "primary") -> np.ndarray:
        """RGB (height, width, 3) uint8 from the named scene camera, for the image topics and the console."""
        return self.arm.render(width, height, camera)

    # -- the task ----------------------------------------------------------------------------------------------
    def solved(self) -> bool:
        """The moved object rests, released, on (in) its receptacle."""
        spec, arm = self._spec(self._current), self.arm
        src, tgt = arm.position(spec.source), arm.position(spec.target)
        yaw_rot = arm.d.xmat[arm.m.body(spec.target).id].reshape(3, 3)
        local = yaw_rot.T @ (src - tgt)
        shape, size = LANDING[spec.target]
        inside = (np.hypot(local[0], local[1]) <= size if shape == "round"
                  else bool(np.all(np.abs(local[:2]) <= size)))
        rest = TOP[spec.target] + BODIES[spec.source].half_height
        resting = rest - 0.008 <= src[2] <= rest + 0.012 and arm.speed(spec.source) < 0.05
        released = self.driver is not None and self.driver.adapter.gripper >= 0.7
        return bool(inside and resting and released)

    def expert_action(self, noise_std: float = 0.0, rng: np.random.Generator | None = None) -> np.ndarray:
        """The scripted expert's EefDeltaAction (7,) on the current observation (:func:`scripted_action`), plus
        optional Gaussian noise on the translation (``noise_std`` in metres; the gripper stays binary)."""
        if self._obs is None:
            raise RuntimeError("call reset(task, seed) first")
        bounds = self.driver.adapter.limits.workspace
        a = scripted_action(self._obs, self._spec(self._current), bounds.max_translation)
        if noise_std > 0:
            if rng is None:
                raise ValueError("an rng is required when noise_std > 0")
            a[:3] += rng.normal(0.0, noise_std, 3)
        return bounds.clip_delta(a)

    # -- internals ---------------------------------------------------------------------------------------------
    def _observe(self) -> np.ndarray:
        names, positions, _ = self.arm.joint_states()
        proprio, out = self.driver.on_joint_state(names, positions)
        self._command(out)
        spec, arm = self._spec(self._current), self.arm
        self._obs = np.concatenate([proprio, arm.position(spec.source), arm.position(spec.target)])
        return self._obs.astype(np.float32)

    def _command(self, out: ArmCommands) -> None:
        if out.arm is not None:
            self.arm.command_arm(out.arm)
        if out.gripper is not None:
            self.arm.command_gripper(out.gripper)
