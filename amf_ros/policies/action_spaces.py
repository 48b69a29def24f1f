"""The action spaces a policy can act in, and their exact conversion to and from the wire action.

Why one home: the wire action is always the 7-D EefDeltaAction (xyz delta in metres, roll/pitch/yaw delta in
radians, gripper with 1 = open); a policy for the Metaworld suite is trained in Metaworld's native 4-D action
``[dx, dy, dz, grab]`` in [-1, 1]. The recorder stores the wire action, the transitions loader (data/) hands a
policy its own action, the policy server turns the policy's action back into a wire action and the Metaworld suite
(envs/) executes wire actions: all four convert here.

Metaworld's scale (fixed by its mocap controller, ``action_scale = 1/100``): a native xyz value of 1.0 moves the
mocap target by 0.01 m in one step; the native grab value g in [-1, 1] is the finger effort, -1 = open,
+1 = close, mapped linearly to gripper = (1 - g) / 2. Metaworld keeps the gripper orientation fixed, so the
rotation part of an EefDeltaAction is dropped on the way in and zero on the way out.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

EEF7_DIM = 7
"""Length of the wire action (EefDeltaAction)."""
NATIVE_ACTION_DIM = 4
"""Metaworld action: xyz delta (units of :data:`METRES_PER_UNIT`) and grab effort, each in [-1, 1]."""
METRES_PER_UNIT = 0.01
"""Metres of end-effector (mocap) motion per unit of native xyz action in one step (Metaworld action_scale)."""


def native_to_eef7(a4: np.ndarray) -> np.ndarray:
    """Native Metaworld action (4,) -> EefDeltaAction vector (7,) = [dx, dy, dz (m), droll, dpitch, dyaw, grip].

    The native xyz is clipped to [-1, 1] first (Metaworld clips it too), so the result is what the arm does.
    """
    a4 = np.asarray(a4, dtype=np.float64)
    if a4.shape != (NATIVE_ACTION_DIM,):
        raise ValueError(f"expected a native Metaworld action of shape (4,), got {a4.shape=}")
    a = np.clip(a4, -1.0, 1.0)
    out = np.zeros(EEF7_DIM, dtype=np.float64)
    out[:3] = a[:3] * METRES_PER_UNIT
    out[6] = (1.0 - a[3]) / 2.0
    return out


def eef7_to_native(a7: np.ndarray) -> np.ndarray:
    """EefDeltaAction vector (7,) -> native Metaworld action (4,), clipped to [-1, 1].

    Rotation (entries 3:6) is ignored: Metaworld's gripper orientation is fixed.
    """
    a7 = np.asarray(a7, dtype=np.float64)
    if a7.shape != (EEF7_DIM,):
        raise ValueError(f"expected an EefDeltaAction vector of shape (7,), got {a7.shape=}")
    out = np.empty(NATIVE_ACTION_DIM, dtype=np.float64)
    out[:3] = a7[:3] / METRES_PER_UNIT
    out[3] = 1.0 - 2.0 * a7[6]
    return np.clip(out, -1.0, 1.0)


def _eef7(a7: np.ndarray) -> np.ndarray:
    a7 = np.asarray(a7)
    if a7.shape != (EEF7_DIM,):
        raise ValueError(f"action_space eef7 needs 7-D actions, got {a7.shape}")
    return a7


@dataclass(frozen=True)
class ActionSpace:
    """One action space: its width and the conversions of one action to and from the wire action."""

    name: str
    dim: int
    to_wire: Callable[[np.ndarray], np.ndarray]
    """Action (dim,) -> EefDeltaAction vector (7,)."""
    from_wire: Callable[[np.ndarray], np.ndarray]
    """EefDeltaAction vector (7,) -> action (dim,); for recorded wire actions the exact preimage of ``to_wire``."""

    def from_wire_rows(self, actions: np.ndarray) -> np.ndarray:
        """Recorded wire actions (N, 7) -> this space's actions (N, dim) float32."""
        if self.name == "eef7":
            return np.asarray(actions, dtype=np.float32)
        return np.stack([self.from_wire(a) for a in actions]).astype(np.float32)


ACTION_SPACES: dict[str, ActionSpace] = {
    "metaworld": ActionSpace("metaworld", NATIVE_ACTION_DIM, native_to_eef7, eef7_to_native),
    "eef7": ActionSpace("eef7", EEF7_DIM, _eef7, _eef7),
}
"""Action spaces of policies: Metaworld's native 4-D action, or the 7-D EefDeltaAction itself."""


def action_space(name: str) -> ActionSpace:
    """The :class:`ActionSpace` called ``name`` (ValueError naming the known ones otherwise)."""
    if name not in ACTION_SPACES:
        raise ValueError(f"action_space must be one of {list(ACTION_SPACES)}, got {name!r}")
    return ACTION_SPACES[name]
