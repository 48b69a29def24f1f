"""task_selector with ``selector: progress`` as a process: its evaluation history comes from the topics policy_server
publishes (checkpoint announcements, run_policy outcomes), and /next_task answers from it without any policy."""

from __future__ import annotations

import time

import pytest
from ros_system_util import REPO
from synthetic_store import write_synthetic_episodes

pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASKS = ("reach", "push")


def _wait(predicate, what: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_progress_answers_from_policy_server_outcomes(ros_env, client_node, tmp_path):
    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.msg import CheckpointInfo, TaskStatus
    from amf_ros.ros import qos
    from amf_ros.ros.client import AMFClient

    ns = "progress_sel"
    spec = NodeSpec("task_selector", "task_selector", str(REPO / "config" / "sim.yaml"), namespace=ns,
                    overrides={"selector": "progress", "dataset_dir": str(tmp_path / "dataset"),
                               "checkpoint_dir": str(tmp_path / "checkpoints"), "tasks": list(TASKS),
                               "selection_policy": "latest"})
    ckpt_pub = client_node.create_publisher(CheckpointInfo, f"/{ns}/checkpoint", qos.LATCHED)
    outcome_pub = client_node.create_publisher(TaskStatus, f"/{ns}/policy/outcomes", qos.EVENTS)
    procs = NodeProcesses([spec], log_dir=tmp_path / "logs", env=ros_env).start()
    client = AMFClient(f"amf_test_{ns}", namespace=ns)
    try:
        assert client.next_task_cli.wait_for_service(timeout_sec=60.0), procs.log_tail(spec.key)
        _wait(lambda: ckpt_pub.get_subscription_count() > 0 and outcome_pub.get_subscription_count() > 0,
              "task_selector's subscriptions")
        warm = client.next_task(batch_size=2, require_ok=False)
        assert warm.ok and warm.warm_start and sorted(warm.selected_tasks) == sorted(TASKS), warm.message

        def announce(round_: int) -> None:
            msg = CheckpointInfo(path="", round=round_)
            msg.header.stamp = client_node.get_clock().now().to_msg()
            ckpt_pub.publish(msg)

        def outcome(task: str, success: bool) -> None:
            msg = TaskStatus(task=task, success=success, done=True)
            msg.header.stamp = client_node.get_clock().now().to_msg()
            outcome_pub.publish(msg)

        announce(0)  # the pre-trained policy: both tasks fail
        time.sleep(0.2)
        for task in TASKS:
            for _ in range(3):
                outcome(task, False)
        write_synthetic_episodes(tmp_path / "dataset", TASKS)  # the warm start, recorded and fine-tuned on
        time.sleep(0.2)
        announce(1)  # after fine-tuning: push solved, reach not
        time.sleep(0.2)
        for task in TASKS:
            for _ in range(3):
                outcome(task, task == "push")

        def answered():
            res = client.next_task(require_ok=False)
            return res if res.ok and "12 evaluation episode(s) over 2 checkpoint(s)" in res.message else None

        _wait(answered, "the history to reach task_selector")
        res = answered()
        assert res.selector == "progress" and not res.warm_start and res.task == "push", res.message
        scores = dict(zip(res.tasks, res.scores, strict=True))
        assert scores["push"] < scores["reach"], scores  # score = -(predicted gain): push learned, reach did not
        assert procs.dead() == {}
    finally:
        client.close()
        procs.stop()
