"""The state trunk's relative features (PolicyConfig.state_differences): content, normalisation, checkpoints.

The WidowX layout is used as the example: 8-D proprio (gripper xyz first), object xyz at 8, receptacle xyz at 11;
the trunk appends object - gripper and receptacle - object before normalising.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from amf_ros.policies.agent import PolicyConfig, TaskConditionedPolicy
from amf_ros.policies.normalizer import Normalizer
from amf_ros.policies.trunks import StateTrunk, check_differences

WIDOWX = ((0, 8, 3), (8, 11, 3))


def states(n: int = 32, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return rng.uniform(-0.3, 0.3, size=(n, 14)).astype(np.float32)


def toy_transitions(n_episodes: int = 3, steps: int = 10, seed: int = 0) -> dict[str, np.ndarray]:
    s = states(n_episodes * steps, seed)
    action = np.concatenate([np.clip((s[:, 8:11] - s[:, 0:3]) / 0.05, -1, 1) * 0.05,
                             np.zeros((len(s), 3)), np.ones((len(s), 1))], axis=1).astype(np.float32)
    return {"state": s, "action": action, "task": np.asarray(["put"] * len(s)),
            "episode_index": np.repeat(np.arange(n_episodes), steps), "step": np.tile(np.arange(steps), n_episodes)}


def policy(differences=WIDOWX, seed: int = 0) -> TaskConditionedPolicy:
    cfg = PolicyConfig(head="diffusion", trunk="state", task_encoder="hash", action_horizon=1, diffusion_hidden_dim=16,
                       diffusion_num_blocks=1, batch_size=16, seed=seed, state_differences=differences)
    return TaskConditionedPolicy(cfg, action_dim=7, state_dim=14, tasks={"put": "put the carrot on the plate"})


def test_features_are_the_state_then_each_difference():
    s = states()
    trunk = StateTrunk(14, differences=WIDOWX)
    assert trunk.feature_dim == 20
    f = trunk.raw_features(s).numpy()
    np.testing.assert_array_equal(f[:, :14], s)
    np.testing.assert_allclose(f[:, 14:17], s[:, 8:11] - s[:, 0:3], rtol=1e-6, atol=0)  # object - gripper
    np.testing.assert_allclose(f[:, 17:20], s[:, 11:14] - s[:, 8:11], rtol=1e-6, atol=0)  # receptacle - object
    assert StateTrunk(14).raw_features(s).shape == (32, 14)  # no differences: the state alone


def test_normalisation_covers_the_differences_and_wrong_widths_are_refused():
    s = states(64)
    trunk = StateTrunk(14, differences=WIDOWX)
    raw = trunk.raw_features(s).numpy()
    trunk.set_normalizer(Normalizer.fit(raw))
    z = trunk.encode_frames({"state": s}).numpy()
    # every feature, differences included, is standardised by the statistics it was fitted on
    np.testing.assert_allclose(z.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(z.std(0), 1.0, atol=1e-4)
    with pytest.raises(ValueError, match="normalizer width 14 != feature width 20"):
        trunk.set_normalizer(Normalizer.fit(s))
    with pytest.raises(ValueError, match=r"expected shape \(B, 14\)"):
        trunk.raw_features(s[:, :13])


@pytest.mark.parametrize("bad", [[(0, 8)], [(0, 12, 3)], [(0, 8, 0)], [(-1, 8, 3)], [(0.5, 8, 3)]])
def test_malformed_differences_are_refused(bad):
    with pytest.raises(ValueError):
        check_differences(bad, 14)
        PolicyConfig(state_differences=bad)
    with pytest.raises(ValueError):
        StateTrunk(14, differences=bad)


def test_differences_need_the_state_trunk():
    with pytest.raises(ValueError, match="state trunk"):
        PolicyConfig(trunk="image", state_differences=WIDOWX)


def test_first_fit_normalises_the_features_it_feeds_the_head():
    p = policy()
    data = toy_transitions()
    p.fit(data, 2)
    raw = p.trunk.raw_features(data["state"]).numpy().astype(np.float64)
    np.testing.assert_allclose(p.trunk.mean.numpy(), raw.mean(0), rtol=1e-5, atol=1e-6)
    assert p.embedding_dim == 20 + p.task_dim


def test_config_round_trip_and_checkpoint_act_the_same(tmp_path):
    cfg = PolicyConfig(state_differences=[[0, 8, 3], [8, 11, 3]], trunk="state")
    assert cfg.state_differences == WIDOWX
    d = json.loads(json.dumps(cfg.to_dict()))
    assert PolicyConfig.from_dict(d) == cfg
    p = policy()
    p.fit(toy_transitions(), 5)
    out = p.save(tmp_path / "ckpt")
    q = TaskConditionedPolicy.load(out)
    assert q.config.state_differences == WIDOWX and q.trunk.feature_dim == 20
    s = states(4, seed=9)
    np.testing.assert_array_equal(p.act_batch({"state": s}, ["put"] * 4, seed=3),
                                  q.act_batch({"state": s}, ["put"] * 4, seed=3))


def test_a_checkpoint_written_before_the_new_fields_loads_as_the_plain_state_policy(tmp_path):
    p = policy(differences=())
    p.fit(toy_transitions(), 5)
    out = p.save(tmp_path / "old")
    meta_path = out / "meta.json"
    doc = json.loads(meta_path.read_text())
    for key in ("state_differences", "lr_schedule", "ema_decay"):  # what the config held before issue 28
        del doc["meta"]["config"][key]
    meta_path.write_text(json.dumps(doc))
    q = TaskConditionedPolicy.load(out)
    assert q.config.state_differences == () and q.trunk.feature_dim == 14
    assert q.config.lr_schedule == "constant" and q.config.ema_decay == 0.0
    s = states(4, seed=2)
    np.testing.assert_array_equal(p.act_batch({"state": s}, ["put"] * 4, seed=1),
                                  q.act_batch({"state": s}, ["put"] * 4, seed=1))

