"""EndEpisode right after the last message was published still records every step: the recorder waits
(asynchronously, in its own callback group) for messages in flight before it commits."""

from __future__ import annotations

import time

import pytest
from robot_testutil import IMAGE_TOPIC, LivePublisher, StatusWatcher, call, scripted_sequence, warm_up

pytestmark = pytest.mark.ros


def test_end_episode_waits_for_messages_in_flight(start_nodes, client_node, tmp_path):
    from amf_ros.data.store import EpisodeStore
    from amf_ros.srv import EndEpisode, StartEpisode

    params = {"dataset_dir": str(tmp_path / "ds"), "sync_mode": "on_action", "image_topics": [IMAGE_TOPIC],
              "topic_timeout_s": 5.0, "end_quiet_s": 0.5, "end_timeout_s": 5.0,
              # A burst packs 3 s of stream time into a fraction of a second: keep every message queued, and let
              # the synchroniser wait for the slowest topic instead of deciding steps after 0.5 s of stream time.
              "image_queue_depth": 100, "max_delay_s": 5.0}
    procs = start_nodes({"demo_recorder": params}, name="rec")
    live = LivePublisher(client_node)
    warm_up(live, StatusWatcher(client_node))
    for seed in (1, 2):
        res = call(client_node, StartEpisode, "/amf/recorder/start_episode",
                   StartEpisode.Request(task="t", instruction="do it"))
        assert res.ok, res.message
        t_start = client_node.get_clock().now().nanoseconds
        time.sleep(3.1)  # a 3 s session stamped in the past, as if just recorded: stamps precede EndEpisode
        seq = scripted_sequence(t_start + 10_000_000, frames=60, image_hw=(120, 160), seed=seed)
        live.publish(seq, pause_s=0.0)  # as fast as possible: many messages still queued when EndEpisode comes
        t0 = time.monotonic()
        end = call(client_node, EndEpisode, "/amf/recorder/end_episode",
                   EndEpisode.Request(episode_id=res.episode_id, success=True))
        waited = time.monotonic() - t0
        stats = EpisodeStore(tmp_path / "ds", create=False).meta(res.episode_id).sync_stats if end.ok else {}
        assert end.ok and end.num_steps == 30, (end.message, end.num_steps, stats)
        assert waited >= 0.5, "EndEpisode answers only after the topics were quiet for end_quiet_s"
    assert procs.dead() == {}
