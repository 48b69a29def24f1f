"""What policy_server does, without ROS: act for a task on a control thread that keeps time, fine-tune on the
store in a worker process, write checkpoints atomically, and swap the acting policy between episodes.

Why here: the node (amf_ros/ros/nodes/policy_server.py) stays a thin adapter (messages <-> these calls), and this
logic is testable without DDS.

Threads and processes (docs/ros-system.md, "Concurrency"): subscription callbacks only store the newest
observation and task status (:class:`~amf_ros.runtime.control_loop.Latest`); a run_policy goal runs on its own
control thread (:class:`~amf_ros.runtime.control_loop.ControlLoop`); a fine-tune runs in a spawned worker process
(:mod:`amf_ros.runtime.fine_tune_worker`; backend octo first embeds the frames not cached yet with the node's trunk,
in this process, on the fine_tune goal's thread: docs/ros-system.md, "Serving Octo"); the executor threads that
serve the two actions only wait for them, each wait bounded. :meth:`PolicyServer.close` (called at shutdown) stops
all of it within about 3 s.

Semantics of run_policy during fine-tuning (tested): fine-tuning trains a *copy* of the acting checkpoint in the
worker; a run_policy goal that starts or is running meanwhile acts with the policy it started with at the full
control rate. When fine-tuning finishes, the new policy becomes the acting one for every run_policy goal that
starts afterwards; an episode in progress is never switched mid-way.

Backends: "native" (the package's TaskConditionedPolicy; with ``trunk: image_pretrained``, :class:`CameraServing`:
the camera policy, a frozen pretrained image encoder on camera frames, fine-tuned on cached per-frame embeddings) and
"octo" (:class:`OctoServing`: Octo's frozen trunk on camera frames, the head fine-tuned on cached trunk embeddings).
Which checkpoint a node starts from and how it is loaded: amf_ros.policies.loading; the Octo actor and head
checkpoints: amf_ros.policies.octo; the embedding caches: amf_ros.data.octo_embeddings, amf_ros.data.image_embeddings.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np

from amf_ros.bringup.lifetime import NoRespawnError
from amf_ros.data import transitions as datasets
from amf_ros.data.replay import check_fraction, mix, replay_cache, replay_instructions, stack_episodes
from amf_ros.data.tasks import check_task_keys, episode_instructions
from amf_ros.policies.checkpoint_dirs import member_dir, newest_checkpoint, round_of
from amf_ros.policies.fine_tuning import FINE_TUNE, FineTuneSettings
from amf_ros.policies.loading import LOADERS, initial_policy, load_sharing_encoder
from amf_ros.robots.action_gate import ActionCounts
from amf_ros.runtime.fine_tune_worker import FineTuneJob, FineTuneWorker, write_transitions
from amf_ros.runtime.readiness import Readiness, octo_inputs
from amf_ros.threads import limit_threads

if TYPE_CHECKING:
    from amf_ros.bringup.params.policy_server import PolicyServerParams
    from amf_ros.policies.base import Policy
    from amf_ros.policies.octo.actor import OctoActor

log = logging.getLogger(__name__)

ESTOP_REFUSED = ("refused: the arm's e-stop is engaged (arm_status_topic); release it (e.g. widowx/estop false) and "
                 "send the goal again")
"""run_policy's result while the arm's e-stop is engaged."""
ESTOP_ENDED = "the arm's e-stop was engaged: the goal ended and the arm holds"
"""run_policy's result when the e-stop engages mid-goal (the control loop adds "; stopped after N steps")."""


@dataclass
class FineTuneResult:
    """Outcome of one fine-tuning job."""

    checkpoint: Path
    round: int
    tasks: list[str]
    alphas: list[float]
    final_loss: float
    losses: list[float] = field(default_factory=list)
    wall_time_s: float = 0.0
    members: list[Path] = field(default_factory=list)
    """The round's extra ensemble members (``<checkpoint>/members/member_K``; empty without an ensemble)."""


def wire_action(action_space: str) -> Callable[[np.ndarray], np.ndarray]:
    """The ensembled policy action -> EefDeltaAction vector (7,) for the policy's action space.

    Args:
        action_space: "metaworld" (policy acts in the native 4-D space, converted with native_to_eef7) or "eef7".
    """
    if action_space not in ("metaworld", "eef7"):
        raise ValueError(f"action_space must be 'metaworld' or 'eef7', got {action_space=}")

    def finish(action: np.ndarray) -> np.ndarray:
        if action_space == "metaworld":
            from amf_ros.policies.action_spaces import native_to_eef7

            return native_to_eef7(action)
        if action.shape != (7,):
            raise ValueError(f"action_space eef7 needs 7-D policy actions, got {action.shape}")
        return action

    return finish


class PolicyRuntime:
    """The acting policy of policy_server and its fine-tuning (in a worker process).

    Args:
        policy: the loaded policy (TaskConditionedPolicy, or an Octo head policy).
        checkpoint: directory it was loaded from.
        checkpoint_dir: where fine-tuned checkpoints go (``round_NNNN``).
        dataset_dir: the episode store fine-tuning reads.
        settings: steps, batch size, learning rate and alpha steps of a fine-tune (policy_server's parameters).
        seed: seed of the first round's fine-tune (each round adds 1000 x its number).
        action_space: which recorded action the policy is trained on (see transitions.ACTION_SPACES).
        loader: ``"module:function"`` that loads a checkpoint of this policy (path -> policy; default: the native
            one, see policies.loading.LOADERS); the worker process loads the copy it trains with it, and this
            process the result.
        transitions_fn: ``(tasks, cancelled) -> transitions or None``, may raise FineTuneCancelledError (default: the
            store's states and actions; Octo: cached trunk embeddings, see data/octo_embeddings.py).
        after_save: called with each new checkpoint directory before it becomes the acting one (Octo: marker).
        torch_threads: torch threads of the worker process.
        niceness: scheduling niceness of the worker process (background training yields the CPU).
        worker: the fine-tune worker (default: a new :class:`FineTuneWorker`).
        ensemble_members: heads fine-tuned every round (1 = the acting one only); each extra member k continues
            from ``<acting checkpoint>/members/member_k`` (the acting checkpoint itself when it has no such member,
            e.g. round 1), on the same data with another seed, and is saved inside the new round (see
            policies/checkpoint_dirs.py). Fine-tuning takes about ``ensemble_members`` times as long.
        replay_dir: the pre-training demonstrations replayed in every fine-tune (data/replay.py: an episode store,
            or a camera policy's stored states; `amf run --replay-fraction` writes the pre-trained checkpoint's
            own, bringup/pretrained.py).
        replay_fraction: their share of every minibatch, in [0, 1); 0 = no replay.
        replay_state_key: what this policy's states are, which the replay must hold (data/replay.py
            ``replay_cache``): None = "" (the store's states) with the default transitions, else states no replay
            holds (Octo); the camera backend gives its checkpoint's ``camera_state_key``.
    """

    def __init__(self, policy: Policy, checkpoint: str | Path, checkpoint_dir: str | Path, dataset_dir: str | Path,
                 settings: FineTuneSettings = FINE_TUNE, seed: int = 0, action_space: str = "metaworld",
                 loader: str = LOADERS["native"],
                 transitions_fn: Callable[[list[str], Callable[[], bool]], datasets.Transitions | None]
                 | None = None,
                 after_save: Callable[[Path], None] | None = None, torch_threads: int = 1,
                 worker: FineTuneWorker | None = None, ensemble_members: int = 1, niceness: int = 0,
                 replay_dir: str | Path = "", replay_fraction: float = 0.0,
                 replay_state_key: str | None = None) -> None:
        if ensemble_members < 1:
            raise ValueError(f"ensemble_members must be >= 1 (1 = no ensemble), got {ensemble_members=}")
        self.replay_fraction = check_fraction(replay_fraction)
        self.replay_dir = Path(replay_dir) if replay_dir else None
        if replay_state_key is None and transitions_fn is None:
            replay_state_key = ""
        self._replay = replay_cache(self.replay_dir, self.replay_fraction, action_space, replay_state_key)
        self.ensemble_members = int(ensemble_members)
        self._policy = policy
        self.loader = loader
        self.transitions_fn = transitions_fn
        self.after_save = after_save
        self.action_space = action_space
        self.checkpoint = Path(checkpoint)
        self.round = round_of(checkpoint)
        self.checkpoint_dir = Path(checkpoint_dir)
        self.dataset_dir = Path(dataset_dir)
        self.settings, self.seed = settings, int(seed)
        self.worker = worker if worker is not None else FineTuneWorker(torch_threads=torch_threads,
                                                                       niceness=niceness)
        self._lock = threading.Lock()
        self._busy = threading.Lock()  # held while a fine-tune runs

    @property
    def policy(self) -> Policy:
        """The acting policy (a run_policy goal takes this reference once at its start)."""
        with self._lock:
            return self._policy

    @property
    def fine_tuning(self) -> bool:
        """True while a fine-tuning job runs."""
        return self._busy.locked()

    def close(self) -> None:
        """Stop the worker process (shutdown); a running fine-tune ends as cancelled."""
        self.worker.close()

    def fine_tune(self, steps: int = 0, tasks: Sequence[str] = (),
                  feedback: Callable[[int, int, float], None] | None = None,
                  cancelled: Callable[[], bool] = lambda: False, timeout_s: float = 3600.0) -> FineTuneResult:
        """Fine-tune a copy of the acting checkpoint on the store (worker process), save it, make it acting.

        Args:
            steps: gradient steps (0 = default).
            tasks: restrict the data to these task keys (empty = all episodes).
            feedback: called with (step, total_steps, loss) as training progresses (total_steps = steps x
                ``ensemble_members``: the members' steps follow the acting head's).
            cancelled: polled while waiting; True -> the worker stops, FineTuneCancelledError is raised (nothing saved).
            timeout_s: the job's bound per trained head (x ``ensemble_members``; the worker is stopped and the goal
                fails after it, nothing saved).
        Raises:
            ValueError: no data, unknown task, or a fine-tune already running.
            FineTuneCancelledError: cancelled or shutting down; RuntimeError: the worker failed or died.
        """
        known = self.policy.tasks  # and the tasks it learns at this fine-tune: those with recorded episodes
        check_task_keys(list(tasks), known + (list(episode_instructions(self.dataset_dir))
                                              if set(tasks) - set(known) else []))
        if not self._busy.acquire(blocking=False):
            raise ValueError("a fine-tune is already running; wait for its result or cancel it")
        try:
            return self._fine_tune(steps or self.settings.steps, list(tasks), feedback, cancelled, timeout_s)
        finally:
            self._busy.release()

    def _fine_tune(self, steps: int, tasks: list[str], feedback: Callable[[int, int, float], None] | None,
                   cancelled: Callable[[], bool], timeout_s: float) -> FineTuneResult:
        t0 = time.monotonic()
        if self.transitions_fn is not None:
            transitions = self.transitions_fn(tasks, cancelled)
        else:
            transitions = datasets.load_transitions(self.dataset_dir, tasks=tasks, action_space=self.action_space)
        if transitions is None:
            what = f" for tasks {tasks}" if tasks else ""
            raise ValueError(f"no episodes{what} in the dataset {str(self.dataset_dir)!r}: record a "
                             "demonstration first (nothing to fine-tune on)")
        if self._replay is not None:
            replayed = self._replay.episodes()
            if not replayed:
                raise ValueError(f"replay_fraction is {self.replay_fraction} but replay_dir "
                                 f"{str(self.replay_dir)!r} holds no episodes (nothing saved)")
            transitions = mix(transitions, stack_episodes([t for _, t in replayed]))
        acting = self.policy
        unknown = sorted({str(t) for t in transitions["task"]} - set(acting.tasks))
        new_tasks = {}  # tasks the checkpoint lacks: learned from their demonstrations, with their instruction
        if unknown:
            recorded = {**replay_instructions(self._replay), **episode_instructions(self.dataset_dir)}
            new_tasks = {t: recorded[t] for t in unknown if t in recorded}
            missing = [t for t in unknown if t not in recorded]
            if missing:
                raise ValueError(f"the training data has task(s) {missing} the policy does not know and no "
                                 f"episode in {str(self.dataset_dir)!r} gives their instruction")
        new_round = max(self.round, round_of(newest_checkpoint(self.checkpoint_dir) or "")) + 1
        out = self.checkpoint_dir / f"round_{new_round:04d}"
        data = write_transitions(transitions, self.checkpoint_dir / f".fine_tune_{os.getpid()}.npz")
        job = FineTuneJob(checkpoint=str(self.checkpoint), transitions=str(data), out_dir=str(out), steps=steps,
                          batch_size=self.settings.batch_size, lr=self.settings.lr,
                          alpha_steps=self.settings.alpha_steps, seed=self.seed + 1000 * (self.round + 1),
                          loader=self.loader, members=self.member_starts(), new_tasks=new_tasks,
                          replay_fraction=self.replay_fraction)
        try:
            res = self.worker.run(job, feedback=feedback, cancelled=cancelled,
                                  timeout_s=timeout_s * self.ensemble_members)
        finally:
            data.unlink(missing_ok=True)
        path = Path(res["checkpoint"])
        if self.after_save is not None:
            self.after_save(path)
        student = load_sharing_encoder(self.loader, path, acting.encoder)
        with self._lock:
            self._policy, self.checkpoint, self.round = student, path, new_round
        alphas = res["alphas"]
        return FineTuneResult(checkpoint=path, round=new_round, tasks=list(alphas), alphas=list(alphas.values()),
                              final_loss=float(res["final_loss"]), losses=list(res["losses"]),
                              wall_time_s=time.monotonic() - t0, members=[Path(m) for m in res.get("members", [])])

    def member_starts(self) -> tuple[str, ...]:
        """The checkpoint each extra ensemble member of the next round continues from: its own previous weights
        (``<acting checkpoint>/members/member_k``), else the acting checkpoint (round 1, or an ensemble turned on
        later). Empty when ``ensemble_members`` is 1."""
        starts = []
        for k in range(1, self.ensemble_members):
            own = member_dir(self.checkpoint, k)
            starts.append(str(own if own.is_dir() else self.checkpoint))
        return tuple(starts)

    def adopt(self, path: str | Path) -> bool:
        """Make a checkpoint written by another policy_server (a fleet's trainer) the acting one, if it is a later
        round than the acting one; a running run_policy goal keeps the policy it started with. Returns True if
        adopted. Raises whatever loading raised (the acting policy stays)."""
        path = Path(path)
        if path.resolve() == self.checkpoint.resolve() or round_of(path) <= self.round:
            return False
        policy = load_sharing_encoder(self.loader, path, self.policy.encoder)
        with self._lock:
            self._policy, self.checkpoint, self.round = policy, path, round_of(path)
        return True


def pretrained_fallback(p: PolicyServerParams, log: Callable[[str], None] = log.info) -> Callable[[], Path] | None:
    """With ``pretrain_if_missing`` (the embedded simulation): where policy_server starts when it finds no checkpoint,
    the cached pre-trained policy of ``pretrain_suite``, made on first use by the same code as `amf run`
    (amf_ros.bringup.pretrained) under ``<workspace>/cache``; else None (no checkpoint is an error)."""
    if not p.pretrain_if_missing:
        return None

    def pretrained() -> Path:
        from amf_ros.bringup.pretrained import ensure_pretrained
        from amf_ros.paths import workspace_root

        cache = workspace_root(p.workspace) / "cache"
        if p.trunk == "image_pretrained":  # the camera policy of `amf run --trunk image_pretrained` (same split)
            from amf_ros.bringup.pretrained import ensure_camera_pretrained_run

            log(f"no checkpoint in {str(p.checkpoint_dir)!r}: using the embedded WidowX's pre-trained camera policy "
                f"from {cache} (pre-trained now if this is the first start: minutes on 2 cores)")
            return ensure_camera_pretrained_run(cache, seed=p.seed)
        log(f"no checkpoint in {str(p.checkpoint_dir)!r}: using the embedded simulation's pre-trained policy from "
            f"{cache} (pre-trained now if this is the first start: about a minute on 2 cores)")
        return ensure_pretrained(cache, seed=p.seed, suite=p.pretrain_suite)

    return pretrained


class CameraServing:
    """policy_server's native backend with ``trunk: image_pretrained`` (a PolicyServerParams): the camera policy
    (:mod:`amf_ros.policies.camera_policy`) acting on each camera frame with the proprio of the state at its stamp
    (:mod:`amf_ros.runtime.frame_pairing`), fine-tuned on the per-frame embeddings of
    :class:`~amf_ros.data.image_embeddings.ImageEmbeddingCache` (each recorded frame embedded once, reused by every
    later fine-tune); each new round gets the same marker and frozen projection.

    Attributes: ``spec`` (CameraSpec), ``projection``, ``encoder`` (loaded at start: acting embeds every frame),
    ``cache``, ``runtime`` (PolicyRuntime), and :meth:`infer_fn` for one run_policy goal.
    """

    def __init__(self, p: PolicyServerParams, policy: Policy, path: Path) -> None:
        from amf_ros.data.image_embeddings import ImageEmbeddingCache
        from amf_ros.policies.camera_policy import MARKER, camera_state_key, read_marker, read_projection, write_marker

        spec = read_marker(path)
        if spec is None:
            raise ValueError(f"trunk 'image_pretrained' needs a camera-policy checkpoint; {path} has no {MARKER} "
                             "(make one with `python -m amf_ros.training.camera --out DIR`, or set trunk: state)")
        if not p.image_topic:
            raise ValueError("trunk 'image_pretrained' acts on the camera: set image_topic (e.g. camera/image_raw)")
        if spec.wrist and not p.wrist_image_topic:
            raise ValueError(f"the camera policy {path} also sees the wrist camera: set wrist_image_topic (e.g. "
                             "camera/wrist/image_raw, sim_bridge wrist_camera_name: wrist)")
        self.spec, self.projection = spec, read_projection(path)
        self.wrist_projection = read_projection(path, wrist=True)
        self.encoder = spec.load_encoder()
        self.wrist_encoder = spec.load_wrist_encoder()
        self.cache = ImageEmbeddingCache.for_checkpoint(p.dataset_dir, path)
        projection, wrist_projection = self.projection, self.wrist_projection
        self.runtime = PolicyRuntime(
            policy, path, p.checkpoint_dir, p.dataset_dir, settings=p.fine_tune_settings(), seed=p.seed,
            action_space="eef7", loader=LOADERS["image_pretrained"], torch_threads=p.torch_threads,
            transitions_fn=lambda tasks, cancelled: self.cache.transitions(tasks, cancelled=cancelled),
            after_save=lambda d: write_marker(d, spec, projection, wrist_projection),
            ensemble_members=p.ensemble_members,
            niceness=p.fine_tune_niceness, replay_dir=p.replay_dir, replay_fraction=p.replay_fraction,
            replay_state_key=camera_state_key(path))

    def infer_fn(self, policy: Policy, task: str) -> Callable[[Any], np.ndarray]:
        """``obs ({"state", "image"[, "wrist"]}) -> (H, A)`` chunk of ``policy`` (the goal's fixed policy) for
        ``task``."""
        from amf_ros.policies.camera_policy import CameraActor

        return CameraActor(policy, self.encoder, self.spec.proprio_dims, self.projection, self.wrist_encoder,
                           self.wrist_projection).infer_fn(task)


class OctoServing:
    """policy_server's backend ``octo``, built from its parameters (a PolicyServerParams): the frozen trunk, the
    embedding cache of recorded frames, and a PolicyRuntime whose fine-tuning trains the head on cached embeddings.

    Attributes: ``trunk``, ``cache`` (data.octo_embeddings.EmbeddingCache), ``runtime`` (PolicyRuntime), and
    :meth:`actor` for one run_policy goal.
    """

    def __init__(self, p: PolicyServerParams) -> None:
        from amf_ros.data.octo_embeddings import EmbeddingCache
        from amf_ros.data.task_set import load_task_set
        from amf_ros.policies.octo.heads import write_marker
        from amf_ros.policies.octo.trunk import load_octo_trunk

        self.p = p
        octo_ckpt = str(p.checkpoint)
        self.trunk = load_octo_trunk(octo_ckpt, p.octo_trunk_factory, p.t5_path, p.octo_dataset)
        table = load_task_set(p.tasks_file).instructions if p.tasks_file else {}
        policy, path = initial_policy("octo", octo_ckpt, p.checkpoint_dir, trunk=self.trunk, instructions=table,
                                      head_checkpoint=p.head_checkpoint)
        self.cache = EmbeddingCache(p.dataset_dir, octo_ckpt, lambda: self.trunk, policy.instructions,
                                    image_key=p.image_key, wrist_key=p.wrist_image_key,
                                    batch_size=p.embed_batch_size)
        key = self.cache.key
        self.runtime = PolicyRuntime(
            policy, path, p.checkpoint_dir, p.dataset_dir, settings=p.fine_tune_settings(), seed=p.seed,
            action_space="eef7", loader=LOADERS["octo"], torch_threads=p.torch_threads,
            transitions_fn=lambda tasks, cancelled: self.cache.transitions(tasks, cancelled=cancelled),
            after_save=lambda d: write_marker(d, octo_ckpt, key), ensemble_members=p.ensemble_members,
            niceness=p.fine_tune_niceness)

    def warm_up(self) -> float:
        """Act once on a black frame (JAX compiles the trunk on its first call: seconds, not a control period);
        returns the time it took, s."""
        t0 = time.perf_counter()
        policy = self.runtime.policy
        actor = self.actor(policy)
        actor.reset(policy.tasks[0])
        obs = {"image": np.zeros((256, 256, 3), np.uint8)}
        if self.p.wrist_image_topic:
            obs["wrist"] = np.zeros((128, 128, 3), np.uint8)
        actor(obs)
        return time.perf_counter() - t0

    def actor(self, policy: Policy) -> OctoActor:
        """A fresh per-episode OctoActor (policies/octo/actor.py) for ``policy`` (the run's fixed policy)."""
        from amf_ros.policies.octo.actor import OctoActor

        p = self.p
        return OctoActor(self.trunk, policy, horizon=p.ensemble_horizon, exp_weight=p.ensemble_exp_weight,
                         sticky_gripper_steps=p.sticky_gripper_steps, max_translation=p.max_translation,
                         max_rotation=p.max_rotation, wrist=bool(p.wrist_image_topic))


class PolicyServer:
    """policy_server without ROS: observations in, actions out through ``publish``; run_policy and fine_tune as
    blocking calls (each bounded) that the node's action callbacks make from executor threads.

    Args:
        p: the node's PolicyServerParams (amf_ros/bringup/params/policy_server.py).
        publish: sends one 7-D wire action (EefDeltaAction vector) and returns its stamp, ns of the ROS clock (None:
            unstamped); called on the control thread.
        log: info-level log function (the node's logger).
    """

    def __init__(self, p: PolicyServerParams, publish: Callable[[np.ndarray], int | None],
                 log: Callable[[str], None] = log.info,
                 warn: Callable[[str], None] = log.warning) -> None:
        from amf_ros.runtime.control_loop import Latest
        from amf_ros.runtime.frame_pairing import FramePairing

        limit_threads(p.torch_threads)  # 0 = torch's default
        self.p, self.publish = p, publish
        self.octo: OctoServing | None = None
        self.camera: CameraServing | None = None
        self.runtime: PolicyRuntime | None = None  # None while not ready (backend octo without its inputs)
        self.octo_backend = p.backend == "octo"
        self.readiness: Readiness | None = None
        self._closing = threading.Event()
        if self.octo_backend and p.replay_fraction > 0:  # said at once, not as a not-ready reason forever
            try:
                replay_cache(p.replay_dir, p.replay_fraction, "eef7", state_key=None)
            except ValueError as exc:
                raise NoRespawnError(f"policy_server (backend octo): {exc}") from None
        if self.octo_backend:  # Octo: trunk on camera frames, head fine-tuned on cached trunk embeddings
            # without Octo or its checkpoint: not ready (the reason), ready once they appear (runtime/readiness.py)
            self.readiness = Readiness(lambda: octo_inputs(p.checkpoint, p.octo_trunk_factory), self._start_octo)
            self.readiness.check(inline=True)
        else:
            try:
                policy, path = initial_policy("native", p.checkpoint, p.checkpoint_dir,
                                              pretrained=pretrained_fallback(p, log), warn=warn)
            except ValueError as exc:  # nothing to start from: a restart finds nothing either
                raise NoRespawnError(f"policy_server (native backend): {exc}; set `checkpoint` to a pre-trained "
                                     "checkpoint (or use a config with a pre-trained fallback: config/sim.yaml, "
                                     "config/sim_widowx.yaml)") from None
            if p.trunk == "image_pretrained":  # the camera policy: frames -> frozen encoder, cached per frame
                try:
                    self.camera = CameraServing(p, policy, path)
                except (ValueError, ImportError) as exc:  # a restart finds the same checkpoint / parameters
                    raise NoRespawnError(f"policy_server (trunk image_pretrained): {exc}") from None
                self.runtime = self.camera.runtime
            else:
                try:
                    self.runtime = PolicyRuntime(policy, path, p.checkpoint_dir, p.dataset_dir,
                                                 settings=p.fine_tune_settings(), seed=p.seed,
                                                 action_space=p.action_space, torch_threads=p.torch_threads,
                                                 ensemble_members=p.ensemble_members,
                                                 niceness=p.fine_tune_niceness, replay_dir=p.replay_dir,
                                                 replay_fraction=p.replay_fraction)
                except ValueError as exc:  # the replay settings: a restart finds the same parameters
                    raise NoRespawnError(f"policy_server: {exc}") from None
        self.observations = Latest()
        self.status = Latest() if p.task_status_topic else None
        self._image: np.ndarray | None = None
        self._pairing = (FramePairing(round(p.camera_pair_tolerance_s * 1e9), self.observations.set,
                                      wrist=self.camera.spec.wrist) if self.camera is not None else None)
        self._wrist: np.ndarray | None = None
        self._run_slot = threading.Lock()  # held from goal acceptance to the end of the run
        self._run_stop: threading.Event | None = None
        self._loop: Any = None  # the running ControlLoop, if any
        self.arm = Latest()
        """The arm's newest :class:`~amf_ros.robots.action_gate.ActionCounts` (ArmStatus on arm_status_topic)."""
        self._arm_start: ActionCounts | None = None  # the arm's counts when the running goal started
        self.handover: Any = None
        """A person's take-over during a goal (amf_ros/runtime/handover.py Handover; the node sets it), or None."""

    def _start_octo(self) -> None:
        """Build the octo backend (seconds: the trunk); raises when it cannot (the node stays not ready)."""
        octo = OctoServing(self.p)
        if self._closing.is_set():  # shut down while the trunk loaded
            octo.runtime.close()
            raise RuntimeError("shutting down")
        self.octo, self.runtime = octo, octo.runtime

    def not_ready(self) -> str:
        """``"not ready: <reason and what to do>"`` while the backend waits for an input, "" when ready."""
        return self.readiness.not_ready() if self.readiness is not None else ""

    # -- inputs (subscription callbacks: store the newest value, nothing else) ------------------------------------
    def observe_state(self, values: Sequence[float], stamp_ns: int = 0) -> None:
        """The arm's newest state vector measured at ``stamp_ns``; the native policy acts on it (with the newest
        camera frame), the camera policy on a frame paired with the state of its time (runtime/frame_pairing.py)."""
        if self._pairing is not None:
            self._pairing.on_state(values, stamp_ns)
            return
        obs: dict[str, np.ndarray] = {"state": np.asarray(values, dtype=np.float32)}
        if self._image is not None:
            obs["image"] = self._image
        if not self.octo_backend:
            self.observations.set(obs, stamp_ns)

    def observe_image(self, rgb: np.ndarray, stamp_ns: int = 0) -> None:
        """The newest camera frame, taken at ``stamp_ns``; the Octo policy acts on it (with the newest wrist frame),
        the camera policy once it is paired with the state of its time."""
        if self._pairing is not None:
            self._pairing.on_frame(rgb, stamp_ns)
            return
        self._image = rgb
        if self.octo_backend:  # Octo acts on the camera frame (+ the newest wrist frame)
            self.observations.set({"image": rgb} if self._wrist is None else {"image": rgb, "wrist": self._wrist},
                                  stamp_ns)

    def observe_wrist(self, rgb: np.ndarray, stamp_ns: int = 0) -> None:
        """The newest wrist frame, taken at ``stamp_ns``: sent along with the next camera frame to Octo; paired
        with the camera frame of its time for a camera policy with a wrist camera (ignored by one without)."""
        if self._pairing is not None:
            self._pairing.on_wrist(rgb, stamp_ns)
            return
        self._wrist = rgb

    def observe_status(self, value: Any, stamp_ns: int = 0) -> None:
        """A TaskStatusValue from the arm (sim_bridge), stamped as the frame it goes with (0 = unknown)."""
        if self.status is not None:
            self.status.set(value, stamp_ns)

    def observe_arm(self, counts: ActionCounts) -> bool:
        """The arm's ArmStatus (e-stop, actions applied and refused by reason). An e-stop engaged during a goal ends
        it at once (ok=false, :data:`ESTOP_ENDED`; the control thread wakes and publishes nothing more). True if this
        call ended the running goal."""
        self.arm.set(counts)
        loop = self._loop
        return loop is not None and self._end_on_estop(loop, counts)

    def _end_on_estop(self, loop: Any, counts: ActionCounts | None) -> bool:
        """Abort ``loop`` if the e-stop is engaged, or was engaged since the goal started; True if it did."""
        start = self._arm_start
        engaged = counts is not None and (counts.estop or (
            start is not None and counts.estop_engagements != start.estop_engagements))
        if not engaged or loop.stop.is_set():
            return False
        loop.abort(ESTOP_ENDED)
        return True

    def _arm_tally(self, result: Any, before: ActionCounts | None, period_s: float) -> None:
        """Append to ``result.message`` what the arm did with the goal's actions (applied, refused by reason), after
        waiting (bounded: two control periods, woken by each ArmStatus; none at shutdown) for the arm to report the
        last ones."""
        if before is None or result.steps == 0:
            return
        deadline = time.monotonic() + (0.0 if self._closing.is_set() else 2.0 * period_s)
        while True:
            now, _, count = self.arm.get()
            applied, refused = now.since(before)
            if applied + sum(refused.values()) >= result.steps or time.monotonic() >= deadline:
                break
            self.arm.wait_newer(count, deadline - time.monotonic())
        result.message = f"{result.message}; {now.summary(before, result.steps)}"

    # -- run_policy ----------------------------------------------------------------------------------------------
    def reserve_run(self) -> bool:
        """Claim the arm for one goal (the action's goal callback); False if a goal is active."""
        return not self._closing.is_set() and self._run_slot.acquire(blocking=False)

    def run(self, task: str, max_steps: int = 0, cancelled: Callable[[], bool] = lambda: False,
            feedback: Callable[[int, float], None] | None = None) -> Any:
        """Act for ``task`` on a control thread and wait for it (bounded); needs :meth:`reserve_run` first, which
        this releases. Returns a control_loop.RunResult (ok=false with a message on every fault). While the arm's
        e-stop is engaged the goal is refused (:data:`ESTOP_REFUSED`); engaged mid-goal, it ends the goal at once
        (:meth:`observe_arm`). With an arm status, the message ends with what the arm did with the goal's actions."""
        from amf_ros.policies.chunk_actor import ChunkActor
        from amf_ros.runtime.control_loop import ControlLoop, ControlLoopConfig, RunResult

        try:
            if self.runtime is None:
                return RunResult(ok=False, message=self.not_ready())
            before = self._arm_start = self.arm.get()[0]
            if before is not None and before.estop:
                return RunResult(ok=False, message=ESTOP_REFUSED)
            policy = self.runtime.policy
            try:
                check_task_keys([task], policy.tasks)
            except ValueError as exc:  # a configured task is learned from its demonstrations at a fine-tune
                return RunResult(ok=False, message=f"{exc} (a new task is learned from its demonstrations: record "
                                                   "one and fine-tune)")
            p = self.p
            cfg = ControlLoopConfig(period_s=1.0 / p.control_rate_hz, max_steps=int(max_steps or p.max_steps),
                                    obs_timeout_s=p.observation_timeout_s,
                                    # the arm may apply (or refuse as stale) the last action up to its validity
                                    # after sending: its status is awaited that long plus an observation timeout
                                    status_timeout_s=p.observation_timeout_s + p.action_valid_for_s,
                                    stale_s=p.observation_stale_periods / p.control_rate_hz,
                                    execution_horizon=p.execution_horizon, action_valid_for_s=p.action_valid_for_s)
            if self.octo is not None:
                act = self.octo.actor(policy)
                act.reset(task)
            else:
                infer = (self.camera.infer_fn(policy, task) if self.camera is not None
                         else lambda obs: policy.act(obs, task))
                act = ChunkActor(infer, wire_action("eef7" if self.camera is not None else p.action_space),
                                 p.ensemble_horizon, p.ensemble_exp_weight)
            stop = self._run_stop = threading.Event()
            if self._closing.is_set():
                stop.set()
            loop = self._loop = ControlLoop(act, self.publish, self.observations, self.status, task, cfg, stop,
                                            cancelled=cancelled, feedback=feedback, handover=self.handover)
            self._end_on_estop(loop, self.arm.get()[0])  # engaged before observe_arm could see this loop
            loop.start()
            bound = cfg.max_steps * (cfg.period_s + cfg.obs_timeout_s) + cfg.status_timeout_s + 5.0
            if not loop.join(bound):
                stop.set()
                loop.join(2.0)
                return RunResult(ok=False, message=f"control loop overran its bound of {bound:.0f} s; stopped")
            self._arm_tally(loop.result, before, cfg.period_s)
            return loop.result
        finally:
            self._run_stop = self._loop = self._arm_start = None
            self._run_slot.release()

    def stop_run(self, reason: str) -> bool:
        """End the running goal (ok=false, ``reason``) within one period: an ArmStop from someone else. True if a
        goal was running."""
        loop = self._loop
        if loop is None:
            return False
        loop.abort(reason)
        return True

    # -- fine_tune -----------------------------------------------------------------------------------------------
    def fine_tune(self, steps: int = 0, tasks: Sequence[str] = (),
                  feedback: Callable[[int, int, float], None] | None = None,
                  cancelled: Callable[[], bool] = lambda: False) -> FineTuneResult:
        """Fine-tune in the worker process (see :meth:`PolicyRuntime.fine_tune`); shutdown cancels it. Raises
        ValueError("not ready: ...") while the backend waits for an input."""
        if self.runtime is None:
            raise ValueError(self.not_ready())
        return self.runtime.fine_tune(steps, tasks, feedback, lambda: cancelled() or self._closing.is_set())

    @property
    def fine_tuning(self) -> bool:
        """True while the fine-tune worker is training."""
        return self.runtime is not None and self.runtime.fine_tuning

    def close(self) -> None:
        """Shutdown: stop the control thread and the fine-tune worker (idempotent, returns within ~3 s).

        The control thread is joined (it ends within one inference once stopped): a process that exits while it is
        inside torch aborts ("terminate called without an active exception", exit code -6)."""
        self._closing.set()
        stop, loop = self._run_stop, self._loop
        if stop is not None:
            stop.set()
        if loop is not None:
            loop.join(2.0)
        if self.runtime is not None:
            self.runtime.close()
