"""One run_policy episode with an Octo head: camera frame -> window of 2 + pad mask -> trunk embedding -> mixed head
(H, 7) in robot units -> temporal ensembling, sticky gripper, per-step workspace bounds -> EefDeltaAction (7,).

Why in policies/: it is how an Octo policy acts (Octo's own WidowX evaluation conventions); policy_server's octo
backend only builds one per goal from its parameters.
"""

from __future__ import annotations

from typing import Any, Mapping

import numpy as np

from amf_ros.policies.base import Policy
from amf_ros.policies.chunk_actor import ChunkActor


class OctoActor(ChunkActor):
    """One run_policy episode with Octo: ``reset(task)``, then ``predict(obs, step)`` / ``action(step)`` (or
    ``obs -> (7,)`` EefDeltaAction vector when used synchronously); see chunk_actor.

    Args:
        trunk, policy: the frozen trunk and the (mixed) Octo head policy of this episode.
        horizon, exp_weight: temporal ensembling (Octo: 4, 0.0).
        sticky_gripper_steps: Octo's WidowX sticky gripper (gripper sent as 0 closed / 1 open).
        max_translation, max_rotation: per-step bounds of EefDeltaAction (the arm clips the target position to the
            workspace box itself: widowx_driver / SIMPLER).
        crop_scale: Octo's centre crop (None = SimplerEnv: no crop).
        wrist: feed a wrist camera (obs["wrist"]); False = primary camera only (Octo treats the missing wrist
            image as padding, as in its Bridge evaluation).
    """

    def __init__(self, trunk: Any, policy: Policy, horizon: int = 4, exp_weight: float = 0.0,
                 sticky_gripper_steps: int = 1, max_translation: float = 0.05, max_rotation: float = 0.25,
                 crop_scale: float | None = None, wrist: bool = False) -> None:
        from amf_ros.policies.octo.policy import OctoImageActor
        from amf_ros.policies.postprocess import StickyGripper, WorkspaceBounds

        # the head's chunks are already in robot units (Octo's statistics, gripper raw): no un-normalisation here
        super().__init__(self._infer, self._finish, horizon, exp_weight)
        self.actor = OctoImageActor(trunk, policy, crop_scale=crop_scale)
        self.actor.window = trunk.new_window(mode="octo", crop_scale=crop_scale, wrist=wrist)
        self.gripper = StickyGripper(sticky_gripper_steps)
        self.bounds = WorkspaceBounds(max_translation=max_translation, max_rotation=max_rotation)
        self.calls = 0

    def reset(self, task: str) -> None:  # type: ignore[override]
        """Start an episode of ``task`` (a key the policy knows): empty the window, the ensemble and the gripper."""
        self.actor.reset(task)
        super().reset()
        self.gripper.reset()
        self.calls = 0

    def _infer(self, obs: Mapping[str, np.ndarray]) -> np.ndarray:
        """obs ``{"image": (H, W, 3) uint8, ["wrist": (h, w, 3)]}`` -> chunk (4, 7) in robot units."""
        if "image" not in obs:
            raise ValueError(f"the Octo policy needs a camera image; got observation keys {sorted(obs)}")
        chunk = self.actor.act(obs["image"], obs.get("wrist"), seed=self.calls)
        self.calls += 1
        return chunk

    def _finish(self, action: np.ndarray) -> np.ndarray:
        """Octo's WidowX gripper (0 closed / 1 open) and the per-step bounds."""
        a = np.array(action, dtype=np.float64)
        a[6] = self.gripper(a[6])
        return self.bounds.clip_delta(a)
