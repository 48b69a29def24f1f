"""demo_recorder keeps up with a 640x480 RGB camera at 30 Hz over real DDS (reliable QoS): every frame that was
paired with an action is stored, losslessly (PNG), with its own stamp; zero dropped frames.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
import robot_testutil as rt

pytestmark = [pytest.mark.ros]

FRAMES, RATE_HZ = 60, 30.0


def test_recorder_stores_every_frame_of_a_30hz_vga_camera(start_nodes, client_node, tmp_path):
    from amf_ros.data.store import EpisodeStore
    from amf_ros.srv import EndEpisode, StartEpisode

    # max_delay_s 5 (default 0.5): this test is about the recorder keeping up with and storing every frame, not about
    # how it pairs a frame that arrives after the later state and action messages. After a stall (one CI run: every
    # stream at 5 Hz for 2 s), the node caught up topic by topic and stream time ran 0.5 s past an action whose frame
    # it had not taken yet, so that step was paired, as designed, with the frame before (docs/data.md, max_delay_s)
    params = {"dataset_dir": str(tmp_path / "ds"), "sync_mode": "on_action", "control_rate_hz": RATE_HZ,
              "image_topics": [rt.IMAGE_TOPIC], "image_codec": "png", "topic_timeout_s": 5.0, "status_period_s": 0.2,
              "max_delay_s": 5.0}
    procs = start_nodes({"demo_recorder": params}, name="cam")
    status = rt.StatusWatcher(client_node)
    live = rt.LivePublisher(client_node)
    rt.warm_up(live, status)
    res = rt.recorder_call(client_node, StartEpisode, "/amf/recorder/start_episode",
                           StartEpisode.Request(task="cam", instruction="look"))
    assert res.ok, res.message
    images = [rt.vga_frame(k) for k in range(FRAMES)]
    rng = np.random.default_rng(0)
    period = 1.0 / RATE_HZ
    t_start = time.monotonic()
    stamps = []
    for k in range(FRAMES):  # real time: one frame, its state and the action taken on it per period
        ns = client_node.get_clock().now().nanoseconds
        stamps.append(ns)
        live.publish([(rt.STATE_TOPIC, ns, "state", rng.normal(size=5)), (rt.IMAGE_TOPIC, ns, "rgb8", images[k]),
                      (rt.ACTION_TOPIC, ns + 1_000_000, "action", np.r_[rng.uniform(-0.01, 0.01, 6), 1.0])], 0.0)
        time.sleep(max(0.0, t_start + (k + 1) * period - time.monotonic()))
    wall = time.monotonic() - t_start
    rt.wait_for(lambda: status.last.num_steps >= FRAMES - 1, 30, f"{FRAMES - 1} steps decided")
    lag = time.monotonic() - t_start - wall
    end = rt.recorder_call(client_node, EndEpisode, "/amf/recorder/end_episode",
                           EndEpisode.Request(episode_id=res.episode_id, success=True))
    assert end.ok and end.num_steps == FRAMES, (end.message, end.num_steps)
    ep = EpisodeStore(tmp_path / "ds", create=False).load(res.episode_id)
    np.testing.assert_array_equal(ep.steps["stamp/observation/image_primary"], np.array(stamps))
    for k in range(FRAMES):
        np.testing.assert_array_equal(ep.steps["observation/image_primary"][k], images[k])
    assert ep.meta.sync_stats.get("late_messages", 0) == 0
    print(f"published {FRAMES} VGA frames in {wall:.2f} s ({FRAMES / wall:.1f} Hz); stored {len(ep)}; the recorder "
          f"had decided all but the last step {lag:.2f} s after the last frame (status period 0.2 s)")
    assert procs.dead() == {}


def test_a_camera_dropping_to_half_rate_mid_episode_is_warned_on_the_status_and_kept_in_the_metadata(
        start_nodes, client_node, tmp_path):
    """A 30 Hz camera loses every other frame for 2 s mid-episode (state and actions keep 30 Hz): the status
    carries a rate warning for the camera while it is slow (and none for the state), the log says so, and the
    committed episode's metadata keeps the camera's measured rates and the dropped frames."""
    from amf_ros.data.store import EpisodeStore
    from amf_ros.srv import EndEpisode, StartEpisode

    params = {"dataset_dir": str(tmp_path / "ds"), "sync_mode": "on_action", "control_rate_hz": RATE_HZ,
              "image_topics": [rt.IMAGE_TOPIC], "image_codec": "raw", "topic_timeout_s": 5.0, "status_period_s": 0.1,
              "rate_window_s": 1.0, "min_rate_fraction": 0.55}
    # 0.55: the camera at half rate (15 Hz in a 1 s window) is below 16.5 Hz; the state stream keeps clear of it
    # even when this test's publishing thread stalls for ~0.4 s (a CI run measured the state at 18 Hz that way and
    # 0.8 warned for it too).
    procs = start_nodes({"demo_recorder": params}, name="cam_slow")
    status = rt.StatusWatcher(client_node)
    warnings_seen: list[str] = []
    from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

    from amf_ros.msg import RecorderStatus

    client_node.create_subscription(RecorderStatus, "/amf/recorder/status",
                                    lambda m: warnings_seen.extend(m.rate_warnings),
                                    QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE,
                                               durability=DurabilityPolicy.TRANSIENT_LOCAL))
    live = rt.LivePublisher(client_node)
    rt.warm_up(live, status)
    res = rt.recorder_call(client_node, StartEpisode, "/amf/recorder/start_episode",
                           StartEpisode.Request(task="cam", instruction="look"))
    assert res.ok, res.message
    img = np.zeros((48, 64, 3), np.uint8)
    period_ns = int(1e9 / RATE_HZ)
    t0 = client_node.get_clock().now().nanoseconds
    t_start = time.monotonic()
    slow = range(60, 120)  # frames 60-119 (2 s): the camera sends every other one; then 2 s at full rate, time for
    for k in range(180):   # the recent rate (a 1 s window ending lag_s = 0.5 s back) to recover
        ns = t0 + k * period_ns
        seq = [(rt.STATE_TOPIC, ns, "state", np.zeros(5))]
        if k not in slow or k % 2 == 0:
            seq.append((rt.IMAGE_TOPIC, ns, "rgb8", img))
        seq.append((rt.ACTION_TOPIC, ns + 1_000_000, "action", np.r_[np.zeros(6), 1.0]))
        live.publish(seq, 0.0)
        time.sleep(max(0.0, t_start + (k + 1) / RATE_HZ - time.monotonic()))
    end = rt.recorder_call(client_node, EndEpisode, "/amf/recorder/end_episode",
                        EndEpisode.Request(episode_id=res.episode_id, success=True), 30)
    assert end.ok, end.message
    assert any(w.startswith(f"{rt.IMAGE_TOPIC} at") for w in warnings_seen), warnings_seen
    assert not any(w.startswith(rt.STATE_TOPIC) for w in warnings_seen), warnings_seen
    log = procs.log_tail("demo_recorder", 20000)
    assert f"{rt.IMAGE_TOPIC} at" in log and f"{rt.IMAGE_TOPIC} back to" in log, log[-2000:]
    streams = EpisodeStore(tmp_path / "ds", create=False).meta(res.episode_id).extra["streams"]
    cam, state = streams["image_primary"], streams["state"]
    assert cam["nominal_hz"] == pytest.approx(RATE_HZ, rel=0.02) and cam["min_recent_hz"] <= 16.0
    assert cam["dropped"] == 30 and cam["messages"] == 150 and cam["slow_s"] > 0.5
    assert state["dropped"] == 0 and state["messages"] == 180 and state["slow_s"] == 0
    assert procs.dead() == {}
