"""The embedded WidowX's tasks (SIMPLER's four and the task family), driven through the same arm logic as
widowx_driver.

Why through the arm's logic: every action takes the real arm's path. An EefDeltaAction (7,) (BridgeData convention:
metres and radians per step, gripper 1 = open) goes to :class:`~amf_ros.robots.widowx_arm.WidowXArm` (action gate,
workspace and per-step limits, IK, joint-speed limit, e-stop, PWM gripper: what widowx_driver runs on the real arm),
whose joint targets and gripper PWM drive :class:`~amf_ros.envs.widowx_sim.scene.SimArm` as they would drive the
xs_sdk; the observation is the arm logic's answer to the arm's joint_states (Octo's 8-D proprio). Simulated time
advances one control period (0.2 s, 5 Hz) per action and stamps the actions, so the action gate sees what a live
arm's would.

Tasks come from a task file: config/tasks/widowx_sim.yaml (default: SIMPLER's four tasks with the keys and
instructions of config/tasks/simpler_widowx.yaml) or config/tasks/widowx_family.yaml (16 tasks, each marked
``split: pretrain`` or ``new``). A task moves one object (``source``) onto or into a receptacle, or pushes it onto a
mark (``target``). Each reset draws the object poses from the seed. Success (:meth:`WidowXSimSuite.solved`): the
object rests on (in) its receptacle, released (``skill: place``) or pushed there (``skill: push``). The scripted
experts (:mod:`amf_ros.envs.widowx_sim.expert`) act with the same 7-D actions a teleoperator sends.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from amf_ros.data.task_set import load_task_set
from amf_ros.envs.task_suite import TaskSuite
from amf_ros.envs.widowx_sim.expert import PUSHER, scripted_action
from amf_ros.envs.widowx_sim.objects import BODIES, MOVABLE, RECEPTACLES
from amf_ros.envs.widowx_sim.scene import SimArm
from amf_ros.robots import wx250s
from amf_ros.robots.widowx import PROPRIO_NAMES
from amf_ros.robots.widowx_arm import ArmCommands, WidowXArm, WidowXArmConfig

__all__ = ["FAMILY_TASKS_FILE", "OBJECT_NAMES", "PERIOD_S", "REGION", "SIMPLER_TASKS_FILE", "SKILLS", "SPLITS",
           "STATE_NAMES", "WidowXSimSuite", "WidowXTaskSpec", "load_tasks", "sample_poses", "scripted_action",
           "splits"]

_CONFIG = Path(__file__).resolve().parents[3] / "config" / "tasks"
SIMPLER_TASKS_FILE = _CONFIG / "widowx_sim.yaml"
"""SIMPLER's four WidowX tasks (the default task file)."""
FAMILY_TASKS_FILE = _CONFIG / "widowx_family.yaml"
"""The task family: SIMPLER's four and twelve more, split into pre-training and new tasks."""
PERIOD_S = 0.2
"""Control period: BridgeData's 5 Hz."""
REGION = ((0.22, 0.36), (-0.13, 0.15))
"""(x range, y range) objects are placed in, metres in the base frame (inside Octo's WidowX workspace box)."""
PUSH_DISTANCE = (0.10, 0.13)
"""Range of the distance from a pushed object to its mark, m."""
PUSH_START_BOX = ((0.16, 0.42), (-0.13, 0.23))
"""(x range, y range) in which the pusher's starting point must lie (inside the driver's workspace, with margin)."""
SKILLS = ("place", "push")
"""``place``: pick the object up and let it go on (in) the target; ``push``: slide it onto a mark on the table."""
SPLITS = ("pretrain", "new")
"""A family task's split: known to the pre-trained generalist, or one of the lab's new tasks."""


@dataclass(frozen=True)
class WidowXTaskSpec:
    """One task of the embedded WidowX (a row of a task file)."""

    key: str
    instruction: str
    source: str
    """The object the gripper moves (a movable body of :mod:`amf_ros.envs.widowx_sim.objects`)."""
    target: str
    """The receptacle or mark it must end on (in)."""
    max_steps: int = 60
    """Episode cut-off in actions (5 Hz)."""
    skill: str = "place"
    """One of :data:`SKILLS`."""
    split: str = ""
    """One of :data:`SPLITS` in the family, "" in a file without splits."""

    def __post_init__(self) -> None:
        if self.source not in MOVABLE:
            raise ValueError(f"source must be a movable object of {sorted(MOVABLE)}, got {self.source!r}")
        if self.target not in RECEPTACLES:
            raise ValueError(f"target must be one of {sorted(RECEPTACLES)}, got {self.target!r}")
        if self.skill not in SKILLS:
            raise ValueError(f"skill must be one of {SKILLS}, got {self.skill!r}")
        if self.skill == "push" and BODIES[self.target].top != 0.0:
            raise ValueError(f"a pushed object can only end on a mark on the table, got target {self.target!r}")
        if self.split not in ("", *SPLITS):
            raise ValueError(f"split must be one of {SPLITS} (or empty), got {self.split!r}")
        if not 1 <= int(self.max_steps) <= 1000:
            raise ValueError(f"max_steps must be in [1, 1000], got {self.max_steps=}")


def load_tasks(path: str | os.PathLike | None = None, keys: Sequence[str] | None = None) -> list[WidowXTaskSpec]:
    """The task list of a task file (default :data:`SIMPLER_TASKS_FILE`; YAML ``{tasks: [{key, instruction, source,
    target, max_steps, skill, split}, ...]}``), read by :func:`amf_ros.data.task_set.load_task_set`."""
    return load_task_set(path if path is not None else SIMPLER_TASKS_FILE, keys, "WidowX").typed(WidowXTaskSpec)


def splits(specs: Sequence[WidowXTaskSpec]) -> dict[str, list[str]]:
    """Task keys by split, in file order: ``{"pretrain": [...], "new": [...]}`` (tasks without a split in neither)."""
    return {name: [s.key for s in specs if s.split == name] for name in SPLITS}


def sample_poses(spec: WidowXTaskSpec, seed: int) -> dict[str, tuple[float, float, float]]:
    """Object poses ``{name: (x, y, yaw)}`` drawn from ``seed``, both in :data:`REGION`.

    Place tasks: far enough apart that the gripper reaching one never touches the other. Push tasks: the mark
    :data:`PUSH_DISTANCE` away in any direction that leaves room behind the object for the pusher.
    """
    rng = np.random.default_rng([seed, 20261124])
    (x0, x1), (y0, y1) = REGION
    for _ in range(1000):
        src = (rng.uniform(x0, x1), rng.uniform(y0, y1), rng.uniform(-0.4, 0.4))
        if spec.skill == "push":
            angle, dist = rng.uniform(-np.pi, np.pi), rng.uniform(*PUSH_DISTANCE)
            u = np.array([np.cos(angle), np.sin(angle)])
            tx, ty = np.asarray(src[:2]) + dist * u
            tgt = (float(tx), float(ty), rng.uniform(-0.4, 0.4))
            sx, sy = np.asarray(src[:2]) - u * (BODIES[spec.source].radius + PUSHER + 0.01)
            (bx0, bx1), (by0, by1) = PUSH_START_BOX
            if x0 <= tx <= x1 and y0 <= ty <= y1 and bx0 <= sx <= bx1 and by0 <= sy <= by1:
                return {spec.source: src, spec.target: tgt}
            continue
        tgt = (rng.uniform(x0, x1), rng.uniform(y0, y1), rng.uniform(-0.4, 0.4))
        if np.hypot(src[0] - tgt[0], src[1] - tgt[1]) >= 0.06 + BODIES[spec.target].radius + 0.03:
            return {spec.source: src, spec.target: tgt}
    raise RuntimeError(f"no object layout found for seed {seed}")  # pragma: no cover - the region is wide enough


OBJECT_NAMES = ("object_x", "object_y", "object_z", "receptacle_x", "receptacle_y", "receptacle_z")
"""What follows the 8-D proprio in the observation: the moved object's and the receptacle's (or the mark's) positions
(base frame)."""
STATE_NAMES = (*PROPRIO_NAMES, *OBJECT_NAMES)
"""The embedded WidowX's observation (14,): Octo's proprio, then the scene facts a camera would show."""


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

    @property
    def observation(self) -> np.ndarray:
        """The latest observation (14,) float64 (a copy)."""
        if self._obs is None:
            raise RuntimeError("call reset(task, seed) first")
        return self._obs.copy()

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
        """The moved object rests on (in) its receptacle: its centre within the landing zone, at the resting height
        (-8 mm / +12 mm: lying flat, not propped up or held above it), slower than 5 cm/s; for ``place`` also
        released (gripper > 70 % open). A pushed object only has to lie on the mark."""
        spec, arm = self._spec(self._current), self.arm
        src, tgt = arm.position(spec.source), arm.position(spec.target)
        yaw_rot = arm.d.xmat[arm.m.body(spec.target).id].reshape(3, 3)
        local = yaw_rot.T @ (src - tgt)
        shape, size = BODIES[spec.target].landing
        inside = (np.hypot(local[0], local[1]) <= size if shape == "round"
                  else bool(np.all(np.abs(local[:2]) <= size)))
        rest = BODIES[spec.target].top + BODIES[spec.source].half_height
        resting = rest - 0.008 <= src[2] <= rest + 0.012 and arm.speed(spec.source) < 0.05
        released = spec.skill == "push" or (self.driver is not None and self.driver.adapter.gripper >= 0.7)
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
