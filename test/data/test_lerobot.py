"""LeRobot v3.0 export and import (amf_ros/data/lerobot.py): the layout LeRobotDataset reads, read back here with
pyarrow and PyAV, and the round trip export -> import that gives back the same episodes.

Two 20-episode datasets with one 640x480 camera, recorded at 5 Hz and 30 Hz. test_lerobot_reader.py reads the
same exports with lerobot's own LeRobotDataset where lerobot is importable.
"""

from __future__ import annotations

import json
import shutil

import av
import numpy as np
import pyarrow.parquet as pq
import pytest
from data_helpers import EPISODES, MIN_PSNR_DB, RATES, camera_episode_steps, psnr

from amf_ros.data.codec import iter_video_frames
from amf_ros.data.lerobot import (
    LeRobotExportConfig,
    export_lerobot,
    import_lerobot,
    lerobot_key,
    store_key,
    task_key_of,
)
from amf_ros.data.store import EpisodeStore, StoreConfig


def test_names_map_both_ways():
    for key, feature in [("action", "action"), ("observation/state", "observation.state"),
                         ("observation/image_primary", "observation.images.primary"),
                         ("observation/image_wrist", "observation.images.wrist"),
                         ("observation/gripper_force", "observation.gripper_force")]:
        assert lerobot_key(key) == feature and store_key(feature) == key
    assert store_key("observation.image") == "observation/image_primary"  # older single-camera datasets
    assert task_key_of("Pick up the red cube!") == "pick-up-the-red-cube" and task_key_of("!!") == "task"


def test_export_layout_is_lerobot_v3(exported):
    rate, store, res = exported
    n = RATES[rate]
    root = res.path
    assert (res.episodes, res.frames, res.fps) == (EPISODES, EPISODES * n, rate)
    info = json.loads((root / "meta/info.json").read_text())
    assert info["codebase_version"] == "v3.0" and info["fps"] == rate and info["robot_type"] == "widowx"
    assert (info["total_episodes"], info["total_frames"], info["total_tasks"]) == (EPISODES, EPISODES * n, 2)
    assert info["splits"] == {"train": f"0:{EPISODES}"}
    feats = info["features"]
    cam = feats["observation.images.primary"]
    assert cam["dtype"] == "video" and cam["shape"] == [480, 640, 3] and cam["info"]["video.fps"] == rate
    assert feats["observation.state"]["names"] == ["x", "y", "z", "grip", "t"]
    assert feats["action"]["shape"] == [7] and feats["action"]["names"][-1] == "gripper"
    assert list(feats)[-5:] == ["timestamp", "frame_index", "episode_index", "index", "task_index"]

    data = pq.read_table(root / "data/chunk-000/file-000.parquet")
    assert b"huggingface" in data.schema.metadata  # the datasets library's feature types
    assert str(data.schema.field("action").type) == "fixed_size_list<element: float>[7]"
    cols = data.to_pydict()
    assert cols["index"] == list(range(EPISODES * n))
    assert cols["frame_index"] == [k for _ in range(EPISODES) for k in range(n)]
    assert cols["episode_index"] == [e for e in range(EPISODES) for _ in range(n)]
    # Timestamps at the recording rate: frame k of every episode at k / fps (float32, as lerobot stores them).
    np.testing.assert_array_equal(np.asarray(cols["timestamp"], np.float32),
                                  (np.asarray(cols["frame_index"]) / rate).astype(np.float32))
    tasks = pq.read_table(root / "meta/tasks.parquet").to_pydict()
    assert dict(zip(tasks["__index_level_0__"], tasks["task_index"], strict=True)) == {"reach the object": 0,
                                                                                     "push the object": 1}

    eps = pq.read_table(root / "meta/episodes/chunk-000/file-000.parquet").to_pylist()
    ids = store.episode_ids()
    for e, row in enumerate(eps):
        meta = store.meta(ids[e])
        assert (row["episode_index"], row["length"], row["tasks"]) == (e, n, [meta.instruction])
        assert (row["dataset_from_index"], row["dataset_to_index"]) == (e * n, (e + 1) * n)
        assert row["videos/observation.images.primary/from_timestamp"] == pytest.approx(e * n / rate, abs=1e-9)
        assert row["videos/observation.images.primary/to_timestamp"] == pytest.approx((e + 1) * n / rate, abs=1e-9)
        assert row["success"] is meta.success and json.loads(row["amf_meta"])["episode_id"] == ids[e]
        rows = slice(e * n, (e + 1) * n)
        done = cols["next.done"][rows]
        assert done == [False] * (n - 1) + [True]
        assert cols["next.success"][rows] == [False] * (n - 1) + [meta.success is True]
        np.testing.assert_array_equal(np.asarray(cols["stamp_ns"][rows]), store.load(ids[e]).steps["stamp_ns"])

    # One MP4 holds the episodes back to back: frame i shown at i / fps, as lerobot seeks it.
    # Every episode starts on a key frame: it decodes on its own, and no prediction spans two episodes (SVT-AV1
    # 1.x, in PyAV 15, garbled the first frame of an episode that began mid-GOP).
    video = root / "videos/observation.images.primary/chunk-000/file-000.mp4"
    times = [t for t, _ in iter_video_frames(video)]
    np.testing.assert_allclose(times, np.arange(EPISODES * n) / rate, atol=1e-6)
    with av.open(str(video)) as container:
        keys = {j for j, f in enumerate(container.decode(video=0)) if f.key_frame}
    assert {e * n for e in range(EPISODES)} <= keys

    stats = json.loads((root / "meta/stats.json").read_text())
    actions = np.concatenate([store.load(i, images=False).steps["action"] for i in ids]).astype(np.float64)
    np.testing.assert_allclose(stats["action"]["mean"], actions.mean(axis=0), rtol=1e-6, atol=1e-9)
    np.testing.assert_allclose(stats["action"]["std"], actions.std(axis=0), rtol=1e-5, atol=1e-9)
    assert stats["action"]["count"] == [EPISODES * n]
    assert np.shape(stats["observation.images.primary"]["mean"]) == (3, 1, 1)


def test_import_gives_back_the_same_episodes(exported, tmp_path):
    rate, store, res = exported
    back = EpisodeStore(tmp_path / "back", StoreConfig(image_codec="png"))
    imp = import_lerobot(res.path, back)
    assert imp.episodes == store.episode_ids() and imp.frames == EPISODES * RATES[rate]
    worst = np.inf
    for eid in store.episode_ids():
        a, b = store.load(eid), back.load(eid)
        for field in ("task", "instruction", "success", "robot", "control_rate_hz", "state_names"):
            assert getattr(b.meta, field) == getattr(a.meta, field), field
        assert b.meta.extra["streams"] == a.meta.extra["streams"]
        assert b.meta.extra["imported_from"]["format"] == "lerobot v3.0"
        for key in ("observation/state", "action", "stamp_ns", "is_first", "is_last", "is_terminal"):
            np.testing.assert_array_equal(b.steps[key], a.steps[key], err_msg=key)
        for x, y in zip(a.steps["observation/image_primary"], b.steps["observation/image_primary"], strict=True):
            worst = min(worst, psnr(x, y))
    assert worst >= MIN_PSNR_DB, f"worst frame {worst:.1f} dB after the video round trip"
    again = import_lerobot(res.path, back)  # the same export twice: nothing is duplicated
    assert again.episodes == [] and len(again.skipped) == EPISODES and len(back) == EPISODES


def test_import_of_a_dataset_recorded_elsewhere(exported, tmp_path):
    """Without amf_ros's columns (a dataset from another lab): the task key comes from the task string, the
    verdict from next.success, new episode ids; episodes can be picked by index."""
    rate, store, res = exported
    foreign = tmp_path / "foreign"
    shutil.copytree(res.path, foreign)
    path = foreign / "meta/episodes/chunk-000/file-000.parquet"
    pq.write_table(pq.read_table(path).drop_columns(["amf_meta", "success"]), path)
    back = EpisodeStore(tmp_path / "back")
    imp = import_lerobot(foreign, back, episodes=[0, 1, 2])
    assert len(imp.episodes) == 3 and not set(imp.episodes) & set(store.episode_ids())
    got = [back.meta(i) for i in imp.episodes]
    assert [m.task for m in got] == ["reach-the-object", "push-the-object", "reach-the-object"]
    assert [m.success for m in got] == [False, True, True]  # episode 0 failed (next.success false on its end)
    assert all(m.control_rate_hz == rate for m in got)
    np.testing.assert_array_equal(back.load(imp.episodes[1]).steps["action"],
                                  store.load(store.episode_ids()[1]).steps["action"])
    assert import_lerobot(foreign, EpisodeStore(tmp_path / "t"), task="stack").episodes  # a task key given


def _small_store(root, *episodes: tuple) -> EpisodeStore:
    """A store of 48x64-camera episodes, one per (steps, stamped rate Hz, declared rate Hz[, height])."""
    store = EpisodeStore(root)
    for seed, (n, stamped, declared, *h) in enumerate(episodes):
        store.write_episode("a", "a", camera_episode_steps(n, stamped, seed=seed, h=h[0] if h else 48, w=64),
                            control_rate_hz=declared)
    return store


def test_export_refuses_what_lerobot_cannot_hold_and_leaves_nothing(tmp_path):
    store = _small_store(tmp_path / "s", (4, 5, 5))
    mixed = _small_store(tmp_path / "mixed", (4, 5, 5), (4, 10, 10))
    with pytest.raises(ValueError, match="recorded at 10 Hz, the dataset at 5 Hz"):
        export_lerobot(mixed, tmp_path / "o1")
    # Stamped at 5 Hz but declared 10 Hz: the fault of lerobot#2786, refused unless asked for.
    slow = _small_store(tmp_path / "slow", (6, 5, 10))
    with pytest.raises(ValueError, match="came at 5.0. Hz but it is declared 10 Hz"):
        export_lerobot(slow, tmp_path / "o2")
    assert export_lerobot(slow, tmp_path / "o2", LeRobotExportConfig(check_rate=False)).fps == 10
    frac = _small_store(tmp_path / "frac", (4, 7.5, 7.5))
    with pytest.raises(ValueError, match="integer frame rate"):
        export_lerobot(frac, tmp_path / "o3")
    odd = _small_store(tmp_path / "odd", (4, 5, 5, 47))
    with pytest.raises(ValueError, match="even frame sizes"):
        export_lerobot(odd, tmp_path / "o4")
    assert export_lerobot(odd, tmp_path / "o4", LeRobotExportConfig(image_size=(48, 64))).frames == 4
    export_lerobot(store, tmp_path / "o5")
    with pytest.raises(ValueError, match="exists"):
        export_lerobot(store, tmp_path / "o5")
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no temporary left


def test_import_refuses_unreadable_datasets_with_clear_errors(tmp_path):
    out = export_lerobot(_small_store(tmp_path / "s", (4, 5, 5)), tmp_path / "o").path
    with pytest.raises(FileNotFoundError, match="no meta/info.json"):
        import_lerobot(tmp_path, EpisodeStore(tmp_path / "x"))
    old = tmp_path / "old"
    shutil.copytree(out, old)
    info = json.loads((old / "meta/info.json").read_text())
    (old / "meta/info.json").write_text(json.dumps({**info, "codebase_version": "v2.1"}))
    with pytest.raises(ValueError, match="v2.1 dataset; only v3.x"):
        import_lerobot(old, EpisodeStore(tmp_path / "x"))
    shutil.rmtree(out / "videos")
    target = EpisodeStore(tmp_path / "y")
    with pytest.raises(ValueError, match="video file .* is missing"):
        import_lerobot(out, target)
    assert len(target) == 0 and target.partial() == []  # nothing half-imported


def test_cli_export_and_import(tmp_path, capsys):
    from amf_ros.data.cli import export_main, import_main

    store = EpisodeStore(tmp_path / "s")
    store.write_episode("reach", "reach it", camera_episode_steps(5, 5, h=48, w=64), control_rate_hz=5)
    assert export_main(["lerobot", str(store.root), str(tmp_path / "o"), "--video-codec", "h264"]) == 0
    assert "wrote 1 episodes (5 frames at 5 Hz" in capsys.readouterr().out
    assert export_main(["lerobot", str(store.root), str(tmp_path / "o")]) == 1
    assert "exists" in capsys.readouterr().err
    assert import_main(["lerobot", str(tmp_path / "o"), str(tmp_path / "back")]) == 0
    assert "imported 1 episodes (5 frames)" in capsys.readouterr().out
    assert EpisodeStore(tmp_path / "back").meta(store.episode_ids()[0]).task == "reach"


def test_who_acted_survives_the_round_trip(tmp_path):
    """The per-step ``actor`` column (a goal a person took over) is exported as LeRobot's ``actor`` feature and
    imported back; an episode without it (a plain demonstration) exports as all a person's."""
    from amf_ros.data.schema import ACTOR, ACTOR_HUMAN, ACTOR_POLICY, actors

    who = [ACTOR_POLICY, ACTOR_POLICY, ACTOR_HUMAN, ACTOR_HUMAN, ACTOR_POLICY, ACTOR_HUMAN]
    store = _small_store(tmp_path / "s", (6, 5, 5))  # a plain demonstration, no column
    w = store.begin("a", "a", control_rate_hz=5.0)
    for k, step in enumerate(camera_episode_steps(6, 5, seed=7, h=48, w=64)):
        w.add_step(step["observation"], step["action"], stamp_ns=step["stamp_ns"], actor=who[k])
    w.commit(True)
    res = export_lerobot(store, tmp_path / "out")
    table = pq.read_table(res.path / "data/chunk-000/file-000.parquet")
    assert table.column("actor").to_pylist() == [ACTOR_HUMAN] * 6 + who
    back = EpisodeStore(tmp_path / "back")
    import_lerobot(res.path, back)
    plain, taken_over = store.episode_ids()
    np.testing.assert_array_equal(back.load(taken_over).steps[ACTOR], who)
    np.testing.assert_array_equal(actors(back.load(plain).steps), [ACTOR_HUMAN] * 6)
