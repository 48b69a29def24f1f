"""The simulated task suites that `amf pretrain` and `amf bench` run on, by name: "metaworld" and "widowx".

Why a registry: pre-training, the benchmark and its batched evaluation are the same code for every suite; what
differs is how tasks are loaded, which per-task environment steps them, the state and action sizes, the scale of the
expert noise and how actions are normalised. Those facts live here, one :class:`Suite` per name, and the
environment modules are imported only when a suite is used (``import amf_ros.envs.suites`` needs neither Metaworld
nor MuJoCo).

A per-task environment (:class:`TaskEnv`) is what the rollout loops of :mod:`amf_ros.envs.metaworld_rollouts` need:
a seeded ``reset``, ``step`` to (obs, success, done), the noise-free scripted ``expert_action``, the suite's own
expert-noise model (``perturb``) and a random action for exploration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np


class TaskEnv(Protocol):
    """One environment of one task, stepped one action at a time (shapes: S = state_dim, A = action_dim)."""

    spec: Any
    """The task's spec: ``key``, ``instruction``, ``max_steps``."""
    steps: int
    success: bool

    @property
    def obs(self) -> np.ndarray:
        """Current observation (S,) float32."""

    @property
    def done(self) -> bool:
        """Success or ``spec.max_steps`` steps taken."""

    def reset(self, seed: int) -> np.ndarray:
        """Start an episode with the scene of ``seed``; observation (S,) float32."""

    def step(self, action: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """Apply an action (A,); (obs (S,) float32, success, done)."""

    def expert_action(self) -> np.ndarray:
        """The scripted expert's noise-free action (A,) at the current state."""

    def perturb(self, action: np.ndarray, noise_std: float, rng: np.random.Generator | None) -> np.ndarray:
        """The action executed when a noisy expert means ``action`` (the suite's noise model, clipped)."""

    def random_action(self, rng: np.random.Generator) -> np.ndarray:
        """A random action (A,) for exploration states (normalisation statistics)."""


@dataclass(frozen=True)
class Suite:
    """What pre-training and the benchmark need to know about one suite."""

    name: str
    """Registry name, also the benchmark name in results.json."""
    default_tasks: tuple[str, ...]
    """Tasks of `amf pretrain` / `amf bench` when none are given; mismatched pre-training covers the first half."""
    state_dim: int
    """S: length of an observation."""
    action_dim: int
    """A: length of an action."""
    noise_std: float
    """Default std of the Gaussian noise on executed expert actions (in the units :meth:`TaskEnv.perturb` says)."""
    action_mean: tuple[float, ...]
    """Fixed action normalisation, normalized = (a - mean) / std: set from the action bounds, never fitted (a std
    fitted on half of the tasks can be ~0 in a dimension, see :func:`amf_ros.bench.pretrain.set_normalizers`)."""
    action_std: tuple[float, ...]
    load_tasks: Callable[[Sequence[str] | None], list]
    """keys (None = every task of the suite's task file) -> task specs in that order."""
    make_env: Callable[[Any], TaskEnv]
    """Task spec -> a fresh per-task environment."""
    sources: tuple[str, ...]
    """Repository-relative files and folders (``*.py`` in them) that shape the suite's demonstrations: part of the
    recipe key of a cached pre-trained checkpoint (:mod:`amf_ros.bringup.pretrained`)."""


def _metaworld() -> Suite:
    from amf_ros.envs import metaworld_suite as mw

    return Suite(
        name="metaworld", default_tasks=("faucet-open", "drawer-close", "push", "drawer-open"),
        state_dim=mw.OBS_DIM, action_dim=mw.NATIVE_ACTION_DIM, noise_std=0.1,
        # native actions are already in [-1, 1]: the identity
        action_mean=(0.0,) * mw.NATIVE_ACTION_DIM, action_std=(1.0,) * mw.NATIVE_ACTION_DIM,
        load_tasks=lambda keys: mw.load_tasks(keys=keys), make_env=mw.MetaworldTaskEnv,
        sources=("amf_ros/envs/metaworld_suite.py", "amf_ros/envs/metaworld_rollouts.py",
                 "config/tasks/metaworld.yaml"))


def _widowx() -> Suite:
    from amf_ros.envs.widowx_sim import task_env as wx

    return Suite(
        name="widowx", default_tasks=("spoon_on_towel", "carrot_on_plate", "stack_cube", "eggplant_in_basket"),
        state_dim=wx.STATE_DIM, action_dim=wx.ACTION_DIM, noise_std=wx.NOISE_STD,
        action_mean=wx.ACTION_MEAN, action_std=wx.ACTION_STD,
        load_tasks=lambda keys: wx.load_tasks(keys=keys), make_env=wx.WidowXTaskEnv,
        sources=("amf_ros/envs/widowx_sim", "amf_ros/envs/task_set.py", "amf_ros/envs/metaworld_rollouts.py",
                 "amf_ros/runtime/widowx_driver.py", "amf_ros/robots/widowx.py", "amf_ros/robots/wx250s.py",
                 "amf_ros/bringup/params/widowx_driver.py", "config/tasks/widowx_sim.yaml"))


SUITES: dict[str, Callable[[], Suite]] = {"metaworld": _metaworld, "widowx": _widowx}
"""Suite name -> factory (imports the suite's environment module when called)."""


def get_suite(name: str) -> Suite:
    """The :class:`Suite` called ``name`` (ValueError naming the known ones otherwise)."""
    if name not in SUITES:
        raise ValueError(f"unknown suite {name!r}; choose from {list(SUITES)}")
    return SUITES[name]()
