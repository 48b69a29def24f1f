"""The launch actions that start one node of the graph under `ros2 launch`: one home for both launch files.

Why here: launch/widowx.launch.py and launch/sim.launch.py start their nodes the same way (the process and the
respawn rule of `amf up`, amf_ros.bringup.lifetime.stays_down); `launch` and `launch_ros` are imported inside the
function, so this module imports without them (they are not on PyPI).
"""

from __future__ import annotations

from typing import Any

from amf_ros.bringup import graph
from amf_ros.bringup.lifetime import DIE_WITH_PARENT_ENV, stays_down
from amf_ros.bringup.processes import down_report


def node_actions(spec: graph.NodeSpec) -> list[Any]:
    """The launch actions of one node (graph.NodeSpec): its process, and the handler that applies the respawn rule of
    `amf up` (bringup.lifetime.stays_down). launch's ``respawn`` starts a node again 2 s after it exits, at most 3
    times, whatever its exit code; after exit code 78 (a configuration error no restart can fix) the handler shuts
    the action down during that delay, which ends it. A node left down is said in one ERROR line."""
    from launch.actions import EmitEvent, RegisterEventHandler
    from launch.event_handlers import OnProcessExit
    from launch.events import matches_action
    from launch.events.process import ShutdownProcess
    from launch.logging import get_logger
    from launch_ros.actions import Node

    node = Node(package=graph.PACKAGE, executable=spec.executable, name=spec.name, namespace=spec.namespace,
                output="screen", parameters=[spec.params_file, spec.overrides], respawn=spec.respawn,
                respawn_delay=spec.respawn_delay_s, respawn_max_retries=spec.respawn_max_retries,
                additional_env={DIE_WITH_PARENT_ENV: "1"})
    exits = []

    def on_exit(event, context):
        exits.append(event.returncode)
        if getattr(context, "is_shutdown", False):
            return None
        why = stays_down(event.returncode, len(exits) - 1, spec.respawn, spec.respawn_max_retries)
        if not why:
            return None  # launch starts it again after respawn_delay
        get_logger("launch").error(down_report(spec.key, event.returncode, why, "the output above"))
        return [EmitEvent(event=ShutdownProcess(process_matcher=matches_action(node)))]

    return [node, RegisterEventHandler(OnProcessExit(target_action=node, on_exit=on_exit))]
