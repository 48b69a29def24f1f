"""Per-stream rate, gaps, dropped/duplicated samples and slow-stream warnings (amf_ros/data/stream_health.py)."""

from __future__ import annotations

import pytest

from amf_ros.data.stream_health import StreamHealth, summarize

S = 1_000_000_000
P = S // 30  # a 30 Hz camera's period, ns


def camera_at_half_rate_mid_episode(health: StreamHealth, t0: int) -> list[tuple[str, str]]:
    """30 Hz for 3 s, 15 Hz for 3 s, 30 Hz for 3 s (every other frame lost in the middle); returns the events."""
    events, t = [], t0
    for period, n in ((P, 90), (2 * P, 45), (P, 90)):
        for _ in range(n):
            health.feed("image_primary", t)
            events += health.events()
            t += period
    return events


def test_a_camera_at_half_rate_mid_episode_is_reported_once_each_way_and_counted():
    health = StreamHealth({"image_primary": "/amf/camera/image_raw"}, min_fraction=0.8, window_s=2.0)
    t0 = 100 * S
    for k in range(60):  # heard at 30 Hz before the episode
        health.feed("image_primary", t0 - (60 - k) * P)
    health.begin(t0)
    events = camera_at_half_rate_mid_episode(health, t0)
    assert [level for level, _ in events] == ["warn", "info"], events
    assert "/amf/camera/image_raw at" in events[0][1] and "nominal 30.0 Hz" in events[0][1]
    report = health.end()["image_primary"]
    assert report["nominal_hz"] == pytest.approx(30.0, abs=0.5)
    assert report["min_recent_hz"] == pytest.approx(15.0, abs=0.6)  # a 2 s window entirely inside the slow part
    assert report["dropped"] == 45 and report["duplicated"] == 0 and report["out_of_order"] == 0
    assert report["max_gap_s"] == pytest.approx(2 * P / S, abs=1e-4)  # JSON keeps 4 decimals
    assert report["messages"] == 225 and report["rate_hz"] == pytest.approx(224 / (9 - 1 / 30), rel=1e-3)
    assert 2.0 < report["slow_s"] < 4.0  # about the slow part, shifted by the window
    assert "image_primary: 25.0 Hz (nominal 30.0)" in summarize({"image_primary": report})


def test_steady_stream_no_warning_and_between_episodes_nothing_counts():
    health = StreamHealth({"state": "/s"}, min_fraction=0.8, window_s=1.0)
    health.feed("state", 5 * S)  # before any episode: history only
    health.begin(10 * S)
    for k in range(50):
        health.feed("state", 10 * S + k * (S // 10))
    assert health.events() == [] and health.warnings() == []
    report = health.end()["state"]
    assert report["messages"] == 50 and report["dropped"] == 0 and report["nominal_hz"] == pytest.approx(10.0)
    health.feed("state", 20 * S)
    assert health.reports()["state"].messages == 50  # idle: the last episode's numbers stay for the status


def test_duplicated_and_out_of_order_stamps_are_counted_not_taken():
    health = StreamHealth({"state": "/s"}, window_s=1.0)
    health.begin(None)  # bag import: the episode starts at its first message
    for t in (S, 2 * S, 2 * S, 3 * S, S // 2 + 2 * S):
        health.feed("state", t)
    r = health.end()["state"]
    assert (r["messages"], r["duplicated"], r["out_of_order"]) == (3, 1, 1)


def test_idle_rate_before_the_episode_does_not_hide_the_stepping_rate():
    """A simulator publishes its state at 2 Hz while idle and 20 Hz while stepped: the nominal rate is the larger."""
    health = StreamHealth({"state": "/s"}, min_fraction=0.8, window_s=1.0)
    for k in range(10):
        health.feed("state", k * (S // 2))
    health.begin(10 * S)
    for k in range(40):
        health.feed("state", 10 * S + k * (S // 20))
    assert health.reports()["state"].nominal_hz == pytest.approx(20.0)


def test_a_dead_stream_goes_to_zero_while_another_one_runs():
    health = StreamHealth({"image_primary": "/cam", "state": "/s"}, min_fraction=0.5, window_s=1.0)
    health.begin(0)
    events = []
    for k in range(60):  # both at 10 Hz for 2 s, then the camera stops for 4 s
        t = k * (S // 10)
        health.feed("state", t)
        if k < 20:
            health.feed("image_primary", t)
        events += health.events()
    assert events and events[0][0] == "warn" and events[0][1].startswith("/cam at ")
    assert health.reports()["image_primary"].recent_hz == 0.0 and len(health.warnings()) == 1


def test_bad_settings_are_refused():
    with pytest.raises(ValueError, match="min_fraction"):
        StreamHealth({"s": "/s"}, min_fraction=1.5)


def test_the_action_stream_is_measured_but_never_reported_slow():
    health = StreamHealth({"action": "/a"}, min_fraction=0.8, window_s=1.0)
    health.begin(0)
    for t in [k * (S // 10) for k in range(20)] + [5 * S + k * (S // 10) for k in range(20)]:  # a 3 s pause
        health.feed("action", t)
    assert health.events() == [] and health.warnings() == []
    r = health.end()["action"]
    # measured when a message arrives: for the first one after the pause, the 1 s window ending lag_s (0.5 s)
    # before it lies inside the pause
    assert r["min_recent_hz"] == 0.0 and r["dropped"] == 30 and r["max_gap_s"] == 3.1 and r["slow_s"] == 0
