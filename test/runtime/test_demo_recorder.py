"""demo_recorder's ROS-free rules: stream topics, start checks, settling, partial episodes, log throttling."""

from __future__ import annotations

import pytest

from amf_ros.runtime import demo_recorder as rules


def test_stream_topics_names_every_camera_and_refuses_clashes():
    assert rules.stream_topics("/a", "/s", ["/c0", "/c1"]) == {"/a": "action", "/c0": "image_primary",
                                                              "/c1": "image_1", "/s": "state"}
    assert rules.stream_topics("/a", "", [], []) == {"/a": "action"}
    assert rules.stream_topics("/a", "/s", ["/w"], ["image_wrist"])["/w"] == "image_wrist"
    with pytest.raises(ValueError, match="image_keys"):
        rules.stream_topics("/a", "/s", ["/c0", "/c1"], ["image_primary"])
    with pytest.raises(ValueError, match="distinct"):
        rules.stream_topics("/a", "/a", [])


def test_start_problem_names_silent_topics_and_a_missing_teleop():
    received = {"/a": -1.0, "/s": 9.5, "/c": 5.0}
    msg = rules.start_problem(received, now=10.0, timeout_s=2.0, action_topic="/a", action_publishers=0)
    assert "no message on /c for 2.0 s" in msg and "/s" not in msg.replace("/a", "")
    assert "no publisher on the action topic /a" in msg
    assert rules.start_problem({"/a": -1.0, "/s": 9.5}, 10.0, 2.0, "/a", 1) == ""


def test_settled_when_stamped_after_the_end_or_quiet_since_the_request():
    received = {"/a": 9.95, "/s": 9.99}
    assert not rules.settled({"/a": 100, "/s": 100}, received, t_end_ns=200, since=10.0, now=10.0, quiet_s=0.1)
    assert rules.settled({"/a": 100, "/s": 250}, received, t_end_ns=200, since=10.0, now=10.11, quiet_s=0.1)
    assert not rules.settled({"/a": 100, "/s": 250}, received, t_end_ns=200, since=10.0, now=10.05, quiet_s=0.1)
    # Long-silent topics still wait quiet_s after the request (queued messages are taken first).
    old = {"/a": 1.0, "/s": 2.0}
    assert not rules.settled({}, old, t_end_ns=200, since=10.0, now=10.05, quiet_s=0.1)
    assert rules.settled({}, old, t_end_ns=200, since=10.0, now=10.11, quiet_s=0.1)


def test_error_throttle_counts_suppressed_lines_per_kind():
    th = rules.ErrorThrottle(period_s=1.0)
    assert th.line(("/c", "enc"), "bad", now=0.0) == "bad"
    assert th.line(("/c", "enc"), "bad", now=0.5) is None
    assert th.line(("/c", "nan"), "nan", now=0.6) == "nan"  # another kind of problem is not hidden
    assert th.line(("/c", "enc"), "bad", now=1.2) == "bad (1 similar messages not logged)"


def test_handle_partial_recovers_ignores_or_discards(tmp_path):
    import numpy as np

    from amf_ros.data.store import EpisodeStore, StoreConfig

    def crashed_store(path):
        store = EpisodeStore(path, StoreConfig(chunk_steps=2, threaded=False))
        writer = store.begin("t", "do it")
        for k in range(5):
            writer.add_step({"state": np.zeros(3)}, np.zeros(7), stamp_ns=k + 1)
        return store, writer.episode_id  # never committed: as if the recorder died here

    store, ep = crashed_store(tmp_path / "a")
    assert "left as is" in rules.handle_partial(store, "recover", min_age_s=3600)[0]
    assert "left as is" in rules.handle_partial(store, "ignore", min_age_s=0)[0]
    lines = rules.handle_partial(store, "recover", min_age_s=0)
    assert ep in lines[0] and "recovered" in lines[0] and store.episode_ids() == [ep]
    assert len(store.load(ep)) == 4 and store.meta(ep).recovered
    store, ep = crashed_store(tmp_path / "b")
    assert "discarded" in rules.handle_partial(store, "discard", min_age_s=0)[0]
    assert store.partial() == [] and store.episode_ids() == []
    with pytest.raises(ValueError, match="policy"):
        rules.handle_partial(store, "keep", 0)
