"""Policies as SimplerEnv evaluates them: one camera image in, one SIMPLER-native action (7,) out.

Why: ``amf bench simpler`` must run a policy "the way SIMPLER's own scripts do" (SimplerEnv
``simpler_env/policies/octo/octo_model.py``, ``OctoInference.step``):

1. resize the 480x640 frame straight to 256x256 (no crop), append it to a history of at most 2 frames that is
   not pre-filled (window grows 1 -> 2, pad mask all ones);
2. sample a normalised chunk (4, 7) with a fresh split of the JAX key per step (the key is split 5 times at
   start "to match octo server's inference seeds");
3. un-normalise ``a * std + mean`` on all 7 dims (SimplerEnv does it by hand, ``mask_mode="all"``; Octo's own
   ``sample_actions`` would leave the gripper raw, ``mask_mode="stats"``);
4. temporal ensembling over 4 chunks, uniform weights; 5. xyz as is, roll/pitch/yaw -> axis-angle, gripper
   ``2 * (g > 0.5) - 1``.

:class:`ChunkSimplerPolicy` does steps 1 and 3-5 around any ``chunk_fn(observation, instruction) -> (H, A)``;
:class:`OctoSimplerPolicy` plugs in Octo's own sampler through :class:`~amf_ros.policies.octo.trunk.OctoTrunk`.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping, Protocol

import numpy as np

from amf_ros.policies.octo.observation import ObservationWindow
from amf_ros.policies.postprocess import ActionPostprocessor, PostprocessConfig, eef7_to_simpler

ChunkFn = Callable[[Mapping[str, np.ndarray], str], np.ndarray]


class SimplerPolicy(Protocol):
    """What ``amf bench simpler`` drives: reset per episode, then one native action per camera frame."""

    def reset(self, instruction: str, seed: int) -> None:
        """New episode with this instruction; ``seed`` is the policy's sampling seed (SIMPLER: 0, 2, 4)."""

    def step(self, image: np.ndarray) -> np.ndarray:
        """(480, 640, 3) uint8 camera frame -> SIMPLER action (7,) [xyz, axis-angle, gripper +-1]."""


class ChunkSimplerPolicy:
    """History window + post-processing around a chunk predictor (normalised chunks, or raw if no stats)."""

    def __init__(self, chunk_fn: ChunkFn, stats: Mapping[str, Any] | None = None, mask_mode: str = "all",
                 window: int = 2, window_mode: str = "simpler", pad_key: str = "timestep_pad_mask",
                 image_size: tuple[int, int] = (256, 256), crop_scale: float | None = None,
                 horizon: int = 4, exp_weight: float = 0.0, action_scale: float = 1.0,
                 seed_fn: Callable[[int], None] | None = None) -> None:
        self.chunk_fn = chunk_fn
        self.seed_fn = seed_fn
        self.window = ObservationWindow(window=window, primary_size=image_size, pad_key=pad_key, mode=window_mode,
                                        crop_scale=crop_scale)
        self.post = ActionPostprocessor(PostprocessConfig(
            target="simpler", horizon=horizon, exp_weight=exp_weight, mask_mode=mask_mode,
            action_scale=action_scale, stats={k: np.asarray(v) for k, v in (stats or {}).items()}))
        self.instruction = ""
        self.last_raw_action: np.ndarray | None = None
        """The ensembled action in Bridge convention (7,) before the SIMPLER conversion (for logging)."""

    def reset(self, instruction: str, seed: int) -> None:
        """New episode: empty the history window and the ensemble, and seed the sampler if it takes a seed."""
        self.instruction = str(instruction)
        self.window.reset()
        self.post.reset()
        if self.seed_fn is not None:
            self.seed_fn(int(seed))

    def step(self, image: np.ndarray) -> np.ndarray:
        """(480, 640, 3) uint8 camera frame -> SIMPLER action (7,), through the chunk predictor and post-processing."""
        obs = self.window.add(image)
        chunk = np.asarray(self.chunk_fn(obs, self.instruction), dtype=np.float64)
        if chunk.ndim == 3:  # (1, H, A) from a batched sampler
            chunk = chunk[0]
        raw = self.post.robot_action(chunk)
        self.last_raw_action = raw
        return eef7_to_simpler(raw, self.post.config.action_scale)


class OctoSimplerPolicy(ChunkSimplerPolicy):
    """SimplerEnv's OctoInference for ``widowx_bridge`` on an :class:`OctoTrunk` (Octo's own diffusion head)."""

    def __init__(self, trunk: Any, dataset_name: str = "bridge_dataset", mask_mode: str = "all",
                 window_mode: str = "simpler", crop_scale: float | None = None, action_scale: float = 1.0) -> None:
        self.trunk = trunk

        def chunk_fn(obs: Mapping[str, np.ndarray], instruction: str) -> np.ndarray:
            return trunk.sample_actions(obs, [instruction])

        def seed_fn(seed: int) -> None:
            jax = trunk._jax
            rng = jax.random.PRNGKey(seed)
            for _ in range(5):  # SimplerEnv: "match octo server's inference seeds"
                rng, _ = jax.random.split(rng)
            trunk._rng = rng

        keys = trunk.info.image_keys
        super().__init__(chunk_fn, stats=trunk.action_statistics(dataset_name), mask_mode=mask_mode,
                         window=trunk.info.window_size, window_mode=window_mode, pad_key=trunk.pad_key,
                         image_size=keys.get("image_primary", (256, 256)), crop_scale=crop_scale,
                         horizon=min(4, trunk.info.action_horizon), action_scale=action_scale, seed_fn=seed_fn)
