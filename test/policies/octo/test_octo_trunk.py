"""OctoTrunk logic without Octo: a fake model with Octo's method signatures stands in for OctoModel."""

import numpy as np
import pytest
from octo_testlib import make_checkpoint

from amf_ros._optional import HAS_OCTO
from amf_ros.policies.octo.checkpoint import read_checkpoint
from amf_ros.policies.octo.trunk import OctoTrunk, pad_key_of, readout_embedding


class _TokenGroup:  # octo.model.components.base.TokenGroup: tokens (B, W, n, E), mask (B, W, n)
    def __init__(self, tokens):
        self.tokens = tokens
        self.mask = np.ones(tokens.shape[:-1], bool)


class FakeOctoModel:
    """Octo 1.5's OctoModel surface: create_tasks(texts=), run_transformer(obs, tasks, timestep_pad_mask, train)."""

    def __init__(self, E=384):
        self.E = E
        self.calls = {"create_tasks": 0, "run_transformer": []}

    def create_tasks(self, goals=None, texts=None):
        self.calls["create_tasks"] += 1
        return {"language_instruction": {"input_ids": np.array([[len(t)] for t in texts])}}

    def run_transformer(self, observations, tasks, timestep_pad_mask, train=False):
        img = observations["image_primary"].astype(np.float32)  # (B, W, 256, 256, 3)
        b, w = timestep_pad_mask.shape
        self.calls["run_transformer"].append(b)
        ids = tasks["language_instruction"]["input_ids"].astype(np.float32)  # (B, 1)
        base = img.mean(axis=(2, 3, 4))[..., None, None] + ids[:, None, :, None]  # (B, W, 1, 1)
        tokens = np.broadcast_to(base, (b, w, 2, self.E)).copy()
        tokens[:, :, 1] += 2.0  # two readout tokens: the embedding is their mean (+1)
        return {"readout_action": _TokenGroup(tokens), "obs_primary": _TokenGroup(tokens)}


def _trunk(tmp_path):
    t = object.__new__(OctoTrunk)
    t.info = read_checkpoint(make_checkpoint(tmp_path / "ckpt", wrist=False))
    t.model = FakeOctoModel()
    t.pad_key = pad_key_of(FakeOctoModel.run_transformer)
    t.dataset_name = "bridge_dataset"
    t.feature_dim = t.info.embedding_dim
    t._tasks = {}
    return t


def test_pad_key_follows_installed_octo_signature():
    def run_15(self, observations, tasks, timestep_pad_mask, train=False): ...
    def run_10(self, observations, tasks, pad_mask, train=False): ...
    assert pad_key_of(run_15) == "timestep_pad_mask" and pad_key_of(run_10) == "pad_mask"


def test_readout_embedding_means_tokens():
    tok = np.zeros((2, 2, 3, 4), np.float32)
    tok[..., 0, :] = 3.0
    out = readout_embedding({"readout_action": _TokenGroup(tok)})
    assert out.shape == (2, 2, 4) and np.allclose(out, 1.0)
    with pytest.raises(ValueError, match="no 'readout_action'"):
        readout_embedding({"obs": _TokenGroup(tok)})


def test_embed_episode_windows_batches_and_caches_tasks(tmp_path):
    trunk = _trunk(tmp_path)
    T = 5
    images = np.stack([np.full((120, 160, 3), 10 * t, np.uint8) for t in range(T)])
    emb = trunk.embed_episode(images, "put carrot on plate", batch_size=2)
    assert emb.shape == (T, 384)
    assert trunk.model.calls["run_transformer"] == [2, 2, 1]
    assert trunk.model.calls["create_tasks"] == 2  # batches of 2 and of 1 are two distinct task batches
    # last window position = frame t (mean pixel 10 t) + instruction length + 1 (mean of the 2 readout tokens)
    expected = 10 * np.arange(T) + len("put carrot on plate") + 1.0
    np.testing.assert_allclose(emb[:, 0], expected, atol=0.6)
    trunk.embed_episode(images[:2], "put carrot on plate", batch_size=2)
    assert trunk.model.calls["create_tasks"] == 2  # cached


def test_embed_checks_inputs(tmp_path):
    trunk = _trunk(tmp_path)
    win = trunk.new_window()
    obs = win.add(np.zeros((64, 64, 3), np.uint8))
    assert set(obs) == {"image_primary", "timestep_pad_mask"}
    with pytest.raises(ValueError, match="1 observations but 2 instructions"):
        trunk.embed(obs, ["a", "b"])
    with pytest.raises(ValueError, match="timestep_pad_mask"):
        trunk.embed({"image_primary": obs["image_primary"]}, ["a"])
    feats = trunk.encode_frames({**obs, "instruction": ["a"]})
    assert tuple(feats.shape) == (1, 384)


@pytest.mark.skipif(HAS_OCTO, reason="octo is installed here")
def test_missing_octo_says_what_to_install(tmp_path):
    ckpt = make_checkpoint(tmp_path / "ckpt")
    with pytest.raises(ImportError, match="octo-models/octo"):
        OctoTrunk(ckpt)
    with pytest.raises(ValueError, match="not found"):  # a bad path is reported before the import
        OctoTrunk(tmp_path / "nope")
