"""runtime/fine_tune_worker.py without ROS: a fine-tune whose loss goes non-finite stops at that step, saves
nothing and says which loss at which step; non-finite adaptive-prior weights are refused the same way; a finite
run saves. Ensemble members (policy_server's ensemble_members): trained after the acting copy with offset seeds,
counted in the feedback, saved inside the round in one atomic step; a cancel or bad loss in a member saves nothing."""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from amf_ros.runtime.fine_tune_worker import FineTuneJob, _train


class _Student:
    """Stands in for a policy: fit() reports the scripted losses through the callback until it says stop."""

    def __init__(self, losses: list[float], alphas: dict[str, float]) -> None:
        self.losses, self.alphas, self.saved, self.steps_run = losses, alphas, None, 0
        self.prior, self.encoder = object(), None  # Policy members the worker reads

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



class _Saving(_Student):
    """A fake policy whose save() writes a file (so that the atomic round assembly has something to move)."""

    def __init__(self, name: str, losses: list[float], cancel_at: int = 0, cancel=None) -> None:
        super().__init__(losses, {"a": 1.0})
        self.name, self.cancel_at, self.cancel, self.seed = name, cancel_at, cancel, None

    def fit(self, transitions, steps, batch_size, lr, seed, callback):
        self.seed = seed
        if self.cancel_at:
            original = callback

            def callback(step, loss):
                if step == self.cancel_at:
                    self.cancel.set()
                return original(step, loss)
        return super().fit(transitions, steps, batch_size, lr, seed, callback)

    def save(self, out_dir):
        out = Path(out_dir)
        out.mkdir(parents=True)
        (out / "who").write_text(self.name)
        self.saved = out
        return out


def _run_members(tmp_path: Path, monkeypatch, students: dict[str, _Saving], cancel: threading.Event | None = None):
    """_train with one acting checkpoint 'ck' and members started from 'm1', 'm2' (one fake policy per path)."""
    monkeypatch.setattr("amf_ros._optional.load_object",
                        lambda path, what: lambda ckpt, **kw: students[Path(ckpt).name])
    data = tmp_path / "t.npz"
    np.savez(data, state=np.zeros((4, 3)))
    job = FineTuneJob(checkpoint=str(tmp_path / "ck"), transitions=str(data), out_dir=str(tmp_path / "round_0001"),
                      steps=3, batch_size=2, lr=1e-3, alpha_steps=5, seed=1000, loader="x:y",
                      members=(str(tmp_path / "m1"), str(tmp_path / "m2")))
    events: queue.Queue = queue.Queue()
    try:
        out = _train(job, events, cancel or threading.Event(), {})
    except Exception as exc:
        out = exc
    feedback = []
    while not events.empty():
        feedback.append(events.get())
    return out, feedback


def test_members_are_trained_after_the_acting_copy_and_saved_inside_the_round(tmp_path, monkeypatch) -> None:
    from amf_ros.policies.checkpoint_dirs import MEMBERS_DIR, member_checkpoints, round_checkpoints
    from amf_ros.runtime.fine_tune_worker import MEMBER_SEED_OFFSET

    students = {n: _Saving(n, [0.5, 0.4, 0.3]) for n in ("ck", "m1", "m2")}
    out, feedback = _run_members(tmp_path, monkeypatch, students)
    assert isinstance(out, dict), out
    assert [s.seed for s in students.values()] == [1000, 1000 + MEMBER_SEED_OFFSET, 1000 + 2 * MEMBER_SEED_OFFSET]
    assert [(step, total) for _, step, total, _ in feedback] == [(k, 9) for k in range(1, 10)]  # members counted
    round_dir = tmp_path / "round_0001"
    assert out["checkpoint"] == str(round_dir) and (round_dir / "who").read_text() == "ck"
    members = member_checkpoints(round_dir)
    assert [p.name for p in members] == ["member_1", "member_2"] and out["members"] == [str(p) for p in members]
    assert [(p / "who").read_text() for p in members] == ["m1", "m2"] and out["member_final_losses"] == [0.3, 0.3]
    assert round_checkpoints(tmp_path) == [round_dir]  # members/ and no staging left beside the round
    assert sorted(p.name for p in tmp_path.iterdir()) == ["round_0001", "t.npz"]
    assert (round_dir / MEMBERS_DIR).is_dir()


def test_a_cancel_or_a_non_finite_loss_in_a_member_saves_nothing(tmp_path, monkeypatch) -> None:
    cancel = threading.Event()
    students = {"ck": _Saving("ck", [0.5, 0.4, 0.3]), "m1": _Saving("m1", [0.5, 0.4, 0.3], cancel_at=2, cancel=cancel),
                "m2": _Saving("m2", [0.5, 0.4, 0.3])}
    out, _ = _run_members(tmp_path, monkeypatch, students, cancel)
    assert type(out).__name__ == "FineTuneCancelledError" and "after 5 of 9 steps" in str(out), out
    assert students["m2"].seed is None and not (tmp_path / "round_0001").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.npz"]
    students = {"ck": _Saving("ck", [0.5, 0.4, 0.3]), "m1": _Saving("m1", [0.5, 0.4, 0.3]),
                "m2": _Saving("m2", [0.5, float("inf"), 0.3])}
    out, _ = _run_members(tmp_path, monkeypatch, students)
    assert isinstance(out, FloatingPointError) and "ensemble member 2 became inf at step 2" in str(out), out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.npz"]


def test_without_members_the_round_is_saved_as_before(tmp_path, monkeypatch) -> None:
    """ensemble_members = 1: the policy saves itself straight to out_dir (no staging, no members/)."""
    student, out = _run(tmp_path, monkeypatch, [0.5, 0.4, 0.3], {"a": 1.0})
    assert student.saved == tmp_path / "round_0001" and out["members"] == [] and out["member_final_losses"] == []


def test_a_round_with_members_appears_whole_or_not_at_all(tmp_path) -> None:
    """save_with_members: a failing member save leaves neither the round nor its staging directory; a round that
    exists already is replaced whole; round listings never see members or staging."""
    from amf_ros.policies.checkpoint_dirs import member_checkpoints, round_checkpoints, save_with_members

    def writer(text):
        def save(path):
            path.mkdir(parents=True)
            (path / "who").write_text(text)
        return save

    def broken(path):
        path.mkdir(parents=True)
        raise OSError("disk full")

    out = tmp_path / "round_0003"
    with pytest.raises(OSError, match="disk full"):
        save_with_members(out, writer("acting"), [writer("m1"), broken])
    assert list(tmp_path.iterdir()) == []
    out.mkdir()
    (out / "who").write_text("old")
    assert save_with_members(out, writer("acting"), [writer("m1"), writer("m2")]) == out
    assert (out / "who").read_text() == "acting"
    assert [(p.name, (p / "who").read_text()) for p in member_checkpoints(out)] == [("member_1", "m1"),
                                                                                    ("member_2", "m2")]
    assert [p.name for p in tmp_path.iterdir()] == ["round_0003"] and round_checkpoints(tmp_path) == [out]
    assert member_checkpoints(tmp_path / "nothing") == []


def test_the_worker_process_runs_at_the_configured_niceness() -> None:
    """Background training yields the CPU: the worker runs `niceness` above the node (capped at 19 by the OS)."""
    import os
    import time

    import pytest

    from amf_ros.runtime.fine_tune_worker import FineTuneWorker

    with pytest.raises(ValueError, match="niceness"):
        FineTuneWorker(niceness=20)
    worker = FineTuneWorker(niceness=5)
    try:
        worker._ensure_started()
        want = min(19, os.getpriority(os.PRIO_PROCESS, 0) + 5)
        deadline = time.monotonic() + 60.0  # the spawned child sets it once it has imported the module
        while os.getpriority(os.PRIO_PROCESS, worker.pid) != want and time.monotonic() < deadline:
            time.sleep(0.05)
        assert os.getpriority(os.PRIO_PROCESS, worker.pid) == want
    finally:
        worker.close()


def test_worker_process_ignores_a_terminals_ctrl_c_and_is_stopped_by_its_parent() -> None:
    """Ctrl-C in a terminal signals the whole process group: the worker must not die with a KeyboardInterrupt
    traceback of its own (the parent node stops it on shutdown)."""
    import os
    import signal

    from amf_ros.runtime.fine_tune_worker import FineTuneWorker

    worker = FineTuneWorker()
    worker._ensure_started()
    proc = worker._proc
    try:
        # Wait until the child runs our code (its SIGINT disposition is set first thing): a SIGINT before that would
        # hit the interpreter's start-up, not the worker loop this test is about.
        deadline_polls = 600
        while deadline_polls and not _ignores_sigint(proc.pid):
            deadline_polls -= 1
            proc.join(0.1)
        assert _ignores_sigint(proc.pid), "the worker never set SIGINT to ignored"
        os.kill(proc.pid, signal.SIGINT)
        proc.join(3.0)
        assert proc.is_alive() and proc.exitcode is None, f"the worker died on SIGINT (exit code {proc.exitcode})"
    finally:
        worker.close()
    assert not proc.is_alive()


def _ignores_sigint(pid: int) -> bool:
    """True when /proc says the process ignores SIGINT (bit 2 of SigIgn)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii") as fh:
            for line in fh:
                if line.startswith("SigIgn:"):
                    return bool(int(line.split()[1], 16) & (1 << (2 - 1)))
    except FileNotFoundError:
        return False
    return False
