"""EndEpisode waits for messages in flight, within its bound, over real DDS: right after a burst it still records
every step; while messages keep arriving it answers within end_timeout_s (+ slack) and keeps what arrived. The
wait is a condition wait in amf_ros.runtime.demo_recorder (woken by each message), not a polled coroutine."""

from __future__ import annotations

import re
import threading
import time

import pytest
from robot_testutil import (
    ACTION_TOPIC,
    IMAGE_TOPIC,
    LivePublisher,
    StatusWatcher,
    recorder_call,
    scripted_sequence,
    warm_up,
)
from ros_testing import wait_future

pytestmark = pytest.mark.ros


def test_end_episode_waits_for_messages_in_flight(start_nodes, client_node, tmp_path):
    from amf_ros.data.store import EpisodeStore
    from amf_ros.srv import EndEpisode, StartEpisode

    # end_quiet_s above Fast DDS's heartbeat period (3 s): a 3.4 MB burst of images can overflow the transport's
    # buffers on a loaded machine, and reliable DDS resends the lost samples only after the writer's next heartbeat,
    # so delivery pauses for up to 3 s mid-burst. With 0.5 s the recorder took that pause for "nothing in flight"
    # and saved 0-1 of 30 steps, every time with one core held busy (session 36).
    params = {"dataset_dir": str(tmp_path / "ds"), "sync_mode": "on_action", "image_topics": [IMAGE_TOPIC],
              "topic_timeout_s": 5.0, "end_quiet_s": 4.0, "end_timeout_s": 10.0,
              # A burst packs 3 s of stream time into a fraction of a second: keep every message queued, and let
              # the synchroniser wait for the slowest topic instead of deciding steps after 0.5 s of stream time.
              "image_queue_depth": 100, "max_delay_s": 5.0}
    procs = start_nodes({"demo_recorder": params}, name="rec")
    live = LivePublisher(client_node)
    warm_up(live, StatusWatcher(client_node))
    for seed in (1, 2):
        res = recorder_call(client_node, StartEpisode, "/amf/recorder/start_episode",
                            StartEpisode.Request(task="t", instruction="do it"))
        assert res.ok, res.message
        t_start = client_node.get_clock().now().nanoseconds
        time.sleep(3.1)  # a 3 s session stamped in the past, as if just recorded: stamps precede EndEpisode
        seq = scripted_sequence(t_start + 10_000_000, frames=60, image_hw=(120, 160), seed=seed)
        live.publish(seq, pause_s=0.0)  # as fast as possible: many messages still queued when EndEpisode comes
        t0 = time.monotonic()
        end = recorder_call(client_node, EndEpisode, "/amf/recorder/end_episode",
                            EndEpisode.Request(episode_id=res.episode_id, success=True))
        waited = time.monotonic() - t0
        stats = EpisodeStore(tmp_path / "ds", create=False).meta(res.episode_id).sync_stats if end.ok else {}
        assert end.ok and end.num_steps == 30, (end.message, end.num_steps, stats)
        assert waited >= params["end_quiet_s"], "EndEpisode answers only after the topics were quiet for end_quiet_s"
    assert procs.dead() == {}


def test_end_episode_while_messages_keep_arriving_is_bounded_and_keeps_them(start_nodes, client_node, tmp_path):
    """A stream that never settles (stamps behind the request, never quiet): the recorder's settle wait ends at
    end_timeout_s, and the episode holds the steps that arrived while it waited."""
    from amf_ros.srv import EndEpisode, StartEpisode

    end_timeout = 1.0
    # end_quiet_s (its maximum, 10 s) far above end_timeout_s: "nothing arrived for a while" can then never settle
    # the stream before the timeout, even when a loaded machine stalls the publisher thread for a few hundred ms
    # (a CI run under load settled by silence with end_quiet_s 0.3, and the wait this test is about never happened).
    params = {"dataset_dir": str(tmp_path / "ds"), "sync_mode": "on_action", "image_topics": [IMAGE_TOPIC],
              "topic_timeout_s": 5.0, "end_quiet_s": 10.0, "end_timeout_s": end_timeout, "max_delay_s": 5.0}
    procs = start_nodes({"demo_recorder": params}, name="rec")
    live = LivePublisher(client_node)
    warm_up(live, StatusWatcher(client_node))
    res = recorder_call(client_node, StartEpisode, "/amf/recorder/start_episode",
                        StartEpisode.Request(task="t", instruction="do it"))
    assert res.ok, res.message
    t_start = client_node.get_clock().now().nanoseconds
    # Stamps start just after the episode and advance 0.1 ms per frame (a frame takes >= 20 ms to publish): even all
    # 1000 frames end 0.1 s after the start, before the EndEpisode request (>= 1 s after it), so no stream ever
    # settles by its stamps, however fast or slow the machine publishes. (With 10 ms per frame the stamps caught
    # up with the request during the wait on an idle machine and the stream settled.)
    seq = scripted_sequence(t_start + 1_000_000, frames=1000, period_ns=100_000, seed=3)
    actions_sent, stop = [0], threading.Event()

    def publish() -> None:
        for item in seq:
            if stop.is_set():
                return
            live.publish([item], pause_s=0.01)
            actions_sent[0] += item[0] == ACTION_TOPIC

    publisher = threading.Thread(target=publish, daemon=True)
    publisher.start()
    client = client_node.create_client(EndEpisode, "/amf/recorder/end_episode")
    try:
        assert client.wait_for_service(timeout_sec=20.0)
        time.sleep(1.0)
        before = actions_sent[0]
        t0 = time.monotonic()
        end = wait_future(client.call_async(EndEpisode.Request(episode_id=res.episode_id, success=True)), 20.0)
        waited = time.monotonic() - t0
        during = actions_sent[0]
    finally:
        stop.set()
        publisher.join(timeout=10.0)
        client_node.destroy_client(client)
    assert end.ok, end.message
    # The settle wait itself (measured by the recorder, logged with 2 decimals) is what end_timeout_s bounds: never
    # shorter (the code's deadline). An unbounded wait would last as long as the stream, 1000 frames of >= 2
    # messages with 10 ms pauses (>= 20 s), so 10 s tells the two apart with 9 s for a loaded machine's
    # scheduling. The client's round trip adds the commit of the remaining PNG steps and DDS (a loaded run: 2.5 s);
    # wait_future's 20 s bounds it.
    log = procs.log_tail("demo_recorder", 4000)
    match = re.search(r"topics not settled after ([0-9.]+) s", log)
    assert match, log[-1500:]
    settle = float(match.group(1))
    assert end_timeout - 0.005 <= settle < 10.0, f"settle wait {settle:.2f} s"
    assert waited >= settle - 0.005, f"EndEpisode answered after {waited:.2f} s, before its {settle:.2f} s wait"
    # `before` (actions sent when EndEpisode was requested) bounds what the recorder had then from above, so any
    # step beyond it arrived during the wait. How many arrive in 1 s depends on the machine's load (one loaded CI run
    # recorded 9), so the test asserts the property, not a delivery rate.
    assert before < end.num_steps <= during, (before, end.num_steps, during)  # arrivals during the wait are kept
    assert procs.dead() == {}
