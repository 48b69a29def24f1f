"""RLDS export: TFRecords + TFDS metadata written without TensorFlow, read back by tensorflow-datasets."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from data_helpers import synthetic_steps

from amf_ros._optional import has
from amf_ros.data.codec import decode_image, resize_images
from amf_ros.data.rlds import RldsExportConfig, export_rlds
from amf_ros.data.schema import actors
from amf_ros.data.store import EpisodeStore
from amf_ros.data.tfrecord import decode_example, encode_example, read_records, tfrecord_bytes

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture
def store(tmp_path) -> EpisodeStore:
    s = EpisodeStore(tmp_path / "store")
    for i in range(5):
        s.write_episode(f"task{i % 2}", f"instruction {i} é", synthetic_steps(3 + i, seed=i), success=(i != 3))
    return s


def test_example_codec_round_trip(tmp_path):
    feats = {"a": ("float", np.array([1.5, -2.0], np.float32)), "b": ("int64", np.array([0, -1, 2**40])),
             "c": ("bytes", [b"x", b"", "é".encode()]), "d": ("float", np.zeros(0, np.float32))}
    got = decode_example(encode_example(feats))
    assert got["a"][1].tolist() == [1.5, -2.0] and got["b"][1].tolist() == [0, -1, 2**40]
    assert got["c"][1] == [b"x", b"", "é".encode()] and got["d"][1].size == 0
    path = tmp_path / "f.tfrecord"
    path.write_bytes(tfrecord_bytes([b"one", b"two"]))
    assert list(read_records(str(path))) == [b"one", b"two"]
    raw = bytearray(path.read_bytes())
    raw[14] ^= 1  # flip a bit of the first record's payload
    path.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="CRC"):
        list(read_records(str(path)))


def test_export_structure_and_values(store, tmp_path):
    res = export_rlds(store, tmp_path / "out", RldsExportConfig(image_size=(16, 20), episodes_per_shard=2))
    assert res.episodes == 4 and len(res.skipped) == 1 and res.shards == 2  # episode 3 failed: skipped
    files = sorted(p.name for p in res.path.iterdir())
    assert files == ["amf_demos-train.tfrecord-00000-of-00002", "amf_demos-train.tfrecord-00001-of-00002",
                     "dataset_info.json", "features.json"]
    info = json.loads((res.path / "dataset_info.json").read_text())
    assert info["splits"][0]["shardLengths"] == ["2", "2"]
    assert int(info["splits"][0]["numBytes"]) == sum(p.stat().st_size for p in res.path.glob("*.tfrecord-*"))
    feats = json.loads((res.path / "features.json").read_text())
    step = feats["featuresDict"]["features"]["steps"]["sequence"]["feature"]["featuresDict"]["features"]
    assert set(step) == {"observation", "action", "reward", "discount", "is_first", "is_last", "is_terminal",
                         "actor", "language_instruction"}
    exported = [decode_example(r) for shard in sorted(res.path.glob("*.tfrecord-*")) for r in read_records(str(shard))]
    ids = [e["episode_metadata/episode_id"][1][0].decode() for e in exported]
    assert ids == [eid for eid in store.episode_ids() if store.meta(eid).success]
    for ex, eid in zip(exported, ids, strict=True):
        ep = store.load(eid)
        n = len(ep)
        np.testing.assert_array_equal(ex["steps/action"][1].reshape(n, 7), ep.steps["action"])
        np.testing.assert_array_equal(ex["steps/observation/state"][1].reshape(n, -1), ep.observation["state"])
        assert ex["steps/reward"][1].tolist() == [0.0] * (n - 1) + [1.0]
        assert ex["steps/is_first"][1].tolist() == [1] + [0] * (n - 1)
        assert ex["steps/is_terminal"][1].tolist() == [0] * (n - 1) + [1]
        assert ex["steps/actor"][1].tolist() == actors(ep.steps).tolist()
        assert {s.decode() for s in ex["steps/language_instruction"][1]} == {ep.meta.instruction}
        imgs = np.stack([decode_image(b) for b in ex["steps/observation/image_primary"][1]])
        np.testing.assert_array_equal(imgs, resize_images(ep.observation["image_primary"], (16, 20)))


def test_export_refuses_existing_and_empty(store, tmp_path):
    export_rlds(store, tmp_path / "out", RldsExportConfig(image_size=None))
    with pytest.raises(ValueError, match="exists"):
        export_rlds(store, tmp_path / "out", RldsExportConfig(image_size=None))
    export_rlds(store, tmp_path / "out", RldsExportConfig(image_size=None, include_unsuccessful=True), overwrite=True)
    with pytest.raises(ValueError, match="no episode"):
        export_rlds(store, tmp_path / "out2", RldsExportConfig(tasks=["nope"]))
    assert not list((tmp_path / "out" / "amf_demos").glob(".*tmp*"))


def test_export_rejects_mixed_shapes(tmp_path):
    s = EpisodeStore(tmp_path / "s")
    s.write_episode("t", "i", synthetic_steps(2, h=8, w=8))
    bad = s.write_episode("t", "i", synthetic_steps(2, h=10, w=8)).name
    with pytest.raises(ValueError, match=bad):
        export_rlds(s, tmp_path / "o", RldsExportConfig(image_size=None))
    export_rlds(s, tmp_path / "o", RldsExportConfig(image_size=(8, 8)))  # resizing makes them agree


READER = textwrap.dedent("""
    import sys, numpy as np
    import tensorflow_datasets as tfds
    builder = tfds.builder(sys.argv[1], data_dir=sys.argv[2])   # how Octo's make_single_dataset opens it
    out = {}
    for i, ep in enumerate(tfds.as_numpy(builder.as_dataset(split="train", shuffle_files=False))):
        steps = list(ep["steps"])
        out[f"{i}/id"] = np.frombuffer(ep["episode_metadata"]["episode_id"], np.uint8)
        out[f"{i}/success"] = np.asarray(ep["episode_metadata"]["success"])
        for key in ("action", "reward", "discount", "is_first", "is_last", "is_terminal"):
            out[f"{i}/{key}"] = np.stack([s[key] for s in steps])
        out[f"{i}/state"] = np.stack([s["observation"]["state"] for s in steps])
        out[f"{i}/image"] = np.stack([s["observation"]["image_primary"] for s in steps])
        out[f"{i}/instruction"] = np.frombuffer(steps[0]["language_instruction"], np.uint8)
    out["num_examples"] = np.asarray(builder.info.splits["train"].num_examples)
    # The read of dlimp's DLataset.from_rlds (Octo's loader): whole trajectories, images still encoded.
    import tensorflow as tf
    raw = builder.as_dataset(split="train", shuffle_files=False, decoders={"steps": tfds.decode.SkipDecoding()})
    lengths = []
    for traj in raw:
        steps = traj["steps"]
        img = tf.io.decode_image(steps["observation"]["image_primary"][0], expand_animations=False)
        assert img.dtype == tf.uint8 and img.shape[-1] == 3
        lengths.append(int(tf.shape(steps["action"])[0]))
    out["skipdecoding_lengths"] = np.asarray(lengths)
    np.savez(sys.argv[3], **out)
""")


@pytest.mark.skipif(not has("tensorflow_datasets") or not has("tensorflow"), reason="tensorflow-datasets not installed")
def test_tfds_reads_the_export(store, tmp_path):
    res = export_rlds(store, tmp_path / "out", RldsExportConfig(name="amf_test", image_size=(16, 20),
                                                                episodes_per_shard=3, include_unsuccessful=True))
    dump = tmp_path / "dump.npz"
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", CUDA_VISIBLE_DEVICES="")
    # A separate process: TensorFlow is heavy and must not share a process with torch-based tests.
    proc = subprocess.run([sys.executable, "-c", READER, "amf_test", str(tmp_path / "out"), str(dump)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = np.load(dump)
    assert int(got["num_examples"]) == 5 == res.episodes
    assert got["skipdecoding_lengths"].tolist() == [len(store.load(e, images=False)) for e in store.episode_ids()]
    for i, eid in enumerate(store.episode_ids()):
        ep = store.load(eid)
        assert got[f"{i}/id"].tobytes().decode() == eid
        assert bool(got[f"{i}/success"]) == bool(ep.meta.success)
        np.testing.assert_array_equal(got[f"{i}/action"], ep.steps["action"])
        np.testing.assert_array_equal(got[f"{i}/state"], ep.observation["state"])
        for key in ("is_first", "is_last", "is_terminal"):
            np.testing.assert_array_equal(got[f"{i}/{key}"], ep.steps[key])
        assert got[f"{i}/reward"][-1] == (1.0 if ep.meta.success else 0.0) and got[f"{i}/discount"].min() == 1.0
        np.testing.assert_array_equal(got[f"{i}/image"], resize_images(ep.observation["image_primary"], (16, 20)))
        assert got[f"{i}/instruction"].tobytes().decode() == ep.meta.instruction


def test_export_without_state(tmp_path):
    """Episodes recorded without a state topic (images only) export without the state feature."""
    s = EpisodeStore(tmp_path / "s")
    steps = synthetic_steps(3)
    for st in steps:
        del st["observation"]["state"]
    s.write_episode("t", "i", steps)
    res = export_rlds(s, tmp_path / "o", RldsExportConfig(image_size=None))
    feats = json.loads((res.path / "features.json").read_text())
    obs = feats["featuresDict"]["features"]["steps"]["sequence"]["feature"]["featuresDict"]["features"]["observation"]
    assert set(obs["featuresDict"]["features"]) == {"image_primary"}
    [ex] = [decode_example(r) for r in read_records(str(next(res.path.glob("*.tfrecord-*"))))]
    assert "steps/observation/state" not in ex and len(ex["steps/observation/image_primary"][1]) == 3
