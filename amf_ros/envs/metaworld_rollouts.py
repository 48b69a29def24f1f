"""Scripted demonstrations and batched evaluation rollouts on a simulated task suite (Metaworld, embedded WidowX).

Why a separate module: a suite (:mod:`amf_ros.envs.metaworld_suite`, :mod:`amf_ros.envs.widowx_sim.suite`) is the
step-by-step API a ROS node hosts; here are the loops the benchmark and ``amf pretrain`` run on top of it, fast:
evaluation steps many environments in lockstep so that the policy is called once per step on a batch. The loops see
an environment only through :class:`amf_ros.envs.suites.TaskEnv`, so they serve every suite of
:mod:`amf_ros.envs.suites` (the module kept the name of the first one). Shapes: S = state size, A = action size of
the suite (Metaworld 39 and 4, WidowX 14 and 7).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from amf_ros.envs.suites import TaskEnv, get_suite

ActFn = Callable[[np.ndarray, Sequence[str]], np.ndarray]
"""Batched policy: (observations (B, S) float32, task keys [B]) -> actions (B, A)."""

EVAL_SEED_OFFSET = 1_000_000
"""Evaluation scenes use seeds from here on, so they never coincide with demonstration scenes."""


@dataclasses.dataclass
class Demo:
    """One scripted demonstration.

    Attributes:
        task: task key.
        seed: scene seed given to ``reset``.
        obs: (T, S) float32 observations, obs[t] is the input for actions[t].
        actions: (T, A) float32 actions that were executed (expert + noise).
        expert_actions: (T, A) float32 noise-free expert actions at the same states (the BC labels).
        success: whether the episode reached success within ``max_steps``.
    """

    task: str
    seed: int
    obs: np.ndarray
    actions: np.ndarray
    expert_actions: np.ndarray
    success: bool

    def __len__(self) -> int:
        return int(self.obs.shape[0])


def collect_demo(env: TaskEnv, seed: int, noise_std: float = 0.0,
                 rng: np.random.Generator | None = None) -> Demo:
    """Roll out the scripted expert (with optional action noise) from scene ``seed``.

    The episode ends at success or at ``max_steps``. Labels are the noise-free expert actions at the visited
    states (the executed actions are noisy, so the demonstrations cover states off the expert's path); the noise
    model is the environment's (:meth:`~amf_ros.envs.suites.TaskEnv.perturb`).
    """
    obs = env.reset(seed)
    xs, acts, labels = [], [], []
    done = False
    while not done:
        expert = env.expert_action()
        act = env.perturb(expert, noise_std, rng)
        xs.append(obs)
        acts.append(act)
        labels.append(expert)
        obs, _, done = env.step(act)
    return Demo(task=env.spec.key, seed=int(seed), obs=np.stack(xs).astype(np.float32),
                actions=np.stack(acts).astype(np.float32), expert_actions=np.stack(labels).astype(np.float32),
                success=env.success)


def collect_demos(envs: Mapping[str, TaskEnv], counts: Mapping[str, int], seed: int,
                  noise_std: float = 0.0) -> list[Demo]:
    """``counts[task]`` demonstrations per task, scenes and noise drawn from ``seed`` (deterministic)."""
    rng = np.random.default_rng(seed)
    demos: list[Demo] = []
    for task, n in counts.items():
        if n < 0:
            raise ValueError(f"demonstration count must be >= 0, got {n=} for {task=}")
        if n and task not in envs:
            raise ValueError(f"no environment for task {task!r}; have {sorted(envs)}")
        for _ in range(int(n)):
            scene = int(rng.integers(0, EVAL_SEED_OFFSET))
            demos.append(collect_demo(envs[task], scene, noise_std, rng))
    return demos


class EvalPool:
    """``slots`` environments per task, stepped in lockstep for batched policy evaluation.

    Args:
        specs: task specs of ``suite``.
        slots: environments per task (episodes of one task run ``slots`` at a time).
        suite: name in :mod:`amf_ros.envs.suites` ("metaworld" or "widowx").
    """

    def __init__(self, specs: Sequence[Any], slots: int = 1, suite: str = "metaworld") -> None:
        if slots < 1:
            raise ValueError(f"slots must be >= 1, got {slots=}")
        info = get_suite(suite)
        self.specs = list(specs)
        self.slots = slots
        self.action_dim = info.action_dim
        self.envs: list[TaskEnv] = [info.make_env(s) for s in self.specs for _ in range(slots)]

    def evaluate(self, act_fn: ActFn, episodes_per_task: int, seed: int = 0) -> dict[str, float]:
        """Success rate per task over ``episodes_per_task`` episodes each (scenes from ``seed``).

        Scenes are the same for every policy evaluated with the same ``seed`` (paired comparison).
        """
        if episodes_per_task < 1:
            raise ValueError(f"episodes_per_task must be >= 1, got {episodes_per_task=}")
        succ = {s.key: 0 for s in self.specs}
        done_eps = {s.key: 0 for s in self.specs}
        wave = 0
        while min(done_eps.values()) < episodes_per_task:
            active = []
            for i, env in enumerate(self.envs):
                slot = i % self.slots
                ep = wave * self.slots + slot
                if ep < episodes_per_task:
                    env.reset(EVAL_SEED_OFFSET + 1000 * seed + ep)
                    active.append(env)
            self._run_wave(active, act_fn)
            for env in active:
                succ[env.spec.key] += int(env.success)
                done_eps[env.spec.key] += 1
            wave += 1
        return {k: succ[k] / done_eps[k] for k in succ}

    def _run_wave(self, envs: list[TaskEnv], act_fn: ActFn) -> None:
        running = list(envs)
        while running:
            obs = np.stack([e.obs for e in running])
            actions = np.asarray(act_fn(obs, [e.spec.key for e in running]), dtype=np.float64)
            if actions.shape != (len(running), self.action_dim):
                raise ValueError(f"act_fn must return ({len(running)}, {self.action_dim}) actions, "
                                 f"got {actions.shape}")
            for env, a in zip(running, actions, strict=True):
                env.step(a)
            running = [e for e in running if not e.done]


def demos_to_transitions(demos: Sequence[Demo], episode_offset: int = 0, task: str | None = None
                         ) -> dict[str, np.ndarray]:
    """Stack demonstrations into the policy's transition dict (see ``amf_ros.policies.base``).

    Args:
        demos: demonstrations to stack (at least one).
        episode_offset: first ``episode_index`` (episodes are numbered in order).
        task: relabel every row with this task key (the criterion's hallucinated demonstrations); default the
            demonstrated task.
    Returns:
        ``state`` (N, S) float32, ``task`` (N,) str, ``action`` (N, A) float32 (noise-free expert labels),
        ``episode_index`` (N,) int64, ``step`` (N,) int64.
    """
    if not demos:
        raise ValueError("demos_to_transitions needs at least one demonstration")
    return {
        "state": np.concatenate([d.obs for d in demos]).astype(np.float32),
        "task": np.concatenate([np.full(len(d), task or d.task, dtype=object) for d in demos]).astype(str),
        "action": np.concatenate([d.expert_actions for d in demos]).astype(np.float32),
        "episode_index": np.concatenate([np.full(len(d), episode_offset + i, dtype=np.int64)
                                         for i, d in enumerate(demos)]),
        "step": np.concatenate([np.arange(len(d), dtype=np.int64) for d in demos]),
    }


def exploration_states(envs: Mapping[str, TaskEnv], seed: int, episodes: int = 2, steps: int = 50
                       ) -> np.ndarray:
    """States (N, S) visited by random actions (:meth:`~amf_ros.envs.suites.TaskEnv.random_action`) in every
    task's scene (no expert, no labels).

    Why: state normalization statistics fitted on demonstrations of half of the tasks leave the other tasks'
    object dimensions (constant in that data) with a near-zero std, so their states saturate; statistics of
    random exploration in every scene describe the observation space without demonstrating anything.
    """
    if episodes < 1 or steps < 1:
        raise ValueError(f"episodes and steps must be >= 1, got {episodes=} {steps=}")
    rng = np.random.default_rng([seed, 3])
    out = []
    for env in envs.values():
        for _ in range(episodes):
            out.append(env.reset(int(rng.integers(0, EVAL_SEED_OFFSET))))
            for _ in range(min(steps, env.spec.max_steps)):
                obs, _, done = env.step(env.random_action(rng))
                out.append(obs)
                if done:
                    break
    return np.stack(out).astype(np.float32)
