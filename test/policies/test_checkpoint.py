"""Checkpoints: bit-exact round trip; corrupt, truncated or mismatched checkpoints give clear errors."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from amf_ros.policies.agent import PolicyConfig, TaskConditionedPolicy
from amf_ros.policies.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

from .conftest import make_demos

CFG = PolicyConfig(head="diffusion", task_encoder="hash", action_horizon=2, diffusion_hidden_dim=16,
                   diffusion_num_blocks=1, batch_size=32)


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    policy = TaskConditionedPolicy(CFG, state_dim=5, action_dim=2, tasks={"a": "task a", "b": "task b"})
    data = make_demos("a", 3)
    policy.fit(data, 20)
    policy.freeze_prior()
    policy.fit(data, 5)
    policy.fit_alpha(data, steps=3)
    path = policy.save(tmp_path_factory.mktemp("ckpt") / "policy")
    return policy, data, path


def test_round_trip_is_bit_exact(trained):
    policy, data, path = trained
    loaded = TaskConditionedPolicy.load(path, expected_config=CFG)
    for a, b in ((policy.head, loaded.head), (policy.prior, loaded.prior), (policy.trunk, loaded.trunk)):
        sa, sb = a.state_dict(), b.state_dict()
        assert sa.keys() == sb.keys()
        assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert loaded.alphas == policy.alphas
    assert loaded.instructions == policy.instructions
    assert np.array_equal(loaded.embed(data), policy.embed(data))
    obs = {"state": data["state"][3]}
    assert np.array_equal(loaded.act(obs, "a", seed=4), policy.act(obs, "a", seed=4))
    assert loaded.loss(data) == policy.loss(data)


def test_overwrite_is_atomic_and_leaves_no_temporaries(trained, tmp_path):
    policy, _, _ = trained
    target = tmp_path / "ck"
    policy.save(target)
    policy.save(target)  # replacing an existing checkpoint
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ck"]
    assert sorted(p.name for p in target.iterdir()) == ["meta.json", "weights.safetensors"]


def test_corrupted_weights_raise_clear_error(trained, tmp_path):
    _, _, path = trained
    bad = tmp_path / "bad"
    save_checkpoint(bad, *load_checkpoint(path))
    blob = bytearray((bad / "weights.safetensors").read_bytes())
    blob[len(blob) // 2] ^= 0xFF
    (bad / "weights.safetensors").write_bytes(bytes(blob))
    with pytest.raises(CheckpointError, match="corrupt: sha256"):
        TaskConditionedPolicy.load(bad)


def test_truncated_meta_and_missing_files(trained, tmp_path):
    _, _, path = trained
    bad = tmp_path / "bad"
    save_checkpoint(bad, *load_checkpoint(path))
    text = (bad / "meta.json").read_text()
    (bad / "meta.json").write_text(text[: len(text) // 2])
    with pytest.raises(CheckpointError, match="not valid JSON"):
        TaskConditionedPolicy.load(bad)
    (bad / "meta.json").unlink()
    with pytest.raises(CheckpointError, match="meta.json is missing"):
        TaskConditionedPolicy.load(bad)
    with pytest.raises(CheckpointError, match="does not exist"):
        TaskConditionedPolicy.load(tmp_path / "nowhere")


def test_config_mismatch_raises(trained):
    _, _, path = trained
    other = PolicyConfig(**{**CFG.to_dict(), "diffusion_hidden_dim": 32})
    with pytest.raises(CheckpointError, match="config mismatch.*diffusion_hidden_dim"):
        TaskConditionedPolicy.load(path, expected_config=other)


def test_shape_mismatch_raises(trained, tmp_path):
    """A checkpoint whose stored config disagrees with its tensors (hand-edited) is rejected by shape."""
    _, _, path = trained
    tensors, meta = load_checkpoint(path)
    meta = json.loads(json.dumps(meta))
    meta["config"]["diffusion_hidden_dim"] = 24
    meta["head_config"]["hidden_dim"] = 24
    save_checkpoint(tmp_path / "edited", tensors, meta)
    with pytest.raises(CheckpointError, match="shape"):
        TaskConditionedPolicy.load(tmp_path / "edited")


def test_untrained_policy_cannot_be_saved(tmp_path):
    policy = TaskConditionedPolicy(CFG, state_dim=5, action_dim=2, tasks={"a": "task a"})
    with pytest.raises(ValueError, match="untrained"):
        policy.save(tmp_path / "x")


def test_loading_keeps_the_callers_thread_count(trained):
    _, _, path = trained
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(2)
        loaded = TaskConditionedPolicy.load(path)
        assert torch.get_num_threads() == 2
        assert loaded.config == CFG  # the stored config is kept as is
    finally:
        torch.set_num_threads(before)


def test_atomic_writes_get_ordinary_permissions(tmp_path):
    """Temporary files/directories are private (0600/0700); the renamed results must have the umask's mode."""
    import os
    import stat

    from amf_ros.atomic import atomic_write_json, process_umask

    umask = process_umask()
    assert umask == os.umask(umask)  # read without side effects, and the real value
    f = atomic_write_json(tmp_path / "r.json", {"a": 1})
    assert stat.S_IMODE(f.stat().st_mode) == 0o666 & ~umask
    d = save_checkpoint(tmp_path / "ckpt", {"w": np.zeros(3, np.float32)}, {"k": 1})
    assert stat.S_IMODE(d.stat().st_mode) == 0o777 & ~umask
