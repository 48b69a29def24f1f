"""The peer acquisition rules behind /amf/next_task over DDS (issue 15): task_selector as a process, selector
dropout or diversity, on a store where every task has a demonstration; the ensemble rules answer ok=false with the
reason (policy_server trains one head per round)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from ros_system_util import REPO

pytest.importorskip("torch")
pytest.importorskip("metaworld")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASKS = ("reach", "push")


def _store(root, tasks) -> None:
    """Two synthetic Metaworld episodes per task (39-D states, in-range native actions as EefDeltaActions)."""
    from amf_ros.data.store import EpisodeStore
    from amf_ros.envs.metaworld_suite import native_to_eef7

    store, rng = EpisodeStore(root), np.random.default_rng(0)
    for task in [*tasks, *tasks]:
        t0 = time.time_ns()
        store.write_episode(task, f"do {task}", [
            {"observation": {"state": rng.normal(size=39).astype(np.float32)},
             "action": np.asarray(native_to_eef7(rng.uniform(-0.9, 0.9, 4)), np.float32),
             "stamp_ns": t0 + k * 100_000_000} for k in range(20)], robot="synthetic", control_rate_hz=10.0)


@pytest.mark.parametrize("selector,ok", [("dropout", True), ("diversity", True), ("vfd", False)])
def test_peer_selector_answers_next_task(ros_env, rclpy_context, tmp_path, selector, ok):
    from amf_ros.bench.tiny_checkpoint import tiny_checkpoint
    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.ros.client import AMFClient

    ckpt = tiny_checkpoint(tmp_path / "ckpt", TASKS)
    _store(tmp_path / "dataset", TASKS)
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
            assert "ensemble of two independently fine-tuned heads" in res.message
        assert procs.dead() == {}
    finally:
        client.close()
        procs.stop()
