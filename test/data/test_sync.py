"""StreamSynchronizer: the action/observation pairing rule, tick vs on_action, late and dead streams."""

from __future__ import annotations

import numpy as np
import pytest
from data_helpers import S, fake_action, fake_image, fake_state

from amf_ros.data.recorder import EpisodeRecorder, record_messages
from amf_ros.data.store import EpisodeStore
from amf_ros.data.sync import StreamSynchronizer, SyncConfig

TOPICS = {"/a": "action", "/s": "state", "/img": "image_primary"}
MS = 1_000_000


def control_loop(n: int, period_ms: int = 200, delay_ms: int = 50, image_lag_ms: int = 0):
    """Observation k at k*period (state value k, image value k); the action computed from it (value k)
    is stamped delay_ms later. Returns messages in *arrival* order (images may arrive late)."""
    msgs = []
    for k in range(n):
        t = k * period_ms * MS
        msgs.append((t, "/s", t, fake_state(t, float(k))))
        msgs.append((t + image_lag_ms * MS, "/img", t, fake_image(t, k)))
        ta = t + delay_ms * MS
        msgs.append((ta, "/a", ta, fake_action(ta, float(k))))
    msgs.sort(key=lambda m: m[0])
    return [(topic, stamp, msg) for _, topic, stamp, msg in msgs]


def run(messages, **cfg):
    sync = StreamSynchronizer(TOPICS, SyncConfig(**cfg))
    out = []
    for m in messages:
        out += sync.feed(*m)
    return out, sync.flush(), sync


def naive_latest_at_tick(messages, ticks):
    """The pitfall: at each tick take the latest message of each stream."""
    pairs = []
    for t in ticks:
        latest = {}
        for topic, stamp, msg in messages:
            if stamp <= t:
                latest[topic] = msg
        pairs.append((latest["/a"].translation[0], latest["/s"].values[0]))
    return pairs


@pytest.mark.parametrize("mode", ["tick", "on_action"])
@pytest.mark.parametrize("delay_ms", [1, 50, 199])
def test_action_pairs_with_the_observation_it_was_computed_from(mode, delay_ms):
    msgs = control_loop(12, delay_ms=delay_ms)
    live, rest, sync = run(msgs, mode=mode)
    steps = live + rest
    assert len(steps) == 12 and sync.stats["steps"] == 12
    for k, s in enumerate(steps):
        assert s.action[0] == k and s.observation["state"][0] == k and s.observation["image_primary"][0, 0, 0] == k
        assert s.stamps["action"] == k * 200 * MS + delay_ms * MS
        assert s.stamps["observation/state"] == k * 200 * MS
    # Steps are emitted live (before flush) once every stream has moved past the action.
    assert len(live) >= 11


def test_naive_latest_at_tick_pairs_action_with_its_consequence():
    msgs = control_loop(6, delay_ms=50)
    ticks = [(k + 1) * 200 * MS for k in range(5)]  # ticks aligned with the observation clock
    naive = naive_latest_at_tick(msgs, ticks)
    assert all(obs == act + 1 for act, obs in naive)  # the pitfall: observation k+1 with action k
    steps, rest, _ = run(msgs)
    assert all(s.observation["state"][0] == s.action[0] for s in steps + rest)


def test_late_images_live_equal_sorted_offline():
    late = control_loop(10, image_lag_ms=80)
    offline = sorted(late, key=lambda m: m[1])
    a, b, _ = run(late)
    c, d, _ = run(offline)
    assert [(s.stamp_ns, s.action[0], s.observation["image_primary"][0, 0, 0]) for s in a + b] == \
           [(s.stamp_ns, s.action[0], s.observation["image_primary"][0, 0, 0]) for s in c + d]
    assert len(a + b) == 10


def test_dead_camera_skips_steps_without_stalling():
    msgs = [m for m in control_loop(20) if not (m[0] == "/img" and m[1] >= 5 * 200 * MS)]
    live, rest, sync = run(msgs, max_obs_age_s=0.5, max_delay_s=0.3)
    # Steps 0-4 have images; 5-7 reuse image 4 (age <= 0.5 s incl. 50 ms delay: 5, 6 only); later are stale.
    assert [int(s.action[0]) for s in live + rest] == [0, 1, 2, 3, 4, 5, 6]
    assert sync.stats["skipped_stale_observation"] == 13
    assert len(live) == 7  # decided live thanks to max_delay_s, not only at flush


def test_tick_mode_downsamples_fast_teleop():
    msgs = []
    for k in range(31):  # 30 Hz observations and actions over 1 s
        t = k * S // 30
        msgs.append(("/s", t, fake_state(t, float(k))))
        msgs.append(("/img", t, fake_image(t, k)))
        msgs.append(("/a", t + 5 * MS, fake_action(t + 5 * MS, 1.0)))
    latest, rest, sync = run(msgs, rate_hz=5.0)
    steps = latest + rest
    assert len(steps) == 6  # ticks at 0, 0.2, ..., 1.0 s after the first action
    assert np.all(np.diff([s.stamp_ns for s in steps]) == 200 * MS)
    for s in steps:  # observation at or before the chosen action
        assert s.stamps["observation/state"] <= s.stamps["action"]
    summed, rest2, _ = run(msgs, rate_hz=5.0, aggregate="sum_delta")
    dx = [s.action[0] for s in summed + rest2]
    assert dx[0] == 1.0 and all(v == 6.0 for v in dx[1:])  # six 30 Hz deltas per 5 Hz step


def test_no_observation_yet_is_counted():
    msgs = [m for m in control_loop(5) if not (m[0] == "/s" and m[1] == 0)]
    steps, rest, sync = run(msgs)
    assert [int(s.action[0]) for s in steps + rest] == [1, 2, 3, 4]
    assert sync.stats["skipped_no_observation"] == 1


def test_unknown_topic_and_bad_config():
    sync = StreamSynchronizer(TOPICS)
    assert sync.feed("/other", 1, object()) == [] and sync.stats["unknown_topic"] == 1
    with pytest.raises(ValueError, match="exactly one"):
        StreamSynchronizer({"/s": "state"})
    with pytest.raises(ValueError, match="mode"):
        SyncConfig(mode="latest")


def test_idle_buffers_stay_bounded():
    sync = StreamSynchronizer(TOPICS)
    sync.pause()
    for k in range(2000):
        t = k * S // 30
        sync.feed("/img", t, fake_image(t, k))
    assert len(sync._streams["image_primary"].msgs) <= 20  # ~max_delay_s of 30 Hz frames


def test_recorder_start_end_and_prestart_observations(tmp_path):
    store = EpisodeStore(tmp_path)
    rec = EpisodeRecorder(store, TOPICS, robot="test")
    msgs = control_loop(10)
    start = 3 * 200 * MS  # the operator presses start after observation 3 arrived
    for m in msgs[:9]:
        rec.feed(*m)
    assert rec.num_steps == 0 and not rec.recording
    eid = rec.start("carrot", "put the carrot on the plate", start_ns=start)
    for m in msgs[9:]:
        rec.feed(*m)
    path = rec.end(success=True)
    ep = store.load(path.name)
    assert ep.episode_id == eid and ep.meta.robot == "test" and ep.meta.topics["image_primary"] == "/img"
    assert ep.steps["action"][:, 0].tolist() == [3, 4, 5, 6, 7, 8, 9]
    assert ep.observation["state"][:, 0].tolist() == [3, 4, 5, 6, 7, 8, 9]
    assert ep.meta.state_names == ["x", "y"] and ep.meta.sync_stats["steps"] == 7
    # Discard leaves nothing; an empty episode is refused and leaves nothing either.
    rec.start("carrot", "again")
    rec.feed(*msgs[-1])
    assert rec.end(True, discard=True) is None
    rec.start("carrot", "empty", start_ns=10 * S)
    with pytest.raises(ValueError, match="no steps"):
        rec.end(True)
    assert len(store) == 1 and not store.partial()


def test_record_messages_equals_recorder(tmp_path):
    msgs = control_loop(8)
    a = EpisodeStore(tmp_path / "a").load(record_messages(EpisodeStore(tmp_path / "a"), msgs, "t", "i", TOPICS).name)
    rec = EpisodeRecorder(EpisodeStore(tmp_path / "b"), TOPICS)
    rec.start("t", "i")
    for m in msgs:
        rec.feed(*m)
    b = EpisodeStore(tmp_path / "b").load(rec.end(True).name)
    assert a.steps.keys() == b.steps.keys()
    for k in a.steps:
        np.testing.assert_array_equal(a.steps[k], b.steps[k])


def test_duplicate_action_stamps_keep_the_first():
    msgs = control_loop(4)
    t = msgs[-1][1]
    msgs.append(("/a", t, fake_action(t, 99.0)))  # same stamp as the last action
    steps, rest, sync = run(msgs, mode="on_action")
    assert [int(s.action[0]) for s in steps + rest] == [0, 1, 2, 3]
    assert sync.stats["skipped_duplicate_stamp"] == 1


def test_episode_metadata_and_amf_inspect_report_each_streams_rate_and_gaps(tmp_path, capsys):
    """A camera silent for 1 s (5 frames at 5 Hz) in a recorded episode: the metadata keeps its measured rate,
    longest gap and dropped frames, the state's are clean, and `amf inspect --episodes` prints both."""
    from amf_ros.cli import main

    msgs = [m for m in control_loop(30) if not (m[0] == "/img" and 10 <= m[1] // (200 * MS) < 15)]
    store = EpisodeStore(tmp_path)
    path = record_messages(store, msgs, "t", "i", TOPICS)
    streams = store.meta(path.name).extra["streams"]
    cam, state = streams["image_primary"], streams["state"]
    assert cam["messages"] == 25 and cam["dropped"] == 5 and cam["max_gap_s"] == pytest.approx(1.2)
    assert cam["nominal_hz"] == pytest.approx(5.0) and cam["rate_hz"] == pytest.approx(24 / 5.8, abs=1e-4)  # 4 decimals
    assert state["messages"] == 30 and state["dropped"] == 0 and state["max_gap_s"] == pytest.approx(0.2)
    assert main(["inspect", str(tmp_path), "--episodes"]) == 0
    out = capsys.readouterr().out
    assert "image_primary: 4.1 Hz (nominal 5.0), max gap 1.20 s, 5 dropped" in out and "state: 5.0 Hz" in out
