"""One task of the embedded WidowX as a per-task environment for scripted demonstrations and batched evaluation.

Why a wrapper: :class:`~amf_ros.envs.widowx_sim.suite.WidowXSimSuite` is the sim_bridge backend (one current task,
switched by ``reset(task, seed)``); pre-training and the benchmark want one environment per task, many of them
stepped in lockstep (:class:`~amf_ros.envs.metaworld_rollouts.EvalPool`), with the interface of
:class:`amf_ros.envs.suites.TaskEnv`. Every step still goes through the arm's logic, as widowx_driver's on the real arm.

Actions are EefDeltaAction vectors (7,) in BridgeData units: translation (m) and rotation (rad) per step, bounded
by the driver's ``max_translation`` (0.05 m) and ``max_rotation`` (0.25 rad); gripper 1 = open, 0 = close (the
driver opens at >= 0.5). Observations (14,): Octo's 8-D proprio, the moved object's and the receptacle's (or the
mark's) xyz, for every task of the family.
"""

from __future__ import annotations

import numpy as np

from amf_ros.envs.widowx_sim.suite import STATE_NAMES, WidowXSimSuite, WidowXTaskSpec, load_tasks
from amf_ros.robots.widowx_arm import WidowXArmConfig

__all__ = ["ACTION_DIM", "ACTION_MEAN", "ACTION_STD", "NOISE_STD", "STATE_DIM", "WidowXTaskEnv", "load_tasks"]


STATE_DIM = len(STATE_NAMES)
ACTION_DIM = 7
MAX_TRANSLATION, MAX_ROTATION = float(WidowXArmConfig().max_translation), float(WidowXArmConfig().max_rotation)
"""The arm's per-step bounds (widowx_driver's parameter defaults): 0.05 m per axis, 0.25 rad per Euler angle."""
ACTION_MEAN = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.5)
ACTION_STD = (MAX_TRANSLATION,) * 3 + (MAX_ROTATION,) * 3 + (0.5,)
"""Fixed action normalisation: translation / 0.05 m, rotation / 0.25 rad, gripper [0, 1] -> [-1, 1]."""
NOISE_STD = 0.002
"""Default std of the expert noise on the translation, m per axis and step (pre-training's noisy demonstrations and
config/bench/widowx.yaml). The expert tolerates far more: with the forgiving grasp and the closed-loop expert
(:mod:`amf_ros.envs.widowx_sim.expert`) every task of the family succeeds in at least 90 % of its episodes at
10 mm (``python -m amf_ros.bench.widowx_expert``, docs/results/widowx_expert)."""


class WidowXTaskEnv:
    """The embedded WidowX on one task (:class:`amf_ros.envs.suites.TaskEnv`); no camera is built.

    Args:
        spec: the task (a row of config/tasks/widowx_sim.yaml or config/tasks/widowx_family.yaml).
    """

    action_dim = ACTION_DIM

    def __init__(self, spec: WidowXTaskSpec) -> None:
        self.spec = spec
        self._suite = WidowXSimSuite(tasks=[spec], camera=False)
        self._obs: np.ndarray | None = None

    @property
    def obs(self) -> np.ndarray:
        """Current observation (14,) float32."""
        if self._obs is None:
            raise RuntimeError(f"task {self.spec.key!r}: call reset() before using the environment")
        return self._obs

    @property
    def steps(self) -> int:
        """Actions applied in this episode."""
        return self._suite.steps

    @property
    def success(self) -> bool:
        """The task was solved at some step of this episode (:meth:`WidowXSimSuite.solved`)."""
        return self._suite.success

    @property
    def done(self) -> bool:
        """Success or ``spec.max_steps`` actions applied."""
        return self._suite.done

    def reset(self, seed: int) -> np.ndarray:
        """Start an episode with the object layout of ``seed``; observation (14,) float32."""
        self._obs = self._suite.reset(self.spec.key, int(seed))
        return self._obs

    def step(self, action: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """Apply an EefDeltaAction vector (7,) through the driver; (obs (14,) float32, success, done).

        Stepping past ``done`` raises RuntimeError (reset first), as the Metaworld environments do.
        """
        action = np.asarray(action, dtype=np.float64)
        if action.shape != (ACTION_DIM,) or not np.all(np.isfinite(action)):
            raise ValueError(f"expected a finite EefDeltaAction vector of shape (7,), got {action!r}")
        if self._obs is None:
            raise RuntimeError(f"task {self.spec.key!r}: call reset() before step()")
        if self.done:
            raise RuntimeError(f"task {self.spec.key!r}: episode is over (success or max_steps); call reset()")
        self._obs, success, done = self._suite.step_eef7(action)
        return self._obs, success, done

    def expert_action(self) -> np.ndarray:
        """The scripted expert's noise-free EefDeltaAction (7,) at the current observation."""
        if self._obs is None:
            raise RuntimeError(f"task {self.spec.key!r}: call reset() before expert_action()")
        return self._suite.expert_action()

    def perturb(self, action: np.ndarray, noise_std: float, rng: np.random.Generator | None) -> np.ndarray:
        """``action`` plus N(0, noise_std^2) metres on each translation axis, clipped to the driver's bounds; the
        rotation and the (binary) gripper stay as the expert meant them."""
        if noise_std < 0:
            raise ValueError(f"noise_std must be >= 0, got {noise_std=}")
        a = np.array(action, dtype=np.float64)
        if noise_std == 0:
            return a
        if rng is None:
            raise ValueError("an rng is required when noise_std > 0")
        a[:3] += rng.normal(0.0, noise_std, 3)
        return self._suite.driver.adapter.limits.workspace.clip_delta(a)

    def random_action(self, rng: np.random.Generator) -> np.ndarray:
        """Uniform translation within the bounds and a random gripper command; no rotation (the expert and the
        demonstrations keep the gripper pointing down, and a random walk of the wrist would spread the orientation
        statistics over poses nothing else visits)."""
        a = np.zeros(ACTION_DIM)
        a[:3] = rng.uniform(-MAX_TRANSLATION, MAX_TRANSLATION, 3)
        a[6] = float(rng.integers(0, 2))
        return a

