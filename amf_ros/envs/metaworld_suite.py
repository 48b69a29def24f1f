"""A multi-task Metaworld suite with scripted experts, stepped one action at a time.

Why: the AMF-NN benchmark (paper Sec. 5.3, Fig. 3) and the embedded ROS simulation both need a small set of
manipulation tasks that have a language instruction, a success signal and an expert. The API is deliberately
step-by-step (``reset(task, seed)``, ``step(action)``, ``expert_action()``) with no rollout-only state, so that a
ROS node (sim_bridge) can host it and drive it from messages.

Observations are Metaworld's 39-D goal-observable state vectors (end-effector xyz, gripper opening, two object
poses, the previous frame of those 18 values, the goal xyz), float32. Actions are Metaworld's native 4-D
``[dx, dy, dz, grab]`` in [-1, 1]; :func:`amf_ros.policies.action_spaces.native_to_eef7` /
:func:`~amf_ros.policies.action_spaces.eef7_to_native` convert to and from the wire action EefDeltaAction (7-D: xyz
delta in metres, roll/pitch/yaw delta in radians, gripper with 1 = open; the scale is explained there).
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
from amf_ros.policies.action_spaces import NATIVE_ACTION_DIM, eef7_to_native

log = logging.getLogger(__name__)

OBS_DIM = 39
"""Length of a Metaworld goal-observable state observation."""

_DEFAULT_TASKS_FILE = Path(__file__).resolve().parents[2] / "config" / "tasks" / "metaworld.yaml"


@dataclasses.dataclass(frozen=True)
class MetaworldTaskSpec:
    """One task of the suite, as listed in ``config/tasks/metaworld.yaml``."""

    key: str
    """Task key used by selectors, episodes and ROS services, e.g. ``"faucet-open"``."""
    env_name: str
    """Metaworld v3 environment name, e.g. ``"faucet-open-v3"``."""
    instruction: str
    """Natural-language instruction given to the language encoder."""
    max_steps: int = 150
    """Episode cut-off (steps) for rollouts and demonstrations."""

    def __post_init__(self) -> None:
        if not self.key or not self.instruction:
            raise ValueError(f"task key and instruction must be non-empty, got {self.key=} {self.instruction=}")
        if not self.env_name.endswith("-v3"):
            raise ValueError(f"env_name must be a Metaworld v3 environment like 'push-v3', got {self.env_name=}")
        if not 1 <= int(self.max_steps) <= 500:
            raise ValueError(f"max_steps must be in [1, 500] (Metaworld's limit), got {self.max_steps=}")

    @property
    def expert_class_name(self) -> str:
        """Name of the scripted expert in ``metaworld.policies``, e.g. ``SawyerFaucetOpenV3Policy``."""
        base = self.env_name[: -len("-v3")]
        return "Sawyer" + "".join(part.capitalize() for part in base.split("-")) + "V3Policy"


def tasks_file() -> Path:
    """The task list in use: ``$AMF_METAWORLD_TASKS`` if set, else ``config/tasks/metaworld.yaml``."""
    return Path(os.environ.get("AMF_METAWORLD_TASKS", _DEFAULT_TASKS_FILE))


def load_tasks(path: str | os.PathLike | None = None, keys: Sequence[str] | None = None) -> list[MetaworldTaskSpec]:
    """Read the task list (YAML ``{tasks: [{key, env_name, instruction, max_steps}, ...]}``).

    Args:
        path: YAML file; default :func:`tasks_file`.
        keys: keep only these task keys, in this order (unknown keys raise ValueError).
    """
    return load_task_set(path if path is not None else tasks_file(), keys, "Metaworld").typed(MetaworldTaskSpec)


class MetaworldTaskEnv:
    """One Metaworld environment for one task: seeded reset, step, success and the scripted expert.

    Object and goal positions are drawn from the task's random reset space with the seed given to
    :meth:`reset`, so ``reset(seed)`` always produces the same scene. The rollout loops see it through
    :class:`amf_ros.envs.suites.TaskEnv`.
    """

    action_dim = NATIVE_ACTION_DIM

    def __init__(self, spec: MetaworldTaskSpec) -> None:
        require("metaworld", feature="the Metaworld suite")
        from metaworld import policies
        from metaworld.env_dict import ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE

        env_id = f"{spec.env_name}-goal-observable"
        if env_id not in ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE:
            raise ValueError(f"Metaworld has no environment {spec.env_name!r} for task {spec.key!r}")
        if not hasattr(policies, spec.expert_class_name):
            raise ValueError(f"Metaworld has no scripted expert {spec.expert_class_name} for task {spec.key!r}")
        self.spec = spec
        self._env = ALL_V3_ENVIRONMENTS_GOAL_OBSERVABLE[env_id]()
        self._expert = getattr(policies, spec.expert_class_name)()
        self._obs: np.ndarray | None = None
        self._renderer: Any = None
        self.steps = 0
        self.success = False

    @property
    def obs(self) -> np.ndarray:
        """Current observation (39,) float32."""
        if self._obs is None:
            raise RuntimeError(f"task {self.spec.key!r}: call reset() before using the environment")
        return self._obs

    def reset(self, seed: int) -> np.ndarray:
        """Start an episode with the scene drawn from ``seed``; returns the observation (39,) float32."""
        env = self._env
        env._freeze_rand_vec = False  # draw a new object/goal position ...
        env.seeded_rand_vec = True  # ... from env.np_random, which env.seed() fixes
        env.seed(int(seed))
        obs, _ = env.reset()
        env._freeze_rand_vec = True
        self._obs = obs.astype(np.float32)
        self.steps = 0
        self.success = False
        return self._obs

    def step(self, action: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """Apply a native action (4,); returns (obs (39,) float32, success, done).

        ``success`` is Metaworld's success flag at this step; ``done`` is True once the task has succeeded or
        ``spec.max_steps`` steps were taken. Stepping past ``done`` raises RuntimeError (reset first).
        """
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (NATIVE_ACTION_DIM,):
            raise ValueError(f"expected a native Metaworld action of shape (4,), got {action.shape=}")
        if not np.all(np.isfinite(action)):
            raise ValueError(f"action must be finite, got {action=}")
        if self._obs is None:
            raise RuntimeError(f"task {self.spec.key!r}: call reset() before step()")
        if self.done:
            raise RuntimeError(f"task {self.spec.key!r}: episode is over (success or max_steps); call reset()")
        obs, _, _, _, info = self._env.step(np.clip(action, -1.0, 1.0))
        self._obs = obs.astype(np.float32)
        self.steps += 1
        self.success = bool(info["success"])
        return self._obs, self.success, self.done

    @property
    def done(self) -> bool:
        """True once the episode has succeeded or reached ``spec.max_steps``."""
        return self.success or self.steps >= self.spec.max_steps

    def expert_action(self, obs: np.ndarray | None = None) -> np.ndarray:
        """The scripted expert's native action (4,) for ``obs`` (default: the current observation)."""
        obs = self.obs if obs is None else np.asarray(obs, dtype=np.float64)
        if obs.shape != (OBS_DIM,):
            raise ValueError(f"expected a Metaworld observation of shape (39,), got {obs.shape=}")
        return np.clip(np.asarray(self._expert.get_action(obs), dtype=np.float64), -1.0, 1.0)

    def perturb(self, action: np.ndarray, noise_std: float, rng: np.random.Generator | None) -> np.ndarray:
        """The executed action of a noisy expert: :func:`noisy` (native units on every component)."""
        return noisy(action, noise_std, rng)

    def random_action(self, rng: np.random.Generator) -> np.ndarray:
        """A uniformly random native action (4,) in [-1, 1] (exploration states)."""
        return rng.uniform(-1.0, 1.0, size=NATIVE_ACTION_DIM)

    def render(self, width: int = 128, height: int = 128, camera: str = "corner") -> np.ndarray:
        """RGB image (height, width, 3) uint8 of the current scene (needs OSMesa or a GPU: MUJOCO_GL)."""
        import mujoco

        if self._renderer is None or (self._renderer.width, self._renderer.height) != (width, height):
            self._renderer = mujoco.Renderer(self._env.model, height=height, width=width)
        self._renderer.update_scene(self._env.data, camera=camera)
        return np.asarray(self._renderer.render(), dtype=np.uint8).copy()


class MetaworldSuite(TaskSuite):
    """The task set, one lazily built :class:`MetaworldTaskEnv` per task, and a current task.

    Typical use (what sim_bridge does)::

        suite = MetaworldSuite()
        obs = suite.reset("faucet-open", seed=3)
        while True:
            obs, success, done = suite.step(suite.expert_action())
            if done: break
    """

    def __init__(self, tasks: Sequence[MetaworldTaskSpec] | None = None) -> None:
        super().__init__(tasks if tasks is not None else load_tasks(), "Metaworld")
        self._envs: dict[str, MetaworldTaskEnv] = {}

    def env(self, task: str) -> MetaworldTaskEnv:
        """The environment of ``task`` (built on first use, about 0.2 s)."""
        if task not in self._envs:
            self._envs[task] = MetaworldTaskEnv(self._spec(task))
        return self._envs[task]

    @property
    def current(self) -> MetaworldTaskEnv:
        """The environment of the task given to the last :meth:`reset`."""
        if self._current is None:
            raise RuntimeError("call reset(task, seed) first")
        return self._envs[self._current]

    def reset(self, task: str, seed: int) -> np.ndarray:
        """Switch to ``task`` and start an episode with the scene drawn from ``seed``; obs (39,) float32."""
        env = self.env(task)
        self._current = task
        return env.reset(seed)

    def step(self, action: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """Step the current task with a native action (4,); returns (obs, success, done)."""
        return self.current.step(action)

    def step_eef7(self, action7: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """Step the current task with a wire EefDeltaAction vector (7,)."""
        return self.current.step(eef7_to_native(action7))

    def expert_action(self, noise_std: float = 0.0, rng: np.random.Generator | None = None) -> np.ndarray:
        """The scripted expert's native action (4,) for the current state, plus optional Gaussian noise.

        Args:
            noise_std: standard deviation of noise added to every component (native units), then clipped.
            rng: generator for the noise (required if ``noise_std > 0``).
        """
        return noisy(self.current.expert_action(), noise_std, rng)

    @property
    def success(self) -> bool:
        """Success flag of the current episode (at the last step)."""
        return self.current.success

    def render(self, width: int = 128, height: int = 128, camera: str = "corner") -> np.ndarray:
        """RGB image (height, width, 3) uint8 of the current task's scene."""
        return self.current.render(width=width, height=height, camera=camera)


def noisy(action: np.ndarray, noise_std: float, rng: np.random.Generator | None) -> np.ndarray:
    """``action`` plus N(0, noise_std^2) per component, clipped to [-1, 1] (the paper's noisy experts)."""
    if noise_std < 0:
        raise ValueError(f"noise_std must be >= 0, got {noise_std=}")
    if noise_std == 0:
        return np.asarray(action, dtype=np.float64)
    if rng is None:
        raise ValueError("an rng is required when noise_std > 0")
    return np.clip(action + rng.normal(0.0, noise_std, size=np.shape(action)), -1.0, 1.0)
