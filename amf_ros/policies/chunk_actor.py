"""The actions of one run_policy episode from a policy that predicts action chunks (no rclpy import).

Why a class of its own: inference (slow, the policy) and acting (fast, every control tick) are two steps. A
chunk predicted from the observation of control step s holds the actions of steps s..s+H-1; the action of a
step is the temporal ensemble of the chunks that cover it, then finished for the wire (gripper, bounds, action
space). When inference is faster than the control period, every step gets its own chunk (Octo's and
SimplerEnv's evaluation); when it is slower (Octo's trunk on a CPU), the control loop runs inference on a
thread of its own and the steps between two chunks are taken from the chunks already there, up to the
loop's execution horizon, instead of stalling the arm.

Why in policies/: it is how a chunking policy acts; the runtime's control loop drives it, and the Octo actor
(policies/octo/actor.py) is one.
"""

from __future__ import annotations

import threading
from typing import Any, Callable, Mapping

import numpy as np

from amf_ros.policies.postprocess import TemporalEnsembler


class ChunkActor:
    """``predict(obs, step)`` stores a chunk; ``action(step)`` returns the wire action (7,) or None.

    Args:
        infer: ``obs -> (H, A)`` chunk (the policy; may be slow).
        finish: ``(A,) -> (7,)`` ensembled action to EefDeltaAction vector (called once per published step, in
            step order: a sticky gripper may keep state).
        horizon, exp_weight: temporal ensembling (Octo/SimplerEnv: 4, 0.0); the horizon is capped at the
            policy's chunk length.
    """

    def __init__(self, infer: Callable[[Mapping[str, Any]], np.ndarray],
                 finish: Callable[[np.ndarray], np.ndarray] = lambda a: a,
                 horizon: int = 1, exp_weight: float = 0.0) -> None:
        self.infer, self.finish = infer, finish
        self.horizon, self.exp_weight = int(horizon), float(exp_weight)
        self.ensembler: TemporalEnsembler | None = None
        self._lock = threading.Lock()

    @classmethod
    def of_actions(cls, act: Callable[[Mapping[str, Any]], np.ndarray]) -> "ChunkActor":
        """A policy that returns one action per observation (a chunk of one step)."""
        return cls(lambda obs: np.asarray(act(obs), dtype=np.float64)[None])

    def reset(self) -> None:
        """Start of an episode: forget previous chunks."""
        with self._lock:
            self.ensembler = None

    @property
    def newest_step(self) -> int | None:
        """Step of the newest chunk, or None before the first."""
        with self._lock:
            return None if self.ensembler is None else self.ensembler.newest_step

    def predict(self, obs: Mapping[str, Any], step: int) -> None:
        """Run the policy on the observation of control step ``step`` and store its chunk."""
        chunk = np.asarray(self.infer(obs), dtype=np.float64)
        if chunk.ndim != 2 or not np.all(np.isfinite(chunk)):
            raise ValueError(f"policy returned a bad action chunk: shape {chunk.shape}, "
                             f"finite={bool(np.isfinite(chunk).all())}")
        with self._lock:
            if self.ensembler is None:
                self.ensembler = TemporalEnsembler(max(1, min(self.horizon, chunk.shape[0])), self.exp_weight)
            self.ensembler.put(chunk, step)

    def action(self, step: int) -> np.ndarray | None:
        """The wire action (7,) of control step ``step``, or None if no chunk covers it."""
        with self._lock:
            ensembled = None if self.ensembler is None else self.ensembler.at(step)
        return None if ensembled is None else self.finish(ensembled)

    def __call__(self, obs: Mapping[str, Any]) -> np.ndarray:
        """Synchronous use: the chunk of the next step and that step's action."""
        newest = self.newest_step
        step = 0 if newest is None else newest + 1
        self.predict(obs, step)
        return self.action(step)
