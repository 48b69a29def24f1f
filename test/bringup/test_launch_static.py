"""launch/*.launch.py and config/*.yaml checked without `ros2 launch` (not installable from PyPI here).

Every node a launch file starts is an installed executable, every file it references exists, every parameter it
sets (YAML section or override) is declared by that node's schema (amf_ros/bringup/params/<node>.py); config/*.yaml
keys match the schemas. When the real `launch` and `launch_ros` are importable, generate_launch_description() is
called as well (only that call is skipped otherwise).
"""

from __future__ import annotations

import ast
import importlib.util
from pathlib import Path

import pytest
import yaml
from ros_system_util import INSTALL_LIB, REPO

from amf_ros.bringup import graph
from amf_ros.bringup.params import schema, validate

LAUNCH_FILES = {"sim.launch.py": [{}, {"arm": "widowx"}], "widowx.launch.py": [{"robot": r} for r in graph.ROBOTS]}
CONFIGS = sorted((REPO / "config").glob("*.yaml"))


def _load_launch(name: str):
    spec = importlib.util.spec_from_file_location(f"amf_launch_{name.split('.')[0]}", REPO / "launch" / name)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # imports only amf_ros.bringup.graph at module level
    return module


def _real_launch_available() -> bool:
    """`launch` here may be this repo's launch/ folder seen as a namespace package; require the real thing."""
    if importlib.util.find_spec("launch_ros") is None:
        return False
    import launch

    return hasattr(launch, "LaunchDescription")


def _node_params(config: Path, node: str) -> dict:
    return graph.node_section(config, node)


@pytest.mark.parametrize("name", sorted(LAUNCH_FILES))
def test_launch_file_nodes_files_and_parameters(name: str) -> None:
    module = _load_launch(name)
    assert callable(module.generate_launch_description)
    for args in LAUNCH_FILES[name]:
        specs = module.node_plan(**args)
        names = [s.name for s in specs]
        assert len(set(names)) == len(names), f"{name} {args}: a node is started twice: {names}"
        assert {"policy_server", "task_selector", "demo_recorder"} <= set(names), f"{name} {args}: {names}"
        for s in specs:
            exe = INSTALL_LIB / s.executable
            assert exe.is_file(), f"{name} {args}: node {s.name!r} is not an installed executable ({exe})"
            assert (REPO / "scripts" / "nodes" / s.executable).is_file(), f"{s.executable} has no scripts/nodes entry"
            assert Path(s.params_file).is_file(), f"{name} {args}: params file {s.params_file} missing"
            declared = {p.name for p in schema(s.name)}  # raises if the node has no schema table
            assert set(s.overrides) <= declared, f"{s.name}: overrides {set(s.overrides) - declared} not declared"
            assert validate(s.name, s.overrides) == []
            assert validate(s.name, _node_params(Path(s.params_file), s.name)) == []


def test_widowx_robots_add_the_right_arm() -> None:
    module = _load_launch("widowx.launch.py")
    nodes = {r: [s.name for s in module.node_plan(robot=r)] for r in graph.ROBOTS}
    assert "widowx_driver" in nodes["real"] and "sim_bridge" not in nodes["real"]
    assert "sim_bridge" in nodes["simpler"] and "scripted_teleop" not in nodes["simpler"]
    assert {"sim_bridge", "scripted_teleop"} <= set(nodes["sim"])
    sim_widowx = {s.name: s for s in module.node_plan(robot="sim_widowx")}
    assert sim_widowx["sim_bridge"].overrides["backend"] == "widowx"
    assert sim_widowx["scripted_teleop"].overrides["experts"] == "widowx"
    assert sim_widowx["policy_server"].params_file.endswith("config/sim_widowx.yaml")
    simpler = {s.name: s for s in module.node_plan(robot="simpler")}
    assert simpler["sim_bridge"].overrides["backend"] == "simpler"
    plan = {s.name: s for s in module.node_plan(robot="real", checkpoint="/tmp/ck", tasks="a,b")}
    assert plan["task_selector"].overrides["tasks"] == ["a", "b"]
    assert plan["policy_server"].overrides["checkpoint"] == "/tmp/ck"
    with pytest.raises(ValueError, match="robot must be one of"):
        module.node_plan(robot="ur5")


def test_sim_launch_equals_amf_up_plan() -> None:
    """`amf up config/sim.yaml` and sim.launch.py start the same nodes with the same YAML."""
    from amf_ros.bringup.up import build_parser

    args = build_parser().parse_args(["config/sim.yaml"])
    up_plan = graph.plan("sim", config=args.config)
    launch_plan = _load_launch("sim.launch.py").node_plan()
    assert [(s.name, s.params_file, s.overrides) for s in up_plan] == \
        [(s.name, s.params_file, s.overrides) for s in launch_plan]


def test_the_embedded_widowx_is_one_plan_for_both_launch_files_and_amf_up() -> None:
    """`widowx.launch.py robot:=sim_widowx`, `sim.launch.py arm:=widowx` and `amf up config/sim_widowx.yaml`."""
    from amf_ros.bringup.up import default_robot

    def key(specs):
        return [(s.name, s.params_file, s.overrides) for s in specs]

    up_plan = graph.plan(default_robot("config/sim_widowx.yaml"), config="config/sim_widowx.yaml")
    assert key(up_plan) == key(_load_launch("sim.launch.py").node_plan(arm="widowx")) == \
        key(_load_launch("widowx.launch.py").node_plan(robot="sim_widowx"))
    assert default_robot("config/sim.yaml") == "sim" and default_robot("my/widowx.yaml") == "real"
    with pytest.raises(ValueError, match="arm must be one of"):
        graph.sim_plan(arm="ur5")


@pytest.mark.parametrize("name", sorted(LAUNCH_FILES))
def test_files_referenced_by_launch_file_exist(name: str) -> None:
    """Every string literal that names a file (.yaml/.py/.json) resolves in the package or the install."""
    tree = ast.parse((REPO / "launch" / name).read_text())
    literals = [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]
    paths = [s for s in literals if s.endswith((".yaml", ".yml", ".json")) and " " not in s]
    for p in paths + [graph.ROBOT_CONFIG[r] for r in graph.ROBOTS]:
        assert graph.resolve_config(p).is_file()
    share = REPO / "install" / "amf_ros" / "share" / "amf_ros" / "launch" / name
    assert share.is_file(), f"{name} is not installed to share/amf_ros/launch (run `bash scripts/setup.sh`)"


@pytest.mark.parametrize("config", CONFIGS, ids=[c.name for c in CONFIGS])
def test_config_yaml_matches_schemas(config: Path) -> None:
    doc = yaml.safe_load(config.read_text()) or {}
    assert isinstance(doc, dict) and doc, f"{config} is empty"
    problems = []
    for node, section in doc.items():
        assert isinstance(section, dict) and "ros__parameters" in section, f"{config}: {node} lacks ros__parameters"
        assert node.startswith("/**/"), f"{config}: key {node!r} must be /**/<node> to match a namespaced node"
        node = node.removeprefix("/**/")
        problems += validate(node, section["ros__parameters"])
        for key in ("tasks_file",):
            value = section["ros__parameters"].get(key)
            if value:
                assert graph.resolve_config(value).is_file(), f"{config}: {node}.{key} = {value} does not exist"
    assert problems == []


@pytest.mark.parametrize("name", sorted(LAUNCH_FILES))
def test_generate_launch_description_when_launch_is_installed(name: str) -> None:
    if not _real_launch_available():
        pytest.skip("`launch`/`launch_ros` are not installed (not on PyPI); static checks above still ran")
    description = _load_launch(name).generate_launch_description()
    assert description.entities, f"{name}: empty LaunchDescription"


def _run_launch(description, arguments: dict[str, str], timeout_s: float) -> tuple[int, list[str], list[int]]:
    """Run ``description`` with ``arguments`` in a LaunchService as `ros2 launch` does; returns (its return code, the
    names of the processes it started, their exit codes). Stopped after ``timeout_s`` (a respawn loop)."""
    import threading

    from launch.actions import IncludeLaunchDescription, RegisterEventHandler
    from launch.event_handlers import OnProcessExit, OnProcessStart

    from launch import LaunchDescription, LaunchDescriptionSource, LaunchService

    started: list[str] = []
    codes: list[int] = []
    service = LaunchService()
    service.include_launch_description(LaunchDescription([
        RegisterEventHandler(OnProcessStart(on_start=lambda event, _ctx: started.append(event.action.name))),
        RegisterEventHandler(OnProcessExit(on_exit=lambda event, _ctx: codes.append(event.returncode))),
        IncludeLaunchDescription(LaunchDescriptionSource(description), launch_arguments=list(arguments.items()))]))
    timer = threading.Timer(timeout_s, service.shutdown)
    timer.start()
    try:
        code = service.run()
    finally:
        timer.cancel()
    return code, started, codes


def test_ros2_launch_refuses_a_bad_argument_before_starting_any_node(tmp_path: Path) -> None:
    if not _real_launch_available():
        pytest.skip("`launch`/`launch_ros` are not installed (not on PyPI); bringup/test_preflight.py checks the same")
    module = _load_launch("widowx.launch.py")
    for args in ({"robot": "nonsense"}, {"robot": "sim", "checkpoint": str(tmp_path / "nope")},
                 {"robot": "real", "tasks": "carrot_on_plate,no_such_task"}, {"console_port": "abc"}):
        code, started, _ = _run_launch(module.generate_launch_description(), args, timeout_s=60)
        assert code != 0 and started == [], (args, code, started)
    code, started, _ = _run_launch(_load_launch("sim.launch.py").generate_launch_description(), {"arm": "ur5"}, 60)
    assert code != 0 and started == []


@pytest.mark.ros
def test_ros2_launch_does_not_respawn_a_node_that_exits_with_78(ros_env, tmp_path: Path) -> None:
    """widowx_driver without Interbotix exits with 78 (NO_RESPAWN_EXIT): started once, not 4 times."""
    from amf_ros._optional import has
    from amf_ros.bringup.lifetime import NO_RESPAWN_EXIT
    from amf_ros.ros.launch_nodes import node_actions

    if not _real_launch_available():
        pytest.skip("`launch`/`launch_ros` are not installed (not on PyPI); bringup/test_supervisor.py checks `amf up`")
    if has("interbotix_xs_msgs"):
        pytest.skip("interbotix_xs_msgs is installed: widowx_driver would start")
    from launch import LaunchDescription

    module = _load_launch("widowx.launch.py")
    spec = next(s for s in module.node_plan(robot="real", workspace=str(tmp_path)) if s.name == "widowx_driver")
    # bound: one start (rclpy import, seconds on a loaded machine) plus the respawn delays a respawn loop would take
    code, started, codes = _run_launch(LaunchDescription(node_actions(spec)), {}, timeout_s=120)
    assert len(started) == 1 and started[0].startswith("widowx_driver") and codes == [NO_RESPAWN_EXIT], \
        (started, codes)
    assert code == 0
