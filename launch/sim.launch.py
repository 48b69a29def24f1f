"""Embedded simulation: every node of the AMF loop on one machine (scripted expert as the human).

    ros2 launch amf_ros sim.launch.py [arm:=metaworld|widowx] [config:=/path/to/sim.yaml] [checkpoint:=DIR]
arm:=metaworld (default) hosts Metaworld's Sawyer; arm:=widowx the embedded WidowX 250s tabletop with SIMPLER's four
tasks, every action through widowx_driver's runtime (the same as `widowx.launch.py robot:=sim_widowx`).
teleop:=console|joy|twist|spacemouse: a person demonstrates through the teleop node instead of scripted_teleop.
Without `ros2 launch`: `amf up config/sim.yaml` (or config/sim_widowx.yaml) starts the same nodes
(amf_ros.bringup.graph) from the same YAML.
Before any node starts, bad arguments are refused in one line naming them (amf_ros/bringup/preflight.py, the same
checks as `amf up`); a node that exits with code 78 (a configuration error no restart can fix) is not respawned.
"""

from amf_ros.bringup import graph, preflight
from amf_ros.ros.launch_nodes import node_actions

# Launch arguments: name -> (default, description). Read by the static launch test.
LAUNCH_ARGUMENTS = {
    "arm": ("metaworld", "which simulated arm: metaworld | widowx"),
    "config": ("", "params YAML (path, or relative to the amf_ros package; empty = config/sim.yaml for metaworld, "
                   "config/sim_widowx.yaml for widowx)"),
    "checkpoint": ("", "checkpoint directory for policy_server and task_selector (empty = the YAML's)"),
    "namespace": (graph.NAMESPACE, "namespace of every node (relative names: /<namespace>/next_task, ...)"),
    "workspace": ("", "root of relative dataset/checkpoint folders (empty = $AMF_WORKSPACE, else $ROS_HOME/amf)"),
    "console": ("true", "start operator_console, the operator's web page (true | false)"),
    "console_host": ("", "address the console binds to (empty = the YAML's, 127.0.0.1; any other needs a token)"),
    "console_port": ("", "TCP port of the console page (empty = the YAML's, 8765)"),
    "console_token": ("", "access token of the console (required for a non-loopback console_host)"),
    "teleop": ("none", "a person drives the arm through the teleop node: joy (a gamepad's sensor_msgs/Joy on /joy) | "
                       "twist (spacenav: /spacenav/twist + /spacenav/joy) | spacemouse (pyspacemouse, no driver) | "
                       "console (the console's Drive panel) | none; on an embedded arm it replaces scripted_teleop"),
    "teleop_mapping": ("", "the teleop node's mapping: xbox | ps4 | ps5 | gamepad | spacenav | spacemouse | console "
                           "(config/teleop/<name>.yaml) or a YAML path (empty = the input's default)"),
}


def node_plan(arm: str = "metaworld", config: str = "", checkpoint: str = "", namespace: str = graph.NAMESPACE,
              workspace: str = "", console: str = "true", console_host: str = "", console_port: str = "",
              console_token: str = "", teleop: str = "none",
              teleop_mapping: str = "") -> list:
    """The nodes this file starts (graph.NodeSpec list); pure Python, used by the launch test."""
    return graph.sim_plan(config=config, checkpoint=checkpoint, namespace=namespace, workspace=workspace, arm=arm,
                          console=console, console_host=console_host, console_port=console_port,
                          console_token=console_token, teleop=teleop, teleop_mapping=teleop_mapping)


def generate_launch_description():
    """The LaunchDescription (needs `launch` and `launch_ros`, imported here so the module imports without).

    Before any node starts, the arguments are checked (amf_ros/bringup/preflight.py: one line naming each bad one,
    `ros2 launch` exits 1) and this graph takes its place (one graph per namespace and workspace, a free console
    port); then every node starts with :func:`node_actions`.
    """
    from launch.actions import DeclareLaunchArgument, OpaqueFunction
    from launch.substitutions import LaunchConfiguration

    from launch import LaunchDescription

    held = []  # this graph's lock (bringup/graph_lock.py), held while `ros2 launch` runs

    def _nodes(context):
        values = {k: LaunchConfiguration(k).perform(context) for k in LAUNCH_ARGUMENTS}
        specs = preflight.checked_sim_plan(values.pop("arm"), values)
        held.append(preflight.claim(specs, values))
        return [action for spec in specs for action in node_actions(spec)]

    args = [DeclareLaunchArgument(k, default_value=d, description=h) for k, (d, h) in LAUNCH_ARGUMENTS.items()]
    return LaunchDescription([*args, OpaqueFunction(function=_nodes)])
