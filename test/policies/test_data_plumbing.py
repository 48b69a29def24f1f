"""Chunking within episodes, normalizer, frame cache, trunks, task encoders."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fp_bounds import assert_two_paths_close, fan_in_sum

from amf_ros.policies.chunking import action_chunks
from amf_ros.policies.language import HashEncoder
from amf_ros.policies.normalizer import Normalizer
from amf_ros.policies.trunks import FrameCache, ImageTrunk, StateTrunk


def test_chunks_stay_within_episodes_in_any_row_order():
    actions = np.arange(7, dtype=np.float32)[:, None]  # frame id as the action
    ep = np.array([0, 0, 0, 1, 1, 1, 1])
    step = np.array([0, 1, 2, 0, 1, 2, 3])
    perm = np.array([5, 0, 3, 6, 2, 1, 4])
    chunks, mask = action_chunks(actions[perm], ep[perm], step[perm], horizon=3)
    want = {0: ([0, 1, 2], [1, 1, 1]), 1: ([1, 2, 2], [1, 1, 0]), 2: ([2, 2, 2], [1, 0, 0]),
            3: ([3, 4, 5], [1, 1, 1]), 5: ([5, 6, 6], [1, 1, 0]), 6: ([6, 6, 6], [1, 0, 0])}
    for row, frame in enumerate(perm):
        if frame in want:
            assert chunks[row, :, 0].tolist() == want[frame][0]
            assert mask[row, :, 0].astype(int).tolist() == want[frame][1]
    with pytest.raises(ValueError, match="duplicate"):
        action_chunks(actions[:2], np.array([0, 0]), np.array([1, 1]), 2)


def test_normalizer_round_trip_and_mask():
    x = np.random.default_rng(0).normal(3.0, 2.0, size=(500, 3)).astype(np.float32)
    norm = Normalizer.fit(x, mask=np.array([True, True, False]))
    z = norm.normalize(x)
    assert abs(z[:, 0].mean()) < 1e-5 and abs(z[:, 0].std() - 1) < 1e-3
    assert np.array_equal(z[:, 2], x[:, 2])  # masked dim passes through raw (e.g. gripper)
    assert np.allclose(norm.unnormalize(z), x, atol=1e-5)
    assert np.array_equal(Normalizer.from_state(norm.state()).normalize(x), z)
    with pytest.raises(ValueError, match="last dim"):
        norm.normalize(np.zeros((2, 4)))


def test_frame_cache_runs_the_trunk_once_per_frame():
    trunk = StateTrunk(4)
    calls = []
    original = trunk.encode_frames
    trunk.encode_frames = lambda f: (calls.append(len(f["state"])), original(f))[1]
    cache = FrameCache(trunk)
    s = np.random.default_rng(0).normal(size=(6, 4)).astype(np.float32)
    first = cache.features({"state": s})
    again = cache.features({"state": np.concatenate([s[::-1], s[:2]])})
    assert sum(calls) == 6 and len(cache) == 6
    assert torch.equal(again[:6], first.flip(0))
    assert cache.stats.hits == 8 and cache.stats.misses == 6
    assert torch.equal(first, trunk.encode_frames({"state": s}))


def test_image_trunk_shapes_and_cache_equality():
    torch.manual_seed(0)
    trunk = ImageTrunk(feature_dim=16).eval()
    imgs = np.random.default_rng(0).integers(0, 255, size=(5, 32, 32, 3), dtype=np.uint8)
    out = trunk.encode_frames({"image": imgs})
    assert out.shape == (5, 16)
    # batches of 2: the same float32 sums (convolutions, the 2 x 2 average pool, Linear, LayerNorm), maybe in
    # another kernel's order (test/support/fp_bounds.py)
    assert_two_paths_close(FrameCache(trunk, batch_size=2).features({"image": imgs}), out, fan_in_sum(trunk) + 4,
                           what="frame cache in batches of 2")
    with pytest.raises(ValueError, match="image"):
        trunk.encode_frames({"image": imgs[..., 0]})


def test_hash_encoder_is_deterministic_unit_norm():
    enc = HashEncoder(16)
    a = enc.encode(["open the drawer", "close the drawer", "open the drawer"])
    assert a.shape == (3, 16)
    assert np.allclose(np.linalg.norm(a, axis=1), 1)
    assert np.array_equal(a[0], a[2]) and not np.allclose(a[0], a[1])


def test_minilm_encoder_semantics_and_cache(minilm_encoder, monkeypatch):
    texts = ["open the drawer", "pull the drawer open", "press the button"]
    emb = minilm_encoder.encode(texts)
    assert emb.shape == (3, 384) and emb.dtype == np.float32
    assert np.allclose(np.linalg.norm(emb, axis=1), 1, atol=1e-5)
    assert emb[0] @ emb[1] > emb[0] @ emb[2] + 0.1  # paraphrases are closer than unrelated tasks
    import amf_ros.policies.language as language

    monkeypatch.setattr(language, "load_minilm", lambda: pytest.fail("cached instructions re-ran the model"))
    assert np.array_equal(minilm_encoder.encode(texts[::-1]), emb[::-1])
