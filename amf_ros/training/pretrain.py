"""`amf pretrain`: pre-train a task-conditioned policy on scripted demonstrations of a simulated suite.

Why: the embedded ROS simulation and ``amf bench metaworld`` / ``amf bench widowx`` start from a policy that already
knows some tasks and not others (the paper's *mismatched* pre-training, Sec. 5.3: demonstrations on half of the
tasks only), or one pre-trained on every task (*uniform*). One command reproduces it bit for bit from a seed::

    amf pretrain --out checkpoints/metaworld_mismatched                  # default: Metaworld, mismatched, seed 0
    amf pretrain --allocation uniform --seed 3 --out /tmp/ckpt
    amf pretrain --suite widowx --out checkpoints/widowx_mismatched     # the embedded WidowX (7-D eef actions)

The suite (:mod:`amf_ros.envs.suites`) fixes the tasks, the environments, the state and action sizes, the expert
noise and the action normalisation; everything else is the same for every suite.

The checkpoint directory (a TaskConditionedPolicy checkpoint whose frozen prior is the pre-trained head) is written
atomically; its ``pretrain.json`` records the config, per-task demonstration counts, losses and timings.

Why in amf_ros/training (above envs, below bringup): policy_server pre-trains on first use
(amf_ros.bringup.pretrained), and the benchmarks pre-train every seed, so neither may depend on bench/.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from amf_ros.envs.suites import TRAINING_SUITES, get_suite
from amf_ros.policies.fine_tuning import LR_SCHEDULES
from amf_ros.threads import limited_threads

log = logging.getLogger(__name__)

ALLOCATIONS = ("mismatched", "uniform")
"""The allocations every suite has (the default grid of `amf bench metaworld`)."""
SPLIT_ALLOCATION = "split"
"""The allocation of a task family whose task file marks each task ``split: pretrain|new`` (the WidowX family,
config/tasks/widowx_family.yaml): demonstrations spread over the ``pretrain`` tasks only, the generalist meeting the
lab's new tasks."""
ALL_ALLOCATIONS = (*ALLOCATIONS, SPLIT_ALLOCATION)
"""Every allocation pre-training accepts."""
DEFAULT_TASKS = get_suite("metaworld").default_tasks
"""The Metaworld suite's default tasks (the registry's; kept here for the importers of this name)."""


@dataclass
class PretrainConfig:
    """Everything that determines a pre-trained checkpoint (the same dataclass serves CLI, bench and tests)."""

    suite: str = "metaworld"
    """Simulated suite (:mod:`amf_ros.envs.suites`): "metaworld" (39-D states, native 4-D actions) or "widowx"
    (the embedded WidowX: 14-D states, 7-D EefDeltaAction)."""
    tasks: list[str] | None = None
    """Task keys of the suite's task file (None = the suite's default tasks); in the mismatched allocation the first
    half is pre-trained."""
    tasks_file: str = ""
    """The suite's task file the keys come from ("" = the suite's default; the WidowX family:
    config/tasks/widowx_family.yaml)."""
    allocation: str = "mismatched"
    """"mismatched" = all demonstrations on the first half of ``tasks``; "uniform" = spread over all tasks; "split" =
    spread over the tasks the task file marks ``split: pretrain`` (:data:`SPLIT_ALLOCATION`)."""
    demos: int | None = None
    """Total pre-training demonstrations; None = the suite's (:attr:`~amf_ros.envs.suites.Suite.pretrain_demos`:
    Metaworld 16, as the paper's about 15; WidowX 32)."""
    noise_std: float | None = None
    """Std of Gaussian noise on the executed expert actions; labels stay noise-free. None = the suite's default:
    Metaworld 0.1 on every native component, WidowX 0.002 m on each translation axis."""
    head: str = "diffusion"
    """Action head: "diffusion" (Octo's DiffusionActionHead, what policy_server fine-tunes) or "mlp" (Gaussian MLP,
    the paper's state-based policy)."""
    steps: int | None = None
    """Gradient steps of pre-training; None = the suite's (Metaworld 1500, WidowX 3000)."""
    batch_size: int = 256
    """Batch size of pre-training (paper: 256)."""
    lr: float = 1e-3
    """AdamW learning rate of pre-training."""
    seed: int = 0
    """Seed of demonstration scenes, expert noise, initialisation and batches."""
    task_encoder: str = "minilm"
    """Instruction encoder: "minilm" (all-MiniLM-L6-v2, the paper's) or "hash" (no model; tests)."""
    relative_features: bool = False
    """Append object - gripper and receptacle - object to the state trunk's input (WidowX only:
    :func:`relative_state_differences`). Off: on the WidowX (16 successful demonstrations per task, 3000 steps, 10
    seeds) 9 seeds gained (median 0.94 vs 0.90) but one collapsed to 0.21, mean 0.86 vs 0.88 without."""
    lr_schedule: str | None = None
    """Learning rate of pre-training over its steps, "constant" or "cosine"; None = the suite's
    (:data:`SUITE_SCHEDULES`: WidowX cosine, Metaworld constant as its benchmark was measured)."""
    ema_decay: float | None = None
    """EMA decay of the pre-trained weights, adopted at the end (0 = off); None = the suite's (WidowX 0.999)."""
    successful_only: bool = True
    """Pre-train on scripted demonstrations that reached success only: a failed one is replaced by one from a fresh
    scene (at most :data:`ATTEMPTS_PER_DEMO` scenes per kept demonstration), as an operator discards a failed take.
    Why: on the embedded WidowX a failed demonstration runs to ``max_steps`` (3-6x the frames of a good one) and often
    ends with the object knocked off the table; with 5-10% of attempts failing, such frames were 18-33% of the
    pre-training data and blew up the state statistics (object y std 0.09 -> 0.75 m). Measured (issue 28: 16
    demonstrations per task, 3000 steps, 20 episodes per task): mean success 0.46 (0.04-0.93 over 5 seeds) with every
    attempt, 0.88 (0.80-0.96 over 10 seeds) with successful ones only. False = keep every attempt (the old rule)."""

    def __post_init__(self) -> None:
        suite = get_suite(self.suite, training=True)  # ValueError naming the training suites
        self.tasks_file = str(self.tasks_file or "")
        if self.tasks is None:  # the suite's default tasks, or every task of the file
            self.tasks = ([s.key for s in suite.load_tasks(None, self.tasks_file)] if self.tasks_file
                          else list(suite.default_tasks))
        self.tasks = list(self.tasks)
        self.noise_std = suite.noise_std if self.noise_std is None else float(self.noise_std)
        self.demos = suite.pretrain_demos if self.demos is None else int(self.demos)
        self.steps = suite.pretrain_steps if self.steps is None else int(self.steps)
        schedule, decay = SUITE_SCHEDULES.get(self.suite, ("constant", 0.0))
        self.lr_schedule = schedule if self.lr_schedule is None else str(self.lr_schedule)
        self.ema_decay = decay if self.ema_decay is None else float(self.ema_decay)
        if self.relative_features:
            relative_state_differences(self.suite)  # ValueError for a suite without them
        if len(self.tasks) < 2 or len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"need at least two distinct tasks, got {self.tasks=}")
        if self.allocation not in ALL_ALLOCATIONS:
            raise ValueError(f"allocation must be one of {ALL_ALLOCATIONS}, got {self.allocation=}")
        if self.allocation == SPLIT_ALLOCATION and not self.split_tasks():
            raise ValueError(f"allocation 'split' needs tasks marked 'split: pretrain' among {self.tasks} "
                             f"(task file {self.tasks_file or 'the suite default'!r})")
        if self.demos < 1 or self.steps < 1 or self.batch_size < 1:
            raise ValueError(f"demos, steps and batch_size must be >= 1, got {self.demos=} {self.steps=} "
                             f"{self.batch_size=}")
        if self.noise_std < 0 or self.lr <= 0:
            raise ValueError(f"need noise_std >= 0 and lr > 0, got {self.noise_std=} {self.lr=}")
        if self.head not in ("mlp", "diffusion"):
            raise ValueError(f"head must be 'mlp' or 'diffusion', got {self.head=}")
        if self.task_encoder not in ("minilm", "hash"):
            raise ValueError(f"task_encoder must be 'minilm' or 'hash', got {self.task_encoder=}")
        if self.lr_schedule not in LR_SCHEDULES or not 0.0 <= self.ema_decay < 1.0:
            raise ValueError(f"need lr_schedule in {LR_SCHEDULES} and 0 <= ema_decay < 1, got {self.lr_schedule=} "
                             f"{self.ema_decay=}")


    def specs(self) -> list[Any]:
        """The task specs of :attr:`tasks` from :attr:`tasks_file`, in that order."""
        return get_suite(self.suite).load_tasks(self.tasks, self.tasks_file or None)

    def split_tasks(self) -> list[str]:
        """The tasks the task file marks ``split: pretrain`` (in :attr:`tasks` order; [] in a file without splits)."""
        return [s.key for s in self.specs() if getattr(s, "split", "") == "pretrain"]

    def counts(self) -> dict[str, int]:
        """Pre-training demonstrations per task of this allocation (:func:`allocation_counts`)."""
        split = self.split_tasks() if self.allocation == SPLIT_ALLOCATION else None
        return allocation_counts(self.tasks, self.allocation, self.demos, pretrain_tasks=split)


SUITE_SCHEDULES = {"widowx": ("cosine", 0.999)}
"""(lr_schedule, ema_decay) of pre-training per suite where it is not ("constant", 0.0). Why on the WidowX: with a
constant learning rate, more data made the policy worse (the last iterate stays as noisy as the first epochs'); with
40 successful demonstrations per task and 3000 steps, cosine decay + EMA 0.999 reached 0.92 mean success against
0.82 constant (4 seeds, paired); with 16 per task the two were within noise (0.86 vs 0.88, 10 seeds)."""


def relative_state_differences(suite: str) -> tuple[tuple[int, int, int], ...]:
    """The state differences :attr:`PretrainConfig.relative_features` adds (:class:`~amf_ros.policies.trunks.StateTrunk`
    ``differences``): on the WidowX, object - gripper and receptacle - object, located by the suite's state names
    (the scripted expert decides on exactly these: close within 8 mm of the object, carry by receptacle - object).
    ValueError for a suite that defines none."""
    if suite != "widowx":
        raise ValueError(f"relative features are defined for the 'widowx' suite only, got {suite=}")
    from amf_ros.envs.widowx_sim.suite import STATE_NAMES

    gripper, obj, receptacle = (STATE_NAMES.index(n) for n in ("x", "object_x", "receptacle_x"))
    return ((gripper, obj, 3), (obj, receptacle, 3))


def allocation_counts(tasks: Sequence[str], allocation: str, total: int,
                      pretrain_tasks: Sequence[str] | None = None) -> dict[str, int]:
    """Pre-training demonstrations per task.

    "mismatched": ``total`` split evenly over the first ceil(|tasks|/2) tasks, 0 for the rest (the paper's
    [8, 8, 0, 0]); "uniform": ``total`` split evenly over all tasks; "split": ``total`` split evenly over
    ``pretrain_tasks`` (the family's ``split: pretrain`` tasks, :meth:`PretrainConfig.split_tasks`). Remainders go to
    the earliest tasks.
    """
    tasks = list(tasks)
    if allocation not in ALL_ALLOCATIONS:
        raise ValueError(f"allocation must be one of {ALL_ALLOCATIONS}, got {allocation=}")
    if total < 0:
        raise ValueError(f"total must be >= 0, got {total=}")
    if allocation == SPLIT_ALLOCATION:
        chosen = [t for t in tasks if t in set(pretrain_tasks or ())]
        if not chosen:
            raise ValueError(f"allocation 'split' needs pretrain_tasks among {tasks}, got {pretrain_tasks=}")
    else:
        chosen = tasks[: (len(tasks) + 1) // 2] if allocation == "mismatched" else tasks
    base, extra = divmod(total, len(chosen))
    counts = {t: 0 for t in tasks}
    for i, t in enumerate(chosen):
        counts[t] = base + (1 if i < extra else 0)
    return counts


@dataclass
class PretrainResult:
    """A pre-trained policy and how it came about."""

    policy: Any
    """The TaskConditionedPolicy, with its prior frozen (the pre-trained head) when ``freeze_prior`` was set."""
    counts: dict[str, int]
    """Pre-training demonstrations per task."""
    demos: list
    """The scripted demonstrations (amf_ros.envs.metaworld_rollouts.Demo)."""
    loss_curve: list[float]
    """Loss at every pre-training step."""
    collect_s: float
    """Seconds spent collecting demonstrations."""
    train_s: float
    """Seconds spent training."""


def make_policy(specs: Sequence[Any], head: str = "diffusion", seed: int = 0, lr: float = 1e-3,
                batch_size: int = 256, action_horizon: int = 1, task_encoder: str = "minilm",
                suite: str = "metaworld", relative_features: bool = False) -> Any:
    """A fresh state-based TaskConditionedPolicy for a suite's tasks ``specs`` (Metaworld: 39-D states, native
    4-D actions; WidowX: 14-D states, 7-D EefDeltaAction).

    The action horizon is 1 by default (the paper's state-based policy predicts one action; on the WidowX a
    4-step chunk, acting on its first action, reached 0.42 against 0.91 in issue 28's ablation).
    ``relative_features``: the suite's :func:`relative_state_differences` in the trunk.
    """
    from amf_ros.policies.agent import TaskConditionedPolicy
    from amf_ros.policies.config import PolicyConfig

    info = get_suite(suite)
    cfg = PolicyConfig(head=head, trunk="state", task_encoder=task_encoder, action_horizon=action_horizon, lr=lr,
                       batch_size=batch_size, seed=seed,
                       state_differences=relative_state_differences(suite) if relative_features else ())
    return TaskConditionedPolicy(cfg, action_dim=info.action_dim, state_dim=info.state_dim,
                                 tasks={s.key: s.instruction for s in specs})


def act_fn(policy: Any) -> Any:
    """Batched acting function for :class:`~amf_ros.envs.metaworld_rollouts.EvalPool`: first action of each chunk."""
    def act(obs: np.ndarray, tasks: Sequence[str]) -> np.ndarray:
        return policy.act_batch({"state": np.asarray(obs, dtype=np.float32)}, list(tasks))[:, 0, :]

    return act


STATE_MIN_STD = 0.05
"""Floor of the per-dimension state std (metres / quaternion units / radians): a dimension constant in the fitting
data must not turn a 1 cm difference in another task into a saturated input."""


def set_normalizers(policy: Any, demo_states: np.ndarray, explore_states: np.ndarray,
                    suite: str = "metaworld") -> None:
    """Fix the policy's normalization before pre-training (the frozen statistics every later round shares).

    Actions: the suite's fixed scale from the action bounds, never fitted, because a std fitted on half of the
    tasks can be ~0 in a dimension (e.g. the grab effort of the Metaworld faucet expert is constant), which would
    blow up the loss of the other tasks. Metaworld: the identity (native actions are already in [-1, 1]); WidowX:
    translation / 0.05 m, rotation / 0.25 rad, gripper [0, 1] -> [-1, 1]. States: mean/std of the demonstration
    states plus random-exploration states of every task
    (:func:`~amf_ros.envs.metaworld_rollouts.exploration_states`), std floored at STATE_MIN_STD; with relative
    features, the same statistics of the differences.
    """
    from amf_ros.policies.normalizer import Normalizer

    info = get_suite(suite)
    x = np.concatenate([demo_states, explore_states]).astype(np.float32)
    if hasattr(policy.trunk, "raw_features"):
        x = policy.trunk.raw_features(x).numpy()
    x = x.astype(np.float64)
    policy.action_normalizer = Normalizer(np.asarray(info.action_mean), np.asarray(info.action_std))
    policy.trunk.set_normalizer(Normalizer(x.mean(0), x.std(0), min_std=STATE_MIN_STD))
    policy.cache.clear()


ATTEMPTS_PER_DEMO = 3
"""Scenes tried per kept demonstration when only successful ones are kept (:attr:`PretrainConfig.successful_only`)."""


def pretraining_demos(config: PretrainConfig, envs: dict[str, Any] | None = None) -> list[Any]:
    """The allocation's scripted pre-training demonstrations (deterministic in the config: fine-tuning with replay
    re-collects exactly the demonstrations the checkpoint was pre-trained on). ``envs``: task -> environment.

    With ``config.successful_only`` a failed attempt is dropped and the next scene of the same random stream tried,
    so where every attempt succeeds the demonstrations are exactly those of
    :func:`~amf_ros.envs.metaworld_rollouts.collect_demos` (the Metaworld defaults: all succeed). A task that runs
    out of attempts keeps the successful ones it has, with a warning.
    """
    from amf_ros.envs.metaworld_rollouts import EVAL_SEED_OFFSET, collect_demo, collect_demos

    counts = {k: v for k, v in config.counts().items() if v}
    if envs is None:
        suite = get_suite(config.suite)
        envs = {s.key: suite.make_env(s) for s in config.specs() if counts.get(s.key)}
    if not config.successful_only:
        return collect_demos(envs, counts, seed=config.seed, noise_std=config.noise_std)
    missing = sorted(set(counts) - set(envs))
    if missing:
        raise ValueError(f"no environment for task(s) {missing}; have {sorted(envs)}")
    rng = np.random.default_rng(config.seed)  # the stream collect_demos draws scenes and noise from
    demos: list[Any] = []
    for task, n in counts.items():
        kept = attempts = 0
        while kept < n and attempts < ATTEMPTS_PER_DEMO * n:
            demo = collect_demo(envs[task], int(rng.integers(0, EVAL_SEED_OFFSET)), config.noise_std, rng)
            attempts += 1
            if demo.success:
                demos.append(demo)
                kept += 1
        if attempts > kept:
            log.log(logging.WARNING if kept < n else logging.INFO,
                    "%s: kept %d successful scripted demonstrations of %d attempts (asked for %d)",
                    task, kept, attempts, n)
    return demos


def write_replay_store(config: PretrainConfig, out: str | Path) -> Path:
    """Write the allocation's pre-training demonstrations (:func:`pretraining_demos`, the very ones a checkpoint of
    ``config`` was trained on) as an episode store at ``out``, for fine-tuning with replay (data/replay.py).

    Each demonstration is one episode (id ``pretrain_NNNN``, in pre-training order) whose actions are the wire
    actions of its noise-free expert labels, which pre-training learned from (Metaworld's clipped to the [-1, 1] its
    arm executes, as every recorded action is); the store appears at ``out`` in one rename, so an interrupted run
    leaves none. Returns ``out``.
    """
    import os
    import shutil
    import tempfile

    from amf_ros.atomic import default_mode, replace_dir
    from amf_ros.data.store import EpisodeStore
    from amf_ros.policies.action_spaces import NATIVE_ACTION_DIM, native_to_eef7

    out = Path(out)
    suite = get_suite(config.suite)
    instructions = {s.key: s.instruction for s in config.specs()}
    demos = pretraining_demos(config)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        os.chmod(tmp, default_mode(directory=True))  # mkdtemp's 0700 -> the umask's, as a checkpoint directory
        store = EpisodeStore(tmp)
        for i, demo in enumerate(demos):
            labels = np.asarray(demo.expert_actions, np.float64)
            wire = (np.stack([native_to_eef7(a) for a in labels]) if suite.action_dim == NATIVE_ACTION_DIM
                    else labels)
            steps = [{"observation": {"state": o}, "action": a} for o, a in zip(demo.obs, wire, strict=True)]
            store.write_episode(demo.task, instructions[demo.task], steps,
                                success=bool(demo.success), robot=f"{config.suite} (scripted pre-training)",
                                episode_id=f"pretrain_{i:04d}",
                                extra={"source": "amf pretrain", "scene_seed": int(demo.seed),
                                       "action": "noise-free expert label"})
        replace_dir(tmp, out)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def pretrain(config: PretrainConfig, specs: Sequence[Any] | None = None, freeze_prior: bool = True
             ) -> PretrainResult:
    """Collect the allocation's scripted demonstrations and pre-train a fresh policy on them (deterministic).

    With ``freeze_prior`` the pre-trained head is also kept as the frozen prior of the adaptive prior, so that
    fine-tuning from the checkpoint (bench, ROS policy_server) can fit alpha(c).
    """
    from amf_ros.envs.metaworld_rollouts import demos_to_transitions, exploration_states

    suite = get_suite(config.suite)
    specs = list(specs) if specs is not None else config.specs()
    counts = config.counts()
    t0 = time.perf_counter()
    envs = {s.key: suite.make_env(s) for s in specs if counts.get(s.key)}
    demos = pretraining_demos(config, envs)
    collect_s = time.perf_counter() - t0
    failed = sum(not d.success for d in demos)
    if failed:  # only with successful_only=False
        log.warning("%d of %d scripted pre-training demonstrations did not reach success", failed, len(demos))
    policy = make_policy(specs, head=config.head, seed=config.seed, lr=config.lr, batch_size=config.batch_size,
                         task_encoder=config.task_encoder, suite=config.suite,
                         relative_features=config.relative_features)
    all_envs = {s.key: envs.get(s.key) or suite.make_env(s) for s in specs}
    set_normalizers(policy, demos_to_transitions(demos)["state"], exploration_states(all_envs, config.seed),
                    suite=config.suite)
    t0 = time.perf_counter()
    result = policy.fit(demos_to_transitions(demos), config.steps, lr_schedule=config.lr_schedule,
                        ema_decay=config.ema_decay)
    if freeze_prior:
        policy.freeze_prior()
    return PretrainResult(policy, counts, demos, list(result.losses), collect_s, time.perf_counter() - t0)


def save_pretrained(policy: Any, out: str | Path, info: dict[str, Any] | None = None) -> Path:
    """Write the checkpoint directory ``out`` atomically, with ``pretrain.json`` (``info``) inside it.

    The policy is saved into a temporary sibling directory, the JSON added, and the directory renamed into place;
    an existing ``out`` is replaced only once the new one is complete.
    """
    import os
    import shutil
    import tempfile

    from amf_ros.atomic import atomic_write_json, fsync_dir

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", suffix=".tmp", dir=out.parent))
    try:
        policy.save(tmp / "ckpt")
        if info is not None:
            atomic_write_json(tmp / "ckpt" / "pretrain.json", info)
        old = None
        if out.exists():
            old = out.parent / f".{out.name}.old"
            shutil.rmtree(old, ignore_errors=True)
            os.replace(out, old)
        os.replace(tmp / "ckpt", out)
        fsync_dir(out.parent)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def main(argv: Sequence[str]) -> int:
    """`amf pretrain` entry point."""
    from amf_ros.config_file import load_config

    parser = argparse.ArgumentParser(prog="amf pretrain", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=None,
                        help="checkpoint directory to write (default: checkpoints/<suite>_pretrained)")
    parser.add_argument("--config", default=None, help="YAML with PretrainConfig fields")
    parser.add_argument("--suite", choices=TRAINING_SUITES, default=None, help="default: metaworld")
    parser.add_argument("--allocation", choices=ALL_ALLOCATIONS, default=None, help="default: mismatched")
    parser.add_argument("--seed", type=int, default=None, help="default: 0")
    parser.add_argument("--steps", type=int, default=None,
                        help="gradient steps (default: the suite's, Metaworld 1500, WidowX 3000)")
    parser.add_argument("--head", choices=("diffusion", "mlp"), default=None, help="default: diffusion")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch threads (default 1: small networks gain nothing from more on a busy machine)")
    parser.add_argument("--eval-episodes", type=int, default=0,
                        help="also measure success per task over this many episodes (default: 0 = skip)")
    args = parser.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    cfg = load_config(PretrainConfig, args.config, allocation=args.allocation, seed=args.seed, steps=args.steps,
                      head=args.head, suite=args.suite)
    if args.out is None:
        args.out = f"checkpoints/{cfg.suite}_pretrained"
    with limited_threads(max(1, args.threads)):  # callers (e.g. `amf run`) call main() in their own process
        return _run(cfg, args, argv)


def _run(cfg: PretrainConfig, args: argparse.Namespace, argv: Sequence[str]) -> int:
    """Pre-train, optionally evaluate, and write the checkpoint with its pretrain.json."""
    t0 = time.perf_counter()
    res = pretrain(cfg)
    info: dict[str, Any] = {
        "config": dataclasses.asdict(cfg), "pretrain_counts": res.counts,
        "frames": int(sum(len(d) for d in res.demos)),
        "loss_first": res.loss_curve[0] if res.loss_curve else None,
        "loss_last": res.loss_curve[-1] if res.loss_curve else None,
        "collect_s": res.collect_s, "train_s": res.train_s,
        "command": "amf pretrain " + " ".join(argv),
    }
    if args.eval_episodes > 0:
        from amf_ros.envs.metaworld_rollouts import EvalPool

        pool = EvalPool(cfg.specs(), slots=min(args.eval_episodes, 5), suite=cfg.suite)
        info["success"] = pool.evaluate(act_fn(res.policy), args.eval_episodes, seed=cfg.seed)
    info["wall_time_s"] = time.perf_counter() - t0
    out = save_pretrained(res.policy, args.out, info)
    print(f"pre-trained ({cfg.suite}, {cfg.allocation}, demonstrations {res.counts}) in {info['wall_time_s']:.1f} s "
          f"-> {out}")
    if "success" in info:
        print("success per task: " + ", ".join(f"{k} {v:.2f}" for k, v in info["success"].items()))
    return 0
