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

Policy (``policies/agent.py: TaskConditionedPolicy``; what selectors and nodes use)
    ``act(obs, task) -> (H, A)`` un-normalized action chunk;
    ``loss(transitions) -> float``; ``embed(transitions) -> (N, P)`` loss-gradient embeddings;
    ``fit(transitions, steps) -> FitResult``; ``save(path)``; ``load(path)`` (classmethod).
    ``transitions`` is a dict of numpy arrays with N rows: ``state`` (N, S) and/or ``image`` (N, h, w, 3),
    ``task`` (N,) task keys, ``action`` (N, A), ``episode_index`` (N,), ``step`` (N,).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Protocol, Sequence, runtime_checkable

import numpy as np

Transitions = Mapping[str, np.ndarray]


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
    """What selectors, the benchmark and the ROS nodes see of any policy backend."""

    def act(self, obs: Mapping[str, np.ndarray], task: str) -> np.ndarray:
        """(H, A) un-normalized action chunk for one observation (``{"state": (S,)}`` or ``{"image": ...}``)."""

    def loss(self, transitions: Transitions) -> float:
        """Mean training loss over ``transitions``."""

    def embed(self, transitions: Transitions) -> np.ndarray:
        """(N, P) loss-gradient embeddings, one row per transition (deterministic)."""

    def fit(self, transitions: Transitions, steps: int) -> Any:
        """Fine-tune on ``transitions`` for ``steps`` gradient steps; returns the loss curve."""

    def save(self, path: str | Path) -> Path:
        """Write a checkpoint directory atomically; returns its path."""

    @classmethod
    def load(cls, path: str | Path) -> "Policy":
        """Read and verify a checkpoint written by :meth:`save`."""


def check_shape(name: str, shape: Sequence[int], expected: Sequence[int | None]) -> None:
    """Raise ValueError unless ``shape`` matches ``expected`` (None = any size).

    Why: shape mistakes at the seams must say what was expected and what arrived.
    """
    if len(shape) != len(expected) or any(e is not None and s != e for s, e in zip(shape, expected, strict=True)):
        want = "(" + ", ".join("*" if e is None else str(e) for e in expected) + ")"
        raise ValueError(f"{name}: expected shape {want}, got {tuple(shape)}")
