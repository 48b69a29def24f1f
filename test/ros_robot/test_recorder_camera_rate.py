"""demo_recorder keeps up with a 640x480 RGB camera at 30 Hz over real DDS (reliable QoS): every frame that was
paired with an action is stored, losslessly (PNG), with its own stamp; zero dropped frames.
"""

from __future__ import annotations

import time

import numpy as np
import pytest
from robot_testutil import (ACTION_TOPIC, IMAGE_TOPIC, STATE_TOPIC, LivePublisher, StatusWatcher, call, wait_for,
                            warm_up)

pytestmark = [pytest.mark.ros]

FRAMES, RATE_HZ = 60, 30.0


def frame(k: int) -> np.ndarray:
    """A 480x640 camera-like image (smooth gradients + a moving block), distinct per frame."""
    yy, xx = np.mgrid[0:480, 0:640]
    img = np.stack([(xx // 3 + k) % 256, (yy // 2) % 256, ((xx + yy) // 5 + 3 * k) % 256], axis=-1).astype(np.uint8)
    img[(k * 7) % 440:(k * 7) % 440 + 40, 100:160] = 255
    return img


def test_recorder_stores_every_frame_of_a_30hz_vga_camera(start_nodes, client_node, tmp_path):
    from amf_ros.data.store import EpisodeStore
    from amf_ros.srv import EndEpisode, StartEpisode

    params = {"dataset_dir": str(tmp_path / "ds"), "sync_mode": "on_action", "control_rate_hz": RATE_HZ,
              "image_topics": [IMAGE_TOPIC], "image_codec": "png", "topic_timeout_s": 5.0, "status_period_s": 0.2}
    procs = start_nodes({"demo_recorder": params}, name="cam")
    status = StatusWatcher(client_node)
    live = LivePublisher(client_node)
    warm_up(live, status)
    res = call(client_node, StartEpisode, "/amf/recorder/start_episode",
               StartEpisode.Request(task="cam", instruction="look"))
    assert res.ok, res.message
    images = [frame(k) for k in range(FRAMES)]
    rng = np.random.default_rng(0)
    period = 1.0 / RATE_HZ
    t_start = time.monotonic()
    stamps = []
    for k in range(FRAMES):  # real time: one frame, its state and the action taken on it per period
        ns = client_node.get_clock().now().nanoseconds
        stamps.append(ns)
        live.publish([(STATE_TOPIC, ns, "state", rng.normal(size=5)), (IMAGE_TOPIC, ns, "rgb8", images[k]),
                      (ACTION_TOPIC, ns + 1_000_000, "action", np.r_[rng.uniform(-0.01, 0.01, 6), 1.0])], 0.0)
        time.sleep(max(0.0, t_start + (k + 1) * period - time.monotonic()))
    wall = time.monotonic() - t_start
    wait_for(lambda: status.last.num_steps >= FRAMES - 1, 30, f"{FRAMES - 1} steps decided")
    lag = time.monotonic() - t_start - wall
    end = call(client_node, EndEpisode, "/amf/recorder/end_episode", EndEpisode.Request(episode_id=res.episode_id,
                                                                                         success=True))
    assert end.ok and end.num_steps == FRAMES, (end.message, end.num_steps)
    ep = EpisodeStore(tmp_path / "ds", create=False).load(res.episode_id)
    np.testing.assert_array_equal(ep.steps["stamp/observation/image_primary"], np.array(stamps))
    for k in range(FRAMES):
        np.testing.assert_array_equal(ep.steps["observation/image_primary"][k], images[k])
    assert ep.meta.sync_stats.get("late_messages", 0) == 0
    print(f"published {FRAMES} VGA frames in {wall:.2f} s ({FRAMES / wall:.1f} Hz); stored {len(ep)}; the recorder "
          f"had decided all but the last step {lag:.2f} s after the last frame (status period 0.2 s)")
    assert procs.dead() == {}
