"""The peer acquisition rules behind /amf/next_task over DDS (issue 15): task_selector as a process, selector
dropout or diversity, on a store where every task has a demonstration; the ensemble rules (vfd, action_l2) answer
ok=false on a checkpoint without ensemble members, naming the parameter, and ok once policy_server
(ensemble_members = 2) has fine-tuned a round with its second head and announced it."""

from __future__ import annotations

import time

import numpy as np
import pytest
from ros_system_util import REPO
from synthetic_store import write_synthetic_episodes

pytest.importorskip("torch")
pytest.importorskip("metaworld")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASKS = ("reach", "push")


@pytest.mark.parametrize("selector,ok", [("dropout", True), ("diversity", True), ("vfd", False)])
def test_peer_selector_answers_next_task(ros_env, rclpy_context, tmp_path, selector, ok):
    from amf_ros.bench.tiny_checkpoint import tiny_checkpoint
    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.ros.client import AMFClient

    ckpt = tiny_checkpoint(tmp_path / "ckpt", TASKS)
    write_synthetic_episodes(tmp_path / "dataset", TASKS)
    ns = f"peer_{selector}"
    spec = NodeSpec("task_selector", "task_selector", str(REPO / "config" / "sim.yaml"), namespace=ns,
                    overrides={"selector": selector, "checkpoint": str(ckpt), "dataset_dir": str(tmp_path / "dataset"),
                               "tasks": list(TASKS), "tasks_file": ""})
    procs = NodeProcesses([spec], log_dir=tmp_path / "logs", env=ros_env).start()
    client = AMFClient(f"amf_test_{ns}", namespace=ns)
    try:
        assert client.next_task_cli.wait_for_service(timeout_sec=60.0), procs.log_tail(spec.key)
        res = client.next_task(batch_size=2, require_ok=False)
        assert res.ok is ok, res.message
        if ok:
            assert res.selector == selector and not res.warm_start and sorted(res.selected_tasks) == sorted(TASKS)
            assert all(np.isfinite(res.scores))
        else:
            assert "has no ensemble members" in res.message and "ensemble_members" in res.message, res.message
        assert procs.dead() == {}
    finally:
        client.close()
        procs.stop()


def _answer_ok(client, procs, key: str, timeout: float = 60.0):
    """The first ok /next_task answer (task_selector reloads an announced checkpoint in the background)."""
    deadline = time.monotonic() + timeout
    while True:
        res = client.next_task(batch_size=2, require_ok=False)
        if res.ok or time.monotonic() > deadline:
            assert res.ok, f"{res.message}\n{procs.log_tail(key)}"
            return res
        time.sleep(0.5)


def test_ensemble_rules_answer_after_a_fine_tune_round_with_members(ros_env, rclpy_context, tmp_path):
    """Warm start on disk, then one /fine_tune of policy_server with ensemble_members = 2: the round carries its
    second head (round_0001/members/member_1), and vfd (reloading on /checkpoint) and action_l2 (a second selector
    listening to the same announcement) answer with finite scores."""
    from amf_ros.bench.tiny_checkpoint import tiny_checkpoint
    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.ros.client import AMFClient

    ckpt = tiny_checkpoint(tmp_path / "ckpt", TASKS, head="diffusion")  # vfd needs diffusion heads
    write_synthetic_episodes(tmp_path / "dataset", TASKS)
    ns, config = "peer_ensemble", str(REPO / "config" / "sim.yaml")
    dirs = {"dataset_dir": str(tmp_path / "dataset"), "checkpoint_dir": str(tmp_path / "checkpoints")}
    selector = {"tasks": list(TASKS), "tasks_file": "", "selection_policy": "latest", **dirs}  # sim.yaml: frozen
    specs = [NodeSpec("policy_server", "policy_server", config, namespace=ns,
                      overrides={"checkpoint": str(ckpt), "ensemble_members": 2, "fine_tune_steps": 10,
                                 "fine_tune_batch_size": 16, "alpha_steps": 2, "task_status_topic": "", **dirs}),
             NodeSpec("task_selector", "task_selector", config, namespace=ns,
                      overrides={"selector": "vfd", "checkpoint": str(ckpt), **selector}),
             NodeSpec("task_selector", "task_selector", config, namespace=ns + "_l2",
                      overrides={"selector": "action_l2", "checkpoint": str(ckpt),
                                 "checkpoint_topic": f"/{ns}/checkpoint", **selector})]
    procs = NodeProcesses(specs, log_dir=tmp_path / "logs", env=ros_env).start()
    client, l2 = AMFClient(f"amf_test_{ns}", namespace=ns), AMFClient(f"amf_test_{ns}_l2", namespace=ns + "_l2")
    try:
        assert client.next_task_cli.wait_for_service(timeout_sec=60.0), procs.log_tail(specs[1].key)
        before = client.next_task(batch_size=2, require_ok=False)  # the pre-trained checkpoint has no members
        assert not before.ok and "ensemble_members" in before.message, before.message
        ft = client.fine_tune(timeout=300.0)
        assert ft.ok and "ensemble member" in ft.message, f"{ft.message}\n{procs.log_tail(specs[0].key)}"
        assert (tmp_path / "checkpoints" / "round_0001" / "members" / "member_1" / "meta.json").is_file()
        for c, spec, rule in ((client, specs[1], "vfd"), (l2, specs[2], "action_l2")):
            res = _answer_ok(c, procs, spec.key)
            assert res.selector == rule and not res.warm_start and len(res.selected_tasks) == 2
            assert all(np.isfinite(res.scores)) and "round_0001" in res.message, res.message
        assert procs.dead() == {}
    finally:
        client.close()
        l2.close()
        procs.stop()
