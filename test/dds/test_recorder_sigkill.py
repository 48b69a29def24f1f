"""A demo_recorder process killed with SIGKILL mid-episode leaves every earlier episode intact; the kill frees
its episode's writer.lock, so on restart the partial episode is dead for sure and recovered at once, however
young (complete chunks only, marked recovered, success unknown), and the node says so. With PNG frames and with
H.264 and AV1 video chunks (the partial episode's video decodes).
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from robot_testutil import (
    IMAGE_TOPIC,
    LivePublisher,
    StatusWatcher,
    recorder_call,
    scripted_sequence,
    wait_for,
    warm_up,
)

pytestmark = pytest.mark.ros

TASK, INSTRUCTION = "pour", "pour the cup"


@pytest.mark.parametrize("codec", ["png", "h264", "av1"])  # video: one MP4 per chunk file, all-or-nothing chunks
def test_sigkill_mid_episode_keeps_earlier_episodes(start_nodes, client_node, tmp_path, codec):
    from amf_ros.data.store import EpisodeStore
    from amf_ros.srv import EndEpisode, StartEpisode

    dataset = tmp_path / "ds"
    params = {"dataset_dir": str(dataset), "sync_mode": "on_action", "image_topics": [IMAGE_TOPIC],
              "max_delay_s": 5.0,  # stream time runs faster than wall time in these scripted sessions
              "chunk_steps": 4, "topic_timeout_s": 5.0, "status_period_s": 0.2, "image_codec": codec}
    procs = start_nodes({"demo_recorder": params}, name="first")
    status = StatusWatcher(client_node)
    live = LivePublisher(client_node)
    warm_up(live, status)

    def start():
        res = recorder_call(client_node, StartEpisode, "/amf/recorder/start_episode",
                            StartEpisode.Request(task=TASK, instruction=INSTRUCTION))
        assert res.ok, res.message
        return res.episode_id

    first = start()
    seq1 = scripted_sequence(client_node.get_clock().now().nanoseconds + 50_000_000, frames=12, seed=1)
    live.publish(seq1)
    # EndEpisode's settle takes a message stamped after the request as proof that its topic has delivered
    # everything before it; these stamps run ahead of the clock, so end only once the clock has passed them
    wait_for(lambda: client_node.get_clock().now().nanoseconds > seq1[-1][1], 10, "the clock to pass the stamps")
    done = recorder_call(client_node, EndEpisode, "/amf/recorder/end_episode", EndEpisode.Request(episode_id=first,
                                                                                                  success=True))
    assert done.ok and done.num_steps == 6, done.message
    store = EpisodeStore(dataset, create=False)
    before = store.load(first)

    second = start()
    # Stamps of the second session follow the first one's (published faster than their stamps advance).
    t2 = max(client_node.get_clock().now().nanoseconds, seq1[-1][1]) + 50_000_000
    live.publish(scripted_sequence(t2, frames=20, seed=2))
    # on_action: the 10th action waits for an observation stamped after it (or the end of the episode).
    wait_for(lambda: status.last.num_steps >= 9, 10, "9 steps of the second episode")
    wait_for(lambda: [p.complete_chunks for p in store.partial()] == [2], 10, "two complete chunks on disk")
    recorder = procs.procs["demo_recorder"]
    recorder.kill()
    recorder.wait(timeout=10)

    store = EpisodeStore(dataset, create=False)
    assert store.episode_ids() == [first]
    partial = store.partial()
    assert [(p.episode_id, p.num_steps, p.writer) for p in partial] == [(second, 8, "gone")]  # lock freed by the kill

    def same_as_before(ep):
        assert ep.meta.to_json() == before.meta.to_json()
        for key in before.steps:
            np.testing.assert_array_equal(ep.steps[key], before.steps[key], err_msg=key)

    same_as_before(store.load(first))

    # Restart with the default recover_min_age_s: the lock is free, so the young partial is recovered at once:
    # its complete chunks become an episode marked as recovered.
    again = start_nodes({"demo_recorder": params}, name="second")
    wait_for(lambda: f"partial episode {second}" in again.log_tail("demo_recorder"), 30, "the recovery report")
    assert "recovered" in again.log_tail("demo_recorder")
    time.sleep(0.2)
    store = EpisodeStore(dataset, create=False)
    assert store.episode_ids() == [first, second] and store.partial() == []
    rec = store.load(second)
    assert len(rec) == 8 and rec.meta.recovered and rec.meta.success is None and rec.meta.task == TASK
    assert rec.meta.image_codec == {"observation/image_primary": codec}
    assert rec.observation["image_primary"].shape[0] == 8
    same_as_before(store.load(first))
    assert again.dead() == {}
