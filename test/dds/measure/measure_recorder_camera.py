"""Measure how fast demo_recorder ingests 640x480 rgb8 camera frames over real DDS (each with a state and an
action), and what each stored step costs on disk.

Run (from the repository root, after ``source scripts/env.sh``)::

    python test/dds/measure/measure_recorder_camera.py --rate 30 --frames 150 --codec png

Publishes in real time at ``--rate`` (on_action sampling: one step per frame), then reports the publishing
rate, when the recorder had decided every step (ingest rate), EndEpisode time and bytes per stored step.
The frames are smooth synthetic images (robot_testutil.vga_frame), so PNG compresses them far better
than a real camera image.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def main(argv: list[str] | None = None) -> int:
    """Run one measurement and print one line."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rate", type=float, default=30.0, help="camera rate, Hz")
    ap.add_argument("--frames", type=int, default=150)
    ap.add_argument("--codec", choices=["png", "jpeg", "raw"], default="png")
    args = ap.parse_args(argv)
    from amf_ros.bringup.ros_env import free_domain_id, isolated_ros_env

    isolated_ros_env(free_domain_id())
    sys.path.insert(0, str(HERE.parents[1] / "support"))
    import numpy as np
    import rclpy
    import robot_testutil as rt
    import yaml

    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.srv import EndEpisode, StartEpisode

    out = Path(tempfile.mkdtemp(prefix="amf_measure_cam_"))
    params = {"dataset_dir": str(out / "ds"), "sync_mode": "on_action", "control_rate_hz": args.rate,
              "image_topics": [rt.IMAGE_TOPIC], "image_codec": args.codec, "topic_timeout_s": 5.0,
              "status_period_s": 0.1}
    (out / "params.yaml").write_text(yaml.safe_dump({"/**/demo_recorder": {"ros__parameters": params}}))
    images = [rt.vga_frame(k) for k in range(args.frames)]
    rclpy.init()
    try:
        with rt.spinning_node("measure_recorder_camera") as node:
            with NodeProcesses([NodeSpec("demo_recorder", "demo_recorder", str(out / "params.yaml"))],
                               log_dir=out / "logs", env=dict(os.environ)):
                status, live = rt.StatusWatcher(node), rt.LivePublisher(node)
                rt.warm_up(live, status)
                res = rt.recorder_call(node, StartEpisode, "/amf/recorder/start_episode",
                                    StartEpisode.Request(task="c", instruction="c"))
                rng = np.random.default_rng(0)
                t0 = time.monotonic()
                for k in range(args.frames):
                    ns = node.get_clock().now().nanoseconds
                    live.publish([(rt.STATE_TOPIC, ns, "state", rng.normal(size=5)),
                                  (rt.IMAGE_TOPIC, ns, "rgb8", images[k]),
                                  (rt.ACTION_TOPIC, ns + 1_000_000, "action", np.r_[rng.uniform(-0.01, 0.01, 6), 1.0])],
                                 0.0)
                    time.sleep(max(0.0, t0 + (k + 1) / args.rate - time.monotonic()))
                publish_s = time.monotonic() - t0
                rt.wait_for(lambda: status.last.num_steps >= args.frames - 1, 120, "every step decided")
                decided_s = time.monotonic() - t0
                t1 = time.monotonic()
                end = rt.recorder_call(node, EndEpisode, "/amf/recorder/end_episode",
                                    EndEpisode.Request(episode_id=res.episode_id, success=True), 120)
                end_s = time.monotonic() - t1
                size = sum(p.stat().st_size for p in Path(end.path).rglob("*") if p.is_file())
                print(f"{args.codec}: {args.frames} frames published at {args.frames / publish_s:.1f} Hz; all decided "
                      f"after {decided_s:.2f} s (ingest {args.frames / decided_s:.1f} frames/s); EndEpisode "
                      f"{end_s:.2f} s; stored {end.num_steps} steps, {size / max(end.num_steps, 1) / 1e3:.0f} kB/step")
    finally:
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
