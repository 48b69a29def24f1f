"""The checks before any node starts (amf_ros/bringup/preflight.py, issue 29 "configuration errors"), no ROS.

Both launch files and `amf up` refuse a bad argument with one line naming it, before any node starts: unknown
robot/arm, a params file that is missing or not YAML, ``console_port:=abc``, a missing checkpoint directory, a task key
the task file does not list, a non-loopback console without a token, a console port in use, a native policy_server
with nothing to start from. What ships (every robot's default config) passes. The respawn rule shared by `amf up` and
the launch files leaves a node that exits with 78 down at once.
"""

from __future__ import annotations

import dataclasses
import logging
import socket
from pathlib import Path

import pytest
import yaml

from amf_ros.bringup import graph, graph_lock, preflight, up
from amf_ros.bringup.lifetime import NO_RESPAWN_EXIT, NoRespawnError, stays_down
from amf_ros.paths import resolve_config


def _refusal(robot: str, args: dict, style: str = preflight.LAUNCH) -> str:
    """The one line ``checked_plan`` refuses with (fails the test if it does not refuse)."""
    with pytest.raises(preflight.BadArgumentError) as err:
        preflight.checked_plan(robot, args, style)
    text = str(err.value)
    assert isinstance(err.value, NoRespawnError)  # `amf up` and a node's spin() exit 78 with it
    assert "\n" not in text and text.startswith("refusing to start, no node started: "), text
    return text


@pytest.mark.parametrize("robot", graph.ROBOTS)
def test_what_ships_passes(robot: str, tmp_path: Path) -> None:
    specs = preflight.checked_plan(robot, {"workspace": str(tmp_path)})
    assert [s.name for s in specs] == list(graph.node_names(robot))
    any_port = preflight.checked_plan(robot, {"workspace": str(tmp_path), "console_port": "0"})
    assert preflight.console_port_problem(any_port, {"console_port": "0"}) == ""  # port 0 never collides
    for arm in graph.SIM_ARMS:
        assert [s.name for s in preflight.checked_sim_plan(arm, {})] == list(graph.node_names(graph.SIM_ARMS[arm]))


def test_each_bad_argument_is_named_in_one_line(tmp_path: Path) -> None:
    missing = tmp_path / "no_such_checkpoint"
    cases = {
        "robot:=nonsense is not one of real | simpler | sim | sim_widowx | wxai | wxai_sim": ("nonsense", {}),
        f"config:={tmp_path / 'nope.yaml'}: no such file": ("real", {"config": str(tmp_path / "nope.yaml")}),
        "console_port:=abc is not a port number": ("real", {"console_port": "abc"}),
        "console_port:=70000 is outside 0-65535": ("real", {"console_port": "70000"}),
        "console:=maybe is not true or false": ("real", {"console": "maybe"}),
        "namespace:=robot-1 is not a ROS namespace": ("real", {"namespace": "robot-1"}),
        f"checkpoint:={missing}: no such directory": ("real", {"checkpoint": str(missing)}),
        "tasks:=carrot_on_plate,no_such_task: unknown task(s) ['no_such_task']; "
        "'config/tasks/simpler_widowx.yaml' lists ['spoon_on_towel', ": ("real", {"tasks": "carrot_on_plate,"
                                                                                            "no_such_task"}),
        "console_host:=0.0.0.0 makes the console reachable from other machines without a token: pass "
        "console_token:=SECRET": ("sim", {"console_host": "0.0.0.0"}),
    }
    for expected, (robot, args) in cases.items():
        assert expected in _refusal(robot, args), (robot, args)
    a_file = tmp_path / "a_file"
    a_file.write_text("")
    assert f"workspace:={a_file}: not a directory" in _refusal("sim", {"workspace": str(a_file)})
    assert f"checkpoint:={a_file}: not a directory" in _refusal("sim", {"checkpoint": str(a_file)})
    # every problem in the one line, each named
    both = _refusal("real", {"console_port": "abc", "console": "maybe"})
    assert "console_port:=abc" in both and "console:=maybe" in both
    # with a token, or without a console, the host is fine
    preflight.checked_plan("sim", {"console_host": "0.0.0.0", "console_token": "s3cret"})
    preflight.checked_plan("sim", {"console_host": "0.0.0.0", "console": "false"})
    with pytest.raises(preflight.BadArgumentError, match=r"arm:=ur5 is not one of metaworld \| widowx"):
        preflight.checked_sim_plan("ur5", {})


def test_amf_up_names_its_own_flags_and_exits_78_before_starting_anything(tmp_path: Path, caplog) -> None:
    text = _refusal("real", {"checkpoint": "no_such_dir", "console_port": "x"}, preflight.CLI)
    assert f"--checkpoint no_such_dir ({Path.cwd() / 'no_such_dir'}): no such directory" in text
    assert "--console-port x is not a port number" in text
    assert "CONFIG /nope.yaml: no such file" in _refusal("real", {"config": "/nope.yaml"}, preflight.CLI)
    with caplog.at_level(logging.ERROR):
        code = up.main(["config/widowx.yaml", "--robot", "real", "--workspace", str(tmp_path / "ws"),
                        "--tasks", "carrot_on_plate,no_such_task"])
    assert code == NO_RESPAWN_EXIT
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert len(errors) == 1 and "--tasks carrot_on_plate,no_such_task: unknown task(s)" in errors[0], errors
    assert not (tmp_path / "ws" / graph_lock.GRAPHS_DIR).exists()  # refused before it even took its place


def _params_file(tmp_path: Path, robot: str, changes: dict[str, dict]) -> Path:
    """The robot's shipped params YAML with ``{node: {param: value}}`` changed, written under ``tmp_path``."""
    doc = yaml.safe_load(resolve_config(graph.ROBOT_CONFIG[robot]).read_text())
    for node, values in changes.items():
        doc[f"/**/{node}"]["ros__parameters"].update(values)
    path = tmp_path / f"{robot}_changed.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def test_what_the_nodes_would_read_is_checked_too(tmp_path: Path) -> None:
    cfg = _params_file(tmp_path, "sim", {"policy_server": {"no_such_parameter": 1, "control_rate_hz": -3.0}})
    text = _refusal("sim", {"config": str(cfg)})
    assert f"{cfg}: policy_server: parameter 'no_such_parameter' is not declared" in text
    assert "'control_rate_hz': -3.0 outside" in text and "(known:" not in text
    cfg = _params_file(tmp_path, "sim", {"task_selector": {"tasks_file": "config/tasks/nope.yaml"}})
    assert f"task_selector.tasks_file in {cfg} 'config/tasks/nope.yaml': no such file" in \
        _refusal("sim", {"config": str(cfg)})
    cfg = _params_file(tmp_path, "sim", {"task_selector": {"tasks": ["reach", "fly"]}})
    assert f"task_selector.tasks in {cfg}: unknown task(s) ['fly']" in _refusal("sim", {"config": str(cfg)})
    missing = tmp_path / "gone"
    cfg = _params_file(tmp_path, "real", {"policy_server": {"checkpoint": str(missing)},
                                          "task_selector": {"checkpoint": str(missing)}})
    text = _refusal("real", {"config": str(cfg)})
    assert f"policy_server.checkpoint in {cfg}: no such directory" in text
    assert text.count("no such directory") == 1, text  # one checkpoint, said once
    not_yaml = tmp_path / "broken.yaml"
    not_yaml.write_text("a: [1, 2\n")
    assert f"config:={not_yaml}: not valid YAML" in _refusal("sim", {"config": str(not_yaml)})
    not_params = tmp_path / "plain.yaml"
    not_params.write_text("a: 1\n")
    assert f"config:={not_params}: not a ROS params file" in _refusal("sim", {"config": str(not_params)})


def test_a_native_policy_server_needs_something_to_start_from(tmp_path: Path) -> None:
    cfg = _params_file(tmp_path, "sim", {"policy_server": {"pretrain_if_missing": False}})
    ws = tmp_path / "ws"
    text = _refusal("sim", {"config": str(cfg), "workspace": str(ws)})
    rounds = ws / "sim" / "checkpoints"
    assert f"policy_server (backend native) has no policy to start from: no checkpoint given and no round_NNNN in " \
           f"'{rounds}'" in text, text
    (rounds / "round_0001").mkdir(parents=True)  # a round written by an earlier fine-tune: that is where it starts
    preflight.checked_plan("sim", {"config": str(cfg), "workspace": str(ws)})
    other = tmp_path / "pretrained"
    other.mkdir()
    preflight.checked_plan("sim", {"config": str(cfg), "workspace": str(tmp_path / "ws2"), "checkpoint": str(other)})


def test_a_console_port_in_use_is_refused_and_the_place_released(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(graph_lock, "answering_nodes", lambda specs, env=None: [])  # the ROS graph check: a DDS test
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        args = {"workspace": str(tmp_path), "console_port": str(port)}
        specs = preflight.checked_plan("sim", args)  # the static checks do not look at ports
        with pytest.raises(preflight.BadArgumentError) as err:
            preflight.claim(specs, args)
        assert f"console_port:={port}: port {port} on 127.0.0.1 is already in use" in str(err.value)
        assert "console_port:=0 for any free port" in str(err.value)
        cli = preflight.console_port_problem(specs, args, preflight.CLI)
        assert f"--console-port {port}: port {port}" in cli and "--console-port 0" in cli
        robot1 = graph.plan("sim", namespace="robot1", workspace=str(tmp_path))  # its console port: derived
        console = dataclasses.replace(robot1[-1], overrides={**robot1[-1].overrides, "port": port})
        assert "the console port of namespace /robot1 (derived from the namespace): port" in \
            preflight.console_port_problem([*robot1[:-1], console], {"namespace": "robot1"})
    preflight.claim(specs, args).release()  # the port is free now, and the refused claim left no lock behind
    no_console = preflight.checked_plan("sim", {**args, "console": "false"})
    assert preflight.console_port_problem(no_console, args) == ""


def test_the_respawn_rule_of_amf_up_and_the_launch_files() -> None:
    assert "refused to start (exit 78" in stays_down(NO_RESPAWN_EXIT, 0)
    assert stays_down(1, 0) == stays_down(-9, 2) == stays_down(0, 1) == ""  # crashed, killed, or exited: again
    assert "respawn retries used up" in stays_down(1, 3, max_retries=3)
    assert stays_down(1, 0, respawn=False) == "respawn off"
    assert "refused to start" in stays_down(NO_RESPAWN_EXIT, 0, respawn=False)
