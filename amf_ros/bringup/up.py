"""`amf up CONFIG`: start the nodes of a bring-up as processes, as `ros2 launch` would (no launch needed).

    amf up config/sim.yaml                       # the embedded simulation (same nodes as sim.launch.py); without a
                                                 # checkpoint, the cached pre-trained one (`amf run` makes it)
    amf up config/widowx.yaml --robot real --checkpoint runs/cache/pretrained --tasks a,b

Runs until Ctrl-C (or until a node dies), then stops every node (SIGINT, then SIGKILL).
"""

from __future__ import annotations

import argparse
import logging
import time
from pathlib import Path
from typing import Sequence

from amf_ros.bringup.graph import ROBOTS, plan
from amf_ros.bringup.processes import NodeProcesses


def build_parser() -> argparse.ArgumentParser:
    """Arguments of `amf up` (the same as the launch arguments of widowx.launch.py)."""
    p = argparse.ArgumentParser(prog="amf up", description=__doc__.split("\n")[0])
    p.add_argument("config", help="params YAML (config/sim.yaml, config/widowx.yaml or your own)")
    p.add_argument("--robot", choices=ROBOTS, default=None,
                   help="which arm: real | simpler | sim (default: sim for a file named sim*.yaml, else real)")
    p.add_argument("--checkpoint", default="", help="checkpoint dir for policy_server and task_selector")
    p.add_argument("--tasks", default="", help="comma-separated candidate tasks for task_selector")
    p.add_argument("--log-dir", default=None, help="write each node's output to DIR/<node>.log")
    p.add_argument("--dry-run", action="store_true", help="print the command lines and exit")
    return p


def _sim_checkpoint(config: str) -> str:
    """For the embedded simulation without any checkpoint yet: the cached pre-trained one (made on first use)."""
    from amf_ros.bringup.graph import node_section
    from amf_ros.runtime.policy_server import newest_checkpoint
    from amf_ros.bringup.pretrained import ensure_pretrained

    params = node_section(config, "policy_server")
    if params.get("checkpoint") or newest_checkpoint(params.get("checkpoint_dir", "runs/checkpoints")):
        return ""
    return str(ensure_pretrained(Path("runs/cache")).resolve())


def main(argv: Sequence[str]) -> int:
    """Entry point of `amf up`."""
    args = build_parser().parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="[amf up] %(message)s")
    robot = args.robot or ("sim" if args.config.rsplit("/", 1)[-1].startswith("sim") else "real")
    checkpoint = args.checkpoint or (_sim_checkpoint(args.config) if robot == "sim" and not args.dry_run else "")
    specs = plan(robot, config=args.config, checkpoint=checkpoint, tasks=args.tasks)
    nodes = NodeProcesses(specs, log_dir=args.log_dir)
    if args.dry_run:
        for spec in specs:
            print(" ".join(nodes.command(spec)))
        return 0
    with nodes:
        try:
            while True:
                dead = nodes.dead()
                if dead:
                    logging.error("node(s) exited: %s; stopping the others", dead)
                    return 1
                time.sleep(0.5)
        except KeyboardInterrupt:
            logging.info("Ctrl-C: stopping %d nodes", len(specs))
    return 0
