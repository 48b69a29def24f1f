"""`amf inspect`, `amf export rlds`, `amf import bag` through the real `amf` entry point."""

from __future__ import annotations

import json

import numpy as np
import pytest
from data_helpers import synthetic_steps

from amf_ros.cli import main
from amf_ros.data.store import EpisodeStore, StoreConfig


@pytest.fixture
def dataset(tmp_path):
    store = EpisodeStore(tmp_path / "ds", StoreConfig(chunk_steps=2, threaded=False))
    for i in range(4):
        store.write_episode("carrot" if i < 3 else "spoon", "do it", synthetic_steps(3, seed=i), success=i != 1)
    w = store.begin("spoon", "crashed")
    for s in synthetic_steps(5, seed=9):
        w.add_step(s["observation"], s["action"], stamp_ns=s["stamp_ns"])
    return store, w.episode_id


def test_inspect_summary_and_problems(dataset, capsys):
    store, partial_id = dataset
    assert main(["inspect", str(store.root)]) == 0  # a partial episode alone is not an error
    out = capsys.readouterr().out
    assert "4 episodes, 12 steps" in out and "carrot" in out and "2/3" in out and "67%" in out
    assert f"PARTIAL {partial_id}" in out and "4 steps recoverable" in out
    assert main(["inspect", str(store.root), "--strict"]) == 1
    assert main(["inspect", str(store.root), "--episodes"]) == 0
    assert capsys.readouterr().out.count("success=") == 4  # one line per committed episode
    # Break one episode: inspect names it and the field, exit code 1.
    bad = store.episode_ids()[0]
    with np.load(store.root / bad / "steps.npz") as z:
        arrays = {k: z[k] for k in z.files}
    arrays["action"][1, 2] = np.nan
    np.savez(store.root / bad / "steps.npz", **arrays)
    capsys.readouterr()
    assert main(["inspect", str(store.root), "--json"]) == 1
    summary = json.loads(capsys.readouterr().out)
    assert summary["invalid"] == [{"episode": bad, "field": "action", "problem": "NaN/inf at step 1"}]
    assert summary["tasks"]["carrot"]["episodes"] == 2
    # Recovery from the CLI.
    assert main(["inspect", str(store.root), "--recover", "--min-age", "0"]) == 1
    assert f"recovered {partial_id}" in capsys.readouterr().out
    assert store.load(partial_id).meta.recovered and not store.partial()


def test_inspect_missing_dataset(tmp_path, capsys):
    assert main(["inspect", str(tmp_path / "nope")]) == 2


def test_export_cli(dataset, tmp_path, capsys):
    store, _ = dataset
    out = tmp_path / "rlds"
    assert main(["export", "rlds", str(store.root), str(out), "--image-size", "8", "8"]) == 0
    text = capsys.readouterr().out
    assert "wrote 3 episodes" in text and "skipped" in text
    assert (out / "amf_demos" / "1.0.0" / "features.json").is_file()
    assert main(["export", "rlds", str(store.root), str(out)]) == 1  # exists, no --overwrite
    assert "exists" in capsys.readouterr().err


def test_import_cli(tmp_path, capsys):
    pytest.importorskip("rosbags")
    from bag_session import session, write_bag
    from rosbags.rosbag2 import StoragePlugin

    bag = tmp_path / "teleop"
    write_bag(bag, session(10, "/amf/observation/state_js", "/amf/camera/image_raw"), StoragePlugin.MCAP)
    ds = tmp_path / "ds"
    argv = ["import", "bag", str(bag), "--task", "carrot", "--instruction", "put the carrot on the plate",
            "--dataset", str(ds), "--image-codec", "jpeg"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    assert "imported 5 steps" in text and "image_primary=/amf/camera/image_raw" in text
    ep = EpisodeStore(ds).load(EpisodeStore(ds).episode_ids()[0])
    assert ep.meta.task == "carrot" and ep.meta.image_codec == {"observation/image_primary": "jpeg"}
    assert main(argv[:3] + ["--task", "t", "--instruction", "i", "--dataset", str(ds), "--state-topic", "/x"]) == 1
    assert "not in the bag" in capsys.readouterr().err
