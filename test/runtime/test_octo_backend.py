"""The octo backend without DDS: embedding cache (reuse, invalidation), fine-tuning on it, acting, selection."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fake_octo import fake_checkpoint, fake_trunk
from octo_episodes import TASKS
from octo_episodes import octo_episodes as _episodes

from amf_ros.bringup.params import load, node_of, schema
from amf_ros.bringup.params.policy_server import PolicyServerParams
from amf_ros.bringup.params.task_selector import TaskSelectorParams
from amf_ros.data.octo_embeddings import EmbeddingCache
from amf_ros.data.store import EpisodeStore
from amf_ros.policies.octo.actor import OctoActor
from amf_ros.policies.octo.heads import is_octo_policy
from amf_ros.runtime.policy_server import OctoServing
from amf_ros.runtime.task_selector import OctoSelection


def _typed(cls, values):
    """The parameter dataclass ``cls`` from the declared subset of ``values``."""
    names = {p.name for p in schema(node_of(cls))}
    return load(cls, {k: v for k, v in values.items() if k in names})


def _params(tmp_path, ckpt):
    tasks_file = tmp_path / "tasks.yaml"
    tasks_file.write_text("tasks:\n" + "".join(f"  - key: {k}\n    instruction: {v}\n" for k, v in TASKS.items()))
    return {"checkpoint": str(ckpt), "octo_trunk_factory": "fake_octo:fake_trunk", "t5_path": "",
            "octo_dataset": "bridge_dataset", "head_checkpoint": "", "tasks_file": str(tasks_file),
            "image_key": "image_primary", "wrist_image_key": "", "wrist_image_topic": "", "embed_batch_size": 4,
            "checkpoint_dir": str(tmp_path / "ckpts"),
            "dataset_dir": str(tmp_path / "data"), "fine_tune_steps": 4, "fine_tune_batch_size": 8,
            "fine_tune_lr": 1e-3, "alpha_steps": 2, "seed": 0, "ensemble_horizon": 4, "ensemble_exp_weight": 0.0,
            "sticky_gripper_steps": 1, "max_translation": 0.05, "max_rotation": 0.25}


def test_cache_computes_once_and_invalidates_on_instruction_and_checkpoint(tmp_path):
    ckpt = fake_checkpoint(tmp_path / "octo")
    _episodes(tmp_path / "data")
    trunk = fake_trunk(str(ckpt))
    cache = EmbeddingCache(tmp_path / "data", str(ckpt), lambda: trunk, TASKS, batch_size=4)
    first = cache.transitions()
    assert first["state"].shape == (18, 384) and first["action"].shape == (18, 7)
    assert trunk.episodes_embedded == 3 and cache.computed == 3
    assert len(list(cache.root.glob("*.npz"))) == 3 and cache.root.parent.name == "data_octo_embeddings"
    # a new cache object (another process) reads the files: the trunk does not run again
    calls = len(trunk.model.run_calls)
    again = EmbeddingCache(tmp_path / "data", str(ckpt), lambda: trunk, TASKS, batch_size=4).transitions()
    assert len(trunk.model.run_calls) == calls and trunk.episodes_embedded == 3
    np.testing.assert_array_equal(again["state"], first["state"])
    # the embedding is the trunk's output for the episode's own frames (window of 2, last position)
    store = EpisodeStore(tmp_path / "data", create=False)
    eid = store.episode_ids()[1]
    direct = trunk.embed_episode(store.load(eid).observation["image_primary"], TASKS["spoon_on_towel"])
    np.testing.assert_allclose(first["state"][first["episode_index"] == 1], direct, rtol=1e-6)
    # another instruction for a task -> that task's episodes are embedded again, the others are reused
    n = trunk.episodes_embedded
    changed = EmbeddingCache(tmp_path / "data", str(ckpt), lambda: trunk,
                                {**TASKS, "carrot_on_plate": "move the carrot"}, batch_size=4).transitions()
    assert trunk.episodes_embedded == n + 2  # the 2 carrot episodes are re-embedded, the spoon one reused
    assert not np.allclose(changed["state"][:6], first["state"][:6])
    # another Octo checkpoint (different statistics) -> another key directory, everything embedded again
    stats = json.loads((ckpt / "dataset_statistics.json").read_text())
    stats["bridge_dataset"]["action"]["std"][0] = 0.5
    (ckpt / "dataset_statistics.json").write_text(json.dumps(stats))
    other = EmbeddingCache(tmp_path / "data", str(ckpt), lambda: trunk, TASKS, batch_size=4)
    assert other.key != cache.key
    n = trunk.episodes_embedded
    other.transitions()
    assert trunk.episodes_embedded == n + 3
    # a corrupt entry is recomputed, not trusted
    victim = sorted(other.root.glob("*.npz"))[0]
    victim.write_bytes(b"junk")
    n = trunk.episodes_embedded
    EmbeddingCache(tmp_path / "data", str(ckpt), lambda: trunk, TASKS, batch_size=4).transitions()
    assert trunk.episodes_embedded == n + 1


def test_serving_fine_tunes_on_cached_embeddings_and_resumes(tmp_path):
    ckpt = fake_checkpoint(tmp_path / "octo")
    _episodes(tmp_path / "data", n_eps=2)
    serving = OctoServing(_typed(PolicyServerParams, _params(tmp_path, ckpt)))
    assert serving.runtime.checkpoint.name == "round_0000" and is_octo_policy(serving.runtime.checkpoint)
    prior = [p.detach().clone() for p in serving.runtime.policy.prior.parameters()]
    res = serving.runtime.fine_tune()
    assert res.checkpoint.name == "round_0001" and is_octo_policy(res.checkpoint)
    assert serving.trunk.episodes_embedded == 2
    calls = len(serving.trunk.model.run_calls)
    res2 = serving.runtime.fine_tune(steps=3, tasks=["carrot_on_plate"])
    assert res2.checkpoint.name == "round_0002"
    assert len(serving.trunk.model.run_calls) == calls  # second fine-tune: the trunk was not re-run
    acting = serving.runtime.policy
    # the prior is frozen
    assert all(np.array_equal(a.detach(), b) for a, b in zip(acting.prior.parameters(), prior, strict=True))
    # a restart resumes from the newest head made from this Octo checkpoint
    again = OctoServing(_typed(PolicyServerParams, _params(tmp_path, ckpt)))
    assert again.runtime.checkpoint == res2.checkpoint and again.runtime.round == 2
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['nope'\]"):  # refused before any data is read
        serving.runtime.fine_tune(tasks=["nope"])


def test_fine_tune_cancelled_during_embedding_keeps_what_was_embedded(tmp_path):
    from amf_ros.policies.fine_tuning import FineTuneCancelledError

    ckpt = fake_checkpoint(tmp_path / "octo")
    _episodes(tmp_path / "data", n_eps=3)
    serving = OctoServing(_typed(PolicyServerParams, _params(tmp_path, ckpt)))
    polls = []
    with pytest.raises(FineTuneCancelledError, match="embedding episode 2 of 3"):
        serving.runtime.fine_tune(cancelled=lambda: polls.append(1) or len(polls) > 1)
    assert serving.trunk.episodes_embedded == 1 and serving.runtime.round == 0
    assert serving.runtime.fine_tune().round == 1 and serving.trunk.episodes_embedded == 3  # 1 reused, 2 new


def test_actor_postprocesses_octo_chunks(tmp_path):
    ckpt = fake_checkpoint(tmp_path / "octo")
    serving = OctoServing(_typed(PolicyServerParams, _params(tmp_path, ckpt)))
    actor = serving.actor(serving.runtime.policy)
    with pytest.raises(ValueError, match="unknown task"):
        actor.reset("nope")
    actor.reset("carrot_on_plate")
    rng = np.random.default_rng(0)
    out = np.stack([actor({"image": rng.integers(0, 256, (48, 64, 3), dtype=np.uint8)}) for _ in range(6)])
    assert out.shape == (6, 7) and np.all(np.isfinite(out))
    assert np.all(np.abs(out[:, :3]) <= 0.05) and np.all(np.abs(out[:, 3:6]) <= 0.25)
    assert set(np.unique(out[:, 6])) <= {0.0, 1.0}
    assert len(actor.ensembler) == 4  # temporal ensembling over the last 4 chunks
    # the window of 2: the first call pads (mask [False, True]), later calls do not
    win = actor.actor.window
    assert len(win) == 2
    with pytest.raises(ValueError, match="camera image"):
        actor({"state": np.zeros(8)})
    # the checkpoint has a wrist tokenizer (as octo-small-1.5): with a wrist topic the wrist frame is windowed too
    with_wrist = OctoActor(serving.trunk, serving.runtime.policy, wrist=True)
    with_wrist.reset("spoon_on_towel")
    frame, wrist = np.zeros((48, 64, 3), np.uint8), np.zeros((32, 32, 3), np.uint8)
    assert with_wrist({"image": frame, "wrist": wrist}).shape == (7,)
    assert with_wrist.actor.window.wrist_size == (128, 128) and actor.actor.window.wrist_size is None
    with pytest.raises(ValueError, match="wrist image"):
        with_wrist({"image": np.zeros((48, 64, 3), np.uint8)})


def test_selection_scores_on_cached_embeddings(tmp_path):
    from amf_ros.runtime.task_selector import TaskSelection

    ckpt = fake_checkpoint(tmp_path / "octo")
    _episodes(tmp_path / "data", n_eps=4)
    p = _params(tmp_path, ckpt)
    serving = OctoServing(_typed(PolicyServerParams, p))
    serving.runtime.fine_tune()
    sel_octo = OctoSelection(_typed(TaskSelectorParams, p), TASKS)
    head = sel_octo.newest_head()
    assert head is not None and head.name == "round_0001"
    sel = TaskSelection("amf", TASKS, p["dataset_dir"], action_space="eef7", frames_per_episode=4,
                        episode_loader=sel_octo.episode_loader())
    sel.set_policy(sel_octo.load(head), head)
    d = sel.next_task()
    assert d.task in TASKS and not d.warm_start and np.all(np.isfinite(d.scores)) and d.demo_counts == [2, 2]
    assert sel_octo._trunk is None  # every frame came from policy_server's cache: Octo was never loaded here
    with pytest.raises(ValueError, match="not an Octo head"):
        sel_octo.load(tmp_path / "octo")


def test_episode_without_camera_frames_is_a_clear_error(tmp_path):
    ckpt = fake_checkpoint(tmp_path / "octo")
    store = EpisodeStore(tmp_path / "data")
    store.write_episode("carrot_on_plate", TASKS["carrot_on_plate"], [{
        "observation": {"state": np.zeros(8, np.float32)}, "action": np.zeros(7, np.float32),
        "stamp_ns": 1000 + i * 200_000_000} for i in range(3)])
    serving = OctoServing(_typed(PolicyServerParams, _params(tmp_path, ckpt)))
    with pytest.raises(ValueError, match=r"cannot read the camera stream\(s\) \['image_primary'\]"):
        serving.runtime.fine_tune()
    assert not serving.runtime.fine_tuning and serving.runtime.round == 0  # nothing saved, ready for the next call
    with pytest.raises(ValueError, match="needs 'checkpoint'"):
        OctoServing(_typed(PolicyServerParams, {**_params(tmp_path, ckpt), "checkpoint": ""}))
    with pytest.raises(ValueError, match="cannot import trunk factory"):
        OctoServing(_typed(PolicyServerParams,
                              {**_params(tmp_path, ckpt), "octo_trunk_factory": "no_such_module:f"}))
