"""What policy_server does, without ROS: act for a task with temporal ensembling, fine-tune on the store in a
worker, write checkpoints atomically, and swap the acting policy between episodes.

Why here: the node (amf_ros/ros/nodes/policy_server.py) stays a thin adapter (messages <-> these calls), and this
logic is testable without DDS.

Semantics of run_policy during fine-tuning (documented in docs/ros-system.md and tested): fine-tuning trains a
*copy* of the acting policy in a worker thread; a run_policy goal that starts or is running meanwhile acts with
the policy it started with (the pre-fine-tune checkpoint) at the full control rate. When fine-tuning finishes, the
new policy becomes the acting one for every run_policy goal that starts afterwards; an episode in progress is never
switched mid-way.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from amf_ros.data import transitions as datasets

log = logging.getLogger(__name__)

_ROUND_DIR = re.compile(r"^round_(\d{4,})$")


def round_checkpoints(checkpoint_dir: str | Path) -> list[Path]:
    """The ``round_NNNN`` checkpoint directories in ``checkpoint_dir``, oldest round first ([] if none)."""
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return []
    rounds = sorted((int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _ROUND_DIR.match(p.name)))
    return [p for _, p in rounds]


def newest_checkpoint(checkpoint_dir: str | Path) -> Path | None:
    """The newest ``round_NNNN`` checkpoint directory in ``checkpoint_dir`` (None if there is none)."""
    rounds = round_checkpoints(checkpoint_dir)
    return rounds[-1] if rounds else None


def resolve_checkpoint(checkpoint: str, checkpoint_dir: str) -> Path:
    """The checkpoint to start from: ``checkpoint`` if given, else the newest in ``checkpoint_dir``."""
    if checkpoint:
        path = Path(checkpoint)
        if not path.is_dir():
            raise ValueError(f"checkpoint directory does not exist: {checkpoint!r}")
        return path
    path = newest_checkpoint(checkpoint_dir)
    if path is None:
        raise ValueError(f"no checkpoint given and no round_NNNN checkpoint in {checkpoint_dir!r}; "
                         "run `amf pretrain` or set the 'checkpoint' parameter")
    return path


def round_of(path: str | Path) -> int:
    """Fine-tuning round of a checkpoint directory (``round_0007`` -> 7; anything else, e.g. pretrained -> 0)."""
    m = _ROUND_DIR.match(Path(path).name)
    return int(m.group(1)) if m else 0


def load_policy(path: str | Path, task_encoder: Any = None) -> Any:
    """Load a TaskConditionedPolicy checkpoint (verified by the policy library); ``task_encoder`` shares an
    already loaded language model instead of loading another copy."""
    from amf_ros.policies.agent import TaskConditionedPolicy

    return TaskConditionedPolicy.load(path, task_encoder=task_encoder)


def set_torch_threads(n: int) -> None:
    """Limit torch's intra-op threads of this process (0 = leave torch's default)."""
    if n > 0:
        import torch

        torch.set_num_threads(int(n))


def pretrain_counts(checkpoint: str | Path) -> dict[str, int] | None:
    """``pretrain_counts`` of ``<checkpoint>/pretrain.json`` (written by `amf pretrain`), None if absent."""
    import json

    path = Path(checkpoint) / "pretrain.json"
    if not path.is_file():
        return None
    counts = json.loads(path.read_text()).get("pretrain_counts")
    return {str(k): int(v) for k, v in counts.items()} if isinstance(counts, dict) else None


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


class Cancelled(Exception):
    """Raised inside a fine-tuning job when its goal is cancelled."""


class ActionAdapter:
    """Policy chunk (H, A_policy) -> temporal ensembling -> one wire action (7,) (EefDeltaAction vector).

    Args:
        action_space: "metaworld" (policy acts in the native 4-D space, converted with native_to_eef7) or "eef7".
        horizon, exp_weight: TemporalEnsembler settings (Octo/SimplerEnv: 4, 0.0); the horizon is capped at the
            policy's chunk length.
    """

    def __init__(self, action_space: str, horizon: int, exp_weight: float) -> None:
        from amf_ros.policies.postprocess import TemporalEnsembler

        if action_space not in ("metaworld", "eef7"):
            raise ValueError(f"action_space must be 'metaworld' or 'eef7', got {action_space=}")
        self.action_space = action_space
        self._make = lambda h: TemporalEnsembler(horizon=h, exp_weight=exp_weight)
        self.horizon = int(horizon)
        self.ensembler: Any = None

    def reset(self) -> None:
        """Start of an episode: forget previous chunks."""
        self.ensembler = None

    def __call__(self, chunk: np.ndarray) -> np.ndarray:
        chunk = np.asarray(chunk, dtype=np.float64)
        if chunk.ndim != 2 or not np.all(np.isfinite(chunk)):
            raise ValueError(f"policy returned a bad action chunk: shape {chunk.shape}, "
                             f"finite={bool(np.isfinite(chunk).all())}")
        if self.ensembler is None:
            self.ensembler = self._make(max(1, min(self.horizon, chunk.shape[0])))
        action = self.ensembler.add(chunk)
        if self.action_space == "metaworld":
            from amf_ros.envs.metaworld_suite import native_to_eef7

            return native_to_eef7(action)
        if action.shape != (7,):
            raise ValueError(f"action_space eef7 needs 7-D policy actions, got {action.shape}")
        return action


class PolicyRuntime:
    """The acting policy of policy_server and its fine-tuning.

    Args:
        policy: the loaded TaskConditionedPolicy.
        checkpoint: directory it was loaded from.
        checkpoint_dir: where fine-tuned checkpoints go (``round_NNNN``).
        dataset_dir: the episode store fine-tuning reads.
        steps, batch_size, lr, alpha_steps, seed: fine-tuning defaults.
        action_space: which recorded action the policy is trained on (see datasets.ACTION_SPACES).
        loader: ``path -> policy`` for the fine-tuned copy (default :func:`load_policy`; Octo: its own loader).
        transitions_fn: ``(tasks, cancelled) -> transitions or None``, may raise :class:`Cancelled` (default: the
            store's states and actions; Octo: cached trunk embeddings, see octo_backend.EmbeddingCache).
        after_save: called with each new checkpoint directory before it is announced (Octo: source marker).
    """

    def __init__(self, policy: Any, checkpoint: str | Path, checkpoint_dir: str | Path, dataset_dir: str | Path,
                 steps: int = 300, batch_size: int = 256, lr: float = 1e-3, alpha_steps: int = 100,
                 seed: int = 0, action_space: str = "metaworld", loader: Callable[[Path], Any] | None = None,
                 transitions_fn: Callable[[list[str], Callable[[], bool]], datasets.Transitions | None]
                 | None = None,
                 after_save: Callable[[Path], None] | None = None) -> None:
        self._policy = policy
        self.loader = loader
        self.transitions_fn = transitions_fn
        self.after_save = after_save
        self.action_space = action_space
        self.checkpoint = Path(checkpoint)
        self.round = round_of(checkpoint)
        self.checkpoint_dir = Path(checkpoint_dir)
        self.dataset_dir = Path(dataset_dir)
        self.steps, self.batch_size, self.lr = int(steps), int(batch_size), float(lr)
        self.alpha_steps, self.seed = int(alpha_steps), int(seed)
        self._lock = threading.Lock()
        self._busy = threading.Lock()  # held while a fine-tune runs

    @property
    def policy(self) -> Any:
        """The acting policy (a run_policy goal takes this reference once at its start)."""
        with self._lock:
            return self._policy

    @property
    def fine_tuning(self) -> bool:
        """True while a fine-tuning job runs."""
        return self._busy.locked()

    def fine_tune(self, steps: int = 0, tasks: Sequence[str] = (),
                  feedback: Callable[[int, int, float], None] | None = None,
                  cancelled: Callable[[], bool] = lambda: False) -> FineTuneResult:
        """Fine-tune a copy of the acting policy on the store, save it, make it the acting policy.

        Args:
            steps: gradient steps (0 = default).
            tasks: restrict the data to these task keys (empty = all episodes).
            feedback: called with (step, total_steps, loss) as training progresses.
            cancelled: polled after every gradient step; True -> raise :class:`Cancelled` (nothing is saved).
        Raises:
            ValueError: no data, unknown task, or a fine-tune already running.
        """
        if not self._busy.acquire(blocking=False):
            raise ValueError("a fine-tune is already running; wait for its result or cancel it")
        try:
            return self._fine_tune(steps or self.steps, list(tasks), feedback, cancelled)
        finally:
            self._busy.release()

    def _fine_tune(self, steps: int, tasks: list[str], feedback: Callable[[int, int, float], None] | None,
                   cancelled: Callable[[], bool]) -> FineTuneResult:
        t0 = time.monotonic()
        if self.transitions_fn is not None:
            transitions = self.transitions_fn(tasks, cancelled)
        else:
            transitions = datasets.load_transitions(self.dataset_dir, tasks=tasks, action_space=self.action_space)
        if transitions is None:
            what = f" for tasks {tasks}" if tasks else ""
            raise ValueError(f"no episodes{what} in the dataset {str(self.dataset_dir)!r}: record a "
                             "demonstration first (nothing to fine-tune on)")
        acting = self.policy
        known = set(getattr(acting, "tasks", []) or [])
        unknown = sorted({str(t) for t in transitions["task"]} - known) if known else []
        if unknown:
            raise ValueError(f"the dataset has episodes of task(s) {unknown} the policy does not know "
                             f"({sorted(known)})")
        # A fresh copy of the acting checkpoint (sharing the frozen task encoder) is trained; the acting policy is
        # untouched until the new checkpoint is saved.
        student = (self.loader(self.checkpoint) if self.loader is not None
                   else load_policy(self.checkpoint, task_encoder=getattr(acting, "encoder", None)))
        every = max(1, min(50, steps // 20))  # feedback about 20 times, at least every 50 steps

        def on_step(step: int, loss: float) -> bool:
            if feedback is not None and (step % every == 0 or step == steps):
                feedback(step, steps, float(loss))
            return not cancelled()

        result = student.fit(transitions, steps, batch_size=self.batch_size, lr=self.lr,
                             seed=self.seed + 1000 * (self.round + 1), callback=on_step)
        if getattr(result, "cancelled", False) or cancelled():
            raise Cancelled(f"fine-tune cancelled after {result.steps} of {steps} steps (nothing saved)")
        if self.alpha_steps > 0 and getattr(student, "prior", None) is not None:
            student.fit_alpha(transitions, steps=self.alpha_steps, seed=self.seed + self.round)
        new_round = max(self.round, round_of(newest_checkpoint(self.checkpoint_dir) or "")) + 1
        path = student.save(self.checkpoint_dir / f"round_{new_round:04d}")
        if self.after_save is not None:
            self.after_save(Path(path))
        alphas = datasets.alphas(student)
        with self._lock:
            self._policy, self.checkpoint, self.round = student, Path(path), new_round
        return FineTuneResult(checkpoint=Path(path), round=new_round, tasks=list(alphas),
                              alphas=list(alphas.values()), final_loss=float(result.final_loss),
                              losses=list(result.losses), wall_time_s=time.monotonic() - t0)
