"""amf_ros.ros.params.declare: a node's relative data folders resolve under its namespace's folder of the workspace
(issue 29: /robot1's recorder wrote /amf's dataset). A node is created but never spun: no other process is needed."""

from __future__ import annotations

from pathlib import Path

import pytest
from ros_testing import require_ros


@pytest.fixture
def rclpy_context():
    require_ros()
    import rclpy

    context = rclpy.Context()
    rclpy.init(context=context, args=[])
    try:
        yield context
    finally:
        rclpy.shutdown(context=context)


def _declared(context, namespace: str, **overrides):
    from rclpy.node import Node
    from rclpy.parameter import Parameter

    from amf_ros.bringup.params.demo_recorder import DemoRecorderParams
    from amf_ros.ros.params import declare

    node = Node("demo_recorder", namespace=namespace, context=context,
                parameter_overrides=[Parameter(k, value=v) for k, v in overrides.items()])
    try:
        return declare(node, DemoRecorderParams)
    finally:
        node.destroy_node()


def test_data_folders_follow_the_namespace(rclpy_context, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AMF_WORKSPACE", str(tmp_path / "ws"))
    root = (tmp_path / "ws").resolve()
    default = _declared(rclpy_context, "/amf", dataset_dir="sim/dataset")
    robot1 = _declared(rclpy_context, "/robot1", dataset_dir="sim/dataset")
    robot2 = _declared(rclpy_context, "/robot2", dataset_dir="sim/dataset")
    assert Path(default.dataset_dir) == root / "sim/dataset"  # unchanged for the default namespace
    assert Path(robot1.dataset_dir) == root / "namespaces/robot1/sim/dataset"
    assert Path(robot2.dataset_dir) == root / "namespaces/robot2/sim/dataset"
    # workspace:= says otherwise: used as given in any namespace; an absolute folder is never moved
    given = _declared(rclpy_context, "/robot1", dataset_dir="sim/dataset", workspace=str(tmp_path / "mine"))
    assert Path(given.dataset_dir) == (tmp_path / "mine").resolve() / "sim/dataset"
    shared = _declared(rclpy_context, "/robot2", dataset_dir=str(tmp_path / "store"))
    assert Path(shared.dataset_dir) == tmp_path / "store"
