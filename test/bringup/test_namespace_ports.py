"""One console port per namespace (issue 29: two graphs on one machine collided on 8765): `amf up` and both launch
files derive the same port from the namespace; an explicit console_port wins."""

from __future__ import annotations

import importlib.util

import pytest
from ros_system_util import REPO

from amf_ros.bringup import graph


def _console_port(specs: list[graph.NodeSpec]) -> int:
    spec = next(s for s in specs if s.name == graph.CONSOLE_NODE)
    return int(spec.overrides.get("port", graph.node_section(spec.params_file, spec.name)["port"]))


def _launch(name: str):
    spec = importlib.util.spec_from_file_location(f"amf_ns_launch_{name.split('.')[0]}", REPO / "launch" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_each_namespace_gets_its_own_stable_port() -> None:
    ports = {ns: _console_port(graph.plan("sim", namespace=ns)) for ns in ("amf", "/amf", "robot1", "robot2", "a/b")}
    assert ports["amf"] == ports["/amf"] == graph.CONSOLE_PORT == 8765  # the default namespace: as documented
    others = [ports[n] for n in ("robot1", "robot2", "a/b")]
    assert len(set(others)) == 3 and graph.CONSOLE_PORT not in others
    assert all(graph.CONSOLE_PORT < p <= graph.CONSOLE_PORT + graph.CONSOLE_PORT_SPAN for p in others)
    assert ports["robot1"] == graph.namespace_console_port("robot1") == 9630  # the README's example: stable
    assert ports["robot2"] == 9248


def test_explicit_port_and_port_zero_win() -> None:
    assert _console_port(graph.plan("sim", namespace="robot1", console_port="9001")) == 9001
    assert _console_port(graph.plan("sim", namespace="robot1", console_port=0)) == 0
    assert graph.namespace_console_port("robot1", 0) == 0
    assert graph.namespace_console_port("robot1", 65000) < 65000  # never past the last port
    assert not any(s.name == graph.CONSOLE_NODE for s in graph.plan("sim", namespace="robot1", console=False))


@pytest.mark.parametrize("robot", ["sim", "sim_widowx", "real"])
def test_amf_up_and_the_launch_files_agree(robot: str) -> None:
    """The same namespace gives the same port in `amf up` and in both launch files (one graph module)."""
    up = _console_port(graph.plan(robot, namespace="robot1"))
    widowx = _console_port(_launch("widowx.launch.py").node_plan(robot=robot, namespace="robot1"))
    assert up == widowx == graph.namespace_console_port("robot1")
    if robot != "real":
        arm = "metaworld" if robot == "sim" else "widowx"
        assert _console_port(_launch("sim.launch.py").node_plan(arm=arm, namespace="robot1")) == up
