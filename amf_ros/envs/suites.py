"""The simulated task suites, by name: "metaworld", "widowx" (the embedded WidowX tabletop) and "simpler".

Why one registry (LeRobot keeps one per kind): sim_bridge hosts a suite's simulator, scripted_teleop drives it with
the suite's scripted experts, and `amf pretrain` and `amf bench` pre-train and evaluate on its per-task
environments. What differs between suites is how tasks are loaded, which simulator hosts them, which experts
demonstrate them, the state and action sizes, the scale of the expert noise and how actions are normalised. Those
facts live here, one :class:`Suite` per name, and the environment modules are imported only when a suite is asked
for (``import amf_ros.envs.suites`` needs neither Metaworld, MuJoCo nor SIMPLER).

A per-task environment (:class:`TaskEnv`) is what the rollout loops of :mod:`amf_ros.envs.metaworld_rollouts` need:
a seeded ``reset``, ``step`` to (obs, success, done), the noise-free scripted ``expert_action``, the suite's own
expert-noise model (``perturb``) and a random action for exploration. SIMPLER has none (no scripted experts): it is
a simulator for sim_bridge only, so :data:`TRAINING_SUITES` lists the suites pre-training and the benchmarks accept.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np


class SimBackend(Protocol):
    """A suite's simulator as sim_bridge hosts it (one current task, switched by ``reset``)."""

    @property
    def task_keys(self) -> list[str]:
        """Task keys in configuration order."""

    @property
    def task(self) -> str | None:
        """Key of the current task (None before the first reset)."""

    def instruction(self, task: str) -> str:
        """The natural-language instruction of ``task``."""

    def reset(self, task: str, seed: int) -> np.ndarray:
        """Switch to ``task`` and start an episode with the scene of ``seed``; the observation (D,)."""

    def step_eef7(self, action7: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """Apply one EefDeltaAction vector (7,); (observation, success, done)."""

    def render(self, width: int, height: int, camera: str) -> np.ndarray:
        """Camera image (height, width, 3) uint8 of the current scene."""


@dataclass(frozen=True)
class Expert:
    """A scripted demonstrator for one task: ``act(obs (D,)) -> (7,)`` EefDeltaAction vector; ``max_steps``
    actions before the operator gives up."""

    act: Callable[[np.ndarray], np.ndarray]
    max_steps: int


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
    """What sim_bridge, scripted_teleop, pre-training and the benchmark need to know about one suite."""

    name: str
    """Registry name: sim_bridge's ``backend``, scripted_teleop's ``experts``, the benchmark name in results.json."""
    load_tasks: Callable[..., list]
    """``(keys=None, path=None)`` -> the suite's task specs: ``keys`` (None = every task) of the task file ``path``
    (None = the suite's default), in that order."""
    make_backend: Callable[[list], SimBackend]
    """Task specs -> the simulator sim_bridge hosts."""
    default_tasks: tuple[str, ...]
    """Tasks of `amf pretrain` / `amf bench` when none are given; mismatched pre-training covers the first half."""
    state_dim: int
    """S: length of an observation."""
    action_dim: int
    """A: length of an action (the action the suite's simulator executes natively)."""
    sources: tuple[str, ...]
    """Repository-relative files and folders (``*.py`` in them) that shape the suite's demonstrations: part of the
    recipe key of a cached pre-trained checkpoint (:mod:`amf_ros.bringup.pretrained`)."""
    experts: Callable[[list, float, int], dict[str, Expert]] | None = None
    """``(task specs, noise_std, seed)`` -> the scripted experts of those tasks (what scripted_teleop drives the
    simulator with); None for a suite without scripted experts."""
    make_env: Callable[[Any], TaskEnv] | None = None
    """Task spec -> a fresh per-task environment (pre-training and the benchmark); None: not a training suite."""
    noise_std: float = 0.0
    """Default std of the Gaussian noise on executed expert actions (in the units :meth:`TaskEnv.perturb` says)."""
    action_mean: tuple[float, ...] = ()
    """Fixed action normalisation, normalized = (a - mean) / std: set from the action bounds, never fitted (a std
    fitted on half of the tasks can be ~0 in a dimension, see :func:`amf_ros.training.pretrain.set_normalizers`)."""
    action_std: tuple[float, ...] = ()
    pretrain_demos: int = 16
    """Total demonstrations of `amf pretrain` when none are given (the mismatched allocation puts them on the first
    half of the tasks)."""
    pretrain_steps: int = 1500
    """Gradient steps of `amf pretrain` when none are given."""

    def backend(self, tasks_file: str | os.PathLike = "") -> SimBackend:
        """The simulator sim_bridge hosts, with the tasks of ``tasks_file`` ("" = the suite's default task set)."""
        return self.make_backend(self.load_tasks(None, tasks_file or None))

    def scripted_experts(self, tasks_file: str | os.PathLike = "", noise_std: float = 0.0,
                         seed: int = 0) -> dict[str, Expert]:
        """The scripted experts of the tasks of ``tasks_file`` ("" = the suite's default task set), keyed by task.

        Args:
            tasks_file: the task-set YAML ("" = the suite's default task set).
            noise_std: std of the expert noise (the suite's units: Metaworld native action, WidowX metres of
                translation); 0 = the exact expert.
            seed: seed of that noise (one generator shared by all tasks).
        """
        if self.experts is None:
            raise ValueError(f"suite {self.name!r} has no scripted experts; choose from {list(TRAINING_SUITES)}")
        return self.experts(self.load_tasks(None, tasks_file or None), noise_std, seed)


def _metaworld_experts(specs: list, noise_std: float, seed: int) -> dict[str, Expert]:
    """Metaworld's scripted policies (built now, about 0.2 s per task), noise on the native action, acting in the
    wire action space."""
    from amf_ros.envs.metaworld_suite import MetaworldTaskEnv, noisy
    from amf_ros.policies.action_spaces import native_to_eef7

    rng = np.random.default_rng(seed)
    experts = {}
    for spec in specs:
        env = MetaworldTaskEnv(spec)

        def act(obs: np.ndarray, env: MetaworldTaskEnv = env) -> np.ndarray:
            return native_to_eef7(noisy(env.expert_action(obs), noise_std, rng))

        experts[spec.key] = Expert(act=act, max_steps=spec.max_steps)
    return experts


def _widowx_experts(specs: list, noise_std: float, seed: int, max_translation: float = 0.05) -> dict[str, Expert]:
    """The embedded WidowX's scripted grasp-and-place experts (amf_ros.envs.widowx_sim.suite.scripted_action), noise
    in metres on the translation, each step bounded by ``max_translation`` (widowx_driver's)."""
    from amf_ros.envs.widowx_sim.suite import scripted_action

    rng = np.random.default_rng(seed)
    experts = {}
    for spec in specs:

        def act(obs: np.ndarray, spec: Any = spec) -> np.ndarray:
            a = scripted_action(obs, spec, max_translation)
            if noise_std > 0:
                a[:3] = np.clip(a[:3] + rng.normal(0.0, noise_std, 3), -max_translation, max_translation)
            return a

        experts[spec.key] = Expert(act=act, max_steps=spec.max_steps)
    return experts


def _metaworld() -> Suite:
    from amf_ros.envs import metaworld_suite as mw
    from amf_ros.policies.action_spaces import NATIVE_ACTION_DIM

    return Suite(
        name="metaworld", load_tasks=lambda keys=None, path=None: mw.load_tasks(path, keys),
        make_backend=mw.MetaworldSuite, experts=_metaworld_experts,
        default_tasks=("faucet-open", "drawer-close", "push", "drawer-open"),
        state_dim=mw.OBS_DIM, action_dim=NATIVE_ACTION_DIM, noise_std=0.1,
        # native actions are already in [-1, 1]: the identity
        action_mean=(0.0,) * NATIVE_ACTION_DIM, action_std=(1.0,) * NATIVE_ACTION_DIM, make_env=mw.MetaworldTaskEnv,
        sources=("amf_ros/envs/metaworld_suite.py", "amf_ros/envs/metaworld_rollouts.py",
                 "config/tasks/metaworld.yaml"))


def _widowx() -> Suite:
    from amf_ros.envs.widowx_sim import suite as sim
    from amf_ros.envs.widowx_sim import task_env as wx

    return Suite(
        name="widowx", load_tasks=lambda keys=None, path=None: sim.load_tasks(path, keys),
        make_backend=sim.WidowXSimSuite, experts=_widowx_experts,
        default_tasks=("spoon_on_towel", "carrot_on_plate", "stack_cube", "eggplant_in_basket"),
        state_dim=wx.STATE_DIM, action_dim=wx.ACTION_DIM, noise_std=wx.NOISE_STD,
        action_mean=wx.ACTION_MEAN, action_std=wx.ACTION_STD, make_env=wx.WidowXTaskEnv,
        # 16 successful demonstrations per pre-trained task, 3000 steps: pre-trained tasks at 1.0 (10 episodes each),
        # where 8 per task and 1500 steps gave 0.30 (docs/ros-robot.md, "The main job and the benchmark")
        pretrain_demos=32, pretrain_steps=3000,
        sources=("amf_ros/envs/widowx_sim", "amf_ros/envs/task_suite.py", "amf_ros/envs/metaworld_rollouts.py",
                 "amf_ros/robots/widowx_arm.py", "amf_ros/robots/action_gate.py", "amf_ros/robots/widowx.py",
                 "amf_ros/robots/wx250s.py", "config/tasks/widowx_sim.yaml"))


def _wxai_sim() -> Suite:
    """The WidowX AI in trossen-arm-sim (amf_ros/envs/wxai_sim): the embedded WidowX's tasks, experts and observation;
    not a training suite (its physics runs in real time: pre-training and benchmarks use ``widowx``)."""
    from amf_ros.envs.widowx_sim import suite as sim
    from amf_ros.envs.widowx_sim import task_env as wx
    from amf_ros.envs.wxai_sim.suite import WXAISimSuite

    return Suite(
        name="wxai_sim", load_tasks=lambda keys=None, path=None: sim.load_tasks(path, keys),
        make_backend=WXAISimSuite, experts=_widowx_experts,
        default_tasks=("spoon_on_towel", "carrot_on_plate", "stack_cube", "eggplant_in_basket"),
        state_dim=wx.STATE_DIM, action_dim=wx.ACTION_DIM, noise_std=wx.NOISE_STD,
        action_mean=wx.ACTION_MEAN, action_std=wx.ACTION_STD,
        sources=("amf_ros/envs/wxai_sim", "amf_ros/robots/wxai.py", "config/tasks/widowx_sim.yaml"))


def _simpler() -> Suite:
    from amf_ros.envs import simpler

    return Suite(
        name="simpler", load_tasks=lambda keys=None, path=None: simpler.load_tasks(path, keys),
        make_backend=simpler.SimplerSuite, default_tasks=tuple(s.key for s in simpler.load_tasks()),
        state_dim=len(simpler.STATE_NAMES), action_dim=7,
        sources=("amf_ros/envs/simpler.py", "config/tasks/simpler_widowx.yaml"))


SUITES: dict[str, Callable[[], Suite]] = {"metaworld": _metaworld, "simpler": _simpler, "widowx": _widowx,
                                          "wxai_sim": _wxai_sim}
"""Suite name -> factory (imports the suite's environment module when called)."""
TRAINING_SUITES: tuple[str, ...] = ("metaworld", "widowx")
"""The suites with per-task environments (:attr:`Suite.make_env`) and scripted experts: what `amf pretrain` and
`amf bench` accept. scripted_teleop needs only :attr:`Suite.experts` (``wxai_sim`` has them, no per-task env: its
physics runs in real time)."""


def get_suite(name: str, training: bool = False) -> Suite:
    """The :class:`Suite` called ``name``; with ``training``, only one of :data:`TRAINING_SUITES` (ValueError naming
    the accepted ones otherwise)."""
    names = TRAINING_SUITES if training else tuple(SUITES)
    if name not in names:
        raise ValueError(f"unknown {'training ' if training else ''}suite {name!r}; choose from {list(names)}")
    return SUITES[name]()
