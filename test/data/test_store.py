"""Episode store: round trip per codec, validation errors that name episode and field, index, recovery."""

from __future__ import annotations

import json

import numpy as np
import pytest
from data_helpers import synthetic_steps

from amf_ros.data.schema import EpisodeValidationError
from amf_ros.data.store import EpisodeStore, StoreConfig


@pytest.mark.parametrize("codec", ["png", "jpeg", "raw"])
@pytest.mark.parametrize("threaded", [True, False])
def test_round_trip(tmp_path, codec, threaded):
    steps = synthetic_steps(11)
    store = EpisodeStore(tmp_path, StoreConfig(image_codec=codec, chunk_steps=4, threaded=threaded))
    path = store.write_episode("carrot", "put the carrot on the plate", steps, success=True,
                               state_names=["a", "b", "c", "d"], robot="test")
    ep = store.load(path.name)
    assert len(ep) == 11 and ep.meta.num_steps == 11 and ep.meta.success is True
    assert ep.meta.image_codec == {"observation/image_primary": codec}
    assert [c["num_steps"] for c in ep.meta.chunks] == [4, 4, 3]
    np.testing.assert_array_equal(ep.steps["action"], np.stack([s["action"] for s in steps]))
    np.testing.assert_array_equal(ep.observation["state"], np.stack([s["observation"]["state"] for s in steps]))
    np.testing.assert_array_equal(ep.steps["stamp/observation/state"],
                                  [s["stamps"]["observation/state"] for s in steps])
    imgs = np.stack([s["observation"]["image_primary"] for s in steps])
    err = np.abs(ep.observation["image_primary"].astype(int) - imgs).max()
    assert err == 0 if codec != "jpeg" else err > 0  # jpeg is lossy (on noise), the others exact
    assert ep.steps["is_first"].tolist() == [True] + [False] * 10
    assert ep.steps["is_last"].tolist() == [False] * 10 + [True]
    assert ep.steps["is_terminal"][-1]
    # Low-dim load does not touch the images.
    assert "observation/image_primary" not in store.load(path.name, images=False).steps


def test_failed_episode_is_not_terminal(tmp_path):
    store = EpisodeStore(tmp_path)
    p = store.write_episode("t", "i", synthetic_steps(3), success=False)
    assert not store.load(p.name).steps["is_terminal"].any()


def test_add_step_rejects_bad_input(tmp_path):
    store = EpisodeStore(tmp_path)
    w = store.begin("t", "i")
    w.add_step({"state": np.zeros(3)}, np.zeros(7), stamp_ns=10)
    with pytest.raises(ValueError, match="stamp_ns must increase"):
        w.add_step({"state": np.zeros(3)}, np.zeros(7), stamp_ns=10)
    with pytest.raises(ValueError, match="shape"):
        w.add_step({"state": np.zeros(4)}, np.zeros(7), stamp_ns=20)
    with pytest.raises(ValueError, match="NaN"):
        w.add_step({"state": np.array([0, np.nan, 0])}, np.zeros(7), stamp_ns=30)
    with pytest.raises(ValueError, match="keys"):
        w.add_step({"other": np.zeros(3)}, np.zeros(7), stamp_ns=40)
    with pytest.raises(ValueError, match="RGB uint8"):
        w.add_step({"state": np.zeros(3), "image_x": np.zeros((4, 4), np.uint8)}, np.zeros(7), stamp_ns=50)
    assert w.num_steps == 1
    w.discard()
    assert not list(tmp_path.iterdir()) or [p.name for p in tmp_path.iterdir()] == []


def test_empty_episode_cannot_be_committed(tmp_path):
    w = EpisodeStore(tmp_path).begin("t", "i")
    with pytest.raises(ValueError, match="no steps"):
        w.commit(True)


def _corrupt(store, eid, key, fn):
    path = store.root / eid / "steps.npz"
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays[key] = fn(arrays[key])
    np.savez(path, **arrays)


@pytest.mark.parametrize("key, fn, field, text", [
    ("action", lambda a: np.where(np.arange(a.size).reshape(a.shape) == 9, np.nan, a).astype(np.float32),
     "action", "NaN"),
    ("stamp_ns", lambda a: a[::-1].copy(), "stamp_ns", "strictly increasing"),
    ("action", lambda a: a.astype(np.float64), "action", "float32"),
    ("observation/state", lambda a: a[:-1], "observation/state", "first dimension"),
    ("is_first", lambda a: np.ones_like(a), "is_first", "only there"),
])
def test_validation_names_episode_and_field(tmp_path, key, fn, field, text):
    store = EpisodeStore(tmp_path)
    eid = store.write_episode("t", "i", synthetic_steps(5), success=True).name
    _corrupt(store, eid, key, fn)
    with pytest.raises(EpisodeValidationError, match=text) as info:
        store.load(eid)
    assert info.value.episode == eid and info.value.field == field
    assert eid in str(info.value) and field in str(info.value)
    scan = store.scan()
    assert [e.episode for e in scan.invalid] == [eid] and not scan.episodes


def test_meta_validation(tmp_path):
    store = EpisodeStore(tmp_path)
    eid = store.write_episode("t", "i", synthetic_steps(2)).name
    meta_path = tmp_path / eid / "meta.json"
    meta = json.loads(meta_path.read_text())
    meta["schema_version"] = 99
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(EpisodeValidationError, match="unsupported version 99") as info:
        store.load(eid)
    assert info.value.field == "meta.schema_version"
    meta["schema_version"] = 1
    meta["num_steps"] = 3
    meta_path.write_text(json.dumps(meta))
    with pytest.raises(EpisodeValidationError, match="says 3"):
        store.load(eid)


@pytest.mark.parametrize("field, kwargs, limit", [
    ("instruction", {"instruction": "x" * 1_000_000}, 1000),
    ("operator note", {"operator_note": "x" * 1_000_000}, 2000),
    ("task", {"task": "t" * 1_000_000}, 128),
    ("robot", {"robot": "r" * 1_000_000}, 256),
])
def test_free_text_is_bounded_when_an_episode_starts(tmp_path, field, kwargs, limit):
    """Issue 33 item 7: the store itself refuses free text above its limit (a library user, an import), with the
    field and the limit in the error and nothing left on disk; text at the limit is kept whole."""
    store = EpisodeStore(tmp_path)
    args = {"task": "t", "instruction": "i", **kwargs}
    task, instruction = args.pop("task"), args.pop("instruction")
    with pytest.raises(ValueError, match=rf"{field} of 1000000 characters is too long \(at most {limit}\)") as info:
        store.begin(task, instruction, **args)
    assert len(str(info.value)) < 200 and list(tmp_path.iterdir()) == []
    at_limit = {k: v[:limit] for k, v in kwargs.items()}
    args = {"task": "t", "instruction": "i", **at_limit}
    eid = store.write_episode(args.pop("task"), args.pop("instruction"), synthetic_steps(2), **args).name
    meta = store.meta(eid)
    assert all(len(getattr(meta, k)) == limit for k in at_limit)


def test_commit_refuses_a_note_above_the_limit_and_keeps_the_episode_open(tmp_path):
    store = EpisodeStore(tmp_path)
    w = store.begin("t", "i")
    s = synthetic_steps(2)[0]
    w.add_step(s["observation"], s["action"], stamp_ns=s["stamp_ns"])
    with pytest.raises(ValueError, match=r"operator note of 5000 characters is too long \(at most 2000\)"):
        w.commit(True, operator_note="n" * 5000)
    path = w.commit(True, operator_note="short")
    assert store.meta(path.name).operator_note == "short"


def test_checksum_detects_bit_rot(tmp_path):
    store = EpisodeStore(tmp_path, StoreConfig(chunk_steps=2))
    eid = store.write_episode("t", "i", synthetic_steps(4)).name
    chunk = tmp_path / eid / "chunk-000001.npz"
    data = bytearray(chunk.read_bytes())
    data[len(data) // 2] ^= 0xFF
    chunk.write_bytes(bytes(data))
    store.load(eid, images=False)  # low-dim data is intact
    with pytest.raises(EpisodeValidationError, match="checksum") as info:
        store.load(eid, verify_checksums=True)
    assert info.value.field == "file"


def test_index_is_rebuilt_from_directories(tmp_path):
    store = EpisodeStore(tmp_path)
    ids = [store.write_episode(f"task{i % 2}", "i", synthetic_steps(2), success=bool(i % 2)).name for i in range(3)]
    (tmp_path / "index.json").write_text("{garbage")
    assert [e["episode_id"] for e in store.index()] == sorted(ids)
    (tmp_path / "index.json").unlink()
    import shutil
    shutil.rmtree(tmp_path / ids[0])
    assert [e["episode_id"] for e in store.index()] == sorted(ids[1:])


def test_partial_episode_recover_and_ignore(tmp_path):
    store = EpisodeStore(tmp_path, StoreConfig(chunk_steps=3, threaded=False))
    done = store.write_episode("t", "i", synthetic_steps(4), success=True).name
    w = store.begin("t", "crashed")
    steps = synthetic_steps(7, seed=5)
    for s in steps:
        w.add_step(s["observation"], s["action"], stamp_ns=s["stamp_ns"], stamps=s["stamps"])
    # Simulate a crash: the writer object is abandoned (steps 6 is only in memory); a stray temp file exists.
    (w.path / ".chunk-000002.npz.abc.tmp").write_bytes(b"half")
    empty = store.begin("t", "no chunk yet")
    empty.add_step({"state": np.zeros(4)}, np.zeros(7), stamp_ns=5)
    assert store.episode_ids() == [done]
    assert [p.writer for p in store.partial()] == ["alive", "alive"]  # writer.lock held: never recovered
    assert {r.reason for r in store.recover_all()} == {"writer alive (lock held)"}
    w.close(), empty.close()  # the writers are gone (their locks are free), as after a crash
    partial = {p.episode_id: p for p in store.partial()}
    assert partial[w.episode_id].num_steps == 6 and partial[empty.episode_id].num_steps == 0
    results = {r.episode_id: r for r in store.recover_all()}
    assert results[w.episode_id].action == "recovered" and results[w.episode_id].num_steps == 6
    assert results[empty.episode_id].action == "ignored" and "no complete chunk" in results[empty.episode_id].reason
    ep = store.load(w.episode_id)
    assert ep.meta.recovered and ep.meta.success is None and len(ep) == 6
    np.testing.assert_array_equal(ep.steps["action"], np.stack([s["action"] for s in steps[:6]]))
    np.testing.assert_array_equal(ep.observation["image_primary"],
                                  np.stack([s["observation"]["image_primary"] for s in steps[:6]]))
    store.discard_partial(empty.episode_id)
    assert not store.partial()
    assert sorted(store.episode_ids()) == sorted([done, w.episode_id])
