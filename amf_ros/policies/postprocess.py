"""Action post-processing exactly as Octo's WidowX evaluation and SimplerEnv's Octo wrapper do it.

Why: the policy outputs a *normalised* chunk of 4 future actions; what reaches the arm is one 7-D
end-effector delta. Every backend (diffusion head, MLP, Octo) goes through the same steps, in this order:

1. ``unnormalize_actions``: ``a * std + mean`` on the dimensions whose statistics ``mask`` is true (Octo's
   ``OctoModel.sample_actions``; the Bridge mask is ``[True]*6 + [False]``, so the gripper stays raw).
   SimplerEnv's ``octo_model.py`` un-normalises all 7 dims by hand; ``mask_mode="all"`` reproduces that.
2. ``TemporalEnsembler``: average the predictions for the current step from the last ``horizon`` chunks with
   weights ``exp(-exp_weight * i)``, i = 0 for the oldest (Octo ``TemporalEnsembleWrapper``, SimplerEnv
   ``ActionEnsembler``; both use horizon 4 and exp_weight 0 for Bridge).
3. WidowX: ``StickyGripper`` (Octo ``WidowXGym.step``: binarise at 0.5, switch only after ``num_steps``
   consecutive requests, send 0.0 closed / 1.0 open) and ``WorkspaceBounds`` (bridge_data_robot clips the
   *target* xyz to the workspace box).
   SIMPLER: ``rpy_to_axis_angle`` (transforms3d ``euler2axangle``, static xyz) and ``gripper_to_simpler``
   (``2 * (g > 0.5) - 1``), as SimplerEnv's ``OctoInference.step`` does.

Shapes: a chunk is (H, A) with H >= horizon (4) and A = 7: [dx, dy, dz, droll, dpitch, dyaw, gripper].
Numpy only: no torch, no JAX.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field
from typing import Mapping, Sequence

import numpy as np

ACTION_DIM = 7
BRIDGE_ACTION_MASK = (True, True, True, True, True, True, False)


# ------------------------------------------------------------------------------------------------ normalisation
def _stat(stats: Mapping[str, object], key: str) -> np.ndarray:
    if key not in stats:
        raise ValueError(f"action statistics need {key!r}; got keys {sorted(stats)}")
    return np.asarray(stats[key], dtype=np.float64)


def _mask(stats: Mapping[str, object], n: int, mask_mode: str) -> np.ndarray:
    if mask_mode == "all":
        return np.ones(n, dtype=bool)
    if mask_mode != "stats":
        raise ValueError(f"mask_mode must be 'stats' or 'all', got {mask_mode=}")
    mask = np.asarray(stats.get("mask", np.ones(n, dtype=bool)), dtype=bool)
    if mask.shape != (n,):
        raise ValueError(f"statistics mask must have shape ({n},), got {mask.shape}")
    return mask


def unnormalize_actions(actions: np.ndarray, stats: Mapping[str, object], normalization: str = "normal",
                        mask_mode: str = "stats") -> np.ndarray:
    """Map normalised actions (..., A') back to robot units, like ``OctoModel.sample_actions``.

    Args:
        actions: (..., A') with A' >= A = len(stats["mean"]); extra (padding) dims are dropped.
        stats: one dataset's action statistics: mean, std (normal) or p01, p99 (bounds), optional mask.
        normalization: "normal" (a * std + mean) or "bounds" ((a + 1) * (p99 - p01) / 2 + p01).
        mask_mode: "stats" leaves dims with mask False raw (Octo); "all" transforms every dim (SimplerEnv).
    Returns:
        (..., A) float64.
    """
    a = np.asarray(actions, dtype=np.float64)
    ref = _stat(stats, "mean" if normalization == "normal" else "p01")
    n = ref.shape[0]
    if a.shape[-1] < n:
        raise ValueError(f"actions have {a.shape[-1]} dims but the statistics have {n}; got {a.shape=}")
    a = a[..., :n]
    mask = _mask(stats, n, mask_mode)
    if normalization == "normal":
        out = a * _stat(stats, "std") + _stat(stats, "mean")
    elif normalization == "bounds":
        p01, p99 = _stat(stats, "p01"), _stat(stats, "p99")
        out = (a + 1.0) * (p99 - p01) / 2.0 + p01
    else:
        raise ValueError(f"normalization must be 'normal' or 'bounds', got {normalization=}")
    return np.where(mask, out, a)


def normalize_actions(actions: np.ndarray, stats: Mapping[str, object], normalization: str = "normal",
                      mask_mode: str = "stats") -> np.ndarray:
    """Inverse of :func:`unnormalize_actions` (Octo's data pipeline: (a - mean) / (std + 1e-8)); (..., A)."""
    a = np.asarray(actions, dtype=np.float64)
    ref = _stat(stats, "mean" if normalization == "normal" else "p01")
    n = ref.shape[0]
    if a.shape[-1] != n:
        raise ValueError(f"actions must have {n} dims like the statistics, got {a.shape=}")
    mask = _mask(stats, n, mask_mode)
    if normalization == "normal":
        out = (a - _stat(stats, "mean")) / (_stat(stats, "std") + 1e-8)
    elif normalization == "bounds":
        p01, p99 = _stat(stats, "p01"), _stat(stats, "p99")
        out = np.clip(2.0 * (a - p01) / (p99 - p01 + 1e-8) - 1.0, -1.0, 1.0)
    else:
        raise ValueError(f"normalization must be 'normal' or 'bounds', got {normalization=}")
    return np.where(mask, out, a)


# ------------------------------------------------------------------------------------------------ ensembling
class TemporalEnsembler:
    """ACT-style temporal ensembling of action chunks (Octo ``TemporalEnsembleWrapper``).

    A chunk (H, A) predicted from the observation of control step s holds the actions for steps s..s+H-1.
    The action for step t is the weighted mean of the predictions for t made by the chunks of the last
    ``horizon`` steps that cover it, with weight ``exp(-exp_weight * i)`` where i = 0 is the *oldest* chunk
    ("more recent predictions get exponentially less weight", as in Octo and SimplerEnv). ``add`` is the
    synchronous case (one chunk per step: the newest chunk's row 0, the previous chunk's row 1, ...);
    ``put``/``at`` index chunks by step, so a policy slower than the control period (no chunk for some
    steps) still yields the action of every step its chunks cover.
    """

    def __init__(self, horizon: int = 4, exp_weight: float = 0.0) -> None:
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon=}")
        if not math.isfinite(exp_weight):
            raise ValueError(f"exp_weight must be finite, got {exp_weight=}")
        self.horizon = int(horizon)
        self.exp_weight = float(exp_weight)
        self._history: deque[tuple[int, np.ndarray]] = deque(maxlen=self.horizon)

    def reset(self) -> None:
        """Forget all chunks (call at the start of every episode)."""
        self._history.clear()

    def __len__(self) -> int:
        return len(self._history)

    @property
    def newest_step(self) -> int | None:
        """Step of the newest chunk, or None before the first."""
        return self._history[-1][0] if self._history else None

    def put(self, chunk: np.ndarray, step: int) -> None:
        """Store the chunk (H >= horizon, A) predicted from the observation of ``step`` (steps never go back)."""
        c = np.asarray(chunk, dtype=np.float64)
        if c.ndim != 2 or c.shape[0] < self.horizon:
            raise ValueError(f"chunk must be (H >= {self.horizon}, A), got shape {c.shape}")
        if self._history:
            last_step, last = self._history[-1]
            if last.shape[1] != c.shape[1]:
                raise ValueError(f"action dim changed from {last.shape[1]} to {c.shape[1]}")
            if step <= last_step:
                raise ValueError(f"chunk steps must increase: {step} after {last_step}")
        while self._history and self._history[0][0] + self.horizon <= step:  # no longer covers any later step
            self._history.popleft()
        self._history.append((int(step), c[: self.horizon]))

    def at(self, step: int) -> np.ndarray | None:
        """The ensembled action (A,) for ``step``, or None if no stored chunk covers it."""
        preds = [pred[step - s] for s, pred in self._history if 0 <= step - s < self.horizon]  # oldest first
        if not preds:
            return None
        weights = np.exp(-self.exp_weight * np.arange(len(preds)))
        weights /= weights.sum()
        return (weights[:, None] * np.stack(preds)).sum(axis=0)

    def add(self, chunk: np.ndarray) -> np.ndarray:
        """Add the chunk of the next step (H >= horizon, A) and return the action (A,) to execute now."""
        step = 0 if self.newest_step is None else self.newest_step + 1
        self.put(chunk, step)
        return self.at(step)


# ------------------------------------------------------------------------------------------------ gripper
class StickyGripper:
    """Binarised gripper that switches only after ``num_steps`` consecutive requests (Octo ``WidowXGym``).

    Input: continuous gripper command g (1 = open). Output: 1.0 (open) or 0.0 (closed). Starts open.
    """

    def __init__(self, num_steps: int = 1, threshold: float = 0.5) -> None:
        if num_steps < 1:
            raise ValueError(f"num_steps must be >= 1, got {num_steps=}")
        self.num_steps = int(num_steps)
        self.threshold = float(threshold)
        self.reset()

    def reset(self) -> None:
        """Open gripper, no pending change."""
        self.is_closed = False
        self._count = 0

    def __call__(self, gripper: float) -> float:
        """1.0 (open) or 0.0 (closed) for the command ``gripper``, switching only after ``num_steps`` requests."""
        if (float(gripper) < self.threshold) != self.is_closed:
            self._count += 1
        else:
            self._count = 0
        if self._count >= self.num_steps:
            self.is_closed = not self.is_closed
            self._count = 0
        return 0.0 if self.is_closed else 1.0


def gripper_to_simpler(gripper: float) -> float:
    """Octo/Bridge gripper (1 = open, [0, 1]) -> SIMPLER's [-1, 1] command: ``2 * (g > 0.5) - 1``."""
    return 1.0 if float(gripper) > 0.5 else -1.0


def simpler_to_gripper(command: float) -> float:
    """SIMPLER's gripper command in [-1, 1] -> Bridge convention in [0, 1] (1 = open)."""
    return float(np.clip((float(command) + 1.0) / 2.0, 0.0, 1.0))


# ------------------------------------------------------------------------------------------------ rotations
def rpy_to_matrix(rpy: Sequence[float]) -> np.ndarray:
    """Extrinsic (static) x-y-z Euler angles -> rotation (3, 3) = Rz(yaw) @ Ry(pitch) @ Rx(roll).

    This is transforms3d's 'sxyz' convention and bridge_data_robot's ``eulerAnglesToRotationMatrix``.
    """
    r, p, y = (float(v) for v in rpy)
    cr, sr, cp, sp, cy, sy = math.cos(r), math.sin(r), math.cos(p), math.sin(p), math.cos(y), math.sin(y)
    rx = np.array([[1, 0, 0], [0, cr, -sr], [0, sr, cr]])
    ry = np.array([[cp, 0, sp], [0, 1, 0], [-sp, 0, cp]])
    rz = np.array([[cy, -sy, 0], [sy, cy, 0], [0, 0, 1]])
    return rz @ ry @ rx


def matrix_to_rpy(rot: np.ndarray) -> np.ndarray:
    """Inverse of :func:`rpy_to_matrix` (bridge_data_robot ``rotationMatrixToEulerAngles``), (3,)."""
    R = np.asarray(rot, dtype=np.float64)
    if R.shape != (3, 3):
        raise ValueError(f"rotation must be (3, 3), got {R.shape}")
    sy = math.hypot(R[0, 0], R[1, 0])
    if sy > 1e-6:
        return np.array([math.atan2(R[2, 1], R[2, 2]), math.atan2(-R[2, 0], sy), math.atan2(R[1, 0], R[0, 0])])
    return np.array([math.atan2(-R[1, 2], R[1, 1]), math.atan2(-R[2, 0], sy), 0.0])


def rpy_to_axis_angle(rpy: Sequence[float]) -> np.ndarray:
    """Roll/pitch/yaw delta -> axis * angle (3,), as SimplerEnv does with transforms3d ``euler2axangle``.

    The quaternion is qz(yaw) * qy(pitch) * qx(roll) (transforms3d ``euler2quat`` 'sxyz'); the angle is
    ``2 * acos(w)`` and the identity maps to zero, like ``quat2axangle``.
    """
    r, p, y = (float(v) for v in rpy)

    def q(axis: int, ang: float) -> np.ndarray:
        out = np.zeros(4)
        out[0] = math.cos(ang / 2.0)
        out[1 + axis] = math.sin(ang / 2.0)
        return out

    quat = _qmul(_qmul(q(2, y), q(1, p)), q(0, r))
    w, vec = quat[0], quat[1:]
    norm2 = float(vec @ vec)
    if norm2 < (3 * np.finfo(np.float64).eps) ** 2:
        return np.zeros(3)
    angle = 2.0 * math.acos(max(min(w, 1.0), -1.0))
    return vec / math.sqrt(norm2) * angle


def axis_angle_to_rpy(axis_angle: Sequence[float]) -> np.ndarray:
    """Axis * angle (3,) -> extrinsic roll/pitch/yaw (3,) (Rodrigues, then :func:`matrix_to_rpy`)."""
    v = np.asarray(axis_angle, dtype=np.float64)
    angle = float(np.linalg.norm(v))
    if angle < 1e-12:
        return np.zeros(3)
    k = v / angle
    K = np.array([[0, -k[2], k[1]], [k[2], 0, -k[0]], [-k[1], k[0], 0]])
    R = np.eye(3) + math.sin(angle) * K + (1 - math.cos(angle)) * K @ K
    return matrix_to_rpy(R)


def _qmul(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    w1, x1, y1, z1 = a
    w2, x2, y2, z2 = b
    return np.array([w1 * w2 - x1 * x2 - y1 * y2 - z1 * z2, w1 * x2 + x1 * w2 + y1 * z2 - z1 * y2,
                     w1 * y2 - x1 * z2 + y1 * w2 + z1 * x2, w1 * z2 + x1 * y2 - y1 * x2 + z1 * w2])


def eef7_to_simpler(action: Sequence[float], action_scale: float = 1.0) -> np.ndarray:
    """Bridge 7-D action [xyz, rpy, gripper 0..1] -> SIMPLER env action [xyz, axis-angle, gripper +-1] (7,)."""
    a = np.asarray(action, dtype=np.float64)
    if a.shape != (ACTION_DIM,):
        raise ValueError(f"action must be ({ACTION_DIM},), got {a.shape}")
    return np.concatenate([a[:3] * action_scale, rpy_to_axis_angle(a[3:6]) * action_scale,
                           [gripper_to_simpler(a[6])]])


def simpler_to_eef7(action: Sequence[float]) -> np.ndarray:
    """SIMPLER env action [xyz, axis-angle, gripper +-1] -> Bridge 7-D action (for recording teleop), (7,)."""
    a = np.asarray(action, dtype=np.float64)
    if a.shape != (ACTION_DIM,):
        raise ValueError(f"action must be ({ACTION_DIM},), got {a.shape}")
    return np.concatenate([a[:3], axis_angle_to_rpy(a[3:6]), [simpler_to_gripper(a[6])]])


# ------------------------------------------------------------------------------------------------ workspace
@dataclass
class WorkspaceBounds:
    """Box limits for the end-effector target and per-step deltas.

    Defaults: Octo's ``04_eval_finetuned_on_robot.py`` WORKSPACE_BOUNDS (xyz in metres, robot base frame)
    and the per-step bounds documented in EefDeltaAction.msg.
    """

    low: tuple[float, float, float] = (0.1, -0.15, -0.01)
    """Lower corner of the allowed target position, metres."""
    high: tuple[float, float, float] = (0.45, 0.25, 0.25)
    """Upper corner of the allowed target position, metres."""
    max_translation: float = 0.05
    """Largest |delta| per axis per control step, metres."""
    max_rotation: float = 0.25
    """Largest |delta| per Euler angle per control step, radians."""

    def __post_init__(self) -> None:
        lo, hi = np.asarray(self.low, float), np.asarray(self.high, float)
        if lo.shape != (3,) or hi.shape != (3,) or np.any(lo >= hi):
            raise ValueError(f"need low < high, both (3,), got {self.low=} {self.high=}")
        if self.max_translation <= 0 or self.max_rotation <= 0:
            raise ValueError(f"per-step limits must be > 0, got {self.max_translation=} {self.max_rotation=}")

    def clip_delta(self, action: Sequence[float]) -> np.ndarray:
        """Clip the translation and rotation parts of a 7-D action to the per-step limits, (7,)."""
        a = np.array(action, dtype=np.float64)
        if a.shape != (ACTION_DIM,):
            raise ValueError(f"action must be ({ACTION_DIM},), got {a.shape}")
        a[:3] = np.clip(a[:3], -self.max_translation, self.max_translation)
        a[3:6] = np.clip(a[3:6], -self.max_rotation, self.max_rotation)
        a[6] = np.clip(a[6], 0.0, 1.0)
        return a

    def clip_position(self, xyz: Sequence[float]) -> np.ndarray:
        """Clip a target position (3,) into the box (bridge_data_robot ``action_clipping='xyz'``)."""
        return np.clip(np.asarray(xyz, dtype=np.float64), self.low, self.high)


# ------------------------------------------------------------------------------------------------ pipeline
@dataclass
class PostprocessConfig:
    """How normalised policy chunks become executed actions."""

    target: str = "widowx"
    """"widowx" (real arm / EefDeltaAction: sticky binary gripper 0/1) or "simpler" (axis-angle, gripper +-1)."""
    horizon: int = 4
    """Chunk steps that take part in temporal ensembling (Octo: action_horizon 4)."""
    exp_weight: float = 0.0
    """Ensembling weight exp(-exp_weight * i); 0 = uniform (Octo and SimplerEnv for Bridge)."""
    ensemble: bool = True
    """False = receding horizon with 1 executed step (take row 0 of every chunk)."""
    normalization: str = "normal"
    """Action normalisation of the checkpoint: "normal" or "bounds"."""
    mask_mode: str = "stats"
    """"stats" = Octo (gripper left raw); "all" = SimplerEnv's octo_model.py (all 7 dims un-normalised)."""
    sticky_gripper_steps: int = 1
    """WidowX: consecutive requests before the gripper switches (Octo STICKY_GRIPPER_NUM_STEPS = 1)."""
    action_scale: float = 1.0
    """SIMPLER: scale of translation and rotation (SimplerEnv's action_scale)."""
    stats: dict = field(default_factory=dict)
    """Action statistics of the dataset (mean, std, mask, ...); empty = actions are already in robot units."""

    def __post_init__(self) -> None:
        if self.target not in ("widowx", "simpler"):
            raise ValueError(f"target must be 'widowx' or 'simpler', got {self.target=}")
        if self.normalization not in ("normal", "bounds"):
            raise ValueError(f"normalization must be 'normal' or 'bounds', got {self.normalization=}")
        if self.mask_mode not in ("stats", "all"):
            raise ValueError(f"mask_mode must be 'stats' or 'all', got {self.mask_mode=}")


class ActionPostprocessor:
    """Normalised chunk (H, A') in, one executable action (7,) out; one instance per episode stream."""

    def __init__(self, config: PostprocessConfig | None = None) -> None:
        self.config = config or PostprocessConfig()
        c = self.config
        self.ensembler = TemporalEnsembler(c.horizon, c.exp_weight)
        self.gripper = StickyGripper(c.sticky_gripper_steps)

    def reset(self) -> None:
        """Call at every episode start."""
        self.ensembler.reset()
        self.gripper.reset()

    def robot_action(self, chunk: np.ndarray) -> np.ndarray:
        """Un-normalise and ensemble: the Bridge-convention action (7,) (continuous gripper), before targets."""
        c = self.config
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.ndim != 2:
            raise ValueError(f"chunk must be (H, A), got shape {chunk.shape}")
        raw = unnormalize_actions(chunk, c.stats, c.normalization, c.mask_mode) if c.stats else chunk
        return self.ensembler.add(raw) if c.ensemble else raw[0].copy()

    def __call__(self, chunk: np.ndarray) -> np.ndarray:
        """The action for the configured target: WidowX (7,) with gripper 0/1, or SIMPLER's native (7,)."""
        a = self.robot_action(chunk)
        if self.config.target == "simpler":
            return eef7_to_simpler(a, self.config.action_scale)
        a[6] = self.gripper(a[6])
        return a
