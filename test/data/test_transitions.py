"""The one transitions loader (amf_ros/data/transitions.py): selection, the policy's action space, no episode."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from synthetic_store import write_synthetic_episodes

from amf_ros.data.store import EpisodeStore
from amf_ros.data.transitions import load_transitions
from amf_ros.policies.action_spaces import eef7_to_native


def test_selection_order_and_action_spaces(tmp_path: Path) -> None:
    write_synthetic_episodes(tmp_path, ["reach", "push"])  # reach, push, reach, push; 20 steps each
    store = EpisodeStore(tmp_path, create=False)
    wire = load_transitions(tmp_path)
    assert wire["state"].shape == (80, 39) and wire["action"].shape == (80, 7) and wire["action"].dtype == np.float32
    assert wire["task"].dtype == object and list(wire["task"][::20]) == ["reach", "push", "reach", "push"]
    np.testing.assert_array_equal(wire["episode_index"][::20], [0, 1, 2, 3])
    np.testing.assert_array_equal(wire["step"][:20], np.arange(20))
    native = load_transitions(store, tasks=["push"], action_space="metaworld")
    assert native["action"].shape == (40, 4) and set(native["task"]) == {"push"}
    pushes = wire["task"] == "push"
    np.testing.assert_array_equal(native["action"],
                                  np.stack([eef7_to_native(a) for a in wire["action"][pushes]]).astype(np.float32))
    ids = store.episode_ids()
    picked = load_transitions(store, episode_ids=[ids[3], ids[0]])
    assert list(picked["task"][::20]) == ["push", "reach"]
    np.testing.assert_array_equal(picked["state"][:20], wire["state"][60:])


def test_no_episode_selected_is_none_and_bad_arguments_raise(tmp_path: Path) -> None:
    assert load_transitions(tmp_path / "missing") is None
    write_synthetic_episodes(tmp_path, ["reach"])
    assert load_transitions(tmp_path, tasks=["push"]) is None
    with pytest.raises(ValueError, match="action_space must be one of"):
        load_transitions(tmp_path, action_space="joints")
    with pytest.raises(ValueError, match="has no 'observation/depth'"):
        load_transitions(tmp_path, state_key="depth")
