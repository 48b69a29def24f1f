"""demo_recorder's runtime without rclpy: the rules (stream topics, start checks, settling, partial episodes, log
throttling) and the DemoRecorder class (messages -> episodes, start/end decisions, the bounded settle wait)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace as NS

import numpy as np
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


def test_quiet_at_is_when_settled_starts_to_hold():
    received, since, quiet = {"/a": 9.95, "/s": 10.02, "/c": -1.0}, 10.0, 0.1
    for stamps in ({}, {"/a": 250}, {"/a": 250, "/s": 250}, {"/a": 250, "/s": 250, "/c": 300}):
        at = rules.quiet_at(stamps, received, 200, since, quiet)
        for now in np.linspace(9.9, 10.3, 81):
            assert rules.settled(stamps, received, 200, since, now, quiet) == (now >= at), (stamps, now, at)
    assert rules.quiet_at({}, received, 200, since, quiet) == pytest.approx(10.12)  # the newest message counts
    assert rules.quiet_at({"/a": 250, "/s": 250, "/c": 300}, received, 200, since, quiet) == float("-inf")


def test_error_throttle_counts_suppressed_lines_per_kind():
    th = rules.ErrorThrottle(period_s=1.0)
    assert th.line(("/c", "enc"), "bad", now=0.0) == "bad"
    assert th.line(("/c", "enc"), "bad", now=0.5) is None
    assert th.line(("/c", "nan"), "nan", now=0.6) == "nan"  # another kind of problem is not hidden
    assert th.line(("/c", "enc"), "bad", now=1.2) == "bad (1 similar messages not logged)"
    assert th.line(("/c", "slow"), "slow", now=0.0, period_s=5.0) == "slow"
    assert th.line(("/c", "slow"), "slow", now=3.0, period_s=5.0) is None  # a kind's own period


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


# -- DemoRecorder -------------------------------------------------------------------------------------------------
A, S, C = "/amf/action", "/amf/observation/state", "/amf/camera/image_raw"
SEC = 1_000_000_000


def header(ns: int) -> NS:
    return NS(stamp=NS(sec=ns // SEC, nanosec=ns % SEC))


def action(ns: int, x: float = 0.01) -> NS:
    return NS(header=header(ns), translation=[x, 0.0, 0.0], rotation=[0.0, 0.0, 0.0], gripper=1.0)


def state(ns: int, v: float = 0.0) -> NS:
    return NS(header=header(ns), names=["s0", "s1"], values=[v, -v])


def image(ns: int, encoding: str = "rgb8") -> NS:
    return NS(header=header(ns), height=2, width=3, encoding=encoding, is_bigendian=0, step=9,
              data=bytes(range(18)))


def recorder(tmp_path, **over):
    from amf_ros.bringup.params import load

    values = {"dataset_dir": str(tmp_path / "ds"), "action_topic": A, "state_topic": S, "image_topics": [C],
              "sync_mode": "on_action", "end_quiet_s": 0.2, "end_timeout_s": 1.0, "max_delay_s": 0.0}
    return rules.DemoRecorder(load("demo_recorder", {**values, **over}))


def feed_steps(rt, t0: int, n: int) -> None:
    """n frames of state + image, each followed 3 ms later by an action."""
    for k in range(n):
        t = t0 + k * 100_000_000
        assert rt.feed(S, state(t, k)) is None and rt.feed(C, image(t)) is None
        assert rt.feed(A, action(t + 3_000_000)) is None


def test_start_checks_then_records_commits_and_announces(tmp_path):
    rt = recorder(tmp_path, end_quiet_s=0.0)
    res = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1)
    assert not res.ok and f"no message on {S}" in res.message and f"no message on {C}" in res.message
    assert rt.status().last_error == res.message  # a refused start is the last error until the next success
    rt.feed(S, state(SEC // 2)), rt.feed(C, image(SEC // 2))
    assert "no publisher on the action topic" in rt.start("t", "do it", "", SEC, action_publishers=0).message
    assert "no instruction" in rt.start("t", "", "", SEC, 1).message
    assert "non-printable" in rt.start("t\0", "do it", "", SEC, 1).message  # no tasks file: any printable key
    assert "at most 128" in rt.start("t" * 5000, "do it", "", SEC, 1).message
    res = rt.start("t", "do it", "note", now_ns=SEC, action_publishers=1)
    assert res.ok and res.episode_id and rt.status().last_error == ""
    assert "already recording" in rt.start("t", "do it", "", SEC, 1).message
    feed_steps(rt, 2 * SEC, 4)
    st = rt.status()
    assert (st.recording, st.episode_id, st.task, st.instruction) == (True, res.episode_id, "t", "do it")
    assert st.topics == [A, C, S] and all(0 <= age < 5 for age in st.topic_age_s)
    assert "not the current episode" in rt.end("other", True, False, now_ns=3 * SEC).message
    end = rt.end(res.episode_id, True, False, now_ns=3 * SEC)
    assert end.ok and end.num_steps == 4 and end.message == "saved 4 steps" and end.settled
    assert end.announce == dict(episode_id=res.episode_id, task="t", instruction="do it", path=end.path,
                                num_steps=4, success=True)
    assert rt.store.meta(res.episode_id).operator_note == "note" and rt.status().episodes_in_store == 1
    assert not rt.status().recording and "not recording" in rt.end(res.episode_id, True, False, 3 * SEC).message


def test_discard_and_empty_episode(tmp_path):
    rt = recorder(tmp_path, end_quiet_s=0.0, topic_timeout_s=3600.0)
    rt.feed(S, state(SEC)), rt.feed(C, image(SEC))
    ep = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    feed_steps(rt, 2 * SEC, 2)
    end = rt.end(ep, False, True, now_ns=3 * SEC)
    assert end.ok and end.message == "discarded" and end.announce is None and rt.store.episode_ids() == []
    ep = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    end = rt.end(ep, True, False, now_ns=3 * SEC)
    assert not end.ok and "no steps recorded" in end.message and rt.status().last_error == end.message


def test_bad_messages_are_refused_logged_once_and_kept_as_last_error(tmp_path):
    rt = recorder(tmp_path)
    line = rt.feed(C, image(SEC, encoding="yuv422"))
    assert line and "yuv422" in line and "message refused" in line
    assert rt.feed(C, image(SEC, encoding="yuv422")) is None  # throttled, still the last error
    assert "yuv422" in rt.status().last_error
    assert "header.stamp is zero" in rt.feed(S, state(0))
    bad = action(SEC)
    bad.translation[1] = float("nan")
    assert "NaN" in rt.feed(A, bad)
    assert rt.rec.last_stamp == {}  # nothing refused reached the synchroniser


def test_end_takes_messages_arriving_while_it_waits(tmp_path):
    """The settle: EndEpisode waits (lock released) while another thread still feeds messages stamped before the
    request; it returns once every topic delivered a message stamped after the request, long before the timeout."""
    rt = recorder(tmp_path, end_quiet_s=5.0, end_timeout_s=5.0, topic_timeout_s=3600.0)
    rt.feed(S, state(SEC)), rt.feed(C, image(SEC))
    ep = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    t_end = 10 * SEC
    result = {}
    ender = threading.Thread(target=lambda: result.update(end=rt.end(ep, True, False, now_ns=t_end)))
    ender.start()
    time.sleep(0.1)
    assert ender.is_alive()  # waiting: nothing is stamped after the request yet
    feed_steps(rt, 2 * SEC, 6)  # in flight: stamped before the request, taken while end() waits
    time.sleep(0.1)
    assert ender.is_alive()
    t0 = time.monotonic()
    rt.feed(S, state(t_end + 1)), rt.feed(C, image(t_end + 1)), rt.feed(A, action(t_end + 2))
    ender.join(timeout=2.0)
    assert not ender.is_alive() and time.monotonic() - t0 < 1.0, "settled by stamps, not by end_quiet_s"
    end = result["end"]
    assert end.ok and end.settled and 0.2 < end.waited_s < 2.0
    assert end.num_steps == 7, end  # the 6 steps fed during the wait + the one that settled the action topic


def test_end_waits_for_quiet_and_never_longer_than_the_timeout(tmp_path):
    rt = recorder(tmp_path, end_quiet_s=0.3, end_timeout_s=0.6, topic_timeout_s=3600.0)
    rt.feed(S, state(SEC)), rt.feed(C, image(SEC))
    ep = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    feed_steps(rt, 2 * SEC, 3)
    end = rt.end(ep, True, False, now_ns=10 * SEC)  # nothing more arrives: quiet after 0.3 s
    assert end.ok and end.settled and 0.3 <= end.waited_s < 0.45 and end.num_steps == 3
    ep = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    feed_steps(rt, 20 * SEC, 2)
    stop = threading.Event()

    def chatter():  # a topic that never goes quiet and never gets past the request's stamp
        k = 0
        while not stop.wait(0.05):
            k += 1
            rt.feed(S, state(20 * SEC + k))

    talker = threading.Thread(target=chatter)
    talker.start()
    try:
        end = rt.end(ep, True, False, now_ns=100 * SEC)
    finally:
        stop.set()
        talker.join()
    assert end.ok and not end.settled and 0.6 <= end.waited_s < 0.75 and end.num_steps == 2


def test_close_wakes_a_waiting_end_and_refuses_new_episodes(tmp_path):
    rt = recorder(tmp_path, end_quiet_s=10.0, end_timeout_s=10.0, topic_timeout_s=3600.0)
    rt.feed(S, state(SEC)), rt.feed(C, image(SEC))
    ep = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    feed_steps(rt, 2 * SEC, 2)
    threading.Timer(0.2, rt.close).start()
    t0 = time.monotonic()
    end = rt.end(ep, True, False, now_ns=10 * SEC)
    assert time.monotonic() - t0 < 1.0 and end.ok and not end.settled and end.num_steps == 2
    assert rt.start("t", "do it", "", SEC, 1).message == "shutting down"
