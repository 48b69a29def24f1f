"""Which of some node names already answer in the ROS graph: `amf up`'s check before it starts a graph.

Why: the workspace locks (amf_ros.bringup.graph_lock) see a second graph on the same machine and workspace; a graph
with the same namespace on the same ROS domain but another workspace or machine duplicates every node and service
just as well. `amf up` (which imports no rclpy) runs this module as a process of its own:

    python -m amf_ros.ros.graph_probe /amf/policy_server /amf/task_selector ...

and it prints the names that answer, one per line. A name counts only if the node answers its ``list_parameters``
service (every rclpy node has it): the discovery cache of a node killed moments ago still lists it for a while, and a
leftover like that must not keep a new graph from starting.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Sequence

DISCOVER_S = 3.0
"""How long to listen for the graph before concluding that no node of those names exists (discovery on one host
takes well under a second when idle; 2 s missed a running graph once on a 2-core machine loaded by parallel test
runs; a remote host may take longer, and the workspace lock covers the local case anyway)."""
ANSWER_S = 3.0
"""How long a node seen in the graph gets to answer before it counts as a leftover of a killed process."""


def answering(fqns: Sequence[str], discover_s: float = DISCOVER_S, answer_s: float = ANSWER_S) -> list[str]:
    """The fully qualified node names of ``fqns`` that are in the graph and answer, in the order given."""
    import rclpy
    from rcl_interfaces.srv import ListParameters
    from rclpy.context import Context
    from rclpy.executors import SingleThreadedExecutor
    from rclpy.signals import SignalHandlerOptions

    from amf_ros.ros import qos

    wanted = list(dict.fromkeys(fqns))
    ctx = Context()
    rclpy.init(context=ctx, signal_handler_options=SignalHandlerOptions.NO)
    try:
        node = rclpy.create_node(f"amf_graph_probe_{os.getpid()}", context=ctx, start_parameter_services=False,
                                 enable_rosout=False)
        executor = SingleThreadedExecutor(context=ctx)
        executor.add_node(node)
        t0 = time.monotonic()
        seen_at: dict[str, float] = {}
        clients: dict[str, object] = {}
        futures: dict[str, object] = {}
        answered: set[str] = set()
        while True:
            now = time.monotonic()
            names = {f"{ns.rstrip('/')}/{name}" for name, ns in node.get_node_names_and_namespaces()}
            for fqn in wanted:
                if fqn in names and fqn not in seen_at:
                    seen_at[fqn] = now
                    clients[fqn] = node.create_client(ListParameters, f"{fqn}/list_parameters",
                                                      qos_profile=qos.SERVICES)
            for fqn, client in clients.items():
                if fqn not in futures and client.service_is_ready():
                    futures[fqn] = client.call_async(ListParameters.Request())
            answered |= {fqn for fqn, fut in futures.items() if fut.done() and fut.result() is not None}
            pending = [f for f in seen_at if f not in answered and now - seen_at[f] < answer_s]
            if (now - t0 >= discover_s and not pending) or len(answered) == len(wanted):
                return [f for f in wanted if f in answered]
            executor.spin_once(timeout_sec=0.05)
    finally:
        rclpy.try_shutdown(context=ctx)


def main(argv: Sequence[str] | None = None) -> int:
    """Print the names of ``argv`` that answer in the graph (one per line); exit 0."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="+", help="fully qualified node names, e.g. /amf/policy_server")
    parser.add_argument("--discover-s", type=float, default=DISCOVER_S)
    parser.add_argument("--answer-s", type=float, default=ANSWER_S)
    args = parser.parse_args(argv)
    for fqn in answering(args.names, args.discover_s, args.answer_s):
        print(fqn)
    return 0


if __name__ == "__main__":
    sys.exit(main())
