"""demo_recorder's runtime without rclpy: the rules (stream topics, start checks, settling, partial episodes, log
throttling) and the DemoRecorder class (messages -> episodes, start/end decisions, the bounded settle wait)."""

from __future__ import annotations

import os
import threading
import time
from types import SimpleNamespace

import numpy as np
import pytest

from amf_ros.runtime import demo_recorder as rules
from amf_ros.runtime.log_lines import ErrorThrottle


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
    assert "no message on /s yet" in rules.start_problem({"/a": 9.0, "/s": -1.0}, 10.0, 2.0, "/a", 1)
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
    th = ErrorThrottle(period_s=1.0)
    assert th.line(("/c", "enc"), "bad", now=0.0) == "bad"
    assert th.line(("/c", "enc"), "bad", now=0.5) is None
    assert th.line(("/c", "nan"), "nan", now=0.6) == "nan"  # another kind of problem is not hidden
    assert th.line(("/c", "enc"), "bad", now=1.2) == "bad (1 similar messages not logged)"
    assert th.line(("/c", "slow"), "slow", now=0.0, period_s=5.0) == "slow"
    assert th.line(("/c", "slow"), "slow", now=3.0, period_s=5.0) is None  # a kind's own period


def crashed_writer(store, n: int = 5):
    """A writer with ``n`` steps (chunks of 2), never committed; ``close()`` it to play the recorder's death."""
    writer = store.begin("t", "do it")
    for k in range(n):
        writer.add_step({"state": np.zeros(3)}, np.zeros(7), stamp_ns=k + 1)
    return writer


def small_store(path):
    from amf_ros.data.store import EpisodeStore, StoreConfig

    return EpisodeStore(path, StoreConfig(chunk_steps=2, threaded=False))


def test_handle_partial_recovers_ignores_or_discards(tmp_path):
    store = small_store(tmp_path / "a")
    writer = crashed_writer(store)
    ep = writer.episode_id
    assert "left as is (writer alive (lock held))" in rules.handle_partial(store, "recover", min_age_s=0)[0]
    writer.close()  # the writer is gone (its lock is free): handled whatever the age
    assert "left as is" in rules.handle_partial(store, "ignore", min_age_s=0)[0]
    lines = rules.handle_partial(store, "recover", min_age_s=3600)
    assert ep in lines[0] and "recovered" in lines[0] and store.episode_ids() == [ep]
    assert len(store.load(ep)) == 4 and store.meta(ep).recovered
    store = small_store(tmp_path / "b")
    writer = crashed_writer(store)
    writer.close()
    (writer.path / "writer.lock").unlink()  # older layout: only the age tells
    assert "left as is (no writer.lock" in rules.handle_partial(store, "discard", min_age_s=3600)[0]
    assert "discarded" in rules.handle_partial(store, "discard", min_age_s=0)[0]
    assert store.partial() == [] and store.episode_ids() == []
    with pytest.raises(ValueError, match="policy"):
        rules.handle_partial(store, "keep", 0)


def test_sweep_acts_on_dead_partials_only_and_reports_only_what_it_did(tmp_path):
    store = small_store(tmp_path)
    own, alive, dead, old, young = (crashed_writer(store) for _ in range(5))
    for w in (dead, old, young):
        w.close()
    for w in (old, young):
        (w.path / "writer.lock").unlink()
    past = time.time() - 7200
    os.utime(old.path, (past, past))  # untouched for two hours
    lines = rules.sweep_partial(store, "recover", min_age_s=3600, own_episode=own.episode_id)
    assert len(lines) == 2 and all("recovered" in line for line in lines)
    assert sorted(store.episode_ids()) == sorted([dead.episode_id, old.episode_id])
    assert sorted(p.episode_id for p in store.partial()) == sorted([own.episode_id, alive.episode_id,
                                                                   young.episode_id])
    assert rules.sweep_partial(store, "recover", 3600, own.episode_id) == []  # nothing new: silent
    alive.close()
    own.close()  # still excluded by id, whatever its lock says
    [line] = rules.sweep_partial(store, "discard", 3600, own.episode_id)
    assert alive.episode_id in line and "discarded" in line
    assert sorted(p.episode_id for p in store.partial()) == sorted([own.episode_id, young.episode_id])


def test_sweep_reports_a_failure_and_keeps_going(tmp_path, monkeypatch):
    store = small_store(tmp_path)
    first, second = crashed_writer(store), crashed_writer(store)
    first.close(), second.close()
    real = store.recover

    def recover(episode_id, min_age_s=0.0):
        if episode_id == first.episode_id:
            raise OSError(28, "No space left on device")
        return real(episode_id, min_age_s)

    monkeypatch.setattr(store, "recover", recover)
    lines = rules.sweep_partial(store, "recover", 0)
    assert any(first.episode_id in ln and "recover failed: OSError" in ln for ln in lines)
    assert store.episode_ids() == [second.episode_id]


# -- DemoRecorder -------------------------------------------------------------------------------------------------
A, S, C = "/amf/action", "/amf/observation/state", "/amf/camera/image_raw"
SEC = 1_000_000_000


def header(ns: int) -> SimpleNamespace:
    return SimpleNamespace(stamp=SimpleNamespace(sec=ns // SEC, nanosec=ns % SEC))


def action(ns: int, x: float = 0.01) -> SimpleNamespace:
    return SimpleNamespace(header=header(ns), translation=[x, 0.0, 0.0], rotation=[0.0, 0.0, 0.0], gripper=1.0)


def state(ns: int, v: float = 0.0) -> SimpleNamespace:
    return SimpleNamespace(header=header(ns), names=["s0", "s1"], values=[v, -v])


def image(ns: int, encoding: str = "rgb8") -> SimpleNamespace:
    return SimpleNamespace(header=header(ns), height=2, width=3, encoding=encoding, is_bigendian=0, step=9,
              data=bytes(range(18)))


def recorder(tmp_path, **over):
    from amf_ros.bringup.params import load
    from amf_ros.bringup.params.demo_recorder import DemoRecorderParams

    values = {"dataset_dir": str(tmp_path / "ds"), "action_topic": A, "state_topic": S, "image_topics": [C],
              "sync_mode": "on_action", "end_quiet_s": 0.2, "end_timeout_s": 1.0, "max_delay_s": 0.0}
    return rules.DemoRecorder(load(DemoRecorderParams, {**values, **over}))


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
    assert rt.status(1).last_error == res.message  # a refused start is the last error until the next success
    assert rt.status(1).not_ready_reason == res.message  # the status says so before anyone asks
    fed_after = time.monotonic()  # every message of this test is received after this
    rt.feed(S, state(SEC // 2)), rt.feed(C, image(SEC // 2))
    assert rt.status(1).not_ready_reason == "" and "no publisher" in rt.status(0).not_ready_reason
    assert "no publisher on the action topic" in rt.start("t", "do it", "", SEC, action_publishers=0).message
    assert "no instruction" in rt.start("t", "", "", SEC, 1).message
    assert "non-printable" in rt.start("t\0", "do it", "", SEC, 1).message  # no tasks file: any printable key
    assert "at most 128" in rt.start("t" * 5000, "do it", "", SEC, 1).message
    res = rt.start("t", "do it", "note", now_ns=SEC, action_publishers=1)
    assert res.ok and res.episode_id and rt.status(1).last_error == ""
    assert "already recording" in rt.start("t", "do it", "", SEC, 1).message
    feed_steps(rt, 2 * SEC, 4)
    st = rt.status(1)
    since = time.monotonic() - fed_after  # an age is measured between two instants inside this interval
    assert (st.recording, st.episode_id, st.task, st.instruction) == (True, res.episode_id, "t", "do it")
    assert st.not_ready_reason == "recording"
    assert st.topics == [A, C, S] and all(0 <= age <= since for age in st.topic_age_s), (st.topic_age_s, since)
    assert "not the current episode" in rt.end("other", True, False, now_ns=3 * SEC).message
    end = rt.end(res.episode_id, True, False, now_ns=3 * SEC)
    assert end.ok and end.num_steps == 4 and end.message == "saved 4 steps" and end.settled
    assert end.announce == dict(episode_id=res.episode_id, task="t", instruction="do it", path=end.path,
                                num_steps=4, success=True)
    assert rt.store.meta(res.episode_id).operator_note == "note" and rt.status(1).episodes_in_store == 1
    assert not rt.status(1).recording and "not recording" in rt.end(res.episode_id, True, False, 3 * SEC).message


def test_discard_and_empty_episode(tmp_path):
    rt = recorder(tmp_path, end_quiet_s=0.0, topic_timeout_s=3600.0)
    rt.feed(S, state(SEC)), rt.feed(C, image(SEC))
    ep = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    feed_steps(rt, 2 * SEC, 2)
    end = rt.end(ep, False, True, now_ns=3 * SEC)
    assert end.ok and end.message == "discarded" and end.announce is None and rt.store.episode_ids() == []
    ep = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    end = rt.end(ep, True, False, now_ns=3 * SEC)
    assert not end.ok and "no steps recorded" in end.message and rt.status(1).last_error == end.message


def test_bad_messages_are_refused_logged_once_and_kept_as_last_error(tmp_path):
    rt = recorder(tmp_path)
    line = rt.feed(C, image(SEC, encoding="yuv422"))
    assert line and "yuv422" in line and "message refused" in line
    assert rt.feed(C, image(SEC, encoding="yuv422")) is None  # throttled, still the last error
    assert "yuv422" in rt.status(1).last_error
    assert "header.stamp is zero" in rt.feed(S, state(0))
    bad = action(SEC)
    bad.translation[1] = float("nan")
    assert "NaN" in rt.feed(A, bad)
    assert rt.rec.last_stamp == {}  # nothing refused reached the synchroniser


def test_end_takes_messages_arriving_while_it_waits(tmp_path):
    """The settle: EndEpisode waits (lock released) while another thread still feeds messages stamped before the
    request; it returns once every topic delivered a message stamped after the request, long before the timeout."""
    rt = recorder(tmp_path, end_quiet_s=10.0, end_timeout_s=10.0, topic_timeout_s=3600.0)  # the largest allowed
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
    assert ender.is_alive()  # still waiting after the in-flight steps: they are stamped before the request
    rt.feed(S, state(t_end + 1)), rt.feed(C, image(t_end + 1)), rt.feed(A, action(t_end + 2))
    ender.join(timeout=60.0)  # bounds a hang only: settled, it returns at once
    assert not ender.is_alive()
    end = result["end"]
    # Settled by the stamps, not by end_quiet_s: the quiet rule holds only after 10 s of waiting and the timeout
    # at 10 s says settled=False (both enforced by the code), so a settled end after less than 10 s (0.2 s of it
    # the test's sleeps) was settled by the messages stamped after the request, on however loaded a machine.
    assert end.ok and end.settled and end.waited_s < 10.0, end
    assert end.num_steps == 7, end  # the 6 steps fed during the wait + the one that settled the action topic


def test_end_waits_for_quiet_and_never_longer_than_the_timeout(tmp_path):
    rt = recorder(tmp_path, end_quiet_s=0.3, end_timeout_s=0.6, topic_timeout_s=3600.0)
    rt.feed(S, state(SEC)), rt.feed(C, image(SEC))
    ep = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    feed_steps(rt, 2 * SEC, 3)
    end = rt.end(ep, True, False, now_ns=10 * SEC)  # nothing more arrives: quiet after 0.3 s
    # settled = by the quiet rule (nothing is stamped after the request), which holds only from 0.3 s on; before
    # the 0.6 s timeout, else settled would be False (both enforced by the code: no wall-clock upper bound needed)
    assert end.ok and end.settled and end.waited_s >= 0.3 and end.num_steps == 3
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
    # Never longer than the timeout: the wait ends at the 0.6 s deadline (not earlier: enforced by the code), and
    # an unbounded wait would never end (the chatter never goes quiet and is stopped only after end() returns);
    # 10 s leaves 9.4 s for a loaded machine to wake the thread.
    assert end.ok and not end.settled and 0.6 <= end.waited_s < 10.0 and end.num_steps == 2, end


def test_close_wakes_a_waiting_end_and_refuses_new_episodes(tmp_path):
    rt = recorder(tmp_path, end_quiet_s=10.0, end_timeout_s=60.0, topic_timeout_s=3600.0)
    rt.feed(S, state(SEC)), rt.feed(C, image(SEC))
    ep = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    feed_steps(rt, 2 * SEC, 2)
    threading.Timer(0.2, rt.close).start()
    end = rt.end(ep, True, False, now_ns=10 * SEC)
    # woken by close(): not by the quiet rule (settled=True, after 10 s) nor by the 60 s deadline (the code's own
    # bounds), so this holds on however loaded a machine
    assert end.waited_s < 60.0 and end.ok and not end.settled and end.num_steps == 2, end
    assert rt.start("t", "do it", "", SEC, 1).message == "shutting down"


def test_recorder_sweep_recovers_a_dead_partial_but_not_its_own_episode(tmp_path):
    rt = recorder(tmp_path, end_quiet_s=0.0, topic_timeout_s=3600.0, recover_min_age_s=3600.0, chunk_steps=2)
    assert rt.p.recover_sweep_period_s == 30.0  # the default: a sweep every 30 s
    rt.feed(S, state(SEC)), rt.feed(C, image(SEC))
    own = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    feed_steps(rt, 2 * SEC, 3)
    other = crashed_writer(rt.store)  # e.g. a second recorder on this dataset that died just now
    assert rt.sweep_partial() == []  # alive: left alone
    other.close()
    [line] = rt.sweep_partial()
    assert other.episode_id in line and "recovered" in line and rt.status(1).episodes_in_store == 1
    assert [p.episode_id for p in rt.store.partial()] == [own]
    end = rt.end(own, True, False, now_ns=3 * SEC)
    assert end.ok and end.num_steps == 3 and rt.status(1).episodes_in_store == 2


def test_recorder_sweep_never_holds_up_messages(tmp_path, monkeypatch):
    """A recovery's I/O runs without the recorder's lock: feed() goes on while the sweep is busy."""
    rt = recorder(tmp_path, end_quiet_s=0.0, topic_timeout_s=3600.0, chunk_steps=2)
    crashed_writer(rt.store).close()
    busy, release = threading.Event(), threading.Event()
    real = rt.store.recover

    def slow_recover(*args, **kwargs):
        busy.set()
        release.wait(60)
        return real(*args, **kwargs)

    monkeypatch.setattr(rt.store, "recover", slow_recover)
    sweeper = threading.Thread(target=rt.sweep_partial)
    sweeper.start()
    try:
        assert busy.wait(60)
        assert rt.feed(S, state(SEC)) is None and rt.status(1).topic_age_s
        # ordering, not timing: the sweep is still held inside recover (released only below, or after 60 s), so
        # feed() and status() returned without waiting for it
        assert sweeper.is_alive() and not release.is_set()
    finally:
        release.set()
        sweeper.join(10)
    assert not sweeper.is_alive() and len(rt.store.episode_ids()) == 1


def test_rerecord_discards_the_episode_in_progress_and_starts_again_in_one_call(tmp_path):
    rt = recorder(tmp_path, end_quiet_s=0.0)
    assert "not recording" in rt.rerecord("", "", "", SEC, 1).message
    feed_steps(rt, SEC // 2, 1)  # topics heard
    first = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1)
    feed_steps(rt, 2 * SEC, 3)
    refused = rt.rerecord("t", "", "", 3 * SEC, action_publishers=0)  # could not start: nothing discarded
    assert not refused.ok and "no publisher" in refused.message and f"still recording {first.episode_id}" in \
        refused.message and rt.status(1).episode_id == first.episode_id and rt.rec.num_steps == 3
    again = rt.rerecord("", "", "second try", 3 * SEC, action_publishers=1)
    assert again.ok and again.episode_id != first.episode_id and first.episode_id in again.message
    st = rt.status(1)
    assert (st.recording, st.episode_id, st.task, st.instruction) == (True, again.episode_id, "t", "do it")
    assert not rt.store.partial() or [p.episode_id for p in rt.store.partial()] == [again.episode_id]
    feed_steps(rt, 4 * SEC, 2)
    end = rt.end(again.episode_id, True, False, now_ns=5 * SEC)
    assert end.ok and end.num_steps == 2 and rt.store.episode_ids() == [again.episode_id]
    assert rt.store.meta(again.episode_id).operator_note == "second try"


def test_free_text_longer_than_the_store_keeps_is_refused_saying_the_limit(tmp_path):
    """Issue 33 item 7: a 1 MB instruction and a 1 MB note were stored verbatim (index.json of 1 MB, rewritten at
    every commit). StartEpisode and re-record refuse them, naming the field and its limit, before anything
    starts or is discarded; the answer quotes at most 40 characters of the text."""
    from amf_ros.data.schema import MAX_INSTRUCTION_CHARS, MAX_NOTE_CHARS

    rt = recorder(tmp_path, end_quiet_s=0.0)
    feed_steps(rt, SEC // 2, 1)  # topics heard
    huge = "x" * 1_000_000
    for instruction, note, field, limit in [(huge, "", "instruction", MAX_INSTRUCTION_CHARS),
                                            ("do it", huge, "operator note", MAX_NOTE_CHARS)]:
        res = rt.start("t", instruction, note, SEC, 1)
        assert not res.ok and f"{field} of 1000000 characters is too long (at most {limit})" in res.message, res
        assert len(res.message) < 200 and not rt.status(1).recording
    edge = rt.start("t", "y" * MAX_INSTRUCTION_CHARS, "z" * MAX_NOTE_CHARS, SEC, 1)  # at the limit: kept
    assert edge.ok, edge.message
    feed_steps(rt, 2 * SEC, 2)
    refused = rt.rerecord("t", "do it", huge, 3 * SEC, 1)
    assert not refused.ok and f"at most {MAX_NOTE_CHARS}" in refused.message
    assert f"still recording {edge.episode_id}" in refused.message and rt.rec.num_steps == 2
    assert rt.end(edge.episode_id, True, False, now_ns=4 * SEC).ok
    meta = rt.store.meta(edge.episode_id)
    assert len(meta.instruction) == MAX_INSTRUCTION_CHARS and len(meta.operator_note) == MAX_NOTE_CHARS
    assert (rt.store.root / "index.json").stat().st_size < 2 * MAX_INSTRUCTION_CHARS + 1000


def test_an_episode_the_estop_interrupted_is_discarded_and_none_starts_while_engaged(tmp_path):
    """The arm's e-stop (its latched ArmStatus): an episode during which it engaged is discarded at EndEpisode, even
    when the operator calls it a success or a failure, and saying why; no episode starts while it is engaged."""
    rt = recorder(tmp_path, end_quiet_s=0.0, topic_timeout_s=3600.0)
    rt.feed(S, state(SEC)), rt.feed(C, image(SEC))
    assert rt.observe_arm(False, 0) is None  # the arm's status at start: released, never engaged
    ep = rt.start("t", "do it", "", now_ns=SEC, action_publishers=1).episode_id
    feed_steps(rt, 2 * SEC, 3)
    line = rt.observe_arm(True, 1)
    assert line is not None and ep in line and "discarded at EndEpisode" in line and rt.status(1).last_error == line
    assert rt.observe_arm(True, 1) is None  # said once
    end = rt.end(ep, False, False, now_ns=3 * SEC)
    assert not end.ok and "e-stop" in end.message and "discarded, nothing saved" in end.message, end.message
    assert end.announce is None and rt.store.episode_ids() == [] and rt.store.partial() == []
    assert rt.status(1).not_ready_reason == "the arm's e-stop is engaged"
    assert "e-stop is engaged" in rt.start("t", "do it", "", SEC, 1).message
    rt.observe_arm(False, 1)
    # an engage and release between two of the arm's statuses (depth 1): the count of engagements still tells
    ep = rt.start("t", "do it", "", now_ns=4 * SEC, action_publishers=1).episode_id
    feed_steps(rt, 5 * SEC, 2)
    assert rt.observe_arm(False, 2) is not None
    assert not rt.end(ep, True, False, now_ns=6 * SEC).ok and rt.store.episode_ids() == []
    # released all along: saved as before
    ep = rt.start("t", "do it", "", now_ns=7 * SEC, action_publishers=1).episode_id
    feed_steps(rt, 8 * SEC, 2)
    end = rt.end(ep, True, False, now_ns=9 * SEC)
    assert end.ok and end.num_steps == 2 and rt.store.episode_ids() == [ep]
