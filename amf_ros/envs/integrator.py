"""The paper's 2D integrator (Sec. 5.1, Fig. 2 and 14): a point mass that starts at the origin and is
velocity-controlled, s_{t+1} = s_t + a_t; task c = a goal point on a circle; reward = -||s - goal||.

Why this file: AMF-GP is proven on this benchmark before anything touches a robot. Everything is vectorised over
a batch of episodes (B) so that 20 evaluation episodes x 12 tasks cost a few numpy calls per step.
Shapes: states (B, 2), actions (B, 2), goals (B, 2); a trajectory is (H, 2) states s_0..s_{H-1} and (H, 2)
actions a_0..a_{H-1}.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

#: (states (B, 2), goals (B, 2), rng) -> actions (B, 2)
BatchPolicy = Callable[[np.ndarray, np.ndarray, np.random.Generator], np.ndarray]


@dataclass(frozen=True)
class IntegratorConfig:
    """Constants of the 2D integrator (the paper gives the horizon only; the rest are ours, see the yaml)."""

    horizon: int = 5  # App. M: 5-step demonstrations
    radius: float = 1.0  # goals on the unit circle
    expert_gain: float = 0.5  # smooth expert a = gain (g - s): 97% of the way in 5 steps
    expert_noise_std: float = 0.1  # i.i.d. Gaussian demonstration noise per action dimension

    def __post_init__(self) -> None:
        if self.horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {self.horizon=}")
        if not self.radius > 0:
            raise ValueError(f"radius must be > 0, got {self.radius=}")
        if not 0 < self.expert_gain <= 1:
            raise ValueError(f"expert_gain must be in (0, 1], got {self.expert_gain=}")
        if self.expert_noise_std < 0:
            raise ValueError(f"expert_noise_std must be >= 0, got {self.expert_noise_std=}")


@dataclass
class Trajectory:
    """One episode: states s_0..s_{H-1} (H, 2), actions (H, 2), its task's goal (2,) and angle."""

    states: np.ndarray
    actions: np.ndarray
    goal: np.ndarray
    angle: float


class Integrator2D:
    """Batched 2D integrator with goal-reaching tasks on a circle."""

    state_dim = 2
    action_dim = 2
    task_dim = 2

    def __init__(self, config: IntegratorConfig | None = None) -> None:
        self.config = config or IntegratorConfig()

    def goals(self, angles: np.ndarray | float) -> np.ndarray:
        """(B, 2) goal points for angles (B,) in radians (the task representation fed to the policy)."""
        a = np.atleast_1d(np.asarray(angles, dtype=np.float64))
        return self.config.radius * np.stack([np.cos(a), np.sin(a)], axis=-1)

    @staticmethod
    def evaluation_angles(num_tasks: int = 12) -> np.ndarray:
        """(num_tasks,) evenly spaced task angles starting at 0 (the paper's 12 evaluation tasks)."""
        if num_tasks < 1:
            raise ValueError(f"num_tasks must be >= 1, got {num_tasks=}")
        return 2.0 * np.pi * np.arange(num_tasks) / num_tasks

    def expert(self, states: np.ndarray, goals: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
        """(B, 2) noisy expert actions; noiseless if ``rng`` is None."""
        mean = self.config.expert_gain * (goals - states)
        if rng is None or self.config.expert_noise_std == 0:
            return mean
        return mean + self.config.expert_noise_std * rng.standard_normal(mean.shape)

    def rollout(self, policy: BatchPolicy, goals: np.ndarray,
                rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Run ``policy`` for one episode per goal.

        Returns:
            states (B, H, 2) s_0..s_{H-1}, actions (B, H, 2), returns (B,) = sum_{t=1..H} -||s_t - goal||.
        """
        goals = np.asarray(goals, dtype=np.float64).reshape(-1, 2)
        h = self.config.horizon
        states = np.zeros((goals.shape[0], h, 2))
        actions = np.zeros((goals.shape[0], h, 2))
        s = np.zeros((goals.shape[0], 2))
        ret = np.zeros(goals.shape[0])
        for t in range(h):
            a = np.asarray(policy(s, goals, rng), dtype=np.float64)
            if a.shape != s.shape or not np.all(np.isfinite(a)):
                raise ValueError(f"policy returned bad actions: shape {a.shape}, expected {s.shape}, finite required")
            states[:, t], actions[:, t] = s, a
            s = s + a
            ret -= np.linalg.norm(s - goals, axis=1)
        return states, actions, ret

    def demonstrate(self, angle: float, rng: np.random.Generator) -> Trajectory:
        """One noisy expert demonstration of the task at ``angle``."""
        goal = self.goals(angle)
        states, actions, _ = self.rollout(self.expert, goal, rng)
        return Trajectory(states[0], actions[0], goal[0], float(angle))

    def expert_return(self, angle: float) -> float:
        """Return of the noiseless expert on one task (the upper reference of the plots)."""
        _, _, ret = self.rollout(lambda s, g, r: self.expert(s, g, None), self.goals(angle),
                                 np.random.default_rng(0))
        return float(ret[0])
