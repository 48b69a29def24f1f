"""Small policy checkpoints for graph-level benchmarks and tests (fault probes, supervision, the WidowX loop).

Why: every node of the embedded simulation loads, acts with, embeds and fine-tunes the policy it serves; with these
(chunks of 4, frozen prior, fitted 5 steps on synthetic data, the "hash" task encoder instead of the language model)
a whole graph starts in seconds on 2 cores. Metaworld: 39-D state, native 4-D action; the embedded WidowX: 14-D
state, 7-D Bridge action.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence


def tiny_checkpoint(path: Path, tasks: tuple[str, ...] = ("reach", "push"), head: str = "mlp", seed: int = 0) -> Path:
    """Write the checkpoint to ``path``; returns its directory."""

    from amf_ros.envs.metaworld_suite import load_tasks
    from amf_ros.policies.agent import TaskConditionedPolicy
    from amf_ros.policies.config import PolicyConfig

    specs = load_tasks(keys=list(tasks))
    cfg = PolicyConfig(head=head, trunk="state", task_encoder="hash", action_horizon=4, seed=seed)
    policy = TaskConditionedPolicy(cfg, action_dim=4, state_dim=39, tasks={s.key: s.instruction for s in specs})
    return fit_on_noise(policy, [s.key for s in specs], path, episodes=4, steps_per_episode=10, fit_steps=5, seed=seed)


def tiny_widowx_checkpoint(path: Path, tasks: tuple[str, ...] = ("carrot_on_plate", "stack_cube"), head: str = "mlp",
                           seed: int = 0) -> Path:
    """The same for the embedded WidowX (config/tasks/widowx_sim.yaml): 14-D state, 7-D Bridge actions."""
    from amf_ros.envs.widowx_sim.suite import STATE_NAMES, load_tasks
    from amf_ros.policies.agent import TaskConditionedPolicy
    from amf_ros.policies.config import PolicyConfig

    specs = load_tasks(keys=list(tasks))
    cfg = PolicyConfig(head=head, trunk="state", task_encoder="hash", action_horizon=4, seed=seed)
    policy = TaskConditionedPolicy(cfg, action_dim=7, state_dim=len(STATE_NAMES),
                                   tasks={s.key: s.instruction for s in specs})
    return fit_on_noise(policy, [s.key for s in specs], path, episodes=4, steps_per_episode=10, fit_steps=5,
                        seed=seed, state_dim=len(STATE_NAMES), action_dim=7)


def fit_on_noise(policy: Any, tasks: Sequence[str], path: Path, episodes: int, steps_per_episode: int,
                 fit_steps: int, seed: int, state_dim: int = 39, action_dim: int = 4) -> Path:
    """Fit a policy briefly on random states (``state_dim``) and actions in [-1, 1] (``action_dim``; tasks in turn,
    one per episode), freeze its prior and save it to ``path``: a checkpoint every node can load, act with and
    embed."""
    import numpy as np

    rng = np.random.default_rng(seed)
    n, per = episodes * steps_per_episode, steps_per_episode
    transitions = {"state": rng.normal(size=(n, state_dim)).astype(np.float32),
                   "action": rng.uniform(-1, 1, (n, action_dim)).astype(np.float32),
                   "task": np.array([tasks[(i // per) % len(tasks)] for i in range(n)]),
                   "episode_index": np.repeat(np.arange(episodes), per), "step": np.tile(np.arange(per), episodes)}
    policy.fit(transitions, fit_steps)
    policy.freeze_prior()
    return Path(policy.save(path))


def nan_copy(src: Path, dst: Path) -> Path:
    """A copy of checkpoint ``src`` whose floating-point weights are all NaN (a diverged fine-tune's output): it
    loads, and a fine-tune started from it must refuse to save."""
    import torch

    from amf_ros.policies.checkpoint import load_checkpoint, save_checkpoint

    tensors, meta = load_checkpoint(src)
    poisoned = {k: torch.full_like(v, float("nan")) if v.is_floating_point() else v for k, v in tensors.items()}
    return save_checkpoint(dst, poisoned, meta)
