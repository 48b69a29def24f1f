"""Ctrl-C / SIGTERM of policy_server mid-goal: every active goal (run_policy and fine_tune) ends with a result.

Issue 29 item 5: a client with an active goal waited forever after the node was stopped: rclpy's signal handler
shut the context down before any goal could be ended, so no result was ever sent. Now the node aborts every active
goal with ok=false and "policy_server is shutting down" and its result reaches the client before the node exits
(amf_ros/ros/spin.py, PolicyServerNode.close).
"""

from __future__ import annotations

import signal
import time

import pytest
from synthetic_store import write_synthetic_episodes

pytestmark = pytest.mark.ros

TASKS = ("reach", "push")


def _wait(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.05)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["sigint", "sigterm"])
def test_stopping_policy_server_mid_goal_aborts_both_goals_with_a_result(start_nodes, rclpy_context, tmp_path, sig):
    from action_msgs.msg import GoalStatus

    from amf_ros.bench.tiny_checkpoint import tiny_checkpoint
    from amf_ros.ros.client import AMFClient

    ckpt = tiny_checkpoint(tmp_path / "ckpt", TASKS)
    write_synthetic_episodes(tmp_path / "ds", TASKS)
    procs = start_nodes({"sim_bridge": {"backend": "metaworld", "initial_task": "reach", "seed": 3},
                         "policy_server": {"checkpoint": str(ckpt), "checkpoint_dir": str(tmp_path / "ckpts"),
                                           "dataset_dir": str(tmp_path / "ds"), "control_rate_hz": 10.0,
                                           "action_space": "metaworld", "observation_stale_periods": 5.0,
                                           "torch_threads": 1}}, name="shutdown_results")
    client = AMFClient(f"amf_test_shutdown_{sig.name.lower()}")
    try:
        assert client.run_cli.wait_for_server(timeout_sec=60) and client.fine_tune_cli.wait_for_server(timeout_sec=60)
        run_steps: list[int] = []
        fine_tune_steps: list[int] = []
        run = client.send_run_policy("reach", max_steps=2**31, feedback=lambda fb: run_steps.append(fb.step))
        fine_tune = client.send_fine_tune(steps=10**7, feedback=lambda fb: fine_tune_steps.append(fb.step))
        # both goals are under way: the arm acts and the worker trains (its first steps after torch's import)
        _wait(lambda: run_steps and fine_tune_steps, 120, "feedback of both goals")
        assert not run.done() and not fine_tune.done()
        node = procs.procs["policy_server"]
        node.send_signal(sig)
        # the node's shutdown is bounded (close: ~3 s for the goals, executor 3 s + 2 s); 60 s bounds a loaded machine
        node.wait(timeout=60)
        _wait(lambda: run.done() and fine_tune.done(), 30, "the results after the node exited")
        for pending in (run, fine_tune):
            response = pending.future.result()
            assert response.status == GoalStatus.STATUS_ABORTED, (pending.what, response.status)
            assert not response.result.ok, pending.what
            assert "policy_server is shutting down" in response.result.message, response.result.message
        assert node.returncode == 0, procs.log_tail("policy_server")
        assert "Traceback" not in procs.log_tail("policy_server", 100_000), procs.log_tail("policy_server")
    finally:
        client.close()
