"""`amf bench metaworld` / `amf bench widowx`: AMF-NN vs baselines on a simulated multi-task suite (paper Sec. 5.3,
Fig. 3, 11, 12; App. J): Metaworld (39-D states, native 4-D actions) or the embedded WidowX (14-D states, 7-D
EefDeltaAction). One engine for both; the suite (:mod:`amf_ros.envs.suites`) supplies tasks, environments, expert
noise and action normalisation, and :data:`BENCH_DEFAULTS` the budget each command starts from.

For each pre-training allocation (mismatched: demonstrations on half of the tasks; uniform; split: on the tasks a
task family's file marks ``split: pretrain``, e.g. config/bench/widowx_family.yaml) and seed, a policy is
pre-trained once (:mod:`amf_ros.training.pretrain`); then every method runs ``rounds`` rounds of Algorithm 1:
select ``demos_per_round`` tasks, collect scripted demonstrations, fine-tune on all fine-tuning demonstrations so
far (continuing from the previous round's weights), refit alpha(c) for methods with the adaptive prior, and
evaluate success per task. Methods:

* ``amf``: AMF-NN: warm start (every task once), then the argmin of the criterion (core/amf_nn.py, App. E)
  over loss-gradient embeddings of a separate selection copy of the policy that is not trained on the warm-start
  demonstrations (App. M.3.4; by default the frozen pre-trained policy, with the later demonstrations conditioned
  on in the posterior); with the adaptive prior.
* ``uniform``: tasks drawn uniformly; no prior (the fine-tuned head alone acts).
* ``uniform+prior``: tasks drawn uniformly; with the adaptive prior.
* ``rebalancing``: privileged (App. J): fewest pre-training + fine-tuning demonstrations; with the adaptive prior.
* ``progress``: a learning-progress rival: warm start, then the task with the largest predicted success gain of one
  more demonstration, from a per-task Kalman-filter trend over the evaluation history (core/progress.py: the
  pre-trained policy's evaluation, then every round's, each at the task's demonstration count); with the adaptive
  prior.

Demonstration scenes are paired across methods: the k-th demonstration of task t uses the same scene and noise in
every method of a seed; evaluation scenes are the same for every method and round of a seed; uniform and
uniform+prior draw the same task sequence, so their difference is the prior alone.

The policy sees the suite's state, or on the WidowX with ``trunk: image_pretrained`` (``--trunk``) the camera: the
camera policy of amf_ros/policies/camera_policy.py, every demonstration frame rendered and embedded once by the frozen
encoder, evaluation on rendered and encoded frames (config/bench/widowx_camera_smoke.yaml is its pipeline check).
A grid can be split over runs by seed (``--first-seed``) and summarised as one (``--merge``).

Outputs (``--out``): results.json (contract of bench/results.py, one setting per allocation, plus per-task
success, demonstration counts, alpha(c) and the selection log), raw_runs.json (every job's record),
fig3_success.png, fig12_per_task_<allocation>.png, fig11_alpha.png.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple, Sequence

import numpy as np

from amf_ros.core.amf_nn import HALLUCINATE
from amf_ros.core.selection import BATCH_CONDITIONING
from amf_ros.envs.suites import get_suite
from amf_ros.policies.camera_policy import TRUNKS
from amf_ros.policies.encoder_names import WRIST_POOL
from amf_ros.policies.fine_tuning import FINE_TUNE
from amf_ros.threads import limit_threads
from amf_ros.training.pretrain import ALL_ALLOCATIONS, ALLOCATIONS, PretrainConfig

log = logging.getLogger(__name__)

class Method(NamedTuple):
    """What a benchmark method is: a selector, the adaptive prior on or off, AMF's embedding kind."""

    selector: str
    """Selector name (core/selectors.py registry)."""
    prior: bool
    """Acts with the adaptive prior (alpha(c) fitted every round)."""
    embedding: str = "grad"
    """AMF's criterion features (policies/embeddings.py kinds): "grad" (AMF-NN), "last_layer", "dropout" (Fig. 4)."""
    replay_aware: bool = False
    """AMF's criterion weighs the data as fine-tuning with replay does (core/amf_nn.py, ``replay_fraction``)."""


METHODS: dict[str, Method] = {
    "amf": Method("amf", True),
    # replay-aware AMF (issue 32): the criterion conditions on the replayed pre-training data at its minibatch share
    # and weighs new demonstrations by theirs; identical to amf without replay
    "amf-replay": Method("amf", True, replay_aware=True),
    # the same without the adaptive prior (so is progress-noprior below): with replay on the WidowX family uniform
    # beat uniform+prior (0.979 vs 0.929), so the prior, not the selection, held the rules back there
    # (docs/ros-robot.md)
    "amf-replay-noprior": Method("amf", False, replay_aware=True),
    "uniform": Method("uniform", False),
    "uniform+prior": Method("uniform", True),
    "rebalancing": Method("rebalancing", True),
    # the learning-progress rival (core/progress.py): reads the per-round evaluations, not the policy
    "progress": Method("progress", True),
    "progress-noprior": Method("progress", False),
    # the uncertainty ablation (paper Fig. 4): AMF with other kernels
    "amf-last_layer": Method("amf", True, "last_layer"),
    "amf-dropout": Method("amf", True, "dropout"),
    # the peer rules (core/peer_selectors.py; SAVE's vfd, action_l2, gu, diversity and the paper's Dropout), all with
    # the adaptive prior, so that only the selection differs from amf and uniform+prior
    "diversity": Method("diversity", True),
    "dropout": Method("dropout", True),
    "vfd": Method("vfd", True),
    "action_l2": Method("action_l2", True),
    "gu": Method("gu", True),
}
"""Method name -> :class:`Method`."""

RNG_STREAMS: tuple[str, ...] = ("amf", "rebalancing", "uniform", "action_l2", "diversity", "dropout", "gu", "vfd",
                                 "progress")
"""Selection random stream per selector (fixed order: the first three keep the draws of earlier results)."""





@dataclass
class MetaworldBenchConfig:
    """The whole experiment, for any suite (the name is the first suite's); written verbatim into results.json."""

    suite: str = "metaworld"
    """Simulated suite (:mod:`amf_ros.envs.suites`): "metaworld" or "widowx"."""
    tasks: list[str] | None = None
    """Task keys of the suite's task file (None = the suite's default tasks, or every task of ``tasks_file``);
    mismatched pre-training covers the first half."""
    tasks_file: str = ""
    """The suite's task file ("" = the suite's default; the WidowX family: config/tasks/widowx_family.yaml, whose
    ``split`` field the "split" allocation pre-trains by)."""
    allocations: list[str] = field(default_factory=lambda: list(ALLOCATIONS))
    """Pre-training allocations, one results setting each: "mismatched" (the first half of the tasks), "uniform",
    "split" (the task file's ``split: pretrain`` tasks)."""
    methods: list[str] = field(default_factory=lambda: ["amf", "uniform", "uniform+prior", "rebalancing"])
    """Methods to compare (keys of METHODS; the ablation and peer methods are opted into by configs)."""
    seeds: int = 5
    """Independent seeds (pre-training, demonstrations, selection, fine-tuning)."""
    first_seed: int = 0
    """The seeds are first_seed .. first_seed + seeds - 1: a grid split over several runs (or machines) whose raw
    records are merged afterwards (``--merge``) gives the results of one run over all of them."""
    rounds: int = 12
    """Selection + fine-tuning rounds."""
    demos_per_round: int = 1
    """Demonstrations collected per round (batch size B of Algorithm 1), chosen jointly, one fine-tuning per round."""
    replay_fraction: float = 0.0
    """Share of every fine-tuning minibatch drawn from the pre-training demonstrations (uq_vla: 0.5); 0 = none."""
    success_threshold: float = 0.9
    """Success rate whose first crossing is reported as "demonstrations to reach" (SAVE's and the paper's form)."""
    pretrain_demos: int | None = None
    """Total pre-training demonstrations (16 = [8, 8, 0, 0] mismatched, [4, 4, 4, 4] uniform for 4 tasks); None = the
    suite's (:attr:`amf_ros.envs.suites.Suite.pretrain_demos`: Metaworld 16, WidowX 32)."""
    pretrain_steps: int | None = None
    """Gradient steps of pre-training; None = the suite's (Metaworld 1500, WidowX 3000)."""
    finetune_steps: int = FINE_TUNE.steps
    """Gradient steps per fine-tuning round (paper: 3000 on GPU)."""
    batch_size: int = FINE_TUNE.batch_size
    """Batch size of pre-training and fine-tuning (paper: 256)."""
    lr: float = FINE_TUNE.lr
    """AdamW learning rate (pre-training and fine-tuning)."""
    noise_std: float | None = None
    """Noise on the executed expert actions; labels are the noise-free expert actions. None = the suite's default
    (Metaworld 0.1 native units on every component, WidowX 0.002 m on each translation axis)."""
    trunk: str = "state"
    """What the policy sees (WidowX): "state" (the 14-D state: proprio + object and receptacle positions) or
    "image_pretrained" (the camera policy, amf_ros/policies/camera_policy.py: the 256 x 256 primary camera through the
    frozen EfficientNet-Lite0 and a frozen PCA of the pre-training frames, beside the 8-D proprio; pre-trained by
    amf_ros/training/camera.py on the same successful scripted demonstrations, every frame embedded once)."""
    camera_projection_dim: int = 64
    """K of the camera policy's frozen projection (``trunk: image_pretrained``; 0 = the raw 1280-D embedding)."""
    camera_wrist_pool: str = WRIST_POOL
    """The camera policy also sees the gripper's wrist camera through the encoder with this pooling (the recipe's;
    "" = the primary camera only; training/camera.py CameraPretrainConfig.wrist_pool)."""
    camera_wrist_projection_dim: int = 32
    """Kw of the wrist camera's frozen projection (with ``camera_wrist_pool``)."""
    head: str = "diffusion"
    """Action head: "diffusion" (Octo's DiffusionActionHead, the one the policy server fine-tunes) or "mlp" (the
    paper's Gaussian state-based policy; ties uniform+prior here, see docs/metaworld.md)."""
    task_encoder: str = "minilm"
    """Instruction encoder: "minilm" (all-MiniLM-L6-v2, the paper's) or "hash" (no model; tests)."""
    alpha_steps: int = FINE_TUNE.alpha_steps
    """Gradient steps of the alpha(c) fit per round (methods with the adaptive prior)."""
    alpha_lr: float = 1.0
    """Learning rate of the alpha logits (paper: 1.0)."""
    alpha_beta: float = 0.01
    """Conservative penalty beta * mean(alpha) (paper: 0.01)."""
    criterion_form: str = "log_variance"
    """AMF criterion form: "log_variance" (entropy, eq. 3) or "variance"."""
    noise_var: float = 1.0
    """Observation noise sigma^2 of the linear-Gaussian model over embeddings."""
    prior_var: float = 1.0
    """Prior variance of its weights (scales the loss-gradient kernel; as task_selector's prior_var)."""
    selection_copy: str = "frozen"
    """Policy whose loss gradients feed the criterion: "frozen" = the pre-trained policy, never fine-tuned (the
    data enter through the posterior, ``condition_on_data``); "holdout" = a copy fine-tuned every round on all but
    the warm-start demonstrations (App. M.3.4; on this suite it forgets the pre-trained tasks, see docs);
    "current" = the fine-tuned policy itself (trained on every demonstration, the validation set included)."""
    criterion_targets: str = "warm"
    """Target and candidate demonstrations of the criterion: "warm" (the warm-start validation set) or "all"."""
    condition_on_data: bool = True
    """Also condition the criterion's posterior on the non-validation demonstrations."""
    hallucinate: str = "validation"
    """AMF's hallucinated demonstration of a candidate: "validation" (its warm-start episode, the paper's),
    "recorded" (every recorded episode of the task) or "data" (its episodes other than the warm-start one, while it
    has any; core/amf_nn.py)."""
    hallucination_weight: float = 1.0
    """AMF's likelihood weight of a hallucinated demonstration's points, in (0, 1] (core/amf_nn.py; 1 = the
    paper's)."""
    batch_conditioning: str = "hallucinated"
    """What AMF's greedy batch conditions on for a task it picked earlier in the round: "hallucinated" (its
    hallucination, the paper's) or "recorded" (its latest recorded non-validation demonstration; core/amf_nn.py)."""
    frames_per_demo: int = 16
    """States per demonstration used for the criterion (evenly spaced; fewer = faster)."""
    max_points: int = 1024
    """Cap on the criterion's data points (fewer frames per demonstration beyond it; as task_selector's max_points).
    16 frames x up to 64 demonstrations fit, so no configuration in config/bench (<= 30 demonstrations) hits it."""
    eval_episodes: int = 10
    """Evaluation episodes per task and round (paper: 50)."""
    eval_slots: int = 5
    """Environments per task stepped in lockstep during evaluation."""

    def __post_init__(self) -> None:
        suite = get_suite(self.suite, training=True)  # ValueError naming the training suites
        self.tasks_file = str(self.tasks_file or "")
        if self.tasks is None:  # the suite's default tasks, or every task of the file
            self.tasks = ([s.key for s in suite.load_tasks(None, self.tasks_file)] if self.tasks_file
                          else list(suite.default_tasks))
        self.tasks = list(self.tasks)
        self.noise_std = suite.noise_std if self.noise_std is None else float(self.noise_std)
        self.pretrain_demos = suite.pretrain_demos if self.pretrain_demos is None else int(self.pretrain_demos)
        self.pretrain_steps = suite.pretrain_steps if self.pretrain_steps is None else int(self.pretrain_steps)
        self.allocations, self.methods = list(self.allocations), list(self.methods)
        bad = [m for m in self.methods if m not in METHODS]
        if bad or not self.methods:
            raise ValueError(f"unknown methods {bad}; choose from {list(METHODS)}")
        bad = [a for a in self.allocations if a not in ALL_ALLOCATIONS]
        if bad or not self.allocations:
            raise ValueError(f"unknown allocations {bad}; choose from {list(ALL_ALLOCATIONS)}")
        for name in ("seeds", "rounds", "demos_per_round", "pretrain_steps", "finetune_steps", "batch_size",
                     "frames_per_demo", "eval_episodes", "eval_slots", "max_points"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)=}")
        if not 0.0 <= self.replay_fraction < 1.0:
            raise ValueError(f"replay_fraction must be in [0, 1), got {self.replay_fraction=}")
        if not 0.0 < self.success_threshold <= 1.0:
            raise ValueError(f"success_threshold must be in (0, 1], got {self.success_threshold=}")
        if self.trunk not in TRUNKS:
            raise ValueError(f"trunk must be one of {TRUNKS}, got {self.trunk=}")
        if self.trunk == "image_pretrained" and (self.suite != "widowx" or self.head != "diffusion"):
            raise ValueError("trunk 'image_pretrained' (the camera policy) runs on suite 'widowx' with the diffusion "
                             f"head, got {self.suite=} {self.head=}")
        if self.selection_copy not in ("frozen", "holdout", "current"):
            raise ValueError(f"selection_copy must be 'frozen', 'holdout' or 'current', got {self.selection_copy=}")
        if self.hallucinate not in HALLUCINATE:
            raise ValueError(f"hallucinate must be one of {HALLUCINATE}, got {self.hallucinate=}")
        if self.batch_conditioning not in BATCH_CONDITIONING:
            raise ValueError(f"batch_conditioning must be one of {BATCH_CONDITIONING}, got {self.batch_conditioning=}")
        if not 0.0 < self.hallucination_weight <= 1.0:
            raise ValueError(f"hallucination_weight must be in (0, 1], got {self.hallucination_weight=}")
        if self.criterion_targets not in ("warm", "all"):
            raise ValueError(f"criterion_targets must be 'warm' or 'all', got {self.criterion_targets=}")
        if self.first_seed < 0:
            raise ValueError(f"first_seed must be >= 0, got {self.first_seed=}")
        if self.alpha_steps < 0 or self.noise_var <= 0 or self.prior_var <= 0 or self.lr <= 0:
            raise ValueError(f"need alpha_steps >= 0, noise_var > 0, prior_var > 0, lr > 0, got {self.alpha_steps=} "
                             f"{self.noise_var=} {self.prior_var=} {self.lr=}")

    def pretrain_config(self, allocation: str, seed: int) -> PretrainConfig:
        """The pre-training config of one (allocation, seed)."""
        return PretrainConfig(suite=self.suite, tasks=self.tasks, tasks_file=self.tasks_file, allocation=allocation,
                              demos=self.pretrain_demos,
                              noise_std=self.noise_std, head=self.head, steps=self.pretrain_steps,
                              batch_size=self.batch_size, lr=self.lr, seed=seed, task_encoder=self.task_encoder)


# ----------------------------------------------------------------------------------------------- one run


def demo_scene(seed: int, task_index: int, k: int) -> tuple[int, np.random.Generator]:
    """Scene seed and noise generator of the k-th fine-tuning demonstration of a task (paired across methods)."""
    rng = np.random.default_rng([seed, 1, task_index, k])
    return int(rng.integers(0, 1_000_000)), rng


def pretrain_job(cfg: MetaworldBenchConfig, allocation: str, seed: int, ckpt: str) -> dict[str, Any]:
    """Pre-train one (allocation, seed), save it to ``ckpt`` and evaluate it (round 0 of every method)."""
    from amf_ros.envs.metaworld_rollouts import EvalPool
    from amf_ros.training import pretrain as pt

    # one torch and one BLAS thread in every job, whichever engine runs it: a multi-threaded BLAS sums in an order
    # that depends on its thread count (a pool worker inherits the machine's, a Ray worker gets SINGLE_THREAD_ENV),
    # and AMF's scores then differed at 1e-13 between the engines; with one thread the records are bit-identical
    limit_threads(1, blas=True)
    t0 = time.perf_counter()
    if cfg.trunk == "image_pretrained":
        return camera_pretrain_job(cfg, allocation, seed, ckpt)
    res = pt.pretrain(cfg.pretrain_config(allocation, seed))
    pt.save_pretrained(res.policy, ckpt)
    pool = EvalPool(cfg.pretrain_config(allocation, seed).specs(), slots=cfg.eval_slots, suite=cfg.suite)
    success = pool.evaluate(pt.act_fn(res.policy), cfg.eval_episodes, seed=seed)
    return {"allocation": allocation, "seed": seed, "counts": res.counts, "success": success,
            "loss_last": res.loss_curve[-1], "time_s": time.perf_counter() - t0}


def camera_pretrain_job(cfg: MetaworldBenchConfig, allocation: str, seed: int, ckpt: str) -> dict[str, Any]:
    """:func:`pretrain_job` of the camera policy (``trunk: image_pretrained``): the allocation's successful scripted
    demonstrations rendered and embedded once (amf_ros/training/camera.py), the projection fitted on them, the head
    trained; saved with its marker and projection, evaluated on the camera."""
    from amf_ros.data.replay import replay_beside
    from amf_ros.policies.camera_policy import save_camera_policy
    from amf_ros.training import camera as cam

    t0 = time.perf_counter()
    pc = cfg.pretrain_config(allocation, seed)
    counts = pc.counts()
    ccfg = cam.CameraPretrainConfig(tasks=list(cfg.tasks), tasks_file=cfg.tasks_file, demos_per_task=counts,
                                    noise_std=float(cfg.noise_std), steps=cfg.pretrain_steps,
                                    batch_size=cfg.batch_size, lr=cfg.lr, seed=seed, task_encoder=cfg.task_encoder,
                                    projection_dim=cfg.camera_projection_dim, wrist_pool=cfg.camera_wrist_pool,
                                    wrist_projection_dim=cfg.camera_wrist_projection_dim)
    res = cam.camera_pretrain(ccfg)
    save_camera_policy(res.policy, ckpt, res.spec, res.projection, res.wrist_projection)
    cam.write_camera_replay(ckpt, ccfg, res.demos, replay_beside(ckpt))  # its camera states: frames are not kept
    success, timing = cam.evaluate_camera(res.policy, res.spec.load_encoder(), pc.specs(), cfg.eval_episodes,
                                          seed=seed, slots=cfg.eval_slots, proprio_dims=res.spec.proprio_dims,
                                          projection=res.projection, wrist_encoder=res.spec.load_wrist_encoder(),
                                          wrist_projection=res.wrist_projection)
    return {"allocation": allocation, "seed": seed, "counts": counts, "success": success,
            "loss_last": res.loss_curve[-1], "time_s": time.perf_counter() - t0,
            "camera_timing": {**res.timing, **{f"eval_{k}": v for k, v in timing.items()}},
            "camera_spec": dataclasses.asdict(res.spec)}


class TrunkOps(NamedTuple):
    """How a method job collects a demonstration and evaluates a policy for the benchmark's trunk."""

    collect: Any
    """``(task, scene, rng) -> Demo`` (obs = the policy's state: the 14-D state or the camera state)."""
    evaluate: Any
    """``policy -> {task: success rate}`` over ``eval_episodes`` episodes per task (the seed's scenes)."""


def trunk_ops(cfg: MetaworldBenchConfig, specs: Sequence[Any], ckpt: str, seed: int) -> TrunkOps:
    """The :class:`TrunkOps` of ``cfg.trunk`` for the tasks ``specs`` and the pre-trained checkpoint ``ckpt``."""
    from amf_ros.envs.metaworld_rollouts import EvalPool, collect_demo
    from amf_ros.training import pretrain as pt

    if cfg.trunk == "image_pretrained":
        from amf_ros.policies.camera_policy import read_marker, read_projection
        from amf_ros.training import camera as cam

        spec, projection = read_marker(ckpt), read_projection(ckpt)
        if spec is None:
            raise ValueError(f"{ckpt} is not a camera-policy checkpoint")
        encoder, wrist_encoder = spec.load_encoder(), spec.load_wrist_encoder()
        wrist_projection = read_projection(ckpt, wrist=True)
        cams = {s.key: cam.CameraTaskEnv(s, wrist=spec.wrist) for s in specs}
        return TrunkOps(
            lambda task, scene, rng: cam.camera_demo(cams[task], scene, cfg.noise_std, rng, encoder, projection,
                                                     spec.proprio_dims, wrist_encoder=wrist_encoder,
                                                     wrist_projection=wrist_projection),
            lambda policy: cam.evaluate_camera(policy, encoder, specs, cfg.eval_episodes, seed=seed,
                                               slots=cfg.eval_slots, proprio_dims=spec.proprio_dims,
                                               projection=projection, wrist_encoder=wrist_encoder,
                                               wrist_projection=wrist_projection)[0])
    suite = get_suite(cfg.suite)
    envs = {s.key: suite.make_env(s) for s in specs}
    pool = EvalPool(specs, slots=cfg.eval_slots, suite=cfg.suite)
    return TrunkOps(lambda task, scene, rng: collect_demo(envs[task], scene, cfg.noise_std, rng),
                    lambda policy: pool.evaluate(pt.act_fn(policy), cfg.eval_episodes, seed=seed))


def pretraining_replay(cfg: MetaworldBenchConfig, allocation: str, seed: int, ckpt: str) -> list[Any]:
    """The pre-training demonstrations replayed in every fine-tune, as Demos in the policy's state: the state
    policy's collected again from the config (deterministic in it), the camera policy's camera states stored by its
    pre-training job (the same rows it was trained on; data/replay.py StateReplay)."""
    from amf_ros.training import pretrain as pt

    if cfg.trunk != "image_pretrained":
        return pt.pretraining_demos(cfg.pretrain_config(allocation, seed))
    from amf_ros.data.replay import StateReplay, replay_beside
    from amf_ros.envs.metaworld_rollouts import Demo

    return [Demo(task=str(ep["task"][0]), seed=-1, obs=ep["state"], actions=ep["action"], expert_actions=ep["action"],
                 success=True) for _, ep in StateReplay(replay_beside(ckpt)).episodes()]


def load_for_method(ckpt: str, use_prior: bool, cfg: MetaworldBenchConfig) -> Any:
    """The pre-trained policy of ``ckpt`` with the adaptive prior on or off and the bench's alpha settings."""
    from amf_ros.policies.loading import load_native

    policy = load_native(ckpt)
    policy.config = dataclasses.replace(policy.config, use_prior=use_prior, alpha_lr=cfg.alpha_lr,
                                        alpha_beta=cfg.alpha_beta, alpha_steps=cfg.alpha_steps)
    if use_prior and policy.prior is None:
        policy.freeze_prior()
    return policy


def method_job(cfg: MetaworldBenchConfig, allocation: str, seed: int, method: str, ckpt: str,
               pre_success: dict[str, float] | None = None) -> dict[str, Any]:
    """Rounds 1..R of one method from the pre-trained checkpoint; per-round success, counts, alpha, selections.

    ``pre_success``: the pre-trained policy's success per task (pretrain_job's evaluation, the same scenes), the
    first point of ``progress``'s evaluation history; None = evaluated here when the method needs it."""
    from amf_ros.core.acquisition import ENSEMBLE_METRICS, PEER_RULES
    from amf_ros.core.progress import Evaluation, progress_score_fn
    from amf_ros.core.selectors import make_selector
    from amf_ros.runtime.fine_tune_worker import MEMBER_SEED_OFFSET

    limit_threads(1, blas=True)  # as in pretrain_job: bit-identical records on every engine
    t0 = time.perf_counter()
    specs = cfg.pretrain_config(allocation, seed).specs()
    ops = trunk_ops(cfg, specs, ckpt, seed)
    spec = METHODS[method]
    policy = load_for_method(ckpt, spec.prior, cfg)
    selection_copy = None
    if spec.selector == "amf":
        selection_copy = load_for_method(ckpt, False, cfg)
        selection_copy.config = dataclasses.replace(selection_copy.config, embedding_kind=spec.embedding)
    member = None  # the second head of the disagreement rules
    if spec.selector in ENSEMBLE_METRICS:
        member = load_for_method(ckpt, False, cfg)
        # the second head of the disagreement rules: same checkpoint and data, other minibatches and noise (as
        # policy_server's ensemble member 1)
        member.config = dataclasses.replace(member.config, seed=member.config.seed + MEMBER_SEED_OFFSET)
    scored = spec.selector in ("amf", "progress") or spec.selector in PEER_RULES
    selector = make_selector(spec.selector, tasks=cfg.tasks, **({"warm_start": True} if scored else {}))
    pre_counts = cfg.pretrain_config(allocation, seed).counts()
    replay = pretraining_replay(cfg, allocation, seed, ckpt) if cfg.replay_fraction > 0 else []
    replay_seen = replay if spec.replay_aware else []  # what the criterion conditions on
    # keyed by the selector, not the method: uniform and uniform+prior draw the same task sequence (paired)
    rng = np.random.default_rng([seed, 2, RNG_STREAMS.index(spec.selector)])
    demos: list[Any] = []
    warm: list[bool] = []
    counts = {t: 0 for t in cfg.tasks}
    rows: list[dict[str, Any]] = []
    timing = {"select": 0.0, "finetune": 0.0, "evaluate": 0.0}
    history: list[Evaluation] = []  # progress: every evaluation so far, each at the task's demonstration count
    if spec.selector == "progress":
        t1 = time.perf_counter()
        first = dict(pre_success) if pre_success is not None else ops.evaluate(policy)
        timing["evaluate"] += time.perf_counter() - t1
        history.extend(Evaluation(t, 0, float(first[t]), cfg.eval_episodes) for t in cfg.tasks)
    for rnd in range(1, cfg.rounds + 1):
        picks: list[str] = []
        round_warm, round_scores, round_info = False, {}, {}
        while len(picks) < cfg.demos_per_round:  # B picks; a warm start is demonstrated before the rule scores
            t1 = time.perf_counter()
            unseen = [t for t in cfg.tasks if counts[t] == 0]
            score_fn = None
            if scored and not unseen and spec.selector == "progress":
                score_fn = progress_score_fn(history, counts)
            elif scored and not unseen:
                score_fn = method_score_fn(spec, policy, selection_copy, member, demos, warm, cfg, seed, replay_seen)
            batch = cfg.demos_per_round - len(picks)
            if scored and unseen:
                batch = min(batch, len(unseen))
            sel = selector.select(list(cfg.tasks), counts, rng, batch_size=batch, score_fn=score_fn,
                                  pretrain_counts=pre_counts)
            timing["select"] += time.perf_counter() - t1
            round_warm = round_warm or bool(sel.warm_start)
            if score_fn is not None or not round_scores:
                round_scores, round_info = dict(sel.scores), dict(sel.info)
            for task in sel.tasks:
                scene, demo_rng = demo_scene(seed, cfg.tasks.index(task), counts[task])
                demos.append(ops.collect(task, scene, demo_rng))
                warm.append(bool(sel.warm_start) and counts[task] == 0)
                counts[task] += 1
                picks.append(task)
        t1 = time.perf_counter()
        data, weights = finetune_data(demos, replay, cfg.replay_fraction)
        fit = policy.fit(data, cfg.finetune_steps, lr=cfg.lr, batch_size=cfg.batch_size, row_weights=weights)
        if member is not None:
            member.fit(data, cfg.finetune_steps, lr=cfg.lr, batch_size=cfg.batch_size, row_weights=weights)
        alphas = policy.fit_alpha(finetune_data(demos, [], 0.0)[0]) if spec.prior and cfg.alpha_steps > 0 else {}
        if selection_copy is not None and cfg.selection_copy == "holdout":
            holdout = [d for d, w in zip(demos, warm, strict=True) if not w]
            if holdout:
                selection_copy.fit(finetune_data(holdout, [], 0.0)[0], cfg.finetune_steps, lr=cfg.lr,
                                   batch_size=cfg.batch_size)
        timing["finetune"] += time.perf_counter() - t1
        t1 = time.perf_counter()
        success = ops.evaluate(policy)
        timing["evaluate"] += time.perf_counter() - t1
        if spec.selector == "progress":
            history.extend(Evaluation(t, counts[t], float(success[t]), cfg.eval_episodes) for t in cfg.tasks)
        rows.append({"round": rnd, "selected": picks, "warm_start": round_warm,
                     "scores": {k: float(v) for k, v in round_scores.items()}, "counts": dict(counts),
                     "phi_sq_norm": round_info.get("mean_sq_norm_phi"),
                     "alpha": {k: float(alphas[k]) for k in cfg.tasks if k in alphas}, "success": success,
                     "loss_last": fit.final_loss})
    return {"allocation": allocation, "seed": seed, "method": method, "rounds": rows, "timing_s": timing,
            "time_s": time.perf_counter() - t0}


def finetune_data(demos: Sequence[Any], replay: Sequence[Any], fraction: float
                  ) -> tuple[dict[str, np.ndarray], np.ndarray | None]:
    """Transitions of a fine-tuning round and their minibatch weights: the replayed pre-training demonstrations
    (first) get ``fraction`` of every minibatch, the fine-tuning demonstrations the rest; no replay = uniform (None).
    """
    from amf_ros.data.replay import row_weights
    from amf_ros.envs.metaworld_rollouts import demos_to_transitions

    if not replay or fraction <= 0:
        return demos_to_transitions(list(demos)), None
    data = demos_to_transitions([*replay, *demos])
    n_replay = sum(len(d) for d in replay)  # rows of the replayed demonstrations, first in ``data``
    return data, row_weights(np.arange(len(data["task"])) < n_replay, fraction)  # policy_server's rule


def method_score_fn(spec: Method, policy: Any, selection_copy: Any, member: Any, demos: Sequence[Any],
                    warm: Sequence[bool], cfg: MetaworldBenchConfig, seed: int, replay: Sequence[Any] = ()) -> Any:
    """The ScoreFn of a scored method once every task has a demonstration: AMF's criterion on its selection copy,
    or the peer rule on the recorded demonstrations (policies/peer_scores.py: peer_score_fn, as task_selector).
    ``replay``: the replayed pre-training demonstrations replay-aware AMF conditions on (empty = the paper's)."""
    from amf_ros.envs.metaworld_rollouts import demos_to_transitions
    from amf_ros.policies.peer_scores import peer_score_fn

    if spec.selector == "amf":
        return amf_score_fn(policy if cfg.selection_copy == "current" else selection_copy, demos, warm, cfg, replay)
    episodes = [demos_to_transitions([d]) for d in demos]
    return peer_score_fn(spec.selector, policy, episodes, cfg.tasks, frames=cfg.frames_per_demo, seed=seed,
                         members=[policy, member] if member is not None else ())


def amf_score_fn(policy: Any, demos: Sequence[Any], warm: Sequence[bool], cfg: MetaworldBenchConfig,
                 replay: Sequence[Any] = ()) -> Any:
    """The criterion's ScoreFn for this benchmark: :func:`amf_ros.core.amf_nn.amf_nn_score_fn` (the same function
    task_selector uses) on the selection copy ``policy``; with ``replay`` (replay-aware AMF) it also conditions on
    those replayed pre-training demonstrations at ``cfg.replay_fraction``.

    Validation set: the warm-start demonstrations (``warm``; App. M.3.4), or every demonstration with
    ``criterion_targets="all"``; targets over ``cfg.tasks`` (mu_c uniform; each needs a validation demonstration).
    """
    from amf_ros.core.amf_nn import amf_nn_score_fn
    from amf_ros.envs.metaworld_rollouts import demos_to_transitions

    val = list(range(len(demos))) if cfg.criterion_targets == "all" else [i for i, w in enumerate(warm) if w]
    return amf_nn_score_fn(policy, [demos_to_transitions([d]) for d in demos], val, tasks=cfg.tasks,
                           noise_var=cfg.noise_var, prior_var=cfg.prior_var, form=cfg.criterion_form,
                           condition_on_data=cfg.condition_on_data, frames_per_episode=cfg.frames_per_demo,
                           max_points=cfg.max_points, replay=[demos_to_transitions([d]) for d in replay],
                           replay_fraction=cfg.replay_fraction if replay else 0.0, hallucinate=cfg.hallucinate,
                           hallucination_weight=cfg.hallucination_weight,
                           batch_conditioning=cfg.batch_conditioning)


# ----------------------------------------------------------------------------------------------- experiment


def run(cfg: MetaworldBenchConfig, jobs: int = 1, work_dir: str | os.PathLike | None = None,
        progress: bool = True, engine: str = "", ray_address: str = "",
        resume_dir: str | os.PathLike | None = None) -> dict[str, Any]:
    """Pre-train every (allocation, seed), run every method on it; returns the raw per-job records.

    Jobs run on ``engine`` (:mod:`amf_ros.bench.engine`: serial, process, ray; "" = ray if installed, else process;
    ``jobs`` = 1 runs them here) with one torch thread each; the pre-trained checkpoints live in ``work_dir`` (a
    temporary directory by default, removed afterwards; on a Ray cluster: storage every node mounts). With
    ``resume_dir`` they and every finished job's record are kept there instead and reused by a later run of the same
    config and code (:mod:`amf_ros.bench.resume`: slices of a grid share their seeds' pre-training, a killed run
    picks up where it stopped).
    """
    from tqdm import tqdm

    from amf_ros.bench.engine import Engine, default_engine
    from amf_ros.bench.resume import JobRecords, checkpoint_dir

    if jobs < 1:
        raise ValueError(f"jobs must be >= 1, got {jobs=}")
    kind = "serial" if jobs == 1 and not ray_address else (engine or default_engine())
    if work_dir:  # a --work-dir that does not exist yet is made, as --out is
        Path(work_dir).mkdir(parents=True, exist_ok=True)
    kept = JobRecords(resume_dir, cfg) if resume_dir else None
    tmp = kept.pretrained if kept else Path(tempfile.mkdtemp(prefix=f"amf_{cfg.suite}_", dir=work_dir))
    keys = [(a, s) for a in cfg.allocations for s in range(cfg.first_seed, cfg.first_seed + cfg.seeds)]
    ckpts = {k: str(checkpoint_dir(tmp, *k)) for k in keys}
    bar = tqdm(total=len(keys) * (1 + len(cfg.methods)), desc=f"{cfg.suite} ({kind})", unit="run",
               disable=not progress)
    try:
        with Engine(kind, jobs, ray_address) as ex:
            pre = _kept_map(ex, kept, pretrain_job, [(cfg, a, s, ckpts[a, s]) for a, s in keys],
                            [kept and kept.pretrain_record(a, s) for a, s in keys],
                            [kept and kept.load_pretrain(a, s) for a, s in keys], bar)
            # the pre-trained evaluation of each (allocation, seed) is progress's first point (no second evaluation)
            first = {(p["allocation"], p["seed"]): p["success"] for p in pre}
            meth = [(a, s, m) for a, s in keys for m in cfg.methods]
            records = [kept and kept.method_record(a, s, m) for a, s, m in meth]
            runs = _kept_map(ex, kept, method_job,
                             [(cfg, a, s, m, ckpts[a, s], first.get((a, s)) if METHODS[m].selector == "progress"
                               else None) for a, s, m in meth],
                             records, [kept and kept.load(r) for r in records], bar)
    finally:
        bar.close()
        if kept is None:
            shutil.rmtree(tmp, ignore_errors=True)
    return {"pretrain": pre, "runs": runs, "engine": kind}


def _kept_map(ex: Any, kept: Any, fn: Any, args: list[tuple], records: list[Any], done: list[Any], bar: Any
              ) -> list[Any]:
    """``fn`` over ``args`` on the engine ``ex``, in order; with kept records (``kept``), the jobs whose record
    ``done`` holds are not run again and the others write theirs (``records``) as they finish."""
    from amf_ros.bench.resume import recorded

    if kept is None:
        return ex.map(fn, args, lambda: bar.update(1))
    todo = [i for i, d in enumerate(done) if d is None]
    if len(todo) < len(args):
        log.info("%s: reusing %d of %d jobs kept in %s", fn.__name__, len(args) - len(todo), len(args), kept.dir)
        bar.update(len(args) - len(todo))
    new = ex.map(recorded, [(fn, str(records[i]), *args[i]) for i in todo], lambda: bar.update(1))
    out = list(done)
    for i, result in zip(todo, new, strict=True):
        out[i] = result
    return out


def summarize_runs(cfg: MetaworldBenchConfig, raw: dict[str, Any]) -> list[dict[str, Any]]:
    """One results "setting" per allocation: overall success per method (round 0 = pre-trained) and extras."""
    from amf_ros.bench.results import demos_to_reach, summarize

    rounds = list(range(cfg.rounds + 1))
    settings = []
    for alloc in cfg.allocations:
        pre = {p["seed"]: p for p in raw["pretrain"] if p["allocation"] == alloc}
        pre_counts = cfg.pretrain_config(alloc, 0).counts()
        seen = [t for t in cfg.tasks if pre_counts[t] > 0]
        unseen = [t for t in cfg.tasks if pre_counts[t] == 0]
        methods, per_task, counts, alphas, pre_task_success, log_, reach = {}, {}, {}, {}, {}, {}, {}
        new_task_success: dict[str, Any] = {}
        new_reach: dict[str, Any] = {}
        for m in cfg.methods:
            runs = sorted((r for r in raw["runs"] if r["allocation"] == alloc and r["method"] == m),
                          key=lambda r: r["seed"])
            succ = np.array([[[pre[r["seed"]]["success"][t] for t in cfg.tasks]]  # (S, R+1, T), round 0 shared
                             + [[row["success"][t] for t in cfg.tasks] for row in r["rounds"]] for r in runs])
            methods[m] = summarize(rounds, succ.mean(axis=2))
            per_task[m] = {t: summarize(rounds, succ[:, :, i]) for i, t in enumerate(cfg.tasks)}
            pre_task_success[m] = summarize(rounds, succ[:, :, [cfg.tasks.index(t) for t in seen]].mean(axis=2))
            if unseen:
                new_task_success[m] = summarize(rounds,
                                                succ[:, :, [cfg.tasks.index(t) for t in unseen]].mean(axis=2))
            cnt = np.array([[[0] * len(cfg.tasks)] + [[row["counts"][t] for t in cfg.tasks] for row in r["rounds"]]
                            for r in runs], dtype=float)
            counts[m] = {t: summarize(rounds, cnt[:, :, i]) for i, t in enumerate(cfg.tasks)}
            reach[m] = demos_to_reach(succ.mean(axis=2), cnt.sum(axis=2), cfg.success_threshold)
            if unseen:  # the new tasks alone: where a generalist that already does well overall has to learn
                new_reach[m] = demos_to_reach(succ[:, :, [cfg.tasks.index(t) for t in unseen]].mean(axis=2),
                                              cnt.sum(axis=2), cfg.success_threshold)
            if METHODS[m].prior:
                al = np.array([[[0.0] * len(cfg.tasks)] + [[row["alpha"].get(t, np.nan) for t in cfg.tasks]
                                                           for row in r["rounds"]] for r in runs])
                alphas[m] = {t: summarize(rounds[1:], al[:, 1:, i]) for i, t in enumerate(cfg.tasks)}
            log_[m] = [[{"round": row["round"], "selected": row["selected"], "warm_start": row["warm_start"],
                         "scores": row["scores"], "phi_sq_norm": row.get("phi_sq_norm")}
                        for row in r["rounds"]] for r in runs]
        settings.append({"name": alloc, "methods": methods, "pretrain_counts": pre_counts,
                         "pretrained_tasks": seen, "per_task_success": per_task, "demo_counts": counts,
                         "alpha": alphas, "pretrained_task_success": pre_task_success,
                         "new_task_success": new_task_success, "selections": log_,
                         "demos_to_reach": reach, "new_task_demos_to_reach": new_reach,
                         "job_time_s": {"pretrain": [p["time_s"] for p in pre.values()],
                                        **{m: [r["time_s"] for r in raw["runs"] if r["allocation"] == alloc
                                               and r["method"] == m] for m in cfg.methods}}})
    return settings


# ----------------------------------------------------------------------------------------------- outputs


def plot_all(cfg: MetaworldBenchConfig, settings: list[dict[str, Any]], out: Path) -> list[Path]:
    """Fig. 3 (overall success per allocation), Fig. 12 (per-task success and counts), Fig. 11 (alpha(c))."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from amf_ros.bench.results import plot_methods
    from amf_ros.outputs import save_figure

    paths = []
    fig, axes = plt.subplots(1, len(settings), figsize=(5 * len(settings), 3.6), squeeze=False)
    for ax, st in zip(axes[0], settings, strict=True):
        plot_methods(ax, st["methods"], ylabel="success rate (all tasks)",
                     title=f"{st['name']} pre-training {list(st['pretrain_counts'].values())}")
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    paths.append(save_figure(fig, out / "fig3_success.png"))
    plt.close(fig)

    for st in settings:
        fig, axes = plt.subplots(2, len(cfg.tasks), figsize=(3.2 * len(cfg.tasks), 5.6), squeeze=False,
                                 sharex=True)
        for i, t in enumerate(cfg.tasks):
            plot_methods(axes[0][i], {m: st["per_task_success"][m][t] for m in cfg.methods},
                         title=f"{t} (pre-train {st['pretrain_counts'][t]})")
            plot_methods(axes[1][i], {m: st["demo_counts"][m][t] for m in cfg.methods})
        axes[0][0].set_ylabel("success rate")
        axes[1][0].set_ylabel("fine-tuning demos")
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        paths.append(save_figure(fig, out / f"fig12_per_task_{st['name']}.png"))
        plt.close(fig)

    paths.append(plot_demos_per_task(cfg, settings, out / "demos_per_task.png"))
    if all("demos_to_reach" in st for st in settings):  # results.json files older than this figure lack it
        paths.append(plot_demos_to_reach(settings, cfg.methods, out / "demos_to_reach.png"))

    with_alpha = [m for m in cfg.methods if METHODS[m].prior]
    if with_alpha:
        fig, axes = plt.subplots(len(settings), len(with_alpha), figsize=(3.6 * len(with_alpha),
                                                                         3.0 * len(settings)), squeeze=False)
        for r, st in enumerate(settings):
            for c, m in enumerate(with_alpha):
                plot_methods(axes[r][c], st["alpha"][m], ylabel="alpha(c)" if c == 0 else "",
                             title=f"{m}, {st['name']}")
                axes[r][c].set_ylim(-0.02, 1.02)
        axes[0][0].legend(fontsize=7)
        fig.tight_layout()
        paths.append(save_figure(fig, out / "fig11_alpha.png"))
        plt.close(fig)
    return paths


TABLE_TASK_COLUMNS = 6
"""Up to this many tasks the table lists the final demonstrations of each task; beyond it (the 16-task family) the
sums over the pre-trained and the new tasks."""


def table(cfg: MetaworldBenchConfig, settings: list[dict[str, Any]]) -> str:
    """Final-round success (overall with its 90% CI, on pre-trained tasks, on new tasks), final demo counts and the
    demonstrations to reach the success threshold on the seed-mean curve, per allocation and method."""
    from amf_ros.bench.results import reach_text
    from amf_ros.outputs import format_table

    per_task = len(cfg.tasks) <= TABLE_TASK_COLUMNS
    rows = []
    for st in settings:
        seen = [t for t in cfg.tasks if st["pretrain_counts"].get(t)]
        for m in cfg.methods:
            o, p = st["methods"][m], st["pretrained_task_success"][m]
            n = st.get("new_task_success", {}).get(m)
            final = {t: st["demo_counts"][m][t]["mean"][-1] for t in cfg.tasks}
            counts = ("/".join(f"{final[t]:.1f}" for t in cfg.tasks) if per_task else
                      f"{sum(final[t] for t in seen):.1f}/{sum(v for t, v in final.items() if t not in seen):.1f}")
            rows.append([st["name"], m, o["mean"][0], o["mean"][-1], f"[{o['ci_low'][-1]:.2f}, {o['ci_high'][-1]:.2f}]",
                         p["mean"][0], p["mean"][-1], "-" if n is None else f"{n['mean'][0]:.3f}",
                         "-" if n is None else f"{n['mean'][-1]:.3f}", counts,
                         reach_text(st.get("demos_to_reach", {}).get(m)),
                         reach_text(st.get("new_task_demos_to_reach", {}).get(m))])
    return format_table(["pre-training", "method", "success r0", "success final", "90% CI",
                         "pretrained-tasks r0", "pretrained-tasks final", "new-tasks r0", "new-tasks final",
                         "demos " + ("/".join(cfg.tasks) if per_task else "pre-trained/new tasks"),
                         f"demos to {cfg.success_threshold:g}", f"new tasks: demos to {cfg.success_threshold:g}"],
                        rows)


def plot_demos_per_task(cfg: MetaworldBenchConfig, settings: list[dict[str, Any]], path: Path) -> Path:
    """Stacked bars: the final fine-tuning demonstrations per task of each method (mean over seeds); the tasks that
    pre-training covered are hatched, so where a method spent its budget is visible at a glance."""
    import matplotlib.pyplot as plt

    from amf_ros.outputs import save_figure

    fig, axes = plt.subplots(1, len(settings), figsize=(max(4.0, 0.8 * len(cfg.methods)) * len(settings), 3.6),
                             squeeze=False)
    for ax, st in zip(axes[0], settings, strict=True):
        bottom = np.zeros(len(cfg.methods))
        for i, t in enumerate(cfg.tasks):
            h = np.array([st["demo_counts"][m][t]["mean"][-1] for m in cfg.methods])
            ax.bar(range(len(cfg.methods)), h, bottom=bottom, color=f"C{i % 10}",
                   hatch="//" if st["pretrain_counts"].get(t) else None,
                   label=f"{t} (pre-train {st['pretrain_counts'].get(t, 0)})")
            bottom += h
        ax.set_xticks(range(len(cfg.methods)), list(cfg.methods), rotation=30, ha="right")
        ax.set_ylabel("fine-tuning demonstrations (final)")
        ax.set_title(f"{st['name']} pre-training")
        ax.grid(alpha=0.3, axis="y")
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    out = save_figure(fig, path)
    plt.close(fig)
    return out


def plot_demos_to_reach(settings: list[dict[str, Any]], methods: Sequence[str], path: Path) -> Path:
    """Bars: demonstrations to reach the threshold on the mean curve per method (hatched at the budget when never
    reached), dots: each seed (seeds that never got there sit at the budget, hollow)."""
    import matplotlib.pyplot as plt

    from amf_ros.outputs import save_figure

    fig, axes = plt.subplots(1, len(settings), figsize=(max(4.0, 0.9 * len(methods)) * len(settings), 3.4),
                             squeeze=False)
    for ax, st in zip(axes[0], settings, strict=True):
        reach = st["demos_to_reach"]
        for i, m in enumerate(methods):
            r = reach[m]
            top = r["mean_curve"] if r["mean_curve"] is not None else r["budget"]
            ax.bar(i, top, color=f"C{i % 10}", alpha=0.5, hatch=None if r["mean_curve"] is not None else "//")
            jitter = np.linspace(-0.2, 0.2, len(r["per_seed"])) if len(r["per_seed"]) > 1 else [0.0]
            for dx, v in zip(jitter, r["per_seed"], strict=False):
                ax.plot(i + dx, r["budget"] if v is None else v, "o", color=f"C{i % 10}", ms=4,
                        mfc="none" if v is None else f"C{i % 10}")
        ax.set_xticks(range(len(methods)), list(methods), rotation=30, ha="right")
        thr = next(iter(reach.values()))["threshold"] if reach else 0.0
        ax.set_ylabel(f"demonstrations to success {thr:g}")
        ax.set_title(f"{st['name']} pre-training (hatched: not reached)")
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    out = save_figure(fig, path)
    plt.close(fig)
    return out


BENCH_DEFAULTS: dict[str, dict[str, Any]] = {
    "metaworld": {},
    "widowx": {"suite": "widowx", "allocations": ["mismatched"],
               "methods": ["amf", "uniform+prior", "uniform", "rebalancing"], "eval_slots": 10,
               "success_threshold": 0.8},
}
"""What `amf bench <suite>` starts from, on top of the MetaworldBenchConfig defaults (then --config, then flags).
config/bench/<suite>.yaml holds the same values (a test checks). WidowX: one allocation (mismatched, the suite's
budget: 16 successful demonstrations each of spoon_on_towel and carrot_on_plate, 3000 steps), four methods, 12
rounds, reach threshold 0.8; evaluation (40 environments in one lockstep wave) is about 3/4 of a method run; the
whole run fits about 30 min with ``--jobs 2`` on 2 cores (docs/results/widowx/README.md)."""


def bench_config(suite: str, path: str | os.PathLike | None = None, **overrides: Any) -> MetaworldBenchConfig:
    """The config of `amf bench <suite>`: :data:`BENCH_DEFAULTS` of ``suite``, the YAML ``path``, then non-None
    ``overrides``; a YAML naming another suite is refused."""
    from amf_ros.config_file import load_config

    if suite not in BENCH_DEFAULTS:
        raise ValueError(f"unknown suite {suite!r}; choose from {list(BENCH_DEFAULTS)}")
    cfg = load_config(MetaworldBenchConfig, path, defaults=BENCH_DEFAULTS[suite], **overrides)
    if cfg.suite != suite:
        raise ValueError(f"{path}: the config is for suite {cfg.suite!r}; run `amf bench {cfg.suite}` instead")
    return cfg


def merge_runs(raw_paths: Sequence[str | os.PathLike], out: Path) -> int:
    """Summarise the raw records of several runs of one config as one run (``--merge``): runs over disjoint seeds,
    or over the same seeds with disjoint methods (a grid too long for one sitting: the camera policy's). The config
    of each is read from the results.json beside its raw_runs.json; they must agree except in their seeds and
    methods, runs sharing a seed must have pre-trained it alike (the same round-0 success), and every seed must end
    up with every method."""
    import json

    from amf_ros.atomic import atomic_write_json
    from amf_ros.bench.results import config_dict, write_results

    docs, raws = [], []
    for p in raw_paths:
        raw_path = Path(p)
        raws.append(json.loads(raw_path.read_text(encoding="utf-8")))
        docs.append(json.loads((raw_path.parent / "results.json").read_text(encoding="utf-8")))
    known = {f.name for f in dataclasses.fields(MetaworldBenchConfig)}
    # each run's config with today's defaults for keys it predates (equal behaviour: a new key defaults to the old)
    configs = [dataclasses.asdict(MetaworldBenchConfig(**{k: v for k, v in d["config"].items() if k in known}))
               for d in docs]
    first = configs[0]
    for other, p in zip(configs[1:], raw_paths[1:], strict=True):
        diff = sorted(k for k in known - {"seeds", "first_seed", "methods"} if first[k] != other[k])
        if diff:
            raise ValueError(f"{p}: its config differs from the first run's in {diff}; only seeds and methods may "
                             "differ")
    pretrain: dict[tuple[str, int], dict[str, Any]] = {}
    for r, p in zip(raws, raw_paths, strict=True):
        for rec in r["pretrain"]:
            key = (rec["allocation"], rec["seed"])
            if key in pretrain and pretrain[key]["success"] != rec["success"]:
                raise ValueError(f"{p}: seed {rec['seed']} ({rec['allocation']}) was pre-trained differently from "
                                 f"an earlier run's (round-0 success {rec['success']} vs {pretrain[key]['success']}: "
                                 "another CPU or code?); its methods cannot be merged with that run's")
            pretrain.setdefault(key, rec)
    runs = [x for r in raws for x in r["runs"]]
    cells = [(x["allocation"], x["seed"], x["method"]) for x in runs]
    shared = sorted({c for c in cells if cells.count(c) > 1})
    if shared:
        raise ValueError(f"the runs share seeds and methods: {shared}")
    methods = list(dict.fromkeys(m for c in configs for m in c["methods"]))
    have = set(cells)
    missing = sorted((a, s, m) for (a, s) in pretrain for m in methods if (a, s, m) not in have)
    if missing:
        raise ValueError(f"the merged grid is incomplete: no run of {missing} (every seed needs every method)")
    seeds = sorted({s for _, s in pretrain})
    cfg = MetaworldBenchConfig(**{**first, "seeds": len(seeds), "first_seed": min(seeds), "methods": methods})
    raw = {"pretrain": list(pretrain.values()), "runs": runs, "engine": raws[0].get("engine", "")}
    atomic_write_json(out / "raw_runs.json", raw)
    settings = summarize_runs(cfg, raw)
    results = {"benchmark": docs[0]["benchmark"],
               "config": {**config_dict(cfg), "seed_list": sorted(seeds), "merged_from": [str(p) for p in raw_paths]},
               "metric": docs[0]["metric"], "wall_time_s": float(sum(d["wall_time_s"] for d in docs)),
               "settings": settings}
    path = write_results(out, results)
    plots = plot_all(cfg, settings, out)
    print(table(cfg, settings))
    print(f"merged {len(raws)} runs, seeds {seeds}, methods {methods}, summed wall time "
          f"{results['wall_time_s']:.0f} s; wrote {path} and {', '.join(p.name for p in plots)}")
    return 0


def main(argv: Sequence[str]) -> int:
    """`amf bench metaworld` entry point."""
    return _main(argv, "metaworld")


def widowx_main(argv: Sequence[str]) -> int:
    """`amf bench widowx` entry point."""
    return _main(argv, "widowx")


def _main(argv: Sequence[str], suite: str) -> int:
    """Parse the flags of `amf bench <suite>`, run (or only replot), write the outputs."""
    from amf_ros.bench.results import add_common_args, config_dict, write_results

    parser = argparse.ArgumentParser(prog=f"amf bench {suite}", description=__doc__.split("\n\n")[0])
    add_common_args(parser, out=f"docs/results/{suite}")
    parser.add_argument("--methods", nargs="+", default=None, help=f"subset of {list(METHODS)}")
    parser.add_argument("--allocations", nargs="+", default=None, help=f"subset of {list(ALL_ALLOCATIONS)}")
    parser.add_argument("--eval-episodes", type=int, default=None, help="evaluation episodes per task and round")
    parser.add_argument("--selection-copy", choices=("frozen", "holdout", "current"), default=None,
                        help="AMF's selection copy (default: from the config, frozen)")
    parser.add_argument("--demos-per-round", type=int, default=None, help="batch size B of every round")
    parser.add_argument("--replay-fraction", type=float, default=None,
                        help="share of each fine-tuning minibatch from the pre-training demonstrations (uq_vla: 0.5)")
    parser.add_argument("--tasks", nargs="+", default=None, help="task keys of the suite (default: its four)")
    parser.add_argument("--noise-var", type=float, default=None,
                        help="AMF's observation noise variance of the criterion (default: from the config, 1.0)")
    parser.add_argument("--hallucinate", choices=HALLUCINATE, default=None,
                        help="AMF's hallucinated demonstration of a candidate (default: from the config, validation)")
    parser.add_argument("--hallucination-weight", type=float, default=None,
                        help="AMF's likelihood weight of a hallucinated demonstration, (0, 1] (default: from the "
                             "config, 1.0 = the paper's)")
    parser.add_argument("--batch-conditioning", choices=BATCH_CONDITIONING, default=None,
                        help="what AMF's greedy batch conditions on for a task it already picked this round: its "
                             "hallucination (default, the paper's) or its latest recorded demonstration")
    parser.add_argument("--trunk", choices=TRUNKS, default=None,
                        help="what the policy sees: state (default) or image_pretrained (the camera policy on a "
                             "frozen pretrained encoder; WidowX)")
    parser.add_argument("--work-dir", default=None, help="where pre-trained checkpoints live during the run")
    parser.add_argument("--resume-dir", default=None, metavar="DIR",
                        help="keep every pre-trained checkpoint and finished job's record under DIR and reuse those "
                             "of the same config and code: slices of a grid (--seeds/--first-seed, --methods) share "
                             "pre-training, a killed run resumes")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument("--engine", choices=("process", "ray"), default=None,
                        help="where the jobs run: ray (default when installed; local, or a cluster with "
                             "--ray-address) or process (a local pool of spawned processes)")
    parser.add_argument("--ray-address", default="", help="Ray cluster to run on ('auto', 'ray://head:10001'); "
                        "empty = a local Ray with --jobs CPUs")
    parser.add_argument("--replot", default=None, metavar="RESULTS_JSON",
                        help="only redraw the figures and the table of an existing results.json into --out")
    parser.add_argument("--first-seed", type=int, default=None,
                        help="seeds first_seed .. first_seed + seeds - 1 (split a grid over runs; see --merge)")
    parser.add_argument("--merge", nargs="+", default=None, metavar="RAW_RUNS_JSON",
                        help="summarise the raw_runs.json of several runs of one config with disjoint seeds (e.g. "
                             "--first-seed 0 --seeds 3 and --first-seed 3 --seeds 2) or disjoint --methods on the "
                             "same seeds as one run into --out; the config is the first run's results.json next to "
                             "it, with the merged seeds and methods")
    args = parser.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.replot:
        import json

        doc = json.loads(Path(args.replot).read_text(encoding="utf-8"))
        known = {f.name for f in dataclasses.fields(MetaworldBenchConfig)}
        cfg = MetaworldBenchConfig(**{k: v for k, v in doc["config"].items() if k in known})
        plots = plot_all(cfg, doc["settings"], Path(args.out))
        print(table(cfg, doc["settings"]))
        print(f"wrote {', '.join(str(p) for p in plots)}")
        return 0
    if args.merge:
        return merge_runs(args.merge, Path(args.out))
    cfg = bench_config(suite, args.config, seeds=args.seeds, first_seed=args.first_seed, rounds=args.rounds,
                       methods=args.methods, allocations=args.allocations, eval_episodes=args.eval_episodes,
                       selection_copy=args.selection_copy, demos_per_round=args.demos_per_round,
                       replay_fraction=args.replay_fraction, tasks=args.tasks, trunk=args.trunk,
                       noise_var=args.noise_var, hallucinate=args.hallucinate,
                       hallucination_weight=args.hallucination_weight,
                       batch_conditioning=args.batch_conditioning)
    jobs = args.jobs or os.cpu_count() or 1
    t0 = time.perf_counter()
    raw = run(cfg, jobs=jobs, work_dir=args.work_dir, progress=not args.no_progress, engine=args.engine or "",
              ray_address=args.ray_address, resume_dir=args.resume_dir)
    wall = time.perf_counter() - t0
    out = Path(args.out)
    from amf_ros.atomic import atomic_write_json

    atomic_write_json(out / "raw_runs.json", raw)  # every job's record, before anything else can fail
    settings = summarize_runs(cfg, raw)
    results = {"benchmark": suite, "config": {**config_dict(cfg), "jobs": jobs, "engine": raw["engine"]},
               "metric": "success rate over all tasks (mean of per-task success over eval_episodes episodes)",
               "wall_time_s": wall, "settings": settings}
    path = write_results(out, results)
    plots = plot_all(cfg, settings, out)
    print(table(cfg, settings))
    print(f"wall time {wall:.0f} s; wrote {path} and {', '.join(p.name for p in plots)}")
    return 0
