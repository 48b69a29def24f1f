"""The replay store of a pre-trained checkpoint (training/pretrain.py write_replay_store, bringup/pretrained.py
ensure_replay_store): the very demonstrations pre-training learned from, as an episode store the fine-tune reads back
to the same states and labels; written once beside the checkpoint, refused for a checkpoint without its config."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

pytest.importorskip("metaworld")

from amf_ros.bringup.pretrained import ensure_replay_store
from amf_ros.data.store import EpisodeStore
from amf_ros.data.transitions import load_transitions
from amf_ros.envs.metaworld_rollouts import demos_to_transitions
from amf_ros.training.pretrain import PretrainConfig, pretraining_demos

CONFIG = PretrainConfig(tasks=["reach", "push"], demos=3, steps=1, task_encoder="hash")


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    """A directory with the pretrain.json `amf pretrain` writes (the replay store reads only its config)."""
    ckpt = tmp_path_factory.mktemp("cache") / "pretrained_x"
    ckpt.mkdir()
    (ckpt / "pretrain.json").write_text(json.dumps({"config": dataclasses.asdict(CONFIG)}))
    return ckpt


def test_the_store_reads_back_to_the_pretraining_states_and_labels(checkpoint):
    store_dir = ensure_replay_store(checkpoint)
    assert store_dir == checkpoint.parent / "pretrained_x_replay"
    store = EpisodeStore(store_dir, create=False)
    assert store.episode_ids() == ["pretrain_0000", "pretrain_0001", "pretrain_0002"]
    assert [store.meta(e).task for e in store.episode_ids()] == ["reach"] * 3  # mismatched: the first half
    want = demos_to_transitions(pretraining_demos(CONFIG))
    got = load_transitions(store_dir, action_space="metaworld")
    np.testing.assert_array_equal(got["state"], want["state"])
    np.testing.assert_array_equal(got["episode_index"], want["episode_index"])
    # labels go native -> 7-D wire (x 0.01 m) -> float32 on disk -> native (/ 0.01): float32 round-off of values
    # in [-1, 1], a few ulp (1 ulp = 1.2e-7 at 1)
    np.testing.assert_allclose(got["action"], np.clip(want["action"], -1, 1), rtol=0, atol=1e-6)


def test_it_is_written_once(checkpoint):
    store_dir = ensure_replay_store(checkpoint)
    stamp = (store_dir / "pretrain_0000" / "meta.json").stat().st_mtime_ns
    assert ensure_replay_store(checkpoint) == store_dir
    assert (store_dir / "pretrain_0000" / "meta.json").stat().st_mtime_ns == stamp


def test_a_checkpoint_without_its_pretraining_config_is_refused(tmp_path):
    (tmp_path / "ckpt").mkdir()
    with pytest.raises(ValueError, match="no pretrain.json with an `amf pretrain` config.*replay_dir of your own"):
        ensure_replay_store(tmp_path / "ckpt")
    assert not (tmp_path / "ckpt_replay").exists()
