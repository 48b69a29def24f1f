"""Octo checkpoint directory parsing (1.5 and 1.0 names), statistics, offline T5 view, observation windows."""

import json

import numpy as np
import pytest
from octo_testlib import BRIDGE_STATS, make_checkpoint

from amf_ros.policies.octo.checkpoint import (
    action_statistics,
    msgpack_restore,
    msgpack_serialize,
    prepare_offline_checkpoint,
    read_checkpoint,
)
from amf_ros.policies.octo.observation import ObservationWindow, resize_image
from amf_ros.policies.postprocess import unnormalize_actions


@pytest.mark.parametrize("version", ["1.5", "1.0"])
def test_read_checkpoint_normalises_key_names(tmp_path, version):
    info = read_checkpoint(make_checkpoint(tmp_path / "ckpt", version))
    assert info.version == version
    if version == "1.0":
        assert set(info.renamed) == {"pred_horizon->action_horizon", "tasks->task", "pad_mask->timestep_pad_mask"}
    assert info.action_horizon == 4 and info.action_dim == 7 and info.embedding_dim == 384
    assert info.window_size == 2
    assert info.image_keys == {"image_primary": (256, 256), "image_wrist": (128, 128)}
    assert info.steps == [300000] and info.latest_step == 300000
    assert info.head_name == "DiffusionActionHead"
    assert info.example_batch["task"]["language_instruction"]["input_ids"].shape == (1, 16)


def test_action_statistics_layouts(tmp_path):
    info = read_checkpoint(make_checkpoint(tmp_path / "a"))
    st = info.action_statistics("bridge_dataset")
    np.testing.assert_allclose(st["std"], BRIDGE_STATS["std"])
    assert st["mask"].dtype == bool and st["mask"].tolist() == [True] * 6 + [False]
    with pytest.raises(ValueError, match="no statistics for dataset 'nope'"):
        info.action_statistics("nope")
    with pytest.raises(ValueError, match="several datasets"):
        info.action_statistics(None)
    flat = read_checkpoint(make_checkpoint(tmp_path / "b", flat_stats=True))
    np.testing.assert_allclose(flat.action_statistics("anything")["mean"], BRIDGE_STATS["mean"])
    # un-normalising with these statistics leaves the gripper raw (mask False)
    out = unnormalize_actions(np.ones((4, 7)), st)
    np.testing.assert_allclose(out[0, :6], np.add(BRIDGE_STATS["mean"], BRIDGE_STATS["std"])[:6])
    assert out[0, 6] == 1.0
    assert action_statistics({"action": {"mean": [0.0], "std": [1.0]}})["mask"].tolist() == [True]


def test_bad_directories(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        read_checkpoint(tmp_path / "missing")
    (tmp_path / "half").mkdir()
    (tmp_path / "half" / "config.json").write_text("{}")
    with pytest.raises(ValueError, match="missing"):
        read_checkpoint(tmp_path / "half")
    with pytest.raises(ValueError, match="local checkpoint directory"):
        read_checkpoint("hf://rail-berkeley/octo-small-1.5")
    ckpt = make_checkpoint(tmp_path / "nosteps", steps=())
    with pytest.raises(ValueError, match="no orbax step"):
        _ = read_checkpoint(ckpt).latest_step


def test_msgpack_roundtrip_matches_flax_format():
    tree = {"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": {"c": np.array([True, False])}}
    back = msgpack_restore(msgpack_serialize(tree))
    np.testing.assert_array_equal(back["a"], tree["a"])
    assert back["a"].dtype == np.float32 and back["b"]["c"].dtype == bool


def test_offline_view_redirects_t5_and_links_weights(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt")
    with pytest.raises(ValueError, match="t5-base tokenizer"):
        prepare_offline_checkpoint(ckpt, tmp_path / "no_t5", tmp_path / "work")
    t5 = tmp_path / "lm"  # a name without "t5": Octo would build the full encoder-decoder from it and fail
    t5.mkdir()
    (t5 / "config.json").write_text("{}")
    view = prepare_offline_checkpoint(ckpt, t5, tmp_path / "work")
    cfg = json.loads((view / "config.json").read_text())
    link = view / "t5-base"
    assert link.is_symlink() and link.resolve() == t5.resolve() and "t5" in str(link)
    assert cfg["text_processor"]["kwargs"]["tokenizer_name"] == str(link)
    assert cfg["model"]["task_tokenizers"]["language"]["kwargs"]["encoder"] == str(link)
    assert prepare_offline_checkpoint(ckpt, t5, tmp_path / "work") == view  # again: same view, link kept
    assert (view / "300000").is_symlink() and (view / "dataset_statistics.json").is_symlink()
    assert read_checkpoint(view).steps == [300000]


def test_observation_window_octo_mode_prefills_and_masks():
    win = ObservationWindow(window=2, wrist_size=(128, 128))
    img = np.full((480, 640, 3), 7, np.uint8)
    obs = win.add(img, wrist=np.zeros((480, 640, 3), np.uint8))
    assert obs["image_primary"].shape == (1, 2, 256, 256, 3) and obs["image_primary"].dtype == np.uint8
    assert obs["image_wrist"].shape == (1, 2, 128, 128, 3)
    assert obs["timestep_pad_mask"].tolist() == [[False, True]]
    obs = win.add(np.full((480, 640, 3), 200, np.uint8), wrist=np.zeros((64, 64, 3), np.uint8))
    assert obs["timestep_pad_mask"].tolist() == [[True, True]]
    assert obs["image_primary"][0, 0].mean() == pytest.approx(7, abs=1) and obs["image_primary"][0, 1].mean() > 150
    with pytest.raises(ValueError, match="wrist"):
        win.add(img)
    win.reset()
    assert len(win) == 0


def test_observation_window_simpler_mode_grows_and_uses_pad_mask_key():
    win = ObservationWindow(window=2, pad_key="pad_mask", mode="simpler")
    img = np.zeros((480, 640, 3), np.uint8)
    obs = win.add(img)
    assert obs["image_primary"].shape == (1, 1, 256, 256, 3) and obs["pad_mask"].tolist() == [[True]]
    assert "timestep_pad_mask" not in obs
    obs = win.add(img)
    obs = win.add(img)
    assert obs["image_primary"].shape == (1, 2, 256, 256, 3)


def test_resize_image_with_centre_crop():
    img = np.zeros((256, 256, 3), np.uint8)
    img[:5] = 255  # a band at the top that a 0.9-area centre crop (side 0.949, offset 6.6 px) cuts away
    assert resize_image(img, (256, 256))[:5].mean() == 255
    assert resize_image(img, (256, 256), crop_scale=0.9)[:3].max() == 0
    with pytest.raises(ValueError, match="uint8"):
        resize_image(img.astype(np.float32), (8, 8))


def test_home_relative_paths(tmp_path, monkeypatch):
    make_checkpoint(tmp_path / "octo_ckpt")
    monkeypatch.setenv("HOME", str(tmp_path))
    assert read_checkpoint("~/octo_ckpt").path == tmp_path / "octo_ckpt"
