"""Several arms, one selector, over DDS (issue 17): concurrent requests of two robots, the expiry of a pending
assignment, and one whole fleet round of `amf run --robots 2` (two embedded WidowX arms, shared store, one fine-tune
on the fleet's trainer, adopted by both robots' policy servers)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time

import pytest
from ros_system_util import REPO

pytest.importorskip("mujoco")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASKS = ("carrot_on_plate", "stack_cube", "spoon_on_towel")
CONFIG = REPO / "config" / "sim_widowx.yaml"
TIMEOUT_S = 3.0


@pytest.fixture
def fleet_selector(ros_env, rclpy_context, tmp_path_factory):
    """The fleet's task_selector alone (/fleet/next_task), AMF on an empty store: every request is a warm start.
    Function-scoped: a second /fleet/task_selector alive during `amf run --robots` would answer half its requests
    (a client's request goes to every server of the name), and the robots' assignments would not see each other."""
    from amf_ros.bench.tiny_checkpoint import tiny_widowx_checkpoint
    from amf_ros.bringup import graph
    from amf_ros.bringup.processes import NodeProcesses

    run = tmp_path_factory.mktemp("fleet_selector")
    ckpt = tiny_widowx_checkpoint(run / "pretrained", TASKS)
    spec = next(s for s in graph.fleet_plan(2, arm="widowx", config=str(CONFIG), checkpoint=str(ckpt),
                                            assignment_timeout_s=TIMEOUT_S) if s.key == "fleet.task_selector")
    extra = {spec.key: ["-p", f"dataset_dir:={run / 'dataset'}", "-p", f"tasks:=[{', '.join(TASKS)}]"]}
    procs = NodeProcesses([spec], log_dir=run / "logs", env=ros_env, extra_args=extra).start()
    try:
        yield procs
    finally:
        print("node exit codes:", procs.stop())


def test_two_robots_asking_at_the_same_instant_get_different_tasks_and_assignments_expire(fleet_selector):
    from amf_ros.ros.client import AMFClient

    clients = [AMFClient(f"amf_test_fleet_{name}", namespace=name, next_task_service="/fleet/next_task")
               for name in ("robot1", "robot2")]
    try:
        for c in clients:
            assert c.next_task_cli.wait_for_service(timeout_sec=60.0)
        barrier, answers = threading.Barrier(2), {}

        def ask(c, name):
            barrier.wait(timeout=10)
            answers[name] = c.next_task(robot=name)

        threads = [threading.Thread(target=ask, args=(c, n))
                   for c, n in zip(clients, ("robot1", "robot2"), strict=True)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        a, b = answers["robot1"], answers["robot2"]
        assert a.ok and b.ok and a.warm_start and b.warm_start
        assert a.task != b.task  # the three unseen tasks are equally informative: no duplicate
        assert (a.robot, b.robot) == ("robot1", "robot2")
        later = max((a, b), key=lambda d: len(d.pending_tasks))  # the one the selector answered second
        first = b if later is a else a
        assert list(zip(later.pending_robots, later.pending_tasks, strict=True)) == [(first.robot, first.task)]
        anonymous = clients[0].next_task()  # conditions on both assignments, assigns nothing
        assert sorted(anonymous.pending_tasks) == sorted([a.task, b.task])
        assert anonymous.task not in anonymous.pending_tasks
        time.sleep(TIMEOUT_S + 0.5)  # neither robot recorded: both assignments expire
        again = clients[0].next_task(robot="robot3")
        assert list(again.pending_tasks) == []
        assert fleet_selector.dead() == {}
    finally:
        for c in clients:
            c.close()


def test_one_fleet_round_of_amf_run_with_two_robots(ros_env, tmp_path):
    """`amf run --robots 2 --rounds 1` as a user runs it: both robots demonstrate into the one store, the trainer
    fine-tunes once, both policy servers adopt round 1, the evaluation is split over both arms."""
    from amf_ros.bench.tiny_checkpoint import tiny_widowx_checkpoint

    ckpt = tiny_widowx_checkpoint(tmp_path / "pretrained", TASKS)
    env = {**os.environ, **ros_env}
    cmd = [sys.executable, "-m", "amf_ros.cli", "run", "--arm", "widowx", "--robots", "2", "--rounds", "1",
           "--eval-episodes", "1", "--eval-max-steps", "20", "--fine-tune-steps", "30", "--checkpoint", str(ckpt),
           "--out", str(tmp_path / "runs")]
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    run_dir = next((tmp_path / "runs").iterdir())
    results = json.loads((run_dir / "results.json").read_text())
    demos = results["rounds"][1]["demos"]
    assert [d["robot"] for d in demos] == ["robot1", "robot2"]
    assert demos[0]["task"] != demos[1]["task"]  # warm start, conditioned on each other
    assert all(d["episode"]["steps"] > 0 for d in demos)
    from amf_ros.data.store import EpisodeStore

    store = EpisodeStore(run_dir / "dataset", create=False)
    assert sorted(store.meta(e).task for e in store.episode_ids()) == sorted(d["task"] for d in demos)
    logs = {p.name: p.read_text() for p in (run_dir / "logs").iterdir()}
    for robot in ("robot1", "robot2"):
        assert "adopted round 1" in logs[f"{robot}.policy_server.log"]
    assert set(results["rounds"][1]["evaluation"]["by_robot"]) == {"robot1", "robot2"}
    assert results["summary"]["demonstrations"] == 2
    assert (run_dir / "amf_run.png").is_file()
