"""Measure one scripted demonstration per Metaworld task through sim_bridge + scripted_teleop + demo_recorder.

Run (from the repository root, after ``source scripts/env.sh``)::

    python test/dds/measure/measure_demos.py

Uses the three nodes' sections of config/sim.yaml (20 Hz, on_action sampling), each node its own process over
real DDS in a random ROS_DOMAIN_ID; prints recorded steps, simulator steps, success and wall time per task
(from StartEpisode to the /amf/episodes announcement).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
TASKS = ("reach", "push", "faucet-open", "faucet-close", "drawer-open", "drawer-close")


def main() -> int:
    """Record one demonstration per task and print a line per task."""
    from amf_ros.bringup.ros_env import free_domain_id, isolated_ros_env

    isolated_ros_env(free_domain_id())
    sys.path.insert(0, str(HERE.parents[1] / "support"))
    import rclpy
    import yaml
    from robot_testutil import call, recorder_call, spinning_node, wait_for

    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.msg import EpisodeInfo
    from amf_ros.srv import ResetTask, StartEpisode, TaskSuccess

    out = Path(tempfile.mkdtemp(prefix="amf_measure_demos_"))
    config = yaml.safe_load((REPO / "config" / "sim.yaml").read_text())
    sections = {f"/**/{n}": config[f"/**/{n}"] for n in ("sim_bridge", "scripted_teleop", "demo_recorder")}
    sections["/**/demo_recorder"]["ros__parameters"]["dataset_dir"] = str(out / "dataset")
    (out / "params.yaml").write_text(yaml.safe_dump(sections))
    rclpy.init()
    try:
        with spinning_node("measure_demos") as node:
            seen: list = []
            node.create_subscription(EpisodeInfo, "/amf/episodes", seen.append, 50)

            def start(task: str):
                res = recorder_call(node, StartEpisode, "/amf/recorder/start_episode", StartEpisode.Request(task=task))
                return res if res.ok else None

            specs = [NodeSpec(n, n, str(out / "params.yaml")) for n in sections]
            with NodeProcesses(specs, log_dir=out / "logs", env=dict(os.environ)):
                for task in TASKS:
                    assert call(node, ResetTask, "/amf/sim/reset", ResetTask.Request(task=task, seed=1), 60).ok
                    t0 = time.monotonic()
                    res = wait_for(lambda task=task: start(task), 30, f"StartEpisode({task})", poll=0.3)
                    info = wait_for(lambda res=res: next((m for m in seen if m.episode_id == res.episode_id), None),
                                    120, "the episode announcement")
                    wall = time.monotonic() - t0
                    sim = call(node, TaskSuccess, "/amf/sim/success", TaskSuccess.Request())
                    print(f"{task:13s} steps={info.num_steps:4d} sim_steps={sim.steps:4d} success={info.success} "
                          f"wall={wall:5.2f}s rate={info.num_steps / wall:5.1f} steps/s", flush=True)
    finally:
        rclpy.try_shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
