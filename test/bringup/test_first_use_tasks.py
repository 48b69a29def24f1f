"""bringup.graph.first_use_tasks: with no checkpoint anywhere, task_selector offers the tasks of the policy that
policy_server pre-trains on first use (the out-of-the-box graph; test/dds/test_out_of_the_box.py runs it)."""

from __future__ import annotations

from amf_ros.bringup import graph
from amf_ros.envs.suites import get_suite


def _selector(robot: str, **kwargs) -> dict:
    return next(s for s in graph.plan(robot, **kwargs) if s.name == "task_selector").overrides


def test_without_a_checkpoint_the_candidates_are_the_pretrained_policys_tasks() -> None:
    assert _selector("sim")["tasks"] == list(get_suite("metaworld").default_tasks)
    assert _selector("sim_widowx")["tasks"] == list(get_suite("widowx").default_tasks)


def test_a_checkpoint_or_explicit_tasks_keep_their_own_candidates() -> None:
    assert "tasks" not in _selector("sim", checkpoint="/tmp/ck")
    assert _selector("sim", tasks="reach,push")["tasks"] == ["reach", "push"]
    assert "tasks" not in _selector("real")  # config/widowx.yaml: no pre-training on first use
    assert all("tasks" not in s.overrides for s in graph.fleet_plan(2, checkpoint="/tmp/ck"))
