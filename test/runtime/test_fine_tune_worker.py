"""runtime/fine_tune_worker.py without ROS: a fine-tune whose loss goes non-finite stops at that step, saves
nothing and says which loss at which step; non-finite adaptive-prior weights are refused the same way; a finite
run saves."""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
from amf_ros.runtime.fine_tune_worker import FineTuneJob, _train


class _Student:
    """Stands in for a policy: fit() reports the scripted losses through the callback until it says stop."""

    def __init__(self, losses: list[float], alphas: dict[str, float]) -> None:
        self.losses, self.alphas, self.saved, self.steps_run = losses, alphas, None, 0
        self.prior = object()

    def fit(self, transitions, steps, batch_size, lr, seed, callback):
        for step, loss in enumerate(self.losses[:steps], start=1):
            self.steps_run = step
            if not callback(step, loss):
                break
        return SimpleNamespace(cancelled=False, steps=self.steps_run, final_loss=self.losses[self.steps_run - 1],
                               losses=self.losses[:self.steps_run])

    def fit_alpha(self, transitions, steps, seed):
        pass

    def save(self, out_dir):
        self.saved = Path(out_dir)
        return self.saved


def _run(tmp_path: Path, monkeypatch, losses: list[float], alphas: dict[str, float]) -> tuple[_Student, object]:
    student = _Student(losses, alphas)
    monkeypatch.setattr("amf_ros._optional.load_object", lambda path, what: lambda ckpt, **kw: student)
    data = tmp_path / "t.npz"
    np.savez(data, state=np.zeros((4, 3)))
    job = FineTuneJob(checkpoint=str(tmp_path / "ck"), transitions=str(data), out_dir=str(tmp_path / "round_0001"),
                      steps=len(losses), batch_size=2, lr=1e-3, alpha_steps=5, seed=0, loader="x:y")
    events: queue.Queue = queue.Queue()
    try:
        return student, _train(job, events, threading.Event(), {})
    except FloatingPointError as exc:
        return student, exc


def test_a_non_finite_loss_stops_the_fine_tune_and_saves_nothing(tmp_path, monkeypatch) -> None:
    student, out = _run(tmp_path, monkeypatch, [0.5, 0.4, float("nan"), 0.3, 0.2], {"a": 1.0})
    assert isinstance(out, FloatingPointError) and "nan at step 3 of 5" in str(out), out
    assert student.steps_run == 3 and student.saved is None  # stopped at the bad step, nothing written


def test_non_finite_alphas_are_refused(tmp_path, monkeypatch) -> None:
    student, out = _run(tmp_path, monkeypatch, [0.5, 0.4], {"a": 1.0, "b": float("inf")})
    assert isinstance(out, FloatingPointError) and "'b': inf" in str(out) and student.saved is None


def test_a_finite_run_saves(tmp_path, monkeypatch) -> None:
    student, out = _run(tmp_path, monkeypatch, [0.5, 0.4, 0.3], {"a": 1.0})
    assert isinstance(out, dict) and student.saved == tmp_path / "round_0001" and out["final_loss"] == 0.3

