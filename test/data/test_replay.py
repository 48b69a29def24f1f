"""data/replay.py: replayed rows join the recorded ones with their own episode indices and a marker column, the
minibatch weights give each side its share whatever the sizes, and bad replay settings are refused with the reason."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.data.replay import (
    REPLAYED,
    STATES_FILE,
    ReplaySettingsError,
    StateReplay,
    check_fraction,
    mix,
    recorded_rows,
    replay_cache,
    replay_instructions,
    row_weights,
    stack_episodes,
    write_state_replay,
)


def _rows(n: int, episodes: int, task: str, width: int = 3, start: int = 0) -> dict[str, np.ndarray]:
    per = n // episodes
    return {"state": np.arange(n * width, dtype=np.float32).reshape(n, width),
            "action": np.ones((n, 4), np.float32), "task": np.full(n, task, dtype=object),
            "episode_index": np.repeat(np.arange(start, start + episodes), per).astype(np.int64),
            "step": np.tile(np.arange(per), episodes).astype(np.int64), "actor": np.zeros(n, np.uint8)}


def test_mix_puts_replay_first_with_its_own_episode_indices():
    replay, recorded = _rows(12, 3, "reach"), _rows(10, 2, "push")
    out = mix(recorded, replay)
    assert list(out[REPLAYED]) == [True] * 12 + [False] * 10
    assert list(out["task"]) == ["reach"] * 12 + ["push"] * 10
    # recorded episodes 0, 1 become 3, 4: no (episode_index, step) pair repeats, so no chunk spans the two sides
    assert sorted(set(out["episode_index"][12:])) == [3, 4]
    pairs = set(zip(out["episode_index"], out["step"], strict=True))
    assert len(pairs) == 22
    np.testing.assert_array_equal(recorded_rows(out)["state"], recorded["state"])
    assert REPLAYED not in recorded_rows(out)


def test_mix_refuses_another_robots_states_and_an_empty_side():
    with pytest.raises(ValueError, match="state is \\(5,\\) per step.*same robot"):
        mix(_rows(10, 2, "push"), _rows(10, 2, "reach", width=5))
    with pytest.raises(ValueError, match="rows on both sides"):
        mix(_rows(10, 2, "push"), {"task": np.zeros(0, object)})


@pytest.mark.parametrize("n_replay,n_new,r", [(12, 10, 0.5), (300, 20, 0.5), (5, 400, 0.25), (1, 1, 0.9)])
def test_row_weights_give_each_side_its_share_whatever_the_sizes(n_replay, n_new, r):
    replayed = np.r_[np.ones(n_replay, bool), np.zeros(n_new, bool)]
    w = row_weights(replayed, r)
    # shares are sums of equal terms: exact up to float64 summation round-off (n terms, relative ~n * 1e-16)
    np.testing.assert_allclose([w[replayed].sum(), w[~replayed].sum()], [r, 1 - r], rtol=1e-12)
    assert np.ptp(w[replayed]) == 0 and np.ptp(w[~replayed]) == 0  # uniform within a side


def test_row_weights_without_replay_are_uniform_draws_and_bad_fractions_are_refused():
    assert row_weights(np.zeros(5, bool), 0.5) is None and row_weights(np.ones(5, bool), 0.0) is None
    with pytest.raises(ValueError, match="record a demonstration first"):
        row_weights(np.ones(5, bool), 0.5)
    for bad in (1.0, -0.1, 2):
        with pytest.raises(ValueError, match="replay_fraction must be in \\[0, 1\\)"):
            check_fraction(bad)


def test_replay_cache_says_what_is_missing(tmp_path):
    assert replay_cache("", 0.0, "metaworld") is None  # no replay: nothing is read or required
    with pytest.raises(ValueError, match="replay_dir is empty"):
        replay_cache("", 0.5, "metaworld")
    with pytest.raises(ValueError, match="is not a directory"):
        replay_cache(tmp_path / "missing", 0.5, "metaworld")
    with pytest.raises(ReplaySettingsError, match="Octo backend"):
        replay_cache(tmp_path, 0.5, "eef7", state_key=None)
    assert replay_cache(tmp_path, 0.5, "metaworld").episodes() == []  # an empty store: the fine-tune says so


def test_stack_episodes_numbers_each_cached_episode_after_the_last():
    """EpisodeCache reads each episode on its own, numbered from 0 (an intervention episode may hold several runs):
    stacked, no (episode_index, step) pair repeats."""
    parts = [_rows(6, 1, "reach"), _rows(8, 2, "reach"), _rows(6, 1, "push")]
    out = stack_episodes(parts)
    assert list(np.unique(out["episode_index"])) == [0, 1, 2, 3]
    assert len(set(zip(out["episode_index"], out["step"], strict=True))) == 20
    with pytest.raises(ValueError, match="no replayed episodes"):
        stack_episodes([])


def test_stored_states_come_back_per_episode_for_the_policy_whose_key_made_them(tmp_path):
    """A camera policy's replay (stored states, data/replay.py StateReplay): read back episode by episode as written,
    mixed like an episode store's, and only for the key that made them."""
    rows = {**_rows(12, 3, "reach", width=5), "task": np.array(["reach"] * 6 + ["push"] * 6)}
    write_state_replay(tmp_path / "replay", rows, "camera-abc", {"reach": "reach it", "push": "push it"})
    replay = replay_cache(tmp_path / "replay", 0.5, "eef7", state_key="camera-abc")
    assert isinstance(replay, StateReplay) and replay.state_key == "camera-abc"
    episodes = replay.episodes()
    assert len(episodes) == 3 and [len(ep["task"]) for _, ep in episodes] == [4, 4, 4]
    back = stack_episodes([ep for _, ep in episodes])
    np.testing.assert_array_equal(back["state"], rows["state"])  # stored float32, read back bit for bit
    assert list(back["task"]) == list(rows["task"])
    assert replay_instructions(replay) == {"reach": "reach it", "push": "push it"}
    mixed = mix(_rows(4, 1, "new", width=5), back)
    assert mixed[REPLAYED].sum() == 12 and "actor" not in mixed  # a column only the recorded rows have is dropped
    with pytest.raises(ReplaySettingsError, match="camera-abc.*not those of the camera policy"):
        replay_cache(tmp_path / "replay", 0.5, "eef7", state_key="camera-other")
    with pytest.raises(ReplaySettingsError, match="not those of the state policy"):
        replay_cache(tmp_path / "replay", 0.5, "metaworld")
    with pytest.raises(ReplaySettingsError, match=f"has no {STATES_FILE}"):  # an episode store for a camera policy
        replay_cache(tmp_path, 0.5, "eef7", state_key="camera-abc")


def test_a_stored_state_replay_refuses_what_it_cannot_use(tmp_path):
    rows = _rows(4, 1, "reach")
    with pytest.raises(ValueError, match="no instruction"):
        write_state_replay(tmp_path, rows, "camera-abc", {})
    with pytest.raises(ValueError, match="needs the key"):
        write_state_replay(tmp_path, rows, "", {"reach": "r"})
    assert not (tmp_path / STATES_FILE).exists()
    (tmp_path / STATES_FILE).write_bytes(b"not a zip")  # e.g. a disk that filled while another tool wrote it
    with pytest.raises(ValueError, match="not a readable replay"):
        StateReplay(tmp_path)
    with pytest.raises(ReplaySettingsError, match="not a readable replay"):  # a node ends for good, with the reason
        replay_cache(tmp_path, 0.5, "eef7", state_key="camera-abc")
