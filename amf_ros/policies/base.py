"""The seams every policy backend implements: trunk, action head, and the task-conditioned policy.

Why a ``typing.Protocol`` and not an ABC: the Octo backend (JAX trunk), the torch heads and the GP policy share no
base class, yet selectors, the benchmark and the ROS nodes must see one interface. Shapes (B = batch, H = action
horizon, A = action dim, E = trunk embedding width, P = embedding width for the AMF criterion, K = fixed noise draws):

Trunk (frozen during fine-tuning; its output is cached per recorded frame)
    ``encode_frames(frames) -> (B, F)`` from an observation batch (``{"state": (B, S)}`` or ``{"image": (B, h, w, 3)
    uint8}``); the trunk embedding fed to a head is ``concat(frame features (B, F), task embedding (B, L))``, so
    frame features are cached once per frame and recombined with any task (the criterion relabels states).

ActionHead (``DiffusionActionHead``, ``GaussianMLPHead``), all in normalized action space
    ``per_sample_loss(emb (B, E), actions (B, H, A), mask (B, H, A) bool, draws) -> (B,)``
    ``sample(emb (B, E), generator) -> (B, H, A)``
    ``last_layer_terms(emb, actions, mask, draws) -> (h (K, B, F'), g (K, B, O))``: the penultimate features feeding
    the last Linear layer and dLoss/d(output) for each of K fixed draws; the loss gradient w.r.t. that layer is
    ``sum_k g_k (x) [h_k, 1]`` (g carries the 1/K of the mean over draws; closed form in ``policies/embeddings.py``).

Policy (every backend: ``TaskConditionedPolicy`` with a diffusion or MLP head, the Octo-initialised one made by
``policies/octo/policy.py: octo_policy``, and ``policies/gp.py: GPTaskPolicy``); what the runtime (policy_server,
task_selector, the fine-tune worker), the selectors, the benchmarks and the ROS nodes read of a policy they did not
build themselves, and nothing else: see :class:`Policy`. ``transitions`` is a dict of numpy arrays with N rows:
``state`` (N, S) and/or ``image`` (N, h, w, 3), ``task`` (N,) task keys, ``action`` (N, A), ``episode_index`` (N,),
``step`` (N,). :class:`HeadPolicy` adds what the peer acquisition rules (policies/peer_scores.py) read of a policy with
a neural action head. Code that builds a ``TaskConditionedPolicy`` itself (pre-training, the Metaworld benchmark,
``amf bench perf-finetune``) may use that class's own members (trunk, cache, action_normalizer, freeze_prior, ...).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from amf_ros.policies.language import TaskEncoder

Transitions = Mapping[str, np.ndarray]
"""A dataset as columns of N rows (see module docstring)."""

StepCallback = Callable[[int, float], bool]
"""``callback(step, loss) -> keep_going``; returning False stops training early (ROS action cancel)."""


@dataclass
class FitResult:
    """What one :meth:`Policy.fit` call did."""

    losses: list[float] = field(default_factory=list)
    """Loss at every step (the loss curve)."""
    steps: int = 0
    """Steps actually taken (fewer than asked when the callback cancelled)."""
    wall_time_s: float = 0.0
    """Wall-clock time of the loop."""
    cancelled: bool = False
    """True when the callback returned False."""

    @property
    def steps_per_s(self) -> float:
        """Throughput of the loop."""
        return self.steps / self.wall_time_s if self.wall_time_s > 0 else float("nan")

    @property
    def final_loss(self) -> float:
        """Mean of the last 10% of the curve (NaN if no step ran)."""
        if not self.losses:
            return float("nan")
        tail = self.losses[-max(1, len(self.losses) // 10):]
        return float(np.mean(tail))


@runtime_checkable
class Trunk(Protocol):
    """Frozen observation encoder: frames -> (B, F) features (see module docstring)."""

    feature_dim: int

    def encode_frames(self, frames: Mapping[str, Any]) -> Any:
        """(B, F) float32 torch tensor of frame features."""


@runtime_checkable
class ActionHead(Protocol):
    """Predicts normalized action chunks (B, H, A) from trunk embeddings (B, E)."""

    action_horizon: int
    action_dim: int

    def per_sample_loss(self, emb: Any, actions: Any, mask: Any, draws: Any = None) -> Any:
        """(B,) training loss of each example."""

    def sample(self, emb: Any, generator: Any = None) -> Any:
        """(B, H, A) sampled (or mean) normalized actions."""

    def last_layer_terms(self, emb: Any, actions: Any, mask: Any, draws: Any) -> tuple[Any, Any]:
        """(h (K, B, F'), g (K, B, O)): last-layer inputs and loss gradients w.r.t. the layer's outputs."""


@runtime_checkable
class Policy(Protocol):
    """What the runtime, the selectors, the benchmarks and the ROS nodes see of any policy backend.

    Every member below is used by code that receives a policy from a checkpoint loader (policy_server, the
    fine-tune worker, task_selector, ``amf bench ros-latency``, the nodes); nothing else may be assumed of one.
    A backend that cannot do something raises ValueError saying so (e.g. the GP policy has no loss-gradient
    embedding and no adaptive prior); test/policies/contract.py checks every backend against this.
    """

    @property
    def tasks(self) -> list[str]:
        """Task keys the policy can act for, in order (the checkpoint's task set)."""

    @property
    def instructions(self) -> Mapping[str, str]:
        """``{task key: instruction}`` for every key of :attr:`tasks` (task_selector's and Octo's task text)."""

    def set_tasks(self, tasks: Mapping[str, str]) -> None:
        """Add (or re-word) tasks ``{key: instruction}``: a new key gets its instruction's embedding and alpha(c) at its
        initial value, so the policy acts for it (mostly from the prior) and learns it from its demonstrations at the
        next :meth:`fit`. A backend that cannot add a task raises ValueError (the GP: a task is a given vector)."""

    @property
    def alphas(self) -> Mapping[str, float]:
        """``{task key: alpha(c)}`` of the adaptive prior (empty without one); reported after each fine-tune."""

    @property
    def prior(self) -> ActionHead | None:
        """The frozen pre-trained head the adaptive prior mixes with; None without one (then :meth:`fit_alpha`
        raises ValueError)."""

    @property
    def encoder(self) -> TaskEncoder | None:
        """The instruction encoder (a language model takes seconds to load: loaders share it between copies);
        None for a policy whose tasks need no encoder."""

    @property
    def action_horizon(self) -> int:
        """H, the length of an action chunk (and of the label chunk an embedding row reads)."""

    @property
    def action_dim(self) -> int:
        """A, the width of one action."""

    def act(self, obs: Mapping[str, np.ndarray], task: str, seed: int | None = None) -> np.ndarray:
        """(H, A) un-normalized action chunk for one observation (``{"state": (S,)}`` or ``{"image": (h, w, 3)}``).

        ``seed``: fixed sampling noise (same seed, same chunk); None = the policy's own generator. Raises
        ValueError for a task key not in :attr:`tasks` (message starts "unknown task").
        """

    def loss(self, transitions: Transitions) -> float:
        """Mean training loss over ``transitions`` (deterministic)."""

    def embed(self, transitions: Transitions) -> np.ndarray:
        """(N, P) float32 loss-gradient embeddings, one row per transition (deterministic; AMF-NN's phi)."""

    def fit(self, transitions: Transitions, steps: int, *, batch_size: int | None = None, lr: float | None = None,
            seed: int | None = None, callback: StepCallback | None = None,
            row_weights: np.ndarray | None = None) -> FitResult:
        """Fine-tune on ``transitions`` for up to ``steps`` steps (``callback`` False = stop, ``cancelled``);
        ``batch_size``, ``lr``, ``seed``: None = the policy's configured ones; ``row_weights``: (N,) minibatch
        sampling weights (replay of pre-training data, data/replay.py; None = uniform). Returns the loss curve."""

    def fit_alpha(self, transitions: Transitions, steps: int | None = None,
                  seed: int | None = None) -> dict[str, float]:
        """Train alpha(c) of the tasks in ``transitions``; returns :attr:`alphas` (ValueError without a prior)."""

    def save(self, path: str | Path) -> Path:
        """Write a checkpoint directory atomically; returns its path."""

    @classmethod
    def load(cls, path: str | Path) -> Policy:
        """Read and verify a checkpoint written by :meth:`save`."""


@runtime_checkable
class HeadPolicy(Policy, Protocol):
    """A policy with a neural action head: what the peer acquisition rules (policies/peer_scores.py: MC dropout, the
    ensemble rules, diversity) read besides :class:`Policy` (task_selector hands them its policy copy)."""

    @property
    def head(self) -> ActionHead:
        """The fine-tuned action head."""

    def head_inputs(self, transitions: Transitions) -> Any:
        """(N, E) float32 torch tensor: what the head sees for each row (needs the frame key and ``task``)."""


def check_shape(name: str, shape: Sequence[int], expected: Sequence[int | None]) -> None:
    """Raise ValueError unless ``shape`` matches ``expected`` (None = any size).

    Why: shape mistakes at the seams must say what was expected and what arrived.
    """
    if len(shape) != len(expected) or any(e is not None and s != e for s, e in zip(shape, expected, strict=True)):
        want = "(" + ", ".join("*" if e is None else str(e) for e in expected) + ")"
        raise ValueError(f"{name}: expected shape {want}, got {tuple(shape)}")
