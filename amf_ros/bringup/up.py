"""`amf up CONFIG`: start the nodes of a bring-up as processes, as `ros2 launch` would (no launch needed).

    amf up config/sim.yaml                       # the embedded simulation (same nodes as sim.launch.py); without a
                                                 # checkpoint, policy_server pre-trains one on first use
    amf up config/sim_widowx.yaml                # the embedded WidowX 250s (widowx.launch.py robot:=sim_widowx)
    amf up config/widowx.yaml --robot real --checkpoint ~/octo-small-1.5 --tasks a,b
    amf up config/wxai.yaml --wxai-ip 192.168.1.2 --checkpoint ~/octo-small-1.5   # a WidowX AI (robot:=wxai)
    amf up config/wxai_sim.yaml                  # the WidowX AI in trossen-arm-sim (widowx.launch.py robot:=wxai_sim)
    amf up config/sim_widowx.yaml --teleop console   # a person demonstrates from the console's Drive panel

Runs until Ctrl-C, SIGTERM or SIGHUP (what a terminal, a process supervisor or a test harness sends), then stops
every node it started (SIGINT, then SIGKILL after STOP_TIMEOUT_S). A node that exits on its own is respawned as
launch's ``respawn`` would (graph.NodeSpec: after 2 s, at most 3 times), while the others keep running; a node down
for good is reported with an error line (its last exit code and log file) and in
``<workspace>/graphs/<namespace>/status.json``; exits non-zero if a node stayed down or had to be killed. The nodes
also die with `amf up` itself if it is killed (amf_ros.bringup.processes).

Before it starts any node, `amf up` refuses with one line and exit code 78 (NO_RESPAWN_EXIT) what the launch files
refuse (amf_ros.bringup.preflight): a bad argument or params file (a missing --checkpoint directory, an unknown
--tasks key, a non-loopback --console-host without --console-token, a console port in use, ...), and a second graph
in the same namespace (amf_ros.bringup.graph_lock): another `amf up` or a node of its graph holds that namespace on
that workspace, or nodes of the same names answer in the ROS graph.
"""

from __future__ import annotations

import argparse
import logging
import signal
import time
from pathlib import Path
from typing import Sequence

from amf_ros.bringup import graph_lock, preflight
from amf_ros.bringup.graph import NAMESPACE, ROBOT_CONFIG, ROBOTS, TELEOP_INPUTS, plan
from amf_ros.bringup.lifetime import NO_RESPAWN_EXIT, NODE_SHUTDOWN_DEADLINE_S
from amf_ros.bringup.processes import NodeProcesses

STOP_TIMEOUT_S = NODE_SHUTDOWN_DEADLINE_S + 2.0
"""How long the nodes get to exit after SIGINT before they are killed: a node stops in well under a second (0.05-0.3 s
measured, also at a load of 10 on 2 cores), and ends itself, saying why, if its clean-up hangs for
NODE_SHUTDOWN_DEADLINE_S; the 2 s beyond are for that exit. It was 5 s, below the nodes' own deadline: a task_selector
SIGKILLed 5 s into its stop in CI (session 43) left no trace of where it was."""


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `amf up`: the launch arguments of widowx.launch.py, ``--name-with-dashes`` for ``name:=``
    (robot and config as --robot and CONFIG, console:=false as --no-console); :func:`plan_arguments` maps them back."""
    p = argparse.ArgumentParser(prog="amf up", description=__doc__.split("\n")[0])
    p.add_argument("config", help="params YAML (config/sim.yaml, config/widowx.yaml or your own)")
    p.add_argument("--robot", choices=ROBOTS, default=None,
                   help="which arm: real (WidowX 250, Interbotix xs_sdk) | simpler | sim | sim_widowx | wxai (a WidowX "
                        "AI at --wxai-ip) | wxai_sim (the WidowX AI in trossen-arm-sim) (default: from the file name: "
                        "wxai for wxai.yaml, wxai_sim for wxai_sim.yaml, sim_widowx for sim_widowx.yaml, sim for "
                        "other sim*.yaml, else real)")
    p.add_argument("--checkpoint", default="", help="checkpoint dir for policy_server and task_selector")
    p.add_argument("--tasks", default="", help="comma-separated candidate tasks for task_selector")
    p.add_argument("--wxai-ip", default="", help="--robot wxai: IP address of the WidowX AI's controller (default: "
                   "widowx_driver's wxai_ip in CONFIG; config/wxai.yaml ships Trossen's factory address)")
    p.add_argument("--namespace", default=NAMESPACE, help="namespace of every node (default %(default)s)")
    p.add_argument("--workspace", default="", help="root of relative data folders (default: $AMF_WORKSPACE, else "
                   "$ROS_HOME/amf, else ~/.ros/amf)")
    p.add_argument("--no-console", action="store_true", help="do not start operator_console (the web page)")
    p.add_argument("--console-host", default="", help="address the console binds to (default: the YAML's, "
                   "127.0.0.1; any other needs --console-token)")
    p.add_argument("--console-port", default="", help="TCP port of the console (default: the YAML's, 8765)")
    p.add_argument("--console-token", default="", help="access token of the console page")
    p.add_argument("--teleop", choices=TELEOP_INPUTS, default="none",
                   help="a person drives the arm through the teleop node: joy (a gamepad's /joy), twist (spacenav), "
                        "spacemouse (pyspacemouse), console (the console's Drive panel); on an embedded arm it "
                        "replaces scripted_teleop (default %(default)s)")
    p.add_argument("--teleop-mapping", default="", help="the teleop node's mapping: xbox, ps4, ps5, gamepad, spacenav, "
                   "spacemouse, console (config/teleop/<name>.yaml) or a YAML path (default: the input's)")
    p.add_argument("--log-dir", default=None, help="write each node's output to DIR/<node>.log")
    p.add_argument("--dry-run", action="store_true", help="print the command lines and exit (and what a start "
                   "would refuse)")
    return p


def default_robot(config: str) -> str:
    """The robot a params file is for when --robot is not given: the one whose default YAML has this file name
    (config/sim_widowx.yaml -> sim_widowx, config/widowx.yaml -> real), else sim for sim*.yaml, else real."""
    name = config.rsplit("/", 1)[-1]
    for robot, default in ROBOT_CONFIG.items():
        if default.rsplit("/", 1)[-1] == name:
            return robot
    return "sim" if name.startswith("sim") else "real"


def supervise_step(nodes: NodeProcesses, status: Path | None = None) -> None:
    """One pass of the supervisor: respawn what exited (NodeProcesses.supervise), say loudly which node is now down
    for good (an error line: its last exit code and log file), and rewrite the status file when anything changed."""
    before = set(nodes.given_up)
    lines = nodes.supervise()
    for line in lines:
        logging.warning(line)
    for name in sorted(set(nodes.given_up) - before):
        logging.error(nodes.down_report(name))
    if status is not None and (lines or not status.exists()):
        graph_lock.write_status(status, nodes.states())


def plan_arguments(args: argparse.Namespace) -> tuple[str, dict[str, object]]:
    """Parsed `amf up` arguments -> (robot, graph.plan's keyword arguments): what widowx.launch.py's launch arguments
    of the same names give (test/bringup/test_up.py checks both plans are equal for every robot)."""
    robot = args.robot or default_robot(args.config)
    return robot, {"config": args.config, "checkpoint": args.checkpoint, "tasks": args.tasks,
                   "namespace": args.namespace, "workspace": args.workspace, "console": not args.no_console,
                   "console_host": args.console_host, "console_port": args.console_port,
                   "console_token": args.console_token, "teleop": args.teleop, "teleop_mapping": args.teleop_mapping,
                   "wxai_ip": args.wxai_ip}


def main(argv: Sequence[str]) -> int:
    """Entry point of `amf up`."""
    args = build_parser().parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="[amf up] %(message)s")
    robot, values = plan_arguments(args)
    try:  # the launch files' checks (bringup/preflight.py): one line naming each bad argument, no node started
        specs = preflight.checked_plan(robot, values, preflight.CLI)
    except preflight.BadArgumentError as exc:
        if not args.dry_run:
            logging.error("%s", exc)
            return NO_RESPAWN_EXIT
        logging.warning("without --dry-run: %s", exc)  # the plan is still printed
        specs = plan(robot, **values)
    nodes = NodeProcesses(specs, log_dir=args.log_dir)
    if args.dry_run:
        for spec in specs:
            print(" ".join(nodes.command(spec)))
        return 0
    received: list[str] = []

    def on_signal(signum: int, _frame: object) -> None:
        # no lock here (no Event.set): a handler runs in the main thread, maybe while it holds that lock (ros/spin.py)
        received.append(signal.Signals(signum).name)

    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    try:
        place = preflight.claim(specs, values, preflight.CLI)
    except (graph_lock.PlaceTakenError, preflight.BadArgumentError) as exc:
        logging.error("%s", exc)
        return NO_RESPAWN_EXIT
    status = graph_lock.graph_dir(args.workspace, args.namespace) / graph_lock.STATUS_FILE
    nodes.start()
    try:
        while not received:
            time.sleep(0.5)  # a signal's handler runs here; the loop sees it within 0.5 s
            if received:
                break
            supervise_step(nodes, status)
            if len(nodes.given_up) == len(specs):
                logging.error("every node is down: %s", nodes.given_up)
                break
    finally:
        if received:
            logging.info("%s: stopping %d nodes", received[0], len(specs))
        codes = nodes.stop(timeout=STOP_TIMEOUT_S)
        graph_lock.write_status(status, {n: {**s, "state": "down" if s["state"] == "down" else "stopped"}
                                         for n, s in nodes.states().items()})
        place.release()
    killed = sorted(name for name in nodes.killed)
    if killed:
        logging.error("node(s) did not stop within %.0f s and were killed: %s", STOP_TIMEOUT_S, killed)
    failed = {n: c for n, c in codes.items() if c not in (0, -signal.SIGINT)}
    return 1 if nodes.given_up or killed or failed else 0
