"""The camera policy: a frozen pretrained image encoder's embedding, the proprio and the instruction -> diffusion head.

Octo's shape on the embedded WidowX, built from the package's own parts. The encoder
(:mod:`amf_ros.policies.image_encoders`, EfficientNet-Lite0 from its PyPI package) is frozen and sits *outside* the
policy, as Octo's trunk does (:mod:`amf_ros.policies.octo.policy`): every recorded frame is embedded once
(:class:`amf_ros.data.image_embeddings.ImageEmbeddingCache`, or :func:`camera_states` for in-memory frames), and the
policy is a :class:`~amf_ros.policies.agent.TaskConditionedPolicy` whose "state" is::

    state (N, K + Kw + P) = concat(projection(image embedding (N, D)) (N, K),
                                   wrist projection(wrist image embedding (N, Dw)) (N, Kw), proprio (N, P))
                       D = 1280 (table_keypoints), K = 64 (or D without a projection), P = 8 (Octo's proprio);
                       Dw = 1280 (keypoints of the whole wrist frame), Kw = 32 (CameraSpec.wrist_pool;
                       a policy without a wrist camera has no Kw block)

normalised per dimension with frozen statistics (the state trunk), then concatenated with the instruction's MiniLM
embedding (384) as for the state policy. The projection (:class:`CameraProjection`) is a whitened PCA of the
embeddings of the pre-training frames, fitted once and frozen with the checkpoint: part of the frozen trunk. Some of
its columns can instead be fitted to the demonstrator's next moves (:meth:`CameraProjection.fit_supervised`,
``CameraPretrainConfig.supervised_dim``; off by default: it keeps more object position, 10.2 mm against 12.6 on the
held-out probe, but succeeded less, 0.625 against 0.775 on seed 0, docs/ros-robot.md).

Why a projection: with 1280 embedding dimensions beside the state, a head trained on a few dozen scenes per task
memorises frames instead of reading object positions. Measured on SIMPLER's four tasks (10 episodes per task, 3000
steps): the privileged 14-D state alone 0.975; the same plus the 1280-D embedding 0.275, plus its 32-D projection 0.80;
the camera policy (no object positions) with 64 demonstrations per task 0.30 on the raw embedding, 0.45 on its 64-D
projection; with the ``table_keypoints`` pooling (spatial soft-argmax of the last stage's maps on the table crop), its
64-D projection and 8000 steps, 0.725 over two seeds; with the wrist camera beside it and 16000 steps, 0.85
(docs/ros-robot.md has the ablation). The diffusion head, the
frozen prior, alpha(c), loss-gradient embeddings, fine-tuning and checkpoints are the unchanged TaskConditionedPolicy
ones, so every consumer of a native checkpoint (the fine-tune worker, task_selector, the AMF criterion) works on
camera-policy transitions as they are.

The wrist camera (on the gripper, as on BridgeData's rigs and in Octo's observation) goes through the same frozen
network pooled over the whole frame, with a projection of its own; it sees the object large at the approach (the
cube about 25 pixels wide against 8 in the primary frame) and took the policy from 0.62 to 0.775 paired on two seeds
(docs/ros-robot.md "A wrist camera").

What a checkpoint adds: ``camera_encoder.json`` (:func:`write_marker`) names the encoder, its pooling, its key, the
projection width, the proprio width and the camera stream (and the wrist camera's pooling, key, width and stream),
and ``camera_projection.npz`` (``camera_projection_wrist.npz``) holds the projection, so whoever acts or embeds new
frames uses the same encoder and projections (:func:`read_marker`, :func:`read_projection`, :func:`camera_actor`).
"""

from __future__ import annotations

import io
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, Sequence

import numpy as np

from amf_ros.atomic import atomic_write_bytes, atomic_write_json
from amf_ros.policies.encoder_names import DEFAULT_POOL

if TYPE_CHECKING:
    from amf_ros.policies.agent import TaskConditionedPolicy
    from amf_ros.policies.config import PolicyConfig
    from amf_ros.policies.image_encoders import PretrainedImageEncoder
    from amf_ros.policies.language import TaskEncoder

MARKER = "camera_encoder.json"
"""File in a camera-policy checkpoint directory naming its encoder (:class:`CameraSpec`)."""
PROJECTION_FILE = "camera_projection.npz"
"""File in a camera-policy checkpoint directory holding its :class:`CameraProjection` (when it has one)."""
WRIST_PROJECTION_FILE = "camera_projection_wrist.npz"
"""The same for the wrist camera's projection."""
TRUNK_NAME = "image_pretrained"
TRUNKS = ("state", TRUNK_NAME)
"""What a native policy sees (policy_server's ``trunk``, `amf run --trunk`, `amf bench --trunk`): the state vector, or
the primary camera through this module's frozen encoder (the camera policy, embedded WidowX only)."""
SUPERVISED_RIDGE = 1e-2
"""Ridge penalty per frame of :meth:`CameraProjection.fit_supervised` on standardised embeddings (1e-3..1e-1 probed
alike)."""
"""The trunk's name in configurations (``trunk: image_pretrained``)."""
STATE_MIN_STD = 1e-2
"""Floor of the per-dimension std of the camera state (embedding units and metres/radians): a feature constant in
the pre-training frames must not turn small differences elsewhere into saturated inputs."""


@dataclass(frozen=True)
class CameraSpec:
    """Which frozen encoder a camera policy acts on, and what is concatenated beside its embedding."""

    encoder: str = "efficientnet-lite0"
    """Encoder name (:data:`amf_ros.policies.encoder_names.ENCODERS`)."""
    pool: str = DEFAULT_POOL
    """Pooling (:data:`amf_ros.policies.image_encoders.POOLS`)."""
    feature_dim: int = 1280
    """D, the embedding width of ``encoder`` with ``pool``."""
    key: str = ""
    """The encoder's key (network, pooling, weight-file digest): embedding caches are kept per key."""
    projection_dim: int = 0
    """K, the width of the frozen :class:`CameraProjection` of the embedding (0 = none: the embedding as it is)."""
    proprio_dims: int = 8
    """P, leading entries of the recorded state placed beside the embedding (the WidowX: Octo's 8-D proprio)."""
    image_key: str = "image_primary"
    """The recorded camera stream (256 x 256 primary camera)."""
    wrist_pool: str = ""
    """Pooling of the same encoder on the wrist camera ("" = no wrist camera: the primary one only)."""
    wrist_feature_dim: int = 0
    """Dw, the wrist embedding's width (0 without a wrist camera)."""
    wrist_key: str = ""
    """The wrist encoder's key (its embedding cache)."""
    wrist_projection_dim: int = 0
    """Kw, the width of the wrist embedding's own frozen projection (0 = the embedding as it is)."""
    wrist_image_key: str = "image_wrist"
    """The recorded wrist camera stream."""

    def __post_init__(self) -> None:
        if self.feature_dim < 1 or self.proprio_dims < 0 or not 0 <= self.projection_dim <= self.feature_dim:
            raise ValueError(f"need feature_dim >= 1, proprio_dims >= 0 and 0 <= projection_dim <= feature_dim, got "
                             f"{self.feature_dim=} {self.proprio_dims=} {self.projection_dim=}")
        if self.wrist_pool and not 0 <= self.wrist_projection_dim <= self.wrist_feature_dim:
            raise ValueError(f"a wrist camera needs 0 <= wrist_projection_dim <= wrist_feature_dim, got "
                             f"{self.wrist_feature_dim=} {self.wrist_projection_dim=}")
        if not self.wrist_pool and (self.wrist_feature_dim or self.wrist_projection_dim or self.wrist_key):
            raise ValueError("wrist_feature_dim, wrist_projection_dim and wrist_key need a wrist_pool")

    @property
    def wrist(self) -> bool:
        """Whether the policy also sees the wrist camera."""
        return bool(self.wrist_pool)

    @property
    def state_dim(self) -> int:
        """K + Kw + P (D, Dw in place of K, Kw without a projection), the width of the policy's state."""
        wrist = (self.wrist_projection_dim or self.wrist_feature_dim) if self.wrist else 0
        return (self.projection_dim or self.feature_dim) + wrist + self.proprio_dims

    @classmethod
    def of(cls, encoder: PretrainedImageEncoder, proprio_dims: int = 8, image_key: str = "image_primary",
           projection_dim: int = 0, wrist_encoder: PretrainedImageEncoder | None = None,
           wrist_projection_dim: int = 0) -> CameraSpec:
        """The spec of a loaded encoder (and of the wrist camera's, the same network pooled its own way)."""
        if wrist_encoder is not None and wrist_encoder.name != encoder.name:
            raise ValueError(f"the wrist camera goes through the primary's network, {encoder.name!r}; got "
                             f"{wrist_encoder.name!r}")
        wrist = {} if wrist_encoder is None else {
            "wrist_pool": wrist_encoder.pool, "wrist_feature_dim": wrist_encoder.feature_dim,
            "wrist_key": wrist_encoder.key, "wrist_projection_dim": wrist_projection_dim}
        return cls(encoder=encoder.name, pool=encoder.pool, feature_dim=encoder.feature_dim, key=encoder.key,
                   projection_dim=projection_dim, proprio_dims=proprio_dims, image_key=image_key, **wrist)

    def load_encoder(self) -> PretrainedImageEncoder:
        """The encoder this spec names (process-wide instance); ValueError if its key differs (other weights)."""
        return _load_checked(self.encoder, self.pool, self.key)

    def load_wrist_encoder(self) -> PretrainedImageEncoder | None:
        """The wrist camera's encoder (None without one); ValueError if its key differs."""
        return _load_checked(self.encoder, self.wrist_pool, self.wrist_key) if self.wrist else None


def _load_checked(name: str, pool: str, key: str) -> PretrainedImageEncoder:
    from amf_ros.policies.image_encoders import load_image_encoder

    enc = load_image_encoder(name, pool)
    if key and enc.key != key:
        raise ValueError(f"the installed encoder has key {enc.key!r}, the policy was trained on {key!r} "
                         "(different weights): reinstall the weights package the policy was trained with")
    return enc


@dataclass(frozen=True, eq=False)
class CameraProjection:
    """Frozen whitened PCA of image embeddings: (N, D) -> (N, K) = (emb - mean) @ matrix.

    Fitted once on the pre-training frames (:meth:`fit`) and stored with the checkpoint; fine-tuning, acting and
    AMF's embeddings use it unchanged (new tasks' frames are projected onto the pre-training components).
    """

    mean: np.ndarray
    """(D,) mean embedding of the fitting frames."""
    matrix: np.ndarray
    """(D, K) top-K principal directions, each scaled to unit variance over the fitting frames."""

    def __post_init__(self) -> None:
        if self.mean.ndim != 1 or self.matrix.ndim != 2 or self.matrix.shape[0] != self.mean.shape[0]:
            raise ValueError(f"expected mean (D,) and matrix (D, K), got {self.mean.shape} and {self.matrix.shape}")

    @property
    def dim(self) -> int:
        """K."""
        return int(self.matrix.shape[1])

    @classmethod
    def fit(cls, embeddings: np.ndarray, dim: int) -> CameraProjection:
        """The whitened top-``dim`` principal components of ``embeddings`` (N, D), N > dim."""
        x = np.asarray(embeddings, np.float64)
        if x.ndim != 2 or not 1 <= dim < min(x.shape):
            raise ValueError(f"need embeddings (N, D) with N, D > dim >= 1, got {x.shape} and {dim=}")
        mean = x.mean(0)
        _, sv, vt = np.linalg.svd(x - mean, full_matrices=False)
        scale = np.sqrt(len(x)) / np.maximum(sv[:dim], 1e-12)
        return cls(mean.astype(np.float32), (vt[:dim].T * scale).astype(np.float32))

    @classmethod
    def fit_supervised(cls, embeddings: np.ndarray, targets: np.ndarray, supervised_dim: int, pca_dim: int,
                       ridge: float = SUPERVISED_RIDGE) -> CameraProjection:
        """Directions that keep what the targets need, then the top principal components: (N, D) -> (N, r + k).

        The first ``supervised_dim`` (r) columns are reduced-rank ridge regression (Izenman 1975; here on
        standardised embeddings and targets): the ridge map B (D, T) from the embeddings to ``targets`` (N, T),
        then the top r right singular directions of the fitted values X B, pulled back through B; the next
        ``pca_dim`` (k) columns are :meth:`fit`'s whitened principal components. Every column has unit variance over
        the fitting frames. Still one frozen linear map, stored and applied as :meth:`fit`'s.

        Args:
            embeddings: (N, D) pre-training embeddings.
            targets: (N, T) what the projection must keep, T >= r (the camera policy: the demonstrator's own next
                moves, see ``amf_ros.training.camera.demo_targets``).
            supervised_dim: r >= 1.
            pca_dim: k >= 0 principal components beside them.
            ridge: penalty per frame on the standardised embeddings.
        """
        x, y = np.asarray(embeddings, np.float64), np.asarray(targets, np.float64)
        if x.ndim != 2 or y.ndim != 2 or len(x) != len(y):
            raise ValueError(f"need embeddings (N, D) and targets (N, T), got {x.shape} and {y.shape}")
        if not 1 <= supervised_dim <= y.shape[1] or pca_dim < 0 or supervised_dim + pca_dim >= min(x.shape):
            raise ValueError(f"need 1 <= supervised_dim <= T and r + k < min(N, D), got {supervised_dim=} {pca_dim=} "
                             f"for embeddings {x.shape} and targets {y.shape}")
        if not ridge > 0:
            raise ValueError(f"ridge must be > 0, got {ridge=}")
        mean, sd = x.mean(0), x.std(0) + 1e-6
        xs = (x - mean) / sd
        ys = (y - y.mean(0)) / (y.std(0) + 1e-6)
        b = np.linalg.solve(xs.T @ xs + ridge * len(xs) * np.eye(xs.shape[1]), xs.T @ ys)
        _, _, vt = np.linalg.svd(xs @ b, full_matrices=False)
        w = (b @ vt[:supervised_dim].T) / sd[:, None]
        w = w / np.maximum(((x - mean) @ w).std(0), 1e-12)
        if pca_dim:
            w = np.concatenate([w, cls.fit(x, pca_dim).matrix.astype(np.float64)], axis=1)
        return cls(mean.astype(np.float32), w.astype(np.float32))

    def __call__(self, embeddings: np.ndarray) -> np.ndarray:
        """(N, K) float32 projection of (N, D) embeddings."""
        x = np.asarray(embeddings, np.float32)
        if x.ndim != 2 or x.shape[1] != self.mean.shape[0]:
            raise ValueError(f"embeddings: expected shape (N, {self.mean.shape[0]}), got {x.shape}")
        return ((x - self.mean) @ self.matrix).astype(np.float32)

    def to_bytes(self) -> bytes:
        """The ``.npz`` file contents."""
        buf = io.BytesIO()
        np.savez(buf, mean=self.mean, matrix=self.matrix)
        return buf.getvalue()

    @classmethod
    def from_file(cls, path: str | Path) -> CameraProjection:
        """Read a projection written with :meth:`to_bytes`."""
        with np.load(path) as z:
            return cls(np.asarray(z["mean"], np.float32), np.asarray(z["matrix"], np.float32))


def camera_states(embeddings: np.ndarray, proprio: np.ndarray, projection: CameraProjection | None = None,
                  wrist_embeddings: np.ndarray | None = None,
                  wrist_projection: CameraProjection | None = None) -> np.ndarray:
    """(N, K [+ Kw] + P) float32 policy state: the (projected) primary image embeddings (N, D), the (projected)
    wrist embeddings (N, Dw) when given, and the proprio (N, P), in that order."""
    embeddings, proprio = np.asarray(embeddings, np.float32), np.asarray(proprio, np.float32)
    if embeddings.ndim != 2 or proprio.ndim != 2 or embeddings.shape[0] != proprio.shape[0]:
        raise ValueError(f"expected embeddings (N, D) and proprio (N, P), got {embeddings.shape} and {proprio.shape}")
    parts = [projection(embeddings) if projection is not None else embeddings]
    if wrist_embeddings is not None:
        wrist = np.asarray(wrist_embeddings, np.float32)
        if wrist.ndim != 2 or wrist.shape[0] != embeddings.shape[0]:
            raise ValueError(f"expected wrist embeddings ({embeddings.shape[0]}, Dw), got {wrist.shape}")
        parts.append(wrist_projection(wrist) if wrist_projection is not None else wrist)
    elif wrist_projection is not None:
        raise ValueError("a wrist projection without wrist embeddings")
    return np.concatenate([*parts, proprio], axis=1)


def make_camera_policy(spec: CameraSpec, tasks: Mapping[str, str], config: PolicyConfig | None = None,
                       action_dim: int = 7, task_encoder: TaskEncoder | None = None) -> TaskConditionedPolicy:
    """A fresh camera policy: a TaskConditionedPolicy on (N, D + P) camera states (see module docstring).

    Args:
        spec: the encoder and proprio width.
        tasks: ``{task key: instruction}``.
        config: PolicyConfig; its trunk must be "state" (the camera state is a state vector). Default: the
            WidowX state policy's (diffusion head, action horizon 1).
        action_dim: A (the WidowX: 7-D EefDeltaAction).
        task_encoder: share an already loaded instruction encoder.
    """
    from amf_ros.policies.agent import TaskConditionedPolicy
    from amf_ros.policies.config import PolicyConfig

    cfg = config or PolicyConfig(head="diffusion", trunk="state", action_horizon=1)
    if cfg.trunk != "state":
        raise ValueError(f"a camera policy acts on a state vector of cached embeddings: trunk must be 'state', got "
                         f"{cfg.trunk=}")
    return TaskConditionedPolicy(cfg, action_dim=action_dim, state_dim=spec.state_dim, tasks=tasks,
                                 task_encoder=task_encoder)


def set_camera_normalizers(policy: TaskConditionedPolicy, states: np.ndarray, action_mean: Sequence[float],
                           action_std: Sequence[float]) -> None:
    """Freeze the policy's statistics before pre-training: per-dimension mean/std of the camera states (std
    floored at :data:`STATE_MIN_STD`) and the suite's fixed action scale (never fitted, as for the state policy)."""
    from amf_ros.policies.normalizer import Normalizer

    x = np.asarray(states, np.float64)
    policy.action_normalizer = Normalizer(np.asarray(action_mean), np.asarray(action_std))
    policy.trunk.set_normalizer(Normalizer(x.mean(0), x.std(0), min_std=STATE_MIN_STD))
    policy.cache.clear()


def write_marker(checkpoint: str | Path, spec: CameraSpec, projection: CameraProjection | None = None,
                 wrist_projection: CameraProjection | None = None) -> Path:
    """Write ``camera_encoder.json`` (and ``camera_projection.npz``, ``camera_projection_wrist.npz`` when the spec
    has those projections) into a saved checkpoint directory, each atomically; returns the marker's path.
    policy_server's ``after_save`` hook for the rounds it fine-tunes."""
    for what, proj, dim in (("projection_dim", projection, spec.projection_dim),
                            ("wrist_projection_dim", wrist_projection, spec.wrist_projection_dim)):
        if (proj.dim if proj is not None else 0) != dim:
            raise ValueError(f"the spec says {what}={dim}, got "
                             f"{'no projection' if proj is None else f'one of width {proj.dim}'}")
    if projection is not None:
        atomic_write_bytes(Path(checkpoint) / PROJECTION_FILE, projection.to_bytes())
    if wrist_projection is not None:
        atomic_write_bytes(Path(checkpoint) / WRIST_PROJECTION_FILE, wrist_projection.to_bytes())
    path = Path(checkpoint) / MARKER
    atomic_write_json(path, {"kind": TRUNK_NAME, **asdict(spec)})
    return path


def read_marker(checkpoint: str | Path) -> CameraSpec | None:
    """The :class:`CameraSpec` of a camera-policy checkpoint; None for a checkpoint without the marker."""
    path = Path(checkpoint) / MARKER
    if not path.is_file():
        return None
    obj = json.loads(path.read_text(encoding="utf-8"))
    if obj.pop("kind", None) != TRUNK_NAME:
        raise ValueError(f"{path} is not a camera-policy marker")
    return CameraSpec(**obj)


def read_projection(checkpoint: str | Path, wrist: bool = False) -> CameraProjection | None:
    """The :class:`CameraProjection` of a camera-policy checkpoint's primary camera (``wrist``: of its wrist
    camera); None when its spec has none."""
    spec = read_marker(checkpoint)
    if spec is None:
        return None
    name, dim, width = ((WRIST_PROJECTION_FILE, spec.wrist_projection_dim, spec.wrist_feature_dim) if wrist
                        else (PROJECTION_FILE, spec.projection_dim, spec.feature_dim))
    if not dim:
        return None
    projection = CameraProjection.from_file(Path(checkpoint) / name)
    if projection.dim != dim or projection.mean.shape[0] != width:
        raise ValueError(f"{checkpoint}: {name} maps {projection.mean.shape[0]} -> {projection.dim}, the marker "
                         f"says {width} -> {dim}")
    return projection


def camera_state_key(checkpoint: str | Path) -> str:
    """What a camera-policy checkpoint's states are made of, as a short hash: its spec (encoders, poolings, widths,
    streams) and its frozen projections' values. Every round fine-tuned from one pre-training shares it (the encoder
    and projections are frozen), so stored states (data/replay.py) are valid for exactly the checkpoints of that
    key. ValueError for a checkpoint without the marker."""
    import hashlib

    spec = read_marker(checkpoint)
    if spec is None:
        raise ValueError(f"{checkpoint} has no {MARKER}: not a camera-policy checkpoint")
    h = hashlib.sha256(json.dumps(asdict(spec), sort_keys=True).encode())
    for wrist in (False, True):
        projection = read_projection(checkpoint, wrist=wrist)
        if projection is not None:
            h.update(np.ascontiguousarray(projection.mean, np.float32).tobytes())
            h.update(np.ascontiguousarray(projection.matrix, np.float32).tobytes())
    return f"camera-{h.hexdigest()[:16]}"


def save_camera_policy(policy: TaskConditionedPolicy, path: str | Path, spec: CameraSpec,
                       projection: CameraProjection | None = None,
                       wrist_projection: CameraProjection | None = None) -> Path:
    """``policy.save(path)`` plus the marker (and the projections); returns the checkpoint directory."""
    out = policy.save(path)
    write_marker(out, spec, projection, wrist_projection)
    return out


def load_camera_policy(path: str | Path, task_encoder: TaskEncoder | None = None) -> TaskConditionedPolicy:
    """Load a camera-policy checkpoint (a native checkpoint with the marker; ValueError without it). Usable as a
    ``"module:function"`` loader (``amf_ros.policies.camera_policy:load_camera_policy``)."""
    from amf_ros.policies.agent import TaskConditionedPolicy

    spec = read_marker(path)
    if spec is None:
        raise ValueError(f"{path} has no {MARKER}: not a camera-policy checkpoint")
    policy = TaskConditionedPolicy.load(path, task_encoder=task_encoder)
    if policy.state_dim != spec.state_dim:
        raise ValueError(f"{path}: the policy's state width {policy.state_dim} != the marker's K + P = "
                         f"{spec.state_dim}")
    return policy


def camera_actor(checkpoint: str | Path, task_encoder: TaskEncoder | None = None) -> CameraActor:
    """A :class:`CameraActor` for a camera-policy checkpoint: its policy, encoder and projection."""
    policy = load_camera_policy(checkpoint, task_encoder)  # ValueError without a marker
    spec = read_marker(checkpoint)
    if spec is None:  # removed since: say so rather than fail on None
        raise ValueError(f"{checkpoint} lost its {MARKER}")
    return CameraActor(policy, spec.load_encoder(), spec.proprio_dims, read_projection(checkpoint),
                       spec.load_wrist_encoder(), read_projection(checkpoint, wrist=True))


class CameraActor:
    """Camera frames + proprio + task -> action chunks: what a node or an evaluation loop calls per control tick.

    Args:
        policy: a camera policy (TaskConditionedPolicy on camera states).
        encoder: the frozen encoder its spec names (:meth:`CameraSpec.load_encoder`).
        proprio_dims: P.
        projection: the checkpoint's projection (:func:`read_projection`; None = the raw embedding).
        wrist_encoder: the wrist camera's encoder (:meth:`CameraSpec.load_wrist_encoder`; None = no wrist camera).
        wrist_projection: its projection (``read_projection(checkpoint, wrist=True)``).
    """

    def __init__(self, policy: Any, encoder: PretrainedImageEncoder, proprio_dims: int = 8,
                 projection: CameraProjection | None = None, wrist_encoder: PretrainedImageEncoder | None = None,
                 wrist_projection: CameraProjection | None = None) -> None:
        self.policy, self.encoder, self.proprio_dims = policy, encoder, int(proprio_dims)
        self.projection = projection
        self.wrist_encoder, self.wrist_projection = wrist_encoder, wrist_projection

    def act_batch(self, images: np.ndarray, states: np.ndarray, tasks: Sequence[str],
                  seed: int | None = None, wrist_images: np.ndarray | None = None) -> np.ndarray:
        """(B, H, A) un-normalised chunks for frames (B, h, w, 3) uint8, the wrist camera's frames of the same
        instants (B, h', w', 3) when the policy has one, and recorded states (B, >= P) (only the first P entries, the
        proprio, are used: the objects come from the cameras)."""
        states = np.asarray(states, np.float32)
        if states.ndim != 2 or states.shape[1] < self.proprio_dims:
            raise ValueError(f"states: expected (B, >= {self.proprio_dims}), got {states.shape}")
        if (wrist_images is None) != (self.wrist_encoder is None):
            raise ValueError("the policy sees the wrist camera: pass wrist_images" if wrist_images is None
                             else "wrist_images given to a policy without a wrist camera")
        emb = self.encoder.encode(images)
        wrist = self.wrist_encoder.encode(wrist_images) if self.wrist_encoder is not None else None
        x = camera_states(emb, states[:, :self.proprio_dims], self.projection, wrist, self.wrist_projection)
        return self.policy.act_batch({"state": x}, list(tasks), seed=seed)

    def act(self, image: np.ndarray, state: np.ndarray, task: str, seed: int | None = None,
            wrist_image: np.ndarray | None = None) -> np.ndarray:
        """(H, A) un-normalised chunk for one frame (h, w, 3) uint8 (and the wrist frame) and its recorded state."""
        wrist = None if wrist_image is None else np.asarray(wrist_image)[None]
        return self.act_batch(np.asarray(image)[None], np.asarray(state)[None], [task], seed=seed,
                              wrist_images=wrist)[0]

    def infer_fn(self, task: str) -> Callable[[Mapping[str, np.ndarray]], np.ndarray]:
        """``obs -> (H, A)`` chunk for :class:`~amf_ros.policies.chunk_actor.ChunkActor` (policy_server's control
        loop): ``obs`` = ``{"state": (S,), "image": (h, w, 3) uint8}`` (and ``"wrist"`` for a policy with a wrist
        camera), the newest observation of each."""
        if task not in self.policy.instructions:
            raise ValueError(f"unknown task {task!r}; the policy knows {self.policy.tasks}")
        wrist = self.wrist_encoder is not None

        def infer(obs: Mapping[str, np.ndarray]) -> np.ndarray:
            if "image" not in obs or "state" not in obs:
                raise ValueError("the camera policy needs the camera image and the state; got observation keys "
                                 f"{sorted(obs)} (is the camera topic published?)")
            if wrist and "wrist" not in obs:
                raise ValueError("this camera policy also sees the wrist camera; no wrist frame yet (is "
                                 "wrist_image_topic set and published?)")
            return self.act(obs["image"], obs["state"], task, wrist_image=obs["wrist"] if wrist else None)

        return infer
