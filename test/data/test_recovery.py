"""Crash recovery of partial episodes: a chunk killed between its write and its rename is adopted, the writer's
lock tells a live writer from a dead one (whatever the directory's age), and a commit that fails after the
operator's verdict keeps that verdict for recovery.
"""

from __future__ import annotations

import errno
import fcntl
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from data_helpers import synthetic_steps
from ros_testing import wait_for
from testpaths import SUPPORT

from amf_ros.data import writer as writer_mod
from amf_ros.data.store import WRITER_ALIVE, WRITER_GONE, WRITER_UNKNOWN, EpisodeStore, StoreConfig, StoreWriteError

ROOT = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))


def add(w, steps: list[dict]) -> None:
    for s in steps:
        w.add_step(s["observation"], s["action"], stamp_ns=s["stamp_ns"], stamps=s["stamps"])


def write_partial(store: EpisodeStore, n: int, seed: int = 3):
    """A writer with the first ``n`` of ``synthetic_steps(..., seed)`` added and never committed."""
    w = store.begin("task", "crashed")
    add(w, synthetic_steps(n, seed=seed))
    return w


def fail_writes(monkeypatch, name: str, code: int = errno.ENOSPC) -> None:
    """Make the writer's atomic writes of the file ``name`` fail with ``code`` (a full disk, an I/O error)."""
    for fn in ("atomic_write_bytes", "atomic_write_json"):
        real = getattr(writer_mod, fn)

        def write(path, *args, _real=real, **kwargs):
            if Path(path).name == name:
                raise OSError(code, os.strerror(code), str(path))
            return _real(path, *args, **kwargs)
        monkeypatch.setattr(writer_mod, fn, write)


def assert_first_steps(store: EpisodeStore, eid: str, n: int, seed: int = 3) -> None:
    ep = store.load(eid, verify_checksums=True)
    want = synthetic_steps(n, seed=seed)
    assert len(ep) == n and ep.meta.recovered
    np.testing.assert_array_equal(ep.steps["action"], np.stack([s["action"] for s in want]))
    np.testing.assert_array_equal(ep.observation["image_primary"],
                                  np.stack([s["observation"]["image_primary"] for s in want]))


# -- temp chunks --------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("damage, steps", [("none", 10), ("truncated", 5), ("other_keys", 5)])
def test_complete_temp_chunk_is_adopted_and_a_damaged_one_is_not(tmp_path, damage, steps):
    """chunk_steps 5, 12 steps: chunk 1 exists only under its temp name (killed between write and rename)."""
    store = EpisodeStore(tmp_path, StoreConfig(chunk_steps=5, threaded=False))
    w = write_partial(store, 12)
    w.close()  # the writer is gone; steps 10-11 were only in memory
    chunk1 = w.path / "chunk-000001.npz"
    temp = w.path / ".chunk-000001.npz.k1ll3d.tmp"
    data = chunk1.read_bytes()
    if damage == "truncated":
        data = data[:len(data) // 2]
    elif damage == "other_keys":  # a valid npz, but not a chunk of this episode
        with np.load(chunk1) as z:
            data = writer_mod._npz_bytes({k: z[k] for k in z.files if k != "observation/state"})
    temp.write_bytes(data)
    chunk1.unlink()
    (w.path / ".chunk-000003.npz.zzz.tmp").write_bytes(chunk1.parent.joinpath("chunk-000000.npz").read_bytes())
    [part] = store.partial()
    assert (part.complete_chunks, part.num_steps, part.writer) == (steps // 5, steps, WRITER_GONE)
    res = store.recover(w.episode_id)
    assert res.action == "recovered" and res.num_steps == steps, res
    assert ("adopted" in res.reason) == (damage == "none")
    assert_first_steps(store, w.episode_id, steps)
    files = sorted(p.name for p in (tmp_path / w.episode_id).iterdir())
    assert files == ["chunk-000000.npz", *(["chunk-000001.npz"] if steps == 10 else []), "meta.json", "start.json",
                     "steps.npz"]


CHILD_KILLED_AT_RENAME = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {helpers!r})
    from data_helpers import synthetic_steps
    import amf_ros.atomic as atomic
    from amf_ros.data.store import EpisodeStore, StoreConfig
    real_replace = os.replace
    def replace(src, dst):  # SIGKILL after chunk 1 is written and fsynced, before its rename
        if str(dst).endswith("chunk-000001.npz"):
            os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst)
    atomic.os.replace = replace
    store = EpisodeStore({root!r}, StoreConfig(chunk_steps=5, threaded=True))
    store.write_episode("task", "earlier", synthetic_steps(4, seed=0), success=True)
    w = store.begin("task", "crashed")
    for s in synthetic_steps(12, seed=3):
        w.add_step(s["observation"], s["action"], stamp_ns=s["stamp_ns"], stamps=s["stamps"])
    time.sleep(60)  # the writer thread kills the process
""")


def test_writer_killed_between_chunk_write_and_rename_loses_nothing_written(tmp_path):
    code = CHILD_KILLED_AT_RENAME.format(helpers=str(SUPPORT), root=str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", code], env=ENV, timeout=60, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    store = EpisodeStore(tmp_path)
    [earlier] = store.episode_ids()
    [part] = store.partial()
    assert list(part.path.glob(".chunk-000001.npz.*.tmp")) and not (part.path / "chunk-000001.npz").exists()
    assert (part.writer, part.complete_chunks, part.num_steps) == (WRITER_GONE, 2, 10)
    res = store.recover(part.episode_id, min_age_s=3600)  # lock free: dead for sure, whatever its age
    assert res.action == "recovered" and res.num_steps == 10, res
    assert_first_steps(store, part.episode_id, 10)
    assert store.meta(part.episode_id).success is None  # killed before commit: no verdict
    assert store.load(earlier, verify_checksums=True).meta.success is True


# -- writer.lock --------------------------------------------------------------------------------------------------
def flock_held(path: Path) -> bool:
    """Whether another open file description sees the lock held (what a second process sees too)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


PROBE = "import fcntl, os, sys\nfd = os.open(sys.argv[1], os.O_RDONLY)\ntry:\n    fcntl.flock(fd, " \
        "fcntl.LOCK_EX | fcntl.LOCK_NB)\n    print('free')\nexcept BlockingIOError:\n    print('held')\n"


def other_process_sees(path: Path) -> str:
    return subprocess.run([sys.executable, "-c", PROBE, str(path)], capture_output=True, text=True, timeout=30,
                          check=True).stdout.strip()


@pytest.mark.parametrize("end", ["close", "commit_failed", "dropped"])
def test_live_writer_holds_its_lock_and_a_gone_one_is_recoverable_at_any_age(tmp_path, monkeypatch, end):
    store = EpisodeStore(tmp_path, StoreConfig(chunk_steps=2, threaded=True))
    w = write_partial(store, 5)
    lock = w.path / "writer.lock"
    assert flock_held(lock) and other_process_sees(lock) == "held"
    # the threaded writer puts complete chunks on disk in the background: wait (bounded) for the second one
    [part] = wait_for(lambda: [p for p in store.partial() if p.num_steps == 4], 10, "2 complete chunks on disk")
    assert part.writer == WRITER_ALIVE
    res = store.recover(w.episode_id, min_age_s=0)
    assert res.action == "ignored" and res.reason == "writer alive (lock held)"
    with pytest.raises(ValueError, match="writer alive"):
        store.discard_partial(w.episode_id)
    add(w, synthetic_steps(6, seed=3)[5:])
    eid = w.episode_id
    if end == "close":
        w.close()
    elif end == "commit_failed":
        fail_writes(monkeypatch, "steps.npz", errno.EIO)
        with pytest.raises(StoreWriteError):
            w.commit(False)
    else:
        w._drain()  # stop its thread (it holds a reference); then nothing refers to the writer any more
        del w
    assert not flock_held(lock) and other_process_sees(lock) == "free"
    [part] = store.partial()
    assert part.writer == WRITER_GONE and part.num_steps == 6
    res = store.recover(eid, min_age_s=10**9)
    assert res.action == "recovered" and res.num_steps == 6, res
    assert_first_steps(store, eid, 6)


CHILD_HOLDING = textwrap.dedent("""
    import sys, time
    import numpy as np
    from amf_ros.data.store import EpisodeStore, StoreConfig
    w = EpisodeStore({root!r}, StoreConfig(chunk_steps=2, threaded=False)).begin("task", "killed")
    for i in range(3):
        w.add_step({{"state": np.full(3, i, np.float32)}}, np.zeros(7), stamp_ns=i + 1)
    print(w.path / "writer.lock", flush=True)
    time.sleep(60)
""")


def test_sigkill_releases_the_lock(tmp_path):
    proc = subprocess.Popen([sys.executable, "-c", CHILD_HOLDING.format(root=str(tmp_path))], env=ENV,
                            stdout=subprocess.PIPE, text=True)
    try:
        lock = Path(proc.stdout.readline().strip())
        assert lock.name == "writer.lock" and flock_held(lock)
        store = EpisodeStore(tmp_path)
        assert [p.writer for p in store.partial()] == [WRITER_ALIVE]
        assert store.recover_all()[0].reason == "writer alive (lock held)"
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert not flock_held(lock)
    [part] = store.partial()
    assert part.writer == WRITER_GONE and part.num_steps == 2
    assert [r.action for r in store.recover_all(min_age_s=10**9)] == ["recovered"]


def test_partial_without_lock_file_falls_back_to_its_age(tmp_path):
    """An older layout (no writer.lock): only the directory's age can tell that its writer is gone."""
    store = EpisodeStore(tmp_path, StoreConfig(chunk_steps=2, threaded=False))
    w = write_partial(store, 4)
    w.close()
    (w.path / "writer.lock").unlink()
    [part] = store.partial()
    assert part.writer == WRITER_UNKNOWN and part.num_steps == 4
    res = store.recover(w.episode_id, min_age_s=3600)
    assert res.action == "ignored" and "modified less than 3600" in res.reason
    assert store.recover(w.episode_id, min_age_s=0).num_steps == 4


def test_commit_leaves_neither_lock_nor_verdict_in_the_episode(tmp_path):
    store = EpisodeStore(tmp_path, StoreConfig(chunk_steps=2))
    w = write_partial(store, 3)
    lock = w.path / "writer.lock"
    path = w.commit(True)
    assert sorted(p.name for p in path.iterdir()) == ["chunk-000000.npz", "chunk-000001.npz", "meta.json",
                                                      "start.json", "steps.npz"]
    assert not lock.exists() and w._lock._fd is None


# -- the operator's verdict -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fails_on", ["steps.npz", "meta.json"])
def test_verdict_survives_a_commit_that_fails_on_a_full_disk(tmp_path, monkeypatch, fails_on):
    store = EpisodeStore(tmp_path, StoreConfig(chunk_steps=5, threaded=True))
    w = write_partial(store, 12)
    fail_writes(monkeypatch, fails_on)
    with pytest.raises(StoreWriteError) as info:
        w.commit(True, operator_note="clean grasp")
    assert info.value.errno == errno.ENOSPC and w.episode_id in str(info.value) and "left partial" in str(info.value)
    monkeypatch.undo()
    assert store.episode_ids() == [] and not store.scan().invalid
    [part] = store.partial()
    assert part.writer == WRITER_GONE and part.num_steps == 12  # the last chunk was written before steps.npz
    res = store.recover(w.episode_id)
    assert res.action == "recovered" and res.num_steps == 12 and "verdict kept (success=True)" in res.reason
    ep = store.load(w.episode_id, verify_checksums=True)
    assert ep.meta.success is True and ep.meta.recovered and ep.meta.operator_note == "clean grasp"
    np.testing.assert_array_equal(ep.steps["is_terminal"], np.arange(12) == 11)  # whole episode: as a commit


def test_verdict_of_an_episode_cut_short_leaves_success_unknown(tmp_path, monkeypatch):
    """A chunk failed (disk full) before the commit: the verdict is saved, but the recovered prefix lacks the
    steps it judged, so its success is unknown (the verdict is kept aside) and no step is terminal."""
    store = EpisodeStore(tmp_path, StoreConfig(chunk_steps=5, threaded=False))
    w = write_partial(store, 7)
    fail_writes(monkeypatch, "chunk-000001.npz")
    with pytest.raises(StoreWriteError) as info:
        add(w, synthetic_steps(10, seed=3)[7:])  # the 10th step completes chunk 1, whose write fails
    assert info.value.errno == errno.ENOSPC and w.num_steps == 10
    with pytest.raises(StoreWriteError, match="writing a chunk failed"):
        w.commit(False)
    monkeypatch.undo()
    res = store.recover(w.episode_id)
    assert res.action == "recovered" and res.num_steps == 5 and "5 of the 10 steps" in res.reason, res
    ep = store.load(w.episode_id)
    assert ep.meta.success is None and ep.meta.recovered and not ep.steps["is_terminal"].any()
    assert ep.meta.extra["operator_verdict"] == {"success": False, "num_steps": 10}


def test_a_commit_killed_before_its_last_chunk_recovers_a_prefix_of_unknown_success(tmp_path, monkeypatch):
    """Issue 33 item 8: a recorder killed just after commit began (verdict.json written, the last chunk still being
    encoded, av1 in the probe) recovered 50 of 71 steps and kept success=True, although the steps that solved
    the task were lost. The kill is simulated at the data layer: the writer dies (close, as the kernel would drop
    its lock) while commit writes the last chunk; a verdict for steps that were lost gives success None."""
    store = EpisodeStore(tmp_path, StoreConfig(chunk_steps=5, threaded=False))
    w = write_partial(store, 13)  # chunks 0 and 1 written; steps 11-13 wait for the commit's flush

    class Killed(BaseException):
        """The process dies here: nothing after this point of the commit runs."""

    real = writer_mod.EpisodeWriter._write_chunk

    def die_on_last_chunk(self, index, steps):
        if index == 2:
            raise Killed
        return real(self, index, steps)
    monkeypatch.setattr(writer_mod.EpisodeWriter, "_write_chunk", die_on_last_chunk)
    with pytest.raises(Killed):
        w.commit(True, operator_note="solved it at the end")
    monkeypatch.undo()
    [part] = store.partial()
    assert part.writer == WRITER_GONE and part.num_steps == 10
    assert writer_mod.read_verdict(w.path) == {"success": True, "operator_note": "solved it at the end",
                                               "num_steps": 13}
    res = store.recover(w.episode_id)
    assert res.action == "recovered" and res.num_steps == 10 and "success unknown" in res.reason, res
    ep = store.load(w.episode_id, verify_checksums=True)
    assert ep.meta.success is None, "the steps that solved the task were lost: success is unknown"
    assert ep.meta.recovered and ep.meta.operator_note == "solved it at the end"
    assert ep.meta.extra["operator_verdict"] == {"success": True, "num_steps": 13}
    assert not ep.steps["is_terminal"].any() and ep.steps["is_last"][-1]
    assert store.index()[-1]["success"] is None
    assert_first_steps(store, w.episode_id, 10)
