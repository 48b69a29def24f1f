"""policy_server's fine-tuning in a process of its own (spawned once, reused for every fine_tune goal).

Why a process: a fine-tune is seconds to minutes of torch work in many small Python-level steps; in the node's
process it would share the GIL with the control thread, whose 10 Hz deadline it then stretched (up to seconds
with the diffusion head: docs/ros-system.md). In its own process it shares nothing but the CPU. ``spawn``, not
``fork``: a forked child would inherit DDS and torch threads in an undefined state.

The hand-off stays on disk: the parent writes the training transitions to an ``.npz`` file, the child trains a
copy of the acting checkpoint and saves the new ``round_NNNN`` directory atomically (policies/checkpoint.py), and
the parent loads it. With ensemble members (``FineTuneJob.members``, policy_server's ``ensemble_members``), the child
then trains each extra member on the same data from its own previous weights with its own seed, and saves the round
with its members in one atomic rename (policies/checkpoint_dirs.py, ``save_with_members``). Messages back (a
``multiprocessing`` queue): ``("feedback", step, total, loss)`` while training (the members' steps continue the
count), then exactly one of ``("done", result dict)``, ``("cancelled", text)`` or ``("error", text)``.
Cancellation: an Event the child checks after every gradient step (nothing is saved when it is set).

The training rule (amf_ros/data/transitions.py): the child trains on the rows a person acted. Transitions built by
``load_transitions`` hold only those already; rows marked as the policy's (``actor`` column, from a run_policy goal
during which a person took over) that another builder passes along are dropped here, so no builder can train the
policy on its own actions by mistake. Replayed pre-training rows (``replayed`` column, policy_server's
``replay_fraction``) get their fixed share of every minibatch (data/replay.py).

Every wait of the parent is bounded: :meth:`FineTuneWorker.run` polls the queue with a short timeout, checks
cancellation, the child's liveness, shutdown and the job's deadline; a dead child ends the job with an error and is
started afresh for the next one.
"""

from __future__ import annotations

import logging
import math
import multiprocessing as mp
import queue
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from amf_ros.policies.fine_tuning import FineTuneCancelledError
from amf_ros.policies.loading import LOADERS, learn_tasks, load_sharing_encoder

if TYPE_CHECKING:
    from amf_ros.policies.base import FitResult, Policy

log = logging.getLogger(__name__)

POLL_S = 0.1
"""How often the waiting parent looks at the queue, cancellation and the child (bounds cancel/shutdown latency)."""

MEMBER_SEED_OFFSET = 7919
"""Ensemble member k is fine-tuned with the job's seed + k * this (same data, different minibatches and noise;
``amf bench metaworld``'s second head uses it too)."""


@dataclass(frozen=True)
class FineTuneJob:
    """One fine-tune, everything as plain data (it crosses a process boundary).

    Attributes:
        checkpoint: checkpoint directory whose copy is trained.
        transitions: ``.npz`` file of training transitions (policies/base.py layout).
        out_dir: directory the new checkpoint is saved to (``round_NNNN``).
        steps, batch_size, lr, seed: training settings; alpha_steps: adaptive-prior fit steps (0 = none).
        loader: ``"module:function"`` loading ``checkpoint`` (path -> policy; policies.loading.LOADERS).
        torch_threads: torch intra-op threads of the worker (0 = torch's default).
        members: the checkpoint each extra ensemble member k = 1, 2, ... continues from (``members[k-1]``); each
            is fine-tuned after the acting copy on the same transitions with seed ``seed + k * MEMBER_SEED_OFFSET``
            (no adaptive-prior fit: the disagreement rules read the heads) and saved to
            ``<out_dir>/members/member_k``. Empty = no ensemble (one checkpoint, as before).
        new_tasks: ``{task: instruction}`` of tasks in the transitions that ``checkpoint`` does not know; they are
            added to the copy (and the members) before training (policies.loading.learn_tasks), so the new round
            knows them.
        replay_fraction: share of every minibatch drawn from the transitions' replayed pre-training rows (their
            ``replayed`` column, data/replay.py); 0 = uniform draws. The adaptive prior is fitted on the recorded
            rows only.
    """

    checkpoint: str
    transitions: str
    out_dir: str
    steps: int
    batch_size: int
    lr: float
    alpha_steps: int
    seed: int
    loader: str = LOADERS["native"]
    torch_threads: int = 1
    members: tuple[str, ...] = ()
    new_tasks: dict[str, str] = field(default_factory=dict)
    replay_fraction: float = 0.0


def _load(job: FineTuneJob, checkpoint: str, cache: dict[str, Any]) -> Policy:
    """Load ``checkpoint`` with the job's loader, sharing the language model between loads and jobs; the job's new
    tasks are added to it."""
    policy = load_sharing_encoder(job.loader, checkpoint, cache.get("encoder"), "fine-tune checkpoint loader")
    learn_tasks(policy, job.new_tasks)
    cache["encoder"] = policy.encoder
    return policy


def _train(job: FineTuneJob, events: Any, cancel: Any, cache: dict[str, Any]) -> dict[str, Any]:
    """Run one job inside the worker; returns the result dict (raises FineTuneCancelledError when cancelled)."""
    import numpy as np

    student = _load(job, job.checkpoint, cache)
    from amf_ros.data.replay import REPLAYED, recorded_rows, row_weights
    from amf_ros.data.schema import ACTOR, ACTOR_HUMAN
    from amf_ros.data.transitions import human_rows

    with np.load(job.transitions, allow_pickle=False) as npz:
        transitions = {k: npz[k] for k in npz.files}
    if ACTOR in transitions and not np.any(transitions[ACTOR] == ACTOR_HUMAN):
        raise ValueError("no step a person acted in the training data (only the policy's own steps): record a "
                         "demonstration, or take over during a run_policy goal, first")
    transitions = human_rows(transitions)
    recorded = recorded_rows(transitions)  # what alpha(c) is fitted on: the replayed rows left out
    replayed = transitions.pop(REPLAYED, None)
    weights = row_weights(replayed, job.replay_fraction) if replayed is not None else None
    weighted = {"row_weights": weights} if weights is not None else {}  # backends without replay need no keyword
    every = max(1, min(50, job.steps // 20))  # feedback about 20 times per model, at least every 50 steps
    total = job.steps * (1 + len(job.members))  # feedback counts the members' steps too

    def fit(policy: Policy, seed: int, offset: int, what: str) -> FitResult:
        """Fit one model (its steps are reported as ``offset + step``), stopping at a non-finite loss or a cancel."""
        diverged: list[tuple[int, float]] = []

        def on_step(step: int, loss: float) -> bool:
            if not math.isfinite(loss):  # stop at once: every later step would only spread the NaN/inf
                diverged.append((int(step), float(loss)))
                return False
            if step % every == 0 or step == job.steps:
                events.put(("feedback", int(offset + step), int(total), float(loss)))
            return not cancel.is_set()

        result = policy.fit(transitions, job.steps, batch_size=job.batch_size, lr=job.lr, seed=seed,
                            callback=on_step, **weighted)
        if diverged:
            step, loss = diverged[0]
            raise FloatingPointError(f"the fine-tune loss{what} became {loss} at step {step} of {job.steps}; nothing "
                                     "saved, the acting checkpoint stays (lower fine_tune_lr, or look for non-finite "
                                     "values in the recorded episodes)")
        if result.cancelled or cancel.is_set():
            raise FineTuneCancelledError(f"fine-tune cancelled after {offset + result.steps} of {total} steps (nothing "
                                    "saved)")
        return result

    t0 = time.monotonic()
    result = fit(student, job.seed, 0, "")
    if job.alpha_steps > 0 and student.prior is not None:
        student.fit_alpha(recorded, steps=job.alpha_steps, seed=job.seed)
    if cancel.is_set():
        raise FineTuneCancelledError("fine-tune cancelled before saving (nothing saved)")
    alphas = {str(k): float(v) for k, v in student.alphas.items()}
    bad = {k: v for k, v in alphas.items() if not math.isfinite(v)}
    if bad:
        raise FloatingPointError(f"the adaptive-prior fit gave non-finite alpha(c) {bad}; nothing saved, the acting "
                                 "checkpoint stays")
    members, member_losses = [], []
    for k, start in enumerate(job.members, start=1):
        member = _load(job, start, cache)
        fitted = fit(member, job.seed + k * MEMBER_SEED_OFFSET, k * job.steps, f" of ensemble member {k}")
        members.append(member)
        member_losses.append(float(fitted.final_loss))
    if cancel.is_set():
        raise FineTuneCancelledError("fine-tune cancelled before saving (nothing saved)")
    if members:
        from amf_ros.policies.checkpoint_dirs import member_checkpoints, save_with_members

        path = save_with_members(job.out_dir, student.save, [m.save for m in members])
        member_paths = [str(p) for p in member_checkpoints(path)]
    else:
        path, member_paths = student.save(job.out_dir), []
    return {"checkpoint": str(path), "final_loss": float(result.final_loss), "losses": list(map(float, result.losses)),
            "alphas": alphas, "train_time_s": time.monotonic() - t0, "members": member_paths,
            "member_final_losses": member_losses}


def _worker_main(jobs: Any, events: Any, cancel: Any, torch_threads: int, niceness: int = 0) -> None:
    """The child: take jobs until a None arrives (or the parent dies: the queue read times out and we check)."""
    import os
    import signal

    # A terminal's Ctrl-C goes to the whole process group, this child included: the parent node stops it (close()),
    # so it ignores SIGINT instead of printing a KeyboardInterrupt traceback from inside the queue read.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if niceness > 0:  # background training yields the CPU to the control loop and the other nodes
        os.nice(int(niceness))
    from amf_ros.threads import limit_threads

    limit_threads(torch_threads)  # 0 = torch's default
    parent = os.getppid()
    cache: dict[str, Any] = {}
    while True:
        try:
            job = jobs.get(timeout=1.0)
        except queue.Empty:
            if os.getppid() != parent:  # orphaned (the node was SIGKILLed): do not live on
                return
            continue
        if job is None:
            return
        try:
            events.put(("done", _train(FineTuneJob(**job), events, cancel, cache)))
        except FineTuneCancelledError as exc:
            events.put(("cancelled", str(exc)))
        except Exception as exc:
            events.put(("error", f"{type(exc).__name__}: {exc}"))


class FineTuneWorker:
    """The parent side: starts the worker process on first use and runs one job at a time.

    Args:
        torch_threads: torch intra-op threads of the worker process.
        start_timeout_s: how long the first job may wait for the worker to import torch and the policy code.
        niceness: added to the worker process's niceness (0 = unchanged), so training yields the CPU.
    """

    def __init__(self, torch_threads: int = 1, start_timeout_s: float = 120.0, niceness: int = 0) -> None:
        if not 0 <= int(niceness) <= 19:
            raise ValueError(f"niceness must be in [0, 19], got {niceness}")
        self.torch_threads, self.niceness = int(torch_threads), int(niceness)
        self.start_timeout_s = float(start_timeout_s)
        self._ctx = mp.get_context("spawn")
        self._proc: Any = None
        self._jobs: Any = None
        self._events: Any = None
        self._cancel = self._ctx.Event()
        self._closed = False

    def _ensure_started(self) -> None:
        if self._proc is not None and self._proc.is_alive():
            return
        self._jobs, self._events = self._ctx.Queue(), self._ctx.Queue()
        self._proc = self._ctx.Process(target=_worker_main, name="amf_fine_tune",
                                       args=(self._jobs, self._events, self._cancel, self.torch_threads,
                                             self.niceness),
                                       daemon=True)
        self._proc.start()
        log.info("fine-tune worker process started (pid %d)", self._proc.pid)

    @property
    def pid(self) -> int | None:
        """Process id of the worker (None before the first job)."""
        return self._proc.pid if self._proc is not None and self._proc.is_alive() else None

    def run(self, job: FineTuneJob, feedback: Callable[[int, int, float], None] | None = None,
            cancelled: Callable[[], bool] = lambda: False, timeout_s: float = 3600.0) -> dict[str, Any]:
        """Run ``job`` in the worker and wait for it (bounded); returns the result dict.

        Raises:
            FineTuneCancelledError: ``cancelled()`` became true, or the worker was closed (shutdown).
            RuntimeError: the worker failed, died, or the job overran ``timeout_s``.
        """
        if self._closed:
            raise FineTuneCancelledError("policy_server is shutting down")
        self._ensure_started()
        proc, events = self._proc, self._events  # close() may clear self._proc from another thread
        self._cancel.clear()
        self._jobs.put(asdict(job))
        deadline = time.monotonic() + timeout_s + self.start_timeout_s
        while True:
            if cancelled() or self._closed:
                self._cancel.set()  # the child stops after its current gradient step and reports "cancelled"
            try:
                event = events.get(timeout=POLL_S)
            except queue.Empty:
                if self._closed:
                    raise FineTuneCancelledError("policy_server is shutting down; fine-tune stopped") from None
                if not proc.is_alive():
                    raise RuntimeError(f"the fine-tune worker died (exit code {proc.exitcode}); the acting "
                                       "checkpoint is unchanged") from None
                if time.monotonic() > deadline:
                    self._stop()
                    raise RuntimeError(f"fine-tune did not finish within {timeout_s:.0f} s; worker stopped") from None
                continue
            kind = event[0]
            if kind == "feedback":
                if feedback is not None:
                    feedback(*event[1:])
            elif kind == "done":
                return event[1]
            elif kind == "cancelled":
                raise FineTuneCancelledError(event[1])
            else:
                raise RuntimeError(event[1])

    def close(self, timeout_s: float = 1.0) -> None:
        """Stop the worker for good (shutdown); idempotent, returns within about 2 * ``timeout_s``.

        No graceful exit at shutdown: the worker is niced, so on a loaded machine its interpreter teardown (torch
        loaded) took seconds and pushed the node past `amf up`'s 5 s SIGKILL. It holds nothing to flush (checkpoints
        are written to a temporary name and renamed), so SIGTERM ends it at once.
        """
        self._closed = True
        self._stop(timeout_s, graceful=False)

    def _stop(self, timeout_s: float = 1.0, graceful: bool = True) -> None:
        """Cancel the job, ask the worker to exit (``graceful``), then terminate/kill it (a later job starts anew)."""
        self._cancel.set()
        proc, self._proc = self._proc, None
        if proc is None:
            return
        if graceful:
            try:
                self._jobs.put_nowait(None)
            except Exception:
                pass
            proc.join(timeout_s)
        if proc.is_alive():
            proc.terminate()
            proc.join(timeout_s)
        if proc.is_alive():
            proc.kill()
            proc.join(timeout_s)


def write_transitions(transitions: dict[str, Any], path: Path) -> Path:
    """Save training transitions for the worker (numpy arrays only; strings as unicode arrays, no pickle)."""
    import numpy as np

    path.parent.mkdir(parents=True, exist_ok=True)
    arrays = {}
    for key, value in transitions.items():
        arr = np.asarray(value)
        arrays[key] = arr.astype(str) if arr.dtype == object else arr  # task keys: object -> unicode (no pickle)
    np.savez(path, **arrays)
    return path
