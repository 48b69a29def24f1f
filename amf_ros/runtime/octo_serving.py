"""Serving Octo from policy_server and task_selector (no rclpy): trunk loading, the acting pipeline, and the
per-frame embedding cache that fine-tuning and task selection share.

Why here: the nodes stay thin; every Octo-specific decision lives in this module and is testable without DDS.

- ``make_trunk``: builds the frozen Octo trunk through a factory ``"module:function"`` (default
  ``amf_ros.policies.octo.trunk:OctoTrunk``, i.e. the real Octo loader; tests pass a fake with Octo's API).
- ``initial_policy``: the acting head = newest fine-tuned ``round_NNNN`` made from the same Octo checkpoint
  (``octo_source.json`` marker), else Octo's pretrained head (fine-tuned copy + frozen prior), saved as
  ``round_0000`` so that fine-tuning and task_selector load it like any checkpoint.
- ``OctoActor``: one run_policy episode: camera frame -> window of 2 + pad mask -> trunk embedding -> mixed head
  (H, 7) in robot units -> temporal ensembling, sticky gripper, per-step workspace bounds -> EefDeltaAction (7,).
- ``EmbeddingCache``: the trunk's embedding of every recorded frame, computed once per (episode, Octo checkpoint,
  instruction, window settings) and stored as ``<dataset_dir>_octo_embeddings/<checkpoint key>/<episode>-<instr
  hash>.npz``; an entry whose step count differs from the episode is recomputed.
"""

from __future__ import annotations

import hashlib
import io
import json
import logging
import threading
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from amf_ros._optional import load_object
from amf_ros.atomic import atomic_write_bytes, atomic_write_json
from amf_ros.runtime.chunk_actor import ChunkActor

log = logging.getLogger(__name__)

DEFAULT_TRUNK_FACTORY = "amf_ros.policies.octo.trunk:OctoTrunk"
MARKER = "octo_source.json"
CACHE_VERSION = 1


def checkpoint_key(octo_checkpoint: str | Path) -> str:
    """Identity of an Octo checkpoint for cache keys: resolved path, config, statistics and the orbax steps.

    Computed from files only (no JAX), so task_selector can look up cached embeddings without loading Octo.
    """
    from amf_ros.policies.octo.checkpoint import read_checkpoint

    info = read_checkpoint(octo_checkpoint)
    root = Path(info.path).resolve()
    h = hashlib.sha256(str(root).encode())
    for name in ("config.json", "dataset_statistics.json"):
        p = root / name
        if p.is_file():
            h.update(p.read_bytes())
    h.update(json.dumps(sorted(int(s) for s in info.steps)).encode())
    return h.hexdigest()[:16]


def make_trunk(octo_checkpoint: str, factory: str = DEFAULT_TRUNK_FACTORY, t5_path: str = "",
               dataset_name: str = "bridge_dataset") -> Any:
    """The frozen Octo trunk (``OctoTrunk`` API: new_window, embed, embed_episode, head_params,
    action_statistics)."""
    if not octo_checkpoint:
        raise ValueError("the octo backend needs 'checkpoint' = an Octo checkpoint directory (config.json, "
                         "dataset_statistics.json, orbax step directories)")
    make = load_object(factory, "trunk factory")
    return make(octo_checkpoint, t5_path=t5_path or None, dataset_name=dataset_name or None)


def made_from(path: str | Path, key: str) -> bool:
    """True if the head checkpoint ``path`` carries a marker naming the Octo checkpoint ``key`` (an unreadable
    marker counts as no marker, with a warning)."""
    marker = Path(path) / MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("key") == key
    except ValueError:
        log.warning("unreadable %s", marker)
        return False


def newest_octo_round(checkpoint_dir: str | Path, key: str) -> Path | None:
    """Newest ``round_NNNN`` whose marker says it was fine-tuned from the Octo checkpoint ``key``."""
    from amf_ros.policies.checkpoint_dirs import round_checkpoints

    return next((p for p in reversed(round_checkpoints(checkpoint_dir)) if made_from(p, key)), None)


def write_marker(path: str | Path, octo_checkpoint: str | Path, key: str) -> None:
    """Record which Octo checkpoint (trunk) a saved head belongs to."""
    atomic_write_json(Path(path) / MARKER, {"octo_checkpoint": str(Path(octo_checkpoint).resolve()), "key": key})


def is_octo_policy(path: str | Path) -> bool:
    """True for a head checkpoint written by the octo backend (has the marker)."""
    return (Path(path) / MARKER).is_file()


def initial_policy(trunk: Any, octo_checkpoint: str, checkpoint_dir: str | Path, instructions: Mapping[str, str],
                   head_checkpoint: str = "") -> tuple[Any, Path]:
    """(policy, its checkpoint directory) to start serving with (see module doc)."""
    from amf_ros.policies.octo.policy import load_octo_policy, octo_policy

    key = checkpoint_key(octo_checkpoint)
    path = Path(head_checkpoint) if head_checkpoint else newest_octo_round(checkpoint_dir, key)
    if path is not None:
        if not path.is_dir():
            raise ValueError(f"head checkpoint directory does not exist: {str(path)!r}")
        log.info("Octo head from %s", path)
        return load_octo_policy(path), path
    if not instructions:
        raise ValueError("the octo backend needs a task set: set 'tasks_file' (keys and instructions)")
    policy = octo_policy(trunk.head_params(), trunk.action_statistics(), dict(instructions))
    path = Path(checkpoint_dir) / "round_0000"
    if path.exists():
        raise ValueError(f"{path} exists but was not made from Octo checkpoint {octo_checkpoint!r}; use another "
                         "'checkpoint_dir'")
    saved = Path(policy.save(path))
    write_marker(saved, octo_checkpoint, key)
    log.info("Octo pretrained head (fine-tuned copy + frozen prior) saved as %s", saved)
    return policy, saved


# ------------------------------------------------------------------------------------------------ acting
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

    def __init__(self, trunk: Any, policy: Any, horizon: int = 4, exp_weight: float = 0.0,
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


# ------------------------------------------------------------------------------------------------ embeddings
def _instr_hash(instruction: str) -> str:
    return hashlib.sha256(instruction.encode()).hexdigest()[:12]


class EmbeddingCache:
    """Octo embeddings of recorded frames, on disk next to the dataset (see module doc).

    Args:
        dataset_dir: the episode store.
        octo_checkpoint: the Octo checkpoint the trunk is loaded from (part of the key).
        trunk_fn: returns the trunk; called only when an embedding is missing (task_selector loads Octo lazily).
        instructions: ``{task: instruction}`` the policy acts with (the embedding depends on it).
        image_key, wrist_key: recorded image streams fed to the trunk (wrist "" = none).
        batch_size: frames per trunk call.
    """

    def __init__(self, dataset_dir: str | Path, octo_checkpoint: str, trunk_fn: Callable[[], Any],
                 instructions: Mapping[str, str], image_key: str = "image_primary", wrist_key: str = "",
                 batch_size: int = 16) -> None:
        self.dataset_dir = Path(dataset_dir)
        self.key = checkpoint_key(octo_checkpoint)
        self.root = self.dataset_dir.parent / f"{self.dataset_dir.name}_octo_embeddings" / self.key
        self.trunk_fn = trunk_fn
        self.instructions = dict(instructions)
        self.image_key, self.wrist_key, self.batch_size = image_key, wrist_key, int(batch_size)
        self.computed = 0  # episodes embedded by the trunk (not read from disk) in this process
        self._lock = threading.Lock()

    def path(self, episode_id: str, instruction: str) -> Path:
        return self.root / f"{episode_id}-{_instr_hash(instruction)}.npz"

    def _read(self, path: Path, num_steps: int, instruction: str) -> np.ndarray | None:
        try:
            with np.load(path) as z:
                emb, meta = z["embedding"], json.loads(str(z["meta"]))
        except (OSError, ValueError, KeyError):
            return None
        ok = (meta.get("version") == CACHE_VERSION and meta.get("instruction") == instruction
              and meta.get("image_key") == self.image_key and meta.get("wrist_key") == self.wrist_key
              and emb.ndim == 2 and emb.shape[0] == num_steps)
        return emb if ok else None

    def instruction(self, task: str, recorded: str) -> str:
        """The instruction the policy acts with for ``task`` (the recorded one for a task outside the set)."""
        return self.instructions.get(task, recorded)

    def episode(self, store: Any, episode_id: str) -> tuple[np.ndarray, Any]:
        """((T, E) embeddings, loaded episode without images) of one committed episode."""
        meta = store.meta(episode_id)
        instruction = self.instruction(meta.task, meta.instruction)
        path = self.path(episode_id, instruction)
        with self._lock:
            emb = self._read(path, meta.num_steps, instruction) if path.is_file() else None
            if emb is not None:
                return emb, store.load(episode_id, images=False)
            keys = [self.image_key] + ([self.wrist_key] if self.wrist_key else [])
            try:
                ep = store.load(episode_id, images=keys)
            except ValueError as exc:  # EpisodeValidationError: e.g. recorded without a camera
                raise ValueError(f"episode {episode_id!r}: cannot read the camera stream(s) {keys} the Octo policy "
                                 f"is fine-tuned on ({exc})") from exc
            obs = ep.observation
            wrist = obs[self.wrist_key] if self.wrist_key else None
            emb = np.asarray(self.trunk_fn().embed_episode(obs[self.image_key], instruction, wrist=wrist,
                                                          batch_size=self.batch_size), np.float32)
            buf = io.BytesIO()
            meta_json = json.dumps({"version": CACHE_VERSION, "instruction": instruction, "episode": episode_id,
                                    "image_key": self.image_key, "wrist_key": self.wrist_key, "key": self.key})
            np.savez(buf, embedding=emb, meta=np.asarray(meta_json))
            atomic_write_bytes(path, buf.getvalue())
            self.computed += 1
            return emb, ep

    def transitions(self, tasks: Sequence[str] = (), episode_ids: Sequence[str] | None = None,
                    cancelled: Callable[[], bool] | None = None) -> dict[str, np.ndarray] | None:
        """Transitions with ``state`` = Octo embeddings (N, E) and ``action`` = recorded 7-D EefDeltaAction;
        None if the store has no (matching) episode. ``cancelled`` is polled before every episode (True ->
        policy_runtime.Cancelled; the episodes embedded so far stay cached)."""
        from amf_ros.data.store import EpisodeStore

        if not self.dataset_dir.is_dir():
            return None
        store = EpisodeStore(self.dataset_dir, create=False)
        ids = list(episode_ids) if episode_ids is not None else store.episode_ids()
        if tasks:
            ids = [e for e in ids if store.meta(e).task in set(tasks)]
        if not ids:
            return None
        cols: dict[str, list[np.ndarray]] = {"state": [], "action": [], "task": [], "episode_index": [], "step": []}
        for i, eid in enumerate(ids):
            if cancelled is not None and cancelled():
                from amf_ros.runtime.policy_server import Cancelled

                raise Cancelled(f"fine-tune cancelled while embedding episode {i + 1} of {len(ids)} (nothing saved)")
            emb, ep = self.episode(store, eid)
            n = len(ep)
            cols["state"].append(emb)
            cols["action"].append(np.asarray(ep.steps["action"], np.float32).reshape(n, -1))
            cols["task"].append(np.full(n, ep.meta.task, dtype=object))
            cols["episode_index"].append(np.full(n, i, np.int64))
            cols["step"].append(np.arange(n, dtype=np.int64))
        return {k: np.concatenate(v) for k, v in cols.items()}


# ------------------------------------------------------------------------------------------------ node wiring
OCTO_LOADER = "amf_ros.policies.octo.policy:load_octo_policy"
"""Loader of Octo head checkpoints (the fine-tune worker process imports it by name)."""


class OctoServing:
    """What policy_server needs for backend ``octo``, built from its parameters (a PolicyServerParams).

    Attributes: ``trunk``, ``cache`` (EmbeddingCache), ``runtime`` (PolicyRuntime whose fine-tuning trains the
    head on cached embeddings), and :meth:`actor` for one run_policy goal.
    """

    def __init__(self, p: Any) -> None:
        from amf_ros.runtime import policy_server as policy_runtime
        from amf_ros.data.tasks import read_instructions
        self.p = p
        octo_ckpt = str(p.checkpoint)
        self.trunk = make_trunk(octo_ckpt, p.octo_trunk_factory, p.t5_path, p.octo_dataset)
        table = read_instructions(p.tasks_file) if p.tasks_file else {}
        policy, path = initial_policy(self.trunk, octo_ckpt, p.checkpoint_dir, table, p.head_checkpoint)
        self.cache = EmbeddingCache(p.dataset_dir, octo_ckpt, lambda: self.trunk, policy.instructions,
                                    image_key=p.image_key, wrist_key=p.wrist_image_key,
                                    batch_size=p.embed_batch_size)
        key = self.cache.key
        self.runtime = policy_runtime.PolicyRuntime(
            policy, path, p.checkpoint_dir, p.dataset_dir, steps=p.fine_tune_steps,
            batch_size=p.fine_tune_batch_size, lr=p.fine_tune_lr, alpha_steps=p.alpha_steps,
            seed=p.seed, action_space="eef7", loader=OCTO_LOADER, torch_threads=p.torch_threads,
            transitions_fn=lambda tasks, cancelled: self.cache.transitions(tasks, cancelled=cancelled),
            after_save=lambda d: write_marker(d, octo_ckpt, key), ensemble_members=p.ensemble_members,
            niceness=p.fine_tune_niceness)

    def warm_up(self) -> float:
        """Act once on a black frame (JAX compiles the trunk on its first call: seconds, not a control period);
        returns the time it took, s."""
        import time

        t0 = time.perf_counter()
        policy = self.runtime.policy
        actor = self.actor(policy)
        actor.reset(policy.tasks[0])
        obs = {"image": np.zeros((256, 256, 3), np.uint8)}
        if self.p.wrist_image_topic:
            obs["wrist"] = np.zeros((128, 128, 3), np.uint8)
        actor(obs)
        return time.perf_counter() - t0

    def actor(self, policy: Any) -> OctoActor:
        """A fresh per-episode actor for ``policy`` (the run's fixed policy)."""
        p = self.p
        return OctoActor(self.trunk, policy, horizon=p.ensemble_horizon, exp_weight=p.ensemble_exp_weight,
                         sticky_gripper_steps=p.sticky_gripper_steps, max_translation=p.max_translation,
                         max_rotation=p.max_rotation, wrist=bool(p.wrist_image_topic))


class OctoSelection:
    """What task_selector needs for backend ``octo``: head checkpoints + the shared embedding cache."""

    def __init__(self, p: Any, instructions: Mapping[str, str]) -> None:
        """``p``: task_selector's TaskSelectorParams."""
        self.p = p
        self.octo_checkpoint = str(p.checkpoint)
        if not self.octo_checkpoint:
            raise ValueError("task_selector backend octo needs 'checkpoint' = the Octo checkpoint directory")
        self._trunk: Any = None
        self._lock = threading.Lock()
        self.cache = EmbeddingCache(p.dataset_dir, self.octo_checkpoint, self.trunk, instructions,
                                    image_key=p.image_key, wrist_key=p.wrist_image_key,
                                    batch_size=p.embed_batch_size)

    def trunk(self) -> Any:
        """The trunk, loaded on first use (only for frames policy_server has not embedded yet)."""
        with self._lock:
            if self._trunk is None:
                log.info("loading the Octo trunk to embed frames that are not cached yet")
                self._trunk = make_trunk(self.octo_checkpoint, self.p.octo_trunk_factory, self.p.t5_path,
                                         self.p.octo_dataset)
            return self._trunk

    def newest_head(self) -> Path | None:
        """Newest head checkpoint made from this Octo checkpoint (None before policy_server has written one)."""
        return newest_octo_round(self.p.checkpoint_dir, self.cache.key)

    def load(self, path: str | Path) -> Any:
        """Load a head checkpoint (refuses one made from another Octo checkpoint)."""
        from amf_ros.policies.octo.policy import load_octo_policy

        if not made_from(path, self.cache.key):
            raise ValueError(f"{path} is not an Octo head checkpoint of {self.octo_checkpoint!r} (no matching "
                             f"{MARKER})")
        return load_octo_policy(path)

    def episode_loader(self) -> Callable[[Sequence[str]], dict[str, np.ndarray] | None]:
        """``episode ids -> transitions`` for datasets.EpisodeCache (states = cached Octo embeddings)."""
        return lambda ids: self.cache.transitions(episode_ids=ids)
