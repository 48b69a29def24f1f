"""run_policy against sim_bridge over real DDS (each its own process), at the end of the simulator's episode.

Issue 33 item 10: a goal with max_steps 2**32-1 ran until the simulator's step limit (the task's max_steps: done,
not solved; the simulator then refuses actions and sends no observation) and ended with "observation stale ...
is the arm running?" although the arm was running. The goal must name the real reason: the arm's episode is over.
Here the simulator re-publishes its idle observation every 0.3 s, sooner than the goal's stale bound (0.6 s):
without the fix the goal kept sending actions the simulator refused and never ended (this test's 60 s bound).
"""

from __future__ import annotations

import pytest
import yaml
from robot_testutil import call

pytestmark = pytest.mark.ros

LIMIT = 12
"""The simulator's step limit for reach here (config/tasks/metaworld.yaml says 120): a short goal."""


def test_a_goal_longer_than_the_simulators_episode_ends_naming_the_episode_end(start_nodes, rclpy_context, tmp_path):
    from amf_ros.bench.tiny_checkpoint import tiny_checkpoint
    from amf_ros.paths import resolve_config
    from amf_ros.ros.client import AMFClient
    from amf_ros.srv import ResetTask

    doc = yaml.safe_load(resolve_config("config/tasks/metaworld.yaml").read_text())
    doc["tasks"] = [dict(t, max_steps=LIMIT) for t in doc["tasks"] if t["key"] in ("reach", "push")]
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(yaml.safe_dump(doc))
    ckpt = tiny_checkpoint(tmp_path / "ckpt", ("reach", "push"))
    start_nodes({"sim_bridge": {"backend": "metaworld", "tasks_file": str(tasks), "initial_task": "reach",
                                "seed": 3, "idle_publish_period_s": 0.3},
                 "policy_server": {"checkpoint": str(ckpt), "checkpoint_dir": str(tmp_path / "ckpts"),
                                   "dataset_dir": str(tmp_path / "ds"), "control_rate_hz": 10.0,
                                   "action_space": "metaworld", "observation_stale_periods": 5.0,
                                   "torch_threads": 1}}, name="run_limit")
    client = AMFClient("amf_test_run_limit")
    try:
        assert call(client.node, ResetTask, "/amf/sim/reset", ResetTask.Request(task="reach", seed=3), timeout=60).ok
        res = client.run_policy("reach", max_steps=2**32 - 1, timeout=60)
    finally:
        client.close()
    # the tiny policy never solves reach in 12 steps (fitted on noise); a run that did would say "solved"
    assert res.ok and not res.success, res.message
    assert f"episode of 'reach' is over after {LIMIT} steps, not solved" in res.message, res.message
    assert "stale" not in res.message and "running" not in res.message, res.message
