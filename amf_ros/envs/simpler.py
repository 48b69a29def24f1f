"""SIMPLER (SimplerEnv, ManiSkill2 real2sim) WidowX scenes behind the same step API as the Metaworld suite.

Why: the ROS ``sim_bridge`` (backend ``simpler``) and ``amf bench simpler`` host SIMPLER's four Bridge tasks the
way they host Metaworld: ``reset(task, seed)``, ``step(action)``, ``success``, ``observation``. SimplerEnv is
git-only and needs a Vulkan GPU; it is imported lazily and a clear ImportError says what to install.

Real API used (simpler-env/SimplerEnv main 4ab7178): ``simpler_env.make(task_name)`` (obs_mode rgbd, prepackaged
visual-matching config), ``env.reset(seed=..., options={"obj_init_options": {"episode_id": i}})`` -> (obs, info),
``simpler_env.utils.env.observation_utils.get_image_from_maniskill2_obs_dict(env, obs)`` -> (480, 640, 3) uint8,
``env.get_language_instruction()``, ``env.step(a7) -> (obs, reward, terminated, truncated, info)`` with
``terminated = info["success"]`` and truncation by the TimeLimit (60 steps; eggplant 120).

Actions: SIMPLER's native 7-D action is [xyz delta (m), axis-angle delta, gripper in [-1, 1] (+1 open)];
:meth:`SimplerSuite.step_eef7` takes the wire EefDeltaAction (xyz, roll/pitch/yaw, gripper 0..1) and converts it
exactly as SimplerEnv's Octo wrapper does (``policies.postprocess.eef7_to_simpler``).
Observations follow the Metaworld suite's contract (what sim_bridge publishes as StateVector): ``reset`` and
``step`` return the 8-D TCP state ``[x, y, z, roll, pitch, yaw, 0, gripper]`` (:data:`STATE_NAMES`); the camera
image (the policy's input) comes from ``render()`` / ``current.image``.
Episodes: SIMPLER's evaluators do not stop at success; they run to the time limit and score success at the
last step. ``stop_at_success=False`` (default) reproduces that; ``done`` is then the time limit only.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from amf_ros._optional import require
from amf_ros.data.task_set import load_task_set
from amf_ros.envs.task_suite import TaskSuite
from amf_ros.policies.postprocess import eef7_to_simpler, matrix_to_rpy

log = logging.getLogger(__name__)

VULKAN_HELP = ("no usable Vulkan device. SIMPLER renders with SAPIEN's Vulkan renderer: it needs an NVIDIA GPU, its "
               "driver's Vulkan ICD (vulkaninfo must list the GPU; see ManiSkill's installation troubleshooting) and, "
               "on some machines, DISPLAY=\"\" and one CUDA_VISIBLE_DEVICES. Without a GPU use the embedded simulation "
               "(robot:=sim)")


def is_vulkan_error(exc: BaseException) -> bool:
    """SAPIEN's ways of saying that Vulkan rendering is unavailable (vk::... ErrorInitializationFailed /
    ErrorExtensionNotPresent, "failed to find a rendering device")."""
    text = str(exc)
    return "vk::" in text or "rendering device" in text or "vulkan" in text.lower()

SIMPLER_WIDOWX_TASKS: dict[str, tuple[str, int]] = {
    "widowx_spoon_on_towel": ("PutSpoonOnTableClothInScene-v0", 60),
    "widowx_carrot_on_plate": ("PutCarrotOnPlateInScene-v0", 60),
    "widowx_stack_cube": ("StackGreenCubeOnYellowCubeBakedTexInScene-v0", 60),
    "widowx_put_eggplant_in_basket": ("PutEggplantInBasketScene-v0", 120),
}
"""SimplerEnv task name -> (ManiSkill2 env id, time limit in steps), from simpler_env/__init__.py."""
NUM_LAYOUTS = 24
"""Object layouts (episode ids 0..23) of every WidowX task; the official protocol runs all 24."""
STATE_NAMES = ("x", "y", "z", "roll", "pitch", "yaw", "pad", "gripper")
FINGER_RANGE = (0.015, 0.037)
_DEFAULT_TASKS_FILE = Path(__file__).resolve().parents[2] / "config" / "tasks" / "simpler_widowx.yaml"


@dataclasses.dataclass(frozen=True)
class SimplerTaskSpec:
    """One task as listed in ``config/tasks/simpler_widowx.yaml``."""

    key: str
    """Task key used by selectors, episodes and ROS services, e.g. ``"carrot_on_plate"``."""
    env_name: str
    """SimplerEnv task name, e.g. ``"widowx_carrot_on_plate"``."""
    instruction: str
    """Instruction given to the policy (SIMPLER's own ``get_language_instruction()`` text)."""
    max_steps: int = 60
    """Episode length in steps (SIMPLER's time limit)."""

    def __post_init__(self) -> None:
        if self.env_name not in SIMPLER_WIDOWX_TASKS:
            raise ValueError(f"task {self.key!r}: unknown SIMPLER WidowX task {self.env_name!r}; "
                             f"choose from {sorted(SIMPLER_WIDOWX_TASKS)}")
        if not self.key or not self.instruction:
            raise ValueError(f"task key and instruction must be non-empty, got {self.key=} {self.instruction=}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps=}")


def tasks_file() -> Path:
    """The default task set file (config/tasks/simpler_widowx.yaml)."""
    return _DEFAULT_TASKS_FILE


def load_tasks(path: str | os.PathLike | None = None, keys: Sequence[str] | None = None) -> list[SimplerTaskSpec]:
    """Task specs from a YAML task file ``{tasks: [{key, env_name, instruction, max_steps}]}``, optionally a subset."""
    return load_task_set(path if path is not None else _DEFAULT_TASKS_FILE, keys, "SIMPLER").typed(SimplerTaskSpec)


def _quat_wxyz_to_matrix(q: np.ndarray) -> np.ndarray:
    w, x, y, z = np.asarray(q, float) / np.linalg.norm(q)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - z * w), 2 * (x * z + y * w)],
                     [2 * (x * y + z * w), 1 - 2 * (x * x + z * z), 2 * (y * z - x * w)],
                     [2 * (x * z - y * w), 2 * (y * z + x * w), 1 - 2 * (x * x + y * y)]])


def proprio_from_obs(obs: dict) -> np.ndarray | None:
    """8-D state [xyz, rpy, 0, gripper] of the TCP in the robot base frame, or None if the obs lacks poses.

    Uses ManiSkill2's ``obs["extra"]["tcp_pose"]`` and ``obs["agent"]["base_pose"]`` ([x, y, z, qw, qx, qy, qz],
    world frame) and the last arm qpos entries (fingers, metres). Roll/pitch/yaw are of the TCP frame itself
    (SIMPLER's ee frame differs from BridgeData's DEFAULT_ROTATION convention; the policy does not use them).
    """
    try:
        tcp = np.asarray(obs["extra"]["tcp_pose"], float)
        base = np.asarray(obs["agent"]["base_pose"], float)
        qpos = np.asarray(obs["agent"]["qpos"], float)
    except (KeyError, TypeError):
        return None
    Rb = _quat_wxyz_to_matrix(base[3:7])
    Rt = _quat_wxyz_to_matrix(tcp[3:7])
    p = Rb.T @ (tcp[:3] - base[:3])
    rpy = matrix_to_rpy(Rb.T @ Rt)
    lo, hi = FINGER_RANGE
    grip = float(np.clip((qpos[-1] - lo) / (hi - lo), 0.0, 1.0)) if qpos.size else 1.0
    return np.concatenate([p, rpy, [0.0, grip]])


class SimplerTaskEnv:
    """One SIMPLER environment for one task: reset by episode id/seed, step, success, camera image."""

    def __init__(self, spec: SimplerTaskSpec, stop_at_success: bool = False, **make_kwargs: Any) -> None:
        simpler_env = require("simpler_env", feature=f"the SIMPLER task {spec.env_name!r}")
        from simpler_env.utils.env.observation_utils import get_image_from_maniskill2_obs_dict

        self.spec = spec
        self.stop_at_success = bool(stop_at_success)
        self._get_image = get_image_from_maniskill2_obs_dict
        try:
            self._env = simpler_env.make(spec.env_name, **make_kwargs)
        except RuntimeError as exc:
            if is_vulkan_error(exc):
                raise RuntimeError(f"SIMPLER cannot render {spec.env_name!r}: {VULKAN_HELP} "
                                   f"(SAPIEN said: {exc})") from None
            raise
        self._obs: dict | None = None
        self.steps = 0
        self.success = False
        self.truncated = False
        self.info: dict = {}
        self.episode_id = -1

    def reset(self, seed: int, episode_id: int | None = None) -> np.ndarray:
        """Start an episode; the object layout is ``episode_id`` (default: ``seed``) modulo the 24 layouts.

        Returns the 8-D state (see :attr:`state`); the camera image is :attr:`image`.
        """
        eid = int(seed if episode_id is None else episode_id)
        obs, info = self._env.reset(seed=int(seed), options={"obj_init_options": {"episode_id": eid}})
        self._obs, self.info = obs, dict(info)
        self.episode_id = int(info.get("episode_id", eid))
        self.steps, self.success, self.truncated = 0, False, False
        instr = self.instruction
        if instr != self.spec.instruction:
            log.warning("task %s: SIMPLER says %r, the task file says %r", self.spec.key, instr, self.spec.instruction)
        return self.state

    @property
    def instruction(self) -> str:
        """SIMPLER's language instruction for the current episode."""
        return str(self._env.get_language_instruction())

    @property
    def image(self) -> np.ndarray:
        """Current 3rd-view camera image (480, 640, 3) uint8 (with SIMPLER's real-image overlay)."""
        if self._obs is None:
            raise RuntimeError(f"task {self.spec.key!r}: call reset() first")
        return np.asarray(self._get_image(self._env, self._obs), dtype=np.uint8)

    @property
    def state(self) -> np.ndarray:
        """8-D TCP state (see :func:`proprio_from_obs`); zeros if the observation carries no poses."""
        if self._obs is None:
            raise RuntimeError(f"task {self.spec.key!r}: call reset() first")
        state = proprio_from_obs(self._obs)
        if state is None:
            log.warning("SIMPLER observation has no extra.tcp_pose/agent.base_pose; publishing zeros")
            return np.zeros(len(STATE_NAMES))
        return state

    @property
    def done(self) -> bool:
        """Time limit reached (or success, with stop_at_success)."""
        return self.truncated or self.steps >= self.spec.max_steps or (self.stop_at_success and self.success)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """Apply SIMPLER's native action (7,); returns (state (8,), success at this step, done)."""
        a = np.asarray(action, dtype=np.float64)
        if a.shape != (7,) or not np.all(np.isfinite(a)):
            raise ValueError(f"expected a finite SIMPLER action of shape (7,), got {a!r}")
        if self._obs is None:
            raise RuntimeError(f"task {self.spec.key!r}: call reset() before step()")
        if self.done:
            raise RuntimeError(f"task {self.spec.key!r}: episode is over; call reset()")
        obs, _reward, terminated, truncated, info = self._env.step(a)
        self._obs, self.info = obs, dict(info)
        self.steps += 1
        self.success = bool(terminated)
        self.truncated = bool(truncated)
        return self.state, self.success, self.done

    def close(self) -> None:
        """Release the SIMPLER environment and its renderer."""
        self._env.close()


class SimplerSuite(TaskSuite):
    """The SIMPLER WidowX task set with a current task (what sim_bridge backend ``simpler`` hosts)."""

    state_names = STATE_NAMES

    def __init__(self, tasks: Sequence[SimplerTaskSpec] | None = None, stop_at_success: bool = False,
                 **make_kwargs: Any) -> None:
        super().__init__(tasks if tasks is not None else load_tasks(), "SIMPLER")
        self.stop_at_success = stop_at_success
        self._make_kwargs = make_kwargs
        self._envs: dict[str, SimplerTaskEnv] = {}

    def env(self, task: str) -> SimplerTaskEnv:
        """The environment of ``task`` (built on first use)."""
        if task not in self._envs:
            self._envs[task] = SimplerTaskEnv(self._spec(task), self.stop_at_success, **self._make_kwargs)
        return self._envs[task]

    @property
    def current(self) -> SimplerTaskEnv:
        """The environment of the task of the last :meth:`reset`; RuntimeError before any reset."""
        if self._current is None:
            raise RuntimeError("call reset(task, seed) first")
        return self._envs[self._current]

    def reset(self, task: str, seed: int, episode_id: int | None = None) -> np.ndarray:
        """Switch to ``task`` and start an episode; returns the state (8,) (image: :meth:`render`)."""
        env = self.env(task)
        self._current = task
        return env.reset(seed, episode_id)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """Step with SIMPLER's native action (7,); returns (state (8,), success, done)."""
        return self.current.step(action)

    def step_eef7(self, action7: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """Step with a wire EefDeltaAction vector (7,) [xyz, rpy, gripper 0..1]."""
        return self.current.step(eef7_to_simpler(action7))

    @property
    def success(self) -> bool:
        """Whether the current episode has succeeded."""
        return self.current.success

    @property
    def observation(self) -> dict[str, np.ndarray]:
        """{"image": (480, 640, 3) uint8, "state": (8,)} of the current episode."""
        env = self.current
        return {"image": env.image, "state": env.state}

    def render(self, width: int | None = None, height: int | None = None, camera: str | None = None) -> np.ndarray:
        """SIMPLER's evaluation camera image (3rd view, with the real-image overlay), resized if a size is given.

        ``camera`` is accepted for sim_bridge's backend interface and ignored (SIMPLER's policy camera is fixed).
        """
        img = self.current.image
        if width is None or height is None or img.shape[:2] == (height, width):
            return img
        import cv2

        return cv2.resize(img, (width, height), interpolation=cv2.INTER_AREA)

    def close(self) -> None:
        """Release every task's environment."""
        for env in self._envs.values():
            env.close()
        self._envs.clear()
