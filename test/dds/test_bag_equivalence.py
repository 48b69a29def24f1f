"""Bag import equals live recording: the same scripted messages, once published live to the demo_recorder node
over real DDS and once written to a rosbag2 with rosbags and imported (the `amf import bag` path), give the same
episode, array for array (actions, states, images after encoding conversion, every stream's stamps, flags).
"""

from __future__ import annotations

import pytest
from robot_testutil import (
    IMAGE_TOPIC,
    LivePublisher,
    StatusWatcher,
    assert_same_episode,
    recorder_call,
    scripted_sequence,
    steps_decided_live,
    wait_for,
    warm_up,
    write_bag,
)

pytestmark = pytest.mark.ros

TASK, INSTRUCTION = "stack", "stack the red block on the blue block"


def recorder_params(dataset, **over):
    p = {"dataset_dir": str(dataset), "robot": "test", "control_rate_hz": 5.0, "sync_mode": "tick",
         "max_delay_s": 5.0, "image_topics": [IMAGE_TOPIC], "image_codec": "png", "chunk_steps": 4,
         "topic_timeout_s": 5.0, "status_period_s": 0.5}
    p.update(over)
    return p


@pytest.mark.parametrize("storage", ["sqlite3", "mcap"])
def test_bag_import_equals_live_recording(start_nodes, client_node, tmp_path, storage):
    from amf_ros.cli import main as amf_main
    from amf_ros.data.store import EpisodeStore
    from amf_ros.msg import EpisodeInfo
    from amf_ros.srv import EndEpisode, StartEpisode

    procs = start_nodes({"demo_recorder": recorder_params(tmp_path / "live")}, name="rec")
    announced: list = []
    client_node.create_subscription(EpisodeInfo, "/amf/episodes", announced.append, 50)
    live = LivePublisher(client_node)
    status = StatusWatcher(client_node)
    warm_up(live, status)  # topics alive before the start
    res = recorder_call(client_node, StartEpisode, "/amf/recorder/start_episode",
                        StartEpisode.Request(task=TASK, instruction=INSTRUCTION))
    assert res.ok, res.message
    seq = scripted_sequence(client_node.get_clock().now().nanoseconds + 100_000_000, frames=40, seed=1)
    live.publish(seq)
    # Messages of different topics arrive in any order; end only once all of them are in (the last step stays
    # pending until EndEpisode flushes it, exactly as in the import).
    decided = steps_decided_live(live, seq, rate_hz=5.0, mode="tick", max_delay_s=5.0)
    wait_for(lambda: status.last.num_steps >= decided, 20, f"{decided} steps decided by the recorder")
    end = recorder_call(client_node, EndEpisode, "/amf/recorder/end_episode",
                        EndEpisode.Request(episode_id=res.episode_id, success=True))
    assert end.ok and end.num_steps > 0, end.message
    wait_for(lambda: announced, 10, "the episode announcement")

    bag = tmp_path / f"session_{storage}"
    write_bag(bag, seq, storage=storage)
    # `amf import bag` (the CLI), with the recorder's sampling settings.
    rc = amf_main(["import", "bag", str(bag), "--task", TASK, "--instruction", INSTRUCTION, "--dataset",
                   str(tmp_path / "imported"), "--robot", "test", "--rate", "5", "--mode", "tick"])
    assert rc == 0
    imported_store = EpisodeStore(tmp_path / "imported", create=False)
    assert len(imported_store.episode_ids()) == 1

    live_ep = EpisodeStore(tmp_path / "live", create=False).load(res.episode_id)
    bag_ep = imported_store.load(imported_store.episode_ids()[0])
    # 40 frames at 20 Hz with an action every 2nd frame (10 Hz), sampled at 5 Hz: one step per 2 actions.
    assert 9 <= len(live_ep) <= 11, len(live_ep)
    assert live_ep.steps["observation/image_primary"].shape[1:] == (24, 32, 3)
    assert_same_episode(live_ep, bag_ep)
    assert procs.dead() == {}
