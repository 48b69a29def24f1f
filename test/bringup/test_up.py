"""`amf up` starts what widowx.launch.py starts, for every robot (issue 31: both WidowX models), no ROS.

Every launch argument of widowx.launch.py has an `amf up` flag of the same name (``name:=`` -> ``--name``; robot and
config are ``--robot`` and CONFIG, ``console:=false`` is ``--no-console``), and the same values give the same plan:
node names, executables, params files and overrides. For the WidowX AI at an address (robot:=wxai) ``--wxai-ip`` is
``wxai_ip:=``; without one the YAML's is used, and an address that is missing or not IPv4 is refused before any node
starts (exit 78, one line).
"""

from __future__ import annotations

import importlib.util
import logging
from pathlib import Path

import pytest
import yaml
from ros_system_util import REPO

from amf_ros.bringup import graph, graph_lock, up
from amf_ros.bringup.lifetime import NO_RESPAWN_EXIT
from amf_ros.paths import resolve_config
from amf_ros.robots.wxai import NO_IP_LINE

IP = "10.20.30.40"
"""An address no test connects to (only planned, never started)."""


def _launch():
    spec = importlib.util.spec_from_file_location("amf_launch_widowx_up", REPO / "launch" / "widowx.launch.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _key(specs) -> list[tuple]:
    return [(s.name, s.executable, s.params_file, s.namespace, s.overrides) for s in specs]


def test_every_launch_argument_is_an_amf_up_flag() -> None:
    flags = {opt for action in up.build_parser()._actions for opt in action.option_strings}
    for name in _launch().LAUNCH_ARGUMENTS:
        if name == "config":
            continue  # the positional CONFIG
        flag = "--no-console" if name == "console" else f"--{name.replace('_', '-')}"
        assert flag in flags, f"launch argument {name}:= has no `amf up` flag {flag}"


@pytest.mark.parametrize("robot", graph.ROBOTS)
def test_amf_up_plans_what_the_launch_file_starts(robot: str) -> None:
    launch = _launch()
    cli = ["--robot", robot, "--namespace", "arm1", "--console-port", "9000", "--teleop", "joy"]
    extra = {"wxai_ip": IP} if robot == "wxai" else {}
    if extra:
        cli += ["--wxai-ip", IP]
    config = graph.ROBOT_CONFIG[robot]
    got_robot, values = up.plan_arguments(up.build_parser().parse_args([config, *cli]))
    assert got_robot == robot
    expected = launch.node_plan(robot=robot, config=config, namespace="arm1", console_port="9000", teleop="joy",
                                **extra)
    assert _key(graph.plan(got_robot, **values)) == _key(expected)
    # and without --robot, CONFIG names the robot (widowx.yaml is the Interbotix arm's, also SIMPLER's)
    if robot != "simpler":
        assert up.default_robot(config) == robot


def test_the_widowx_ai_at_an_address_gets_it_and_the_simulated_one_runs_in_sim_bridge(capsys) -> None:
    assert up.main(["config/wxai.yaml", "--wxai-ip", IP, "--dry-run", "--no-console"]) == 0
    lines = capsys.readouterr().out.splitlines()
    driver = [line for line in lines if "__node:=widowx_driver" in line]
    assert len(driver) == 1 and driver[0].split()[0].endswith("/wxai_driver"), lines
    assert f"wxai_ip:='{IP}'" in driver[0] and "backend:='wxai'" in driver[0]
    assert not any("__node:=sim_bridge" in line for line in lines)
    # no --wxai-ip: the YAML's address (config/wxai.yaml, its one home), no override
    robot, values = up.plan_arguments(up.build_parser().parse_args(["config/wxai.yaml"]))
    assert robot == "wxai"
    specs = graph.plan(robot, **values)
    driver_spec = next(s for s in specs if s.name == "widowx_driver")
    assert "wxai_ip" not in driver_spec.overrides
    assert graph.node_section(driver_spec.params_file, "widowx_driver")["wxai_ip"]
    assert up.main(["config/wxai_sim.yaml", "--dry-run", "--no-console"]) == 0
    lines = capsys.readouterr().out.splitlines()
    bridge = [line for line in lines if "__node:=sim_bridge" in line]
    assert len(bridge) == 1 and "backend:='wxai_sim'" in bridge[0]
    assert not any("__node:=widowx_driver" in line for line in lines)


def _refused(argv: list[str], caplog, tmp_path: Path) -> str:
    """The one error line `amf up` refuses ``argv`` with (exit 78, before it takes its place)."""
    caplog.clear()
    with caplog.at_level(logging.ERROR):
        code = up.main([*argv, "--workspace", str(tmp_path / "ws"), "--no-console"])
    assert code == NO_RESPAWN_EXIT
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1, errors
    assert not (tmp_path / "ws" / graph_lock.GRAPHS_DIR).exists()  # refused before it took its place
    return errors[0]


def test_a_missing_or_bad_address_is_refused_before_any_node_starts(caplog, tmp_path: Path) -> None:
    doc = yaml.safe_load(resolve_config("config/wxai.yaml").read_text())
    del doc["/**/widowx_driver"]["ros__parameters"]["wxai_ip"]
    no_ip = tmp_path / "my_wxai.yaml"
    no_ip.write_text(yaml.safe_dump(doc))
    text = _refused([str(no_ip), "--robot", "wxai"], caplog, tmp_path)
    assert NO_IP_LINE in text, text  # the driver's own line: how to give the address
    text = _refused(["config/wxai.yaml", "--wxai-ip", "arm.local"], caplog, tmp_path)
    assert "--wxai-ip arm.local = 'arm.local' is not an IPv4 address" in text, text
    text = _refused(["config/widowx.yaml", "--robot", "real", "--wxai-ip", IP], caplog, tmp_path)
    assert f"--wxai-ip {IP} is for a WidowX AI: pass --robot wxai as well" in text, text
