"""demo_recorder under bad input, over real DDS: each case gets a clear error response or log line, the node keeps
running, and nothing already recorded is lost.

Cases: StartEpisode with missing topics, without an instruction, with a 1 MB instruction or note, and while
recording; EndEpisode with a wrong id, when idle, and for an episode without steps; an image with an unsupported
encoding; a state and an action with NaN; an unstamped action.
"""

from __future__ import annotations

import numpy as np
import pytest
from robot_testutil import (
    ACTION_TOPIC,
    IMAGE_TOPIC,
    STATE_TOPIC,
    LivePublisher,
    StatusWatcher,
    recorder_call,
    scripted_sequence,
    wait_for,
    warm_up,
)

pytestmark = pytest.mark.ros

TASK, INSTRUCTION = "wipe", "wipe the table"
PERIOD = 50_000_000


def test_recorder_refuses_bad_input_and_keeps_what_it_recorded(start_nodes, client_node, tmp_path):
    from amf_ros.data.store import EpisodeStore
    from amf_ros.srv import EndEpisode, StartEpisode

    # Stream time runs 5x faster than wall time here: max_delay_s must cover a topic lagging behind the others.
    params = {"dataset_dir": str(tmp_path / "ds"), "sync_mode": "on_action", "control_rate_hz": 10.0,
              "max_delay_s": 5.0,
              "image_topics": [IMAGE_TOPIC], "topic_timeout_s": 3.0, "chunk_steps": 4, "status_period_s": 0.3}
    procs = start_nodes({"demo_recorder": params}, name="rec")
    status = StatusWatcher(client_node)

    def start(task=TASK, instruction=INSTRUCTION, note=""):
        return recorder_call(client_node, StartEpisode, "/amf/recorder/start_episode",
                             StartEpisode.Request(task=task, instruction=instruction, note=note))

    def end(episode_id, success=True, discard=False):
        return recorder_call(client_node, EndEpisode, "/amf/recorder/end_episode",
                             EndEpisode.Request(episode_id=episode_id, success=success, discard=discard))

    # Missing topics: nothing published yet, no action publisher.
    res = start()
    assert not res.ok and not res.episode_id
    for topic in (STATE_TOPIC, IMAGE_TOPIC):
        assert f"no message on {topic}" in res.message
    assert f"no publisher on the action topic {ACTION_TOPIC}" in res.message
    live = LivePublisher(client_node)
    warm_up(live, status)
    res = start(instruction="")
    assert not res.ok and "no instruction" in res.message
    huge = "x" * 1_000_000  # issue 33 item 7: refused with the limit, never stored (index.json stayed 1 MB)
    res = start(instruction=huge)
    assert not res.ok and "instruction of 1000000 characters is too long (at most 1000)" in res.message
    res = start(note=huge)
    assert not res.ok and "operator note of 1000000 characters is too long (at most 2000)" in res.message
    assert len(res.message) < 200 and not res.episode_id
    assert not end("ep_nothing").ok  # idle: nothing to end

    def fresh_start():  # the refused starts above took a while (each call waits for its handshake): the topics are
        # heard again first, and a start refused only because one went quiet meanwhile is simply asked again
        ns = live.node.get_clock().now().nanoseconds - 500_000_000
        live.publish([(t, ns, kind, v) for t, _, kind, v in scripted_sequence(ns, frames=1, seed=99)[:2]], 0.0)
        r = start()
        assert r.ok or "no message on" in r.message, r.message
        return r if r.ok else None

    res = wait_for(fresh_start, 30, "StartEpisode accepted with every topic heard", poll=0.1)
    again = start()
    assert not again.ok and f"already recording episode {res.episode_id}" in again.message

    t0 = client_node.get_clock().now().nanoseconds + 100_000_000
    part1 = scripted_sequence(t0, frames=10, seed=1)
    tb = t0 + 10 * PERIOD
    nan_state = np.full(5, np.nan)
    bad = [(STATE_TOPIC, tb, "state", nan_state),
           (IMAGE_TOPIC, tb, "yuv422", np.zeros((24, 32, 3), np.uint8)),
           (ACTION_TOPIC, tb + 3_000_000, "action", np.array([np.nan, 0, 0, 0, 0, 0, 1.0])),
           (ACTION_TOPIC, 0, "action", np.array([0.02, 0, 0, 0, 0, 0, 1.0])),  # unstamped
           (ACTION_TOPIC, tb + 10_000_000, "action", np.array([0.01, 0, 0, 0, 0, 0, 1.0]))]  # valid
    part2 = scripted_sequence(tb + PERIOD, frames=10, seed=2)
    live.publish(part1 + bad + part2)
    wait_for(lambda: status.last.num_steps >= 10, 10, "the recorder to record the published steps")

    wrong = end("ep_not_this_one")
    assert not wrong.ok and "ep_not_this_one" in wrong.message and res.episode_id in wrong.message
    wait_for(lambda: status.last.recording and status.last.episode_id == res.episode_id, 5, "still recording")
    done = end(res.episode_id)
    assert done.ok and done.num_steps == 11, (done.message, done.num_steps)

    log = procs.log_tail("demo_recorder", 20000)
    assert "unsupported" in log or "not supported" in log, log
    assert "'yuv422'" in log and "NaN" in log and "header.stamp is zero" in log

    store = EpisodeStore(tmp_path / "ds", create=False)
    ep = store.load(res.episode_id)
    assert len(ep) == 11 and ep.meta.task == TASK and ep.meta.success
    assert np.isfinite(ep.steps["observation/state"]).all() and np.isfinite(ep.steps["action"]).all()
    # The valid action after the refused messages is stored with the last VALID state and image (frame 9).
    frame9_state = [v for t, ts, k, v in part1 if t == STATE_TOPIC][-1]
    frame9_image = [v for t, ts, k, v in part1 if t == IMAGE_TOPIC][-1]
    step = int(np.argmax(ep.steps["stamp/action"] == tb + 10_000_000))
    np.testing.assert_array_equal(ep.steps["action"][step], np.float32([0.01, 0, 0, 0, 0, 0, 1.0]))
    np.testing.assert_array_equal(ep.steps["observation/state"][step], frame9_state.astype(np.float32))
    np.testing.assert_array_equal(ep.steps["observation/image_primary"][step], frame9_image)

    # An episode without a single step is refused, and the recorded one is untouched.
    empty = start()
    assert empty.ok
    refused = end(empty.episode_id)
    assert not refused.ok and "no steps" in refused.message
    assert store.episode_ids() == [res.episode_id]
    again = store.load(res.episode_id)
    for key in ep.steps:
        np.testing.assert_array_equal(again.steps[key], ep.steps[key])
    assert procs.dead() == {}
