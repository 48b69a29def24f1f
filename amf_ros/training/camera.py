"""Pre-training and evaluating the camera policy on the embedded WidowX (frozen EfficientNet-Lite0 + diffusion head).

The camera counterpart of :mod:`amf_ros.training.pretrain`: the same scripted demonstrations (successful ones only,
translation noise on the executed actions, noise-free labels), but the policy sees the 256 x 256 primary camera
through the frozen encoder and Octo's 8-D proprio instead of the 14-D state (the objects' positions come from the
camera). Every frame is rendered once, embedded once (:mod:`amf_ros.policies.image_encoders`) and dropped; a whitened
PCA of the pre-training embeddings is fitted and frozen, and training runs on the (N, 64 + 8) camera states
(:mod:`amf_ros.policies.camera_policy`)::

    python -m amf_ros.training.camera --demos-per-task 64 --steps 16000 --eval-episodes 20 --out /tmp/camera_ckpt

Why in training/ (above envs): it renders the simulator's camera, which the policies layer cannot import.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from amf_ros.envs.widowx_sim.model import WRIST_CAMERA
from amf_ros.envs.widowx_sim.suite import WidowXSimSuite
from amf_ros.envs.widowx_sim.task_env import ACTION_MEAN, ACTION_STD, NOISE_STD, WidowXTaskEnv, load_tasks
from amf_ros.policies.encoder_names import DEFAULT_POOL, WRIST_POOL

log = logging.getLogger(__name__)

IMAGE_SIZE = 256
"""Side of the primary camera's frames (what sim_bridge publishes and demo_recorder records)."""
ATTEMPTS_PER_DEMO = 3
"""Scenes tried per kept demonstration (a failed scripted take is discarded, as an operator would)."""
TARGET_HORIZONS = (1, 2, 4, 8, 16)
"""Steps ahead over which :func:`demo_targets` sums the demonstrator's translation."""


class CameraTaskEnv(WidowXTaskEnv):
    """A :class:`~amf_ros.envs.widowx_sim.task_env.WidowXTaskEnv` with the primary camera: :attr:`image` is the
    256 x 256 RGB frame of the current state (rendered after every reset and step, ~10 ms on this CPU), and with
    ``wrist`` the gripper's camera too (:attr:`wrist_image`, same size; None without)."""

    def __init__(self, spec: Any, wrist: bool = False) -> None:
        super().__init__(spec)
        self._suite = WidowXSimSuite(tasks=[spec], camera=True)  # the parent builds one without a camera
        self.wrist = bool(wrist)
        self.image: np.ndarray | None = None
        self.wrist_image: np.ndarray | None = None

    def _render(self) -> None:
        self.image = self._suite.render(IMAGE_SIZE, IMAGE_SIZE, "primary")
        if self.wrist:
            self.wrist_image = self._suite.render(IMAGE_SIZE, IMAGE_SIZE, WRIST_CAMERA)

    def reset(self, seed: int) -> np.ndarray:
        """Start an episode (see the parent) and render its first frame."""
        obs = super().reset(seed)
        self._render()
        return obs

    def step(self, action: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        """Apply one action (see the parent) and render the new frame."""
        out = super().step(action)
        self._render()
        return out


@dataclass
class CameraPretrainConfig:
    """Everything that determines a pre-trained camera policy."""

    tasks: list[str] = field(default_factory=lambda: ["spoon_on_towel", "carrot_on_plate", "stack_cube",
                                                      "eggplant_in_basket"])
    """Task keys of config/tasks/widowx_sim.yaml (or of ``tasks_file``)."""
    tasks_file: str = ""
    """Task file ("" = SIMPLER's four tasks, config/tasks/widowx_sim.yaml)."""
    demos_per_task: dict[str, int] | int = 64
    """Successful scripted demonstrations per task (an int = the same for every task; 0 = a task not pre-trained)."""
    noise_std: float = NOISE_STD
    """Std of the translation noise on executed expert actions, m per axis and step (labels stay noise-free)."""
    steps: int = 16000
    """Gradient steps of pre-training (with the wrist camera: 0.825 / 0.875 on seeds 0 / 1 at 16000, 0.775 / 0.775 at
    8000; docs/ros-robot.md "A wrist camera")."""
    batch_size: int = 256
    lr: float = 1e-3
    action_horizon: int = 1
    """H of the diffusion head's chunks (the WidowX state policy's)."""
    seed: int = 0
    task_encoder: str = "minilm"
    """Instruction encoder: "minilm" (all-MiniLM-L6-v2) or "hash" (tests)."""
    encoder: str = "efficientnet-lite0"
    pool: str = DEFAULT_POOL
    """Pooling of the frozen encoder (:data:`amf_ros.policies.image_encoders.POOLS`)."""
    projection_dim: int = 64
    """K, the width of the frozen projection of the embeddings (0 = the raw embedding; policies/camera_policy.py)."""
    supervised_dim: int = 0
    """Of those K, directions fitted to keep the demonstrator's next moves (:func:`fit_projection`; at most K); the
    rest are whitened principal components (0 = the whitened PCA-K)."""
    proprio_dims: int = 8
    """Leading state entries beside the embedding (Octo's 8-D proprio; the objects come from the camera)."""
    wrist_pool: str = WRIST_POOL
    """Pooling of the same encoder on the gripper's wrist camera: "keypoints" (the whole frame's spatial soft-argmax;
    0.775 against 0.62 without it on both seeds, docs/ros-robot.md "A wrist camera") or "" (the primary camera
    only, the earlier recipe)."""
    wrist_projection_dim: int = 32
    """Kw, the width of the wrist embedding's own whitened PCA (used with ``wrist_pool``; 0 = the raw embedding)."""
    encode_batch: int = 4
    """Frames per encoder call (see ``image_encoders.ENCODE_BATCH``)."""

    def __post_init__(self) -> None:
        targets = 3 * len(TARGET_HORIZONS) + 7
        if self.projection_dim < 0 or not 0 <= self.supervised_dim <= targets:
            raise ValueError(f"need projection_dim >= 0 and 0 <= supervised_dim <= {targets} (the width of "
                             f"demo_targets), got {self.projection_dim=} {self.supervised_dim=}")
        if self.wrist_projection_dim < 0:
            raise ValueError(f"need wrist_projection_dim >= 0, got {self.wrist_projection_dim=}")

    def counts(self) -> dict[str, int]:
        """Demonstrations per task."""
        if isinstance(self.demos_per_task, int):
            return {t: int(self.demos_per_task) for t in self.tasks}
        unknown = sorted(set(self.demos_per_task) - set(self.tasks))
        if unknown:
            raise ValueError(f"demos_per_task names tasks not in tasks: {unknown}")
        return {t: int(self.demos_per_task.get(t, 0)) for t in self.tasks}


@dataclass
class CameraDemo:
    """One scripted demonstration as the camera policy trains on it (no frames kept)."""

    task: str
    seed: int
    embeddings: np.ndarray
    """(T, D) encoder embeddings of the frames the actions were taken on."""
    proprio: np.ndarray
    """(T, P) proprio at those frames."""
    actions: np.ndarray
    """(T, 7) noise-free expert labels."""
    success: bool
    wrist_embeddings: np.ndarray | None = None
    """(T, Dw) the wrist camera's embeddings of the same instants (None without a wrist camera)."""


def collect_camera_demos(specs: Sequence[Any], counts: dict[str, int], encoder: Any, *, seed: int, noise_std: float,
                         proprio_dims: int = 8, batch_size: int = 4, wrist_encoder: Any = None
                         ) -> tuple[list[CameraDemo], dict[str, float]]:
    """Successful scripted demonstrations per task, each frame embedded once (and each wrist frame, with a
    ``wrist_encoder``); (demos, timings in s). A progress bar counts the kept demonstrations (minutes on 2 cores)."""
    from tqdm.auto import tqdm

    from amf_ros.envs.metaworld_rollouts import EVAL_SEED_OFFSET

    rng = np.random.default_rng(seed)
    demos: list[CameraDemo] = []
    timing = {"simulate_s": 0.0, "encode_s": 0.0, "frames": 0}
    bar = tqdm(total=sum(counts.get(s.key, 0) for s in specs), desc="camera demonstrations", unit="demo",
               leave=False)
    for spec in specs:
        n = counts.get(spec.key, 0)
        if not n:
            continue
        env = CameraTaskEnv(spec, wrist=wrist_encoder is not None)
        kept = attempts = 0
        while kept < n and attempts < ATTEMPTS_PER_DEMO * n:
            t0 = time.perf_counter()
            scene = int(rng.integers(0, EVAL_SEED_OFFSET))
            obs = env.reset(scene)
            xs, frames, wrist_frames, labels = [], [], [], []
            while not env.done:
                expert = env.expert_action()
                xs.append(obs)
                frames.append(env.image)
                wrist_frames.append(env.wrist_image)
                labels.append(expert)
                obs, _, _ = env.step(env.perturb(expert, noise_std, rng))
            attempts += 1
            timing["simulate_s"] += time.perf_counter() - t0
            if not env.success:
                continue
            t0 = time.perf_counter()
            emb = encoder.encode(np.stack(frames), batch_size=batch_size)
            wrist = (wrist_encoder.encode(np.stack(wrist_frames), batch_size=batch_size)
                     if wrist_encoder is not None else None)
            timing["encode_s"] += time.perf_counter() - t0
            timing["frames"] += len(frames)
            demos.append(CameraDemo(spec.key, scene, emb, np.stack(xs)[:, :proprio_dims].astype(np.float32),
                                    np.stack(labels).astype(np.float32), True, wrist))
            kept += 1
            bar.update()
        if kept < n:
            log.warning("%s: kept %d successful scripted demonstrations of %d attempts (asked for %d)",
                        spec.key, kept, attempts, n)
    bar.close()
    return demos, timing


def camera_demo(env: CameraTaskEnv, seed: int, noise_std: float, rng: np.random.Generator | None, encoder: Any,
                projection: Any = None, proprio_dims: int = 8, batch_size: int = 4, wrist_encoder: Any = None,
                wrist_projection: Any = None) -> Any:
    """One scripted demonstration from scene ``seed`` as the camera policy trains on it: a
    :class:`~amf_ros.envs.metaworld_rollouts.Demo` whose ``obs`` are camera states (each frame through the frozen
    ``encoder`` and ``projection``, beside the proprio), so that everything written for state demonstrations
    (transitions, fine-tuning, AMF's criterion) takes it as it is. Rolled out exactly as
    :func:`~amf_ros.envs.metaworld_rollouts.collect_demo` (same scene, same noise draws from ``rng``). With a
    ``wrist_encoder`` (``env`` built with ``wrist=True``) the wrist frames join the states as the policy's spec says."""
    from amf_ros.envs.metaworld_rollouts import Demo
    from amf_ros.policies.camera_policy import camera_states

    obs = env.reset(seed)
    xs, frames, wrist_frames, acts, labels = [], [], [], [], []
    done = False
    while not done:
        expert = env.expert_action()
        act = env.perturb(expert, noise_std, rng)
        xs.append(obs)
        frames.append(env.image)
        wrist_frames.append(env.wrist_image)
        acts.append(act)
        labels.append(expert)
        obs, _, done = env.step(act)
    emb = encoder.encode(np.stack(frames), batch_size=batch_size)
    wrist = wrist_encoder.encode(np.stack(wrist_frames), batch_size=batch_size) if wrist_encoder is not None else None
    states = camera_states(emb, np.stack(xs)[:, :proprio_dims], projection, wrist, wrist_projection)
    return Demo(task=env.spec.key, seed=int(seed), obs=states, actions=np.stack(acts).astype(np.float32),
                expert_actions=np.stack(labels).astype(np.float32), success=env.success)


def demo_targets(actions: np.ndarray, proprio: np.ndarray, horizons: Sequence[int] = TARGET_HORIZONS) -> np.ndarray:
    """What the supervised projection must keep, from one demonstration's own labels and proprio (nothing the
    simulator alone knows): (T, 3 * len(horizons) + 7) float32 = the expert's translation summed over the next k
    steps for each k in ``horizons`` (3 each, fewer steps near the end), its gripper command (1), and the end
    effector's displacement (proprio xyz) from now to where the gripper command first changes (the grasp: where the
    object is) and to the last frame (the release: where the receptacle is) (3 + 3).

    Args:
        actions: (T, 7) noise-free expert labels (translation first, gripper last).
        proprio: (T, >= 3) proprio, end-effector xyz first.
        horizons: the k of the summed translations.
    """
    actions, proprio = np.asarray(actions, np.float64), np.asarray(proprio, np.float64)
    if actions.ndim != 2 or actions.shape[1] < 4 or proprio.ndim != 2 or proprio.shape[1] < 3 \
            or len(actions) != len(proprio) or not len(actions):
        raise ValueError(f"expected actions (T, 7) and proprio (T, >= 3) with T >= 1, got {actions.shape} and "
                         f"{proprio.shape}")
    n = len(actions)
    csum = np.vstack([np.zeros((1, 3)), np.cumsum(actions[:, :3], axis=0)])
    now = np.arange(n)
    cols = [csum[np.minimum(now + k, n)] - csum[now] for k in horizons]
    grip = actions[:, -1]
    changed = np.flatnonzero(np.abs(grip - grip[0]) > 0.5)
    grasp = int(changed[0]) if len(changed) else n - 1
    cols += [grip[:, None], proprio[grasp, :3] - proprio[:, :3], proprio[-1, :3] - proprio[:, :3]]
    return np.concatenate(cols, axis=1).astype(np.float32)


def fit_projection(demos: Sequence[CameraDemo], projection_dim: int, supervised_dim: int = 0) -> Any:
    """The frozen :class:`~amf_ros.policies.camera_policy.CameraProjection` of the pre-training demonstrations:
    ``supervised_dim`` directions that keep the demonstrator's next moves (:func:`demo_targets`, reduced-rank ridge
    regression; at most ``projection_dim``) beside ``projection_dim - supervised_dim`` whitened principal components
    (0 supervised = the whitened PCA)."""
    from amf_ros.policies.camera_policy import CameraProjection

    emb = np.concatenate([d.embeddings for d in demos])
    supervised_dim = min(supervised_dim, projection_dim)
    if not supervised_dim:
        return CameraProjection.fit(emb, projection_dim)
    targets = np.concatenate([demo_targets(d.actions, d.proprio) for d in demos])
    return CameraProjection.fit_supervised(emb, targets, supervised_dim, projection_dim - supervised_dim)


def demos_to_transitions(demos: Sequence[CameraDemo], projection: Any = None, episode_offset: int = 0,
                         wrist_projection: Any = None) -> dict[str, np.ndarray]:
    """The policy's transitions (policies/base.py layout) with ``state`` = camera states (projected embeddings, the
    projected wrist embeddings when the demonstrations have them, the proprio; a projection None = the raw
    embeddings)."""
    from amf_ros.policies.camera_policy import camera_states

    if not demos:
        raise ValueError("need at least one demonstration")
    wrist = None
    if demos[0].wrist_embeddings is not None:
        if any(d.wrist_embeddings is None for d in demos):
            raise ValueError("some demonstrations have wrist embeddings, some not")
        wrist = np.concatenate([d.wrist_embeddings for d in demos])
    return {
        "state": camera_states(np.concatenate([d.embeddings for d in demos]),
                               np.concatenate([d.proprio for d in demos]), projection, wrist, wrist_projection),
        "task": np.concatenate([np.full(len(d.actions), d.task, dtype=object) for d in demos]).astype(str),
        "action": np.concatenate([d.actions for d in demos]).astype(np.float32),
        "episode_index": np.concatenate([np.full(len(d.actions), episode_offset + i, np.int64)
                                         for i, d in enumerate(demos)]),
        "step": np.concatenate([np.arange(len(d.actions), dtype=np.int64) for d in demos]),
    }


@dataclass
class CameraPretrainResult:
    """A pre-trained camera policy and how it came about."""

    policy: Any
    spec: Any
    """The :class:`~amf_ros.policies.camera_policy.CameraSpec` (write it into the checkpoint with the policy)."""
    projection: Any
    """The frozen :class:`~amf_ros.policies.camera_policy.CameraProjection` (None with ``projection_dim`` 0)."""
    demos: list[CameraDemo]
    counts: dict[str, int]
    timing: dict[str, float]
    loss_curve: list[float]
    wrist_projection: Any = None
    """The wrist camera's frozen projection (None without a wrist camera or with ``wrist_projection_dim`` 0)."""


def pretraining_demos(config: CameraPretrainConfig) -> tuple[list[CameraDemo], dict[str, float]]:
    """The config's embedded pre-training demonstrations and their timings: deterministic in the config (its seed
    draws the scenes), so they can be collected again for a checkpoint made from it (its replay)."""
    from amf_ros.policies.image_encoders import load_image_encoder

    encoder = load_image_encoder(config.encoder, config.pool)
    wrist_encoder = load_image_encoder(config.encoder, config.wrist_pool) if config.wrist_pool else None
    return collect_camera_demos(load_tasks(config.tasks_file or None, config.tasks), config.counts(), encoder,
                                seed=config.seed, noise_std=config.noise_std, proprio_dims=config.proprio_dims,
                                batch_size=config.encode_batch, wrist_encoder=wrist_encoder)


def write_camera_replay(checkpoint: str | Path, config: CameraPretrainConfig, demos: Sequence[CameraDemo],
                        out: str | Path) -> Path:
    """Store the camera states of ``checkpoint``'s pre-training ``demos`` (made from ``config``; through its frozen
    projections, exactly as it was trained on them) as its replay in ``out`` (data/replay.py :class:`StateReplay`);
    returns ``out``."""
    from amf_ros.data.replay import write_state_replay
    from amf_ros.policies.camera_policy import camera_state_key, read_projection

    instructions = {s.key: s.instruction for s in load_tasks(config.tasks_file or None, config.tasks)}
    data = demos_to_transitions(demos, read_projection(checkpoint), wrist_projection=read_projection(checkpoint,
                                                                                                     wrist=True))
    return write_state_replay(out, data, camera_state_key(checkpoint), instructions)


def ensure_camera_replay(checkpoint: str | Path) -> Path:
    """The replay of a pre-trained camera checkpoint (``<checkpoint>_replay``, beside it): its pre-training
    frames' camera states, written when it was pre-trained, or collected again now from the config in its
    ``pretrain.json`` (minutes: every frame rendered and embedded again).

    Raises:
        ValueError: ``checkpoint`` has no ``pretrain.json`` with a camera pre-training config.
    """
    from amf_ros.data.replay import STATES_FILE, StateReplay, replay_beside
    from amf_ros.policies.camera_policy import camera_state_key

    checkpoint = Path(checkpoint)
    out = replay_beside(checkpoint)
    if (out / STATES_FILE).is_file():
        try:
            if StateReplay(out).state_key == camera_state_key(checkpoint):
                return out
        except ValueError as exc:
            log.warning("%s: %s; writing it again", out, exc)
    try:
        config = CameraPretrainConfig(**json.loads((checkpoint / "pretrain.json").read_text("utf-8"))["config"])
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{checkpoint} has no pretrain.json with a camera pre-training config ({type(exc).__name__}"
                         f": {exc}): replay needs the checkpoint's pre-training demonstrations") from None
    log.info("collecting the pre-training demonstrations of %s again for its replay %s (first use only: every frame "
             "rendered and embedded)", checkpoint, out)
    demos, _ = pretraining_demos(config)
    return write_camera_replay(checkpoint, config, demos, out)


def camera_pretrain(config: CameraPretrainConfig, freeze_prior: bool = True) -> CameraPretrainResult:
    """Collect and embed the demonstrations, fit the projection, fix the normalisation, train the head; the prior
    frozen after."""
    from amf_ros.policies.camera_policy import CameraProjection, CameraSpec, make_camera_policy, set_camera_normalizers
    from amf_ros.policies.config import PolicyConfig
    from amf_ros.policies.image_encoders import load_image_encoder

    specs = load_tasks(config.tasks_file or None, config.tasks)
    counts = config.counts()
    encoder = load_image_encoder(config.encoder, config.pool)
    wrist_encoder = load_image_encoder(config.encoder, config.wrist_pool) if config.wrist_pool else None
    wrist_dim = config.wrist_projection_dim if wrist_encoder is not None else 0
    spec = CameraSpec.of(encoder, config.proprio_dims, projection_dim=config.projection_dim,
                         wrist_encoder=wrist_encoder, wrist_projection_dim=wrist_dim)
    demos, timing = pretraining_demos(config)
    pcfg = PolicyConfig(head="diffusion", trunk="state", task_encoder=config.task_encoder,
                        action_horizon=config.action_horizon, lr=config.lr, batch_size=config.batch_size,
                        seed=config.seed)
    policy = make_camera_policy(spec, {s.key: s.instruction for s in specs}, pcfg)
    projection = fit_projection(demos, config.projection_dim, config.supervised_dim) if config.projection_dim else None
    wrist_projection = (CameraProjection.fit(np.concatenate([d.wrist_embeddings for d in demos]), wrist_dim)
                        if wrist_dim else None)
    data = demos_to_transitions(demos, projection, wrist_projection=wrist_projection)
    set_camera_normalizers(policy, data["state"], ACTION_MEAN, ACTION_STD)
    t0 = time.perf_counter()
    fit = policy.fit(data, config.steps)
    timing["train_s"] = time.perf_counter() - t0
    if freeze_prior:
        policy.freeze_prior()
    return CameraPretrainResult(policy, spec, projection, demos, counts, timing, list(fit.losses), wrist_projection)


def evaluate_camera(policy: Any, encoder: Any, specs: Sequence[Any], episodes_per_task: int, *, seed: int = 0,
                    slots: int = 10, proprio_dims: int = 8, projection: Any = None, wrist_encoder: Any = None,
                    wrist_projection: Any = None) -> tuple[dict[str, float], dict[str, float]]:
    """Success rate per task over ``episodes_per_task`` episodes (the scenes of
    :class:`~amf_ros.envs.metaworld_rollouts.EvalPool` with the same ``seed``: paired with the state policy's), the
    policy acting on the camera; ``slots`` environments per task step in lockstep so the encoder and the head run
    on a batch; ``projection``: the policy's frozen projection; ``wrist_encoder``, ``wrist_projection``: its wrist
    camera's (None = the primary camera only). Returns (success per task, timings: s and frames)."""
    from amf_ros.envs.metaworld_rollouts import EVAL_SEED_OFFSET
    from amf_ros.policies.camera_policy import CameraActor

    actor = CameraActor(policy, encoder, proprio_dims, projection, wrist_encoder, wrist_projection)
    wrist = wrist_encoder is not None
    envs = [CameraTaskEnv(s, wrist=wrist) for s in specs for _ in range(min(slots, episodes_per_task))]
    per_task = len(envs) // len(specs)
    succ = {s.key: 0 for s in specs}
    timing = {"act_s": 0.0, "simulate_s": 0.0, "frames": 0}
    for wave in range(-(-episodes_per_task // per_task)):
        running = []
        for i, env in enumerate(envs):
            ep = wave * per_task + i % per_task
            if ep < episodes_per_task:
                t0 = time.perf_counter()
                env.reset(EVAL_SEED_OFFSET + 1000 * seed + ep)
                timing["simulate_s"] += time.perf_counter() - t0
                running.append(env)
        done = list(running)
        while running:
            t0 = time.perf_counter()
            chunks = actor.act_batch(np.stack([e.image for e in running]), np.stack([e.obs for e in running]),
                                     [e.spec.key for e in running],
                                     wrist_images=np.stack([e.wrist_image for e in running]) if wrist else None)
            timing["act_s"] += time.perf_counter() - t0
            timing["frames"] += len(running)
            t0 = time.perf_counter()
            for env, chunk in zip(running, chunks, strict=True):
                env.step(np.asarray(chunk[0], np.float64))
            timing["simulate_s"] += time.perf_counter() - t0
            running = [e for e in running if not e.done]
        for env in done:
            succ[env.spec.key] += int(env.success)
    return {k: v / episodes_per_task for k, v in succ.items()}, timing


def camera_recipe_key(config: CameraPretrainConfig) -> str:
    """Hash of a camera pre-training config and of the code that makes the checkpoint (this module, the policies
    layer, the WidowX simulation and its task files): a changed recipe makes a new cached checkpoint."""
    import hashlib

    root = Path(__file__).resolve().parents[1]
    tasks = root.parent / "config" / "tasks"
    paths = [Path(__file__), *(root / "policies").glob("*.py"), *(root / "envs" / "widowx_sim").glob("*.py"),
             tasks / "widowx_sim.yaml", tasks / "widowx_family.yaml"]
    h = hashlib.sha256(json.dumps(dataclasses.asdict(config), sort_keys=True, default=str).encode())
    for path in sorted(paths):
        if path.is_file():
            h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:10]


def ensure_camera_pretrained(cache: str | Path, config: CameraPretrainConfig | None = None) -> Path:
    """The cached pre-trained camera-policy checkpoint of ``config`` (default: :class:`CameraPretrainConfig`'s, the
    four SIMPLER tasks), under ``cache/camera_pretrained_<key>``; pre-trained now if missing (minutes on 2 cores).
    policy_server's ``trunk: image_pretrained`` with ``pretrain_if_missing`` starts from it. The directory is written
    atomically (a ``pretrain.json`` inside records the config and timings), so an interrupted run leaves nothing."""
    import shutil
    import tempfile

    from amf_ros.atomic import atomic_write_json
    from amf_ros.data.replay import replay_beside
    from amf_ros.policies.camera_policy import save_camera_policy
    from amf_ros.threads import limited_threads

    cfg = config or CameraPretrainConfig()
    final = Path(cache) / f"camera_pretrained_{camera_recipe_key(cfg)}"
    if (final / "pretrain.json").is_file():
        log.info("using cached pre-trained camera policy %s", final)
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    log.info("pre-training the camera policy (first run only) into %s", final)
    t0 = time.perf_counter()
    with limited_threads(1):
        res = camera_pretrain(cfg)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
    try:
        out = save_camera_policy(res.policy, tmp / "ckpt", res.spec, res.projection, res.wrist_projection)
        atomic_write_json(out / "pretrain.json", {"config": dataclasses.asdict(cfg), "pretrain_counts": res.counts,
                                                  "timing": res.timing, "wall_time_s": time.perf_counter() - t0})
        if not final.exists():
            out.rename(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    write_camera_replay(final, cfg, res.demos, replay_beside(final))  # free now; minutes to redo later
    return final


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m amf_ros.training.camera``: pre-train (and evaluate) a camera policy; prints JSON."""
    import sys

    from amf_ros.policies.camera_policy import save_camera_policy
    from amf_ros.threads import limited_threads

    parser = argparse.ArgumentParser(prog="python -m amf_ros.training.camera", description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=None)
    parser.add_argument("--tasks-file", default="")
    parser.add_argument("--demos-per-task", type=int, default=64)
    parser.add_argument("--steps", type=int, default=CameraPretrainConfig.steps)
    parser.add_argument("--projection-dim", type=int, default=CameraPretrainConfig.projection_dim,
                        help="0 = the raw embedding")
    parser.add_argument("--supervised-dim", type=int, default=CameraPretrainConfig.supervised_dim,
                        help="of those, directions fitted to the demonstrator's next moves (0 = whitened PCA)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--pool", default=DEFAULT_POOL)
    parser.add_argument("--wrist-pool", default=CameraPretrainConfig.wrist_pool,
                        help="pooling of the gripper's wrist camera through the same encoder ('' = the primary "
                             "camera only)")
    parser.add_argument("--wrist-projection-dim", type=int, default=CameraPretrainConfig.wrist_projection_dim)
    parser.add_argument("--action-horizon", type=int, default=1)
    parser.add_argument("--proprio-dims", type=int, default=8,
                        help="state entries beside the embedding (8 = proprio; 14 = the objects too: privileged)")
    parser.add_argument("--task-encoder", default="minilm")
    parser.add_argument("--eval-episodes", type=int, default=20)
    parser.add_argument("--eval-slots", type=int, default=10)
    parser.add_argument("--out", default="", help="checkpoint directory to write (default: none)")
    parser.add_argument("--json", default="", help="write the result JSON here too")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = CameraPretrainConfig(demos_per_task=args.demos_per_task, steps=args.steps, seed=args.seed, pool=args.pool,
                               action_horizon=args.action_horizon, task_encoder=args.task_encoder,
                               proprio_dims=args.proprio_dims, projection_dim=args.projection_dim,
                               supervised_dim=args.supervised_dim, wrist_pool=args.wrist_pool,
                               wrist_projection_dim=args.wrist_projection_dim, tasks_file=args.tasks_file)
    if args.tasks:
        cfg.tasks = list(args.tasks)
    t0 = time.perf_counter()
    with limited_threads(1):
        res = camera_pretrain(cfg)
        out: dict[str, Any] = {"config": dataclasses.asdict(cfg), "spec": dataclasses.asdict(res.spec),
                               "counts": res.counts, "demos": len(res.demos),
                               "frames": int(sum(len(d.actions) for d in res.demos)), "timing": res.timing,
                               "loss_first": res.loss_curve[0], "loss_last": float(np.mean(res.loss_curve[-100:]))}
        if args.out:
            out["checkpoint"] = str(save_camera_policy(res.policy, args.out, res.spec, res.projection,
                                                       res.wrist_projection))
        if args.eval_episodes > 0:
            specs = load_tasks(cfg.tasks_file or None, cfg.tasks)
            succ, timing = evaluate_camera(res.policy, res.spec.load_encoder(), specs, args.eval_episodes,
                                           seed=cfg.seed, slots=args.eval_slots, proprio_dims=cfg.proprio_dims,
                                           projection=res.projection, wrist_encoder=res.spec.load_wrist_encoder(),
                                           wrist_projection=res.wrist_projection)
            out["success"] = succ
            out["mean_success"] = float(np.mean(list(succ.values())))
            out["eval_timing"] = timing
    out["wall_time_s"] = time.perf_counter() - t0
    text = json.dumps(out, indent=1, default=str)
    print(text)
    if args.json:
        Path(args.json).write_text(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
