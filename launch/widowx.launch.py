"""policy_server, task_selector and demo_recorder for a WidowX arm: real, SIMPLER-simulated or the embedded sim.

    ros2 launch amf_ros widowx.launch.py robot:=real    checkpoint:=DIR tasks:=carrot_on_plate,spoon_on_towel
    ros2 launch amf_ros widowx.launch.py robot:=simpler  # sim_bridge with backend simpler
    ros2 launch amf_ros widowx.launch.py robot:=sim      # sim_bridge (Metaworld) + scripted_teleop
    ros2 launch amf_ros widowx.launch.py robot:=sim_widowx  # the embedded WidowX 250s (MuJoCo, any CPU)
    ros2 launch amf_ros widowx.launch.py robot:=wxai wxai_ip:=192.168.1.2  # a WidowX AI (Trossen), config/wxai.yaml
    ros2 launch amf_ros widowx.launch.py robot:=wxai_sim  # the WidowX AI in trossen-arm-sim, Trossen's driver
    ros2 launch amf_ros widowx.launch.py robot:=real teleop:=joy  # + a person's gamepad (teleop node, /joy)
robot:=sim_widowx hosts the embedded WidowX tabletop in sim_bridge; every action goes through widowx_driver's runtime
(IK, limits, e-stop on widowx/estop, PWM gripper) to a simulated xs_sdk. robot:=real adds the Interbotix wx250s
driver adapter (widowx_driver, topics /wx250s/...). robot:=wxai adds widowx_driver for a WidowX AI (executable
wxai_driver: Trossen's trossen_arm driver and the vendor's Cartesian commands; wxai_ip:= or the YAML's wxai_ip).
robot:=wxai_sim hosts the same tabletop in Trossen's simulator (trossen-arm-sim) in sim_bridge, driven through the
WidowX AI backend and trossen_arm over the controller's protocol on loopback.
teleop:=joy|twist|spacemouse|console adds the teleop node (a person's device -> /<namespace>/action while its deadman
is held; docs/ros-robot.md "Driving the arm yourself"); on an embedded arm it takes scripted_teleop's place. The
device driver itself (joy, spacenav) is started by you.
Without `ros2 launch`: `amf up config/widowx.yaml --robot real ...`, `amf up config/wxai.yaml --wxai-ip ADDR` and
`amf up config/wxai_sim.yaml` start the same nodes (amf_ros.bringup.graph; every argument here is an `amf up` flag of
the same name, test/bringup/test_up.py).
Before any node starts, bad arguments are refused in one line naming them (amf_ros/bringup/preflight.py, the same
checks as `amf up`); a node that exits with code 78 (a configuration error no restart can fix) is not respawned.
"""

from amf_ros.bringup import graph, preflight
from amf_ros.ros.launch_nodes import node_actions

# Launch arguments: name -> (default, description). Read by the static launch test.
LAUNCH_ARGUMENTS = {
    "robot": ("real", "which arm: real | simpler | sim | sim_widowx | wxai | wxai_sim"),
    "config": ("", "params YAML (empty = config/widowx.yaml for real/simpler, config/sim.yaml for sim, "
                   "config/sim_widowx.yaml for sim_widowx, config/wxai.yaml for wxai, config/wxai_sim.yaml for "
                   "wxai_sim)"),
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
    "tasks": ("", "comma-separated candidate task keys for task_selector (empty = the YAML's)"),
    "wxai_ip": ("", "robot:=wxai: IPv4 address of the WidowX AI's controller (empty = the YAML's widowx_driver "
                    "wxai_ip; config/wxai.yaml ships Trossen's factory address)"),
}


def node_plan(robot: str = "real", config: str = "", checkpoint: str = "", tasks: str = "",
              namespace: str = graph.NAMESPACE, workspace: str = "", console: str = "true", console_host: str = "",
              console_port: str = "", console_token: str = "", teleop: str = "none",
              teleop_mapping: str = "", wxai_ip: str = "") -> list:
    """The nodes this file starts (graph.NodeSpec list); pure Python, used by the launch test."""
    return graph.plan(robot, config=config, checkpoint=checkpoint, tasks=tasks, namespace=namespace,
                      workspace=workspace, console=console, console_host=console_host, console_port=console_port,
                      console_token=console_token, teleop=teleop, teleop_mapping=teleop_mapping, wxai_ip=wxai_ip)


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
        specs = preflight.checked_plan(values.pop("robot"), values)
        held.append(preflight.claim(specs, values))
        return [action for spec in specs for action in node_actions(spec)]

    args = [DeclareLaunchArgument(k, default_value=d, description=h) for k, (d, h) in LAUNCH_ARGUMENTS.items()]
    return LaunchDescription([*args, OpaqueFunction(function=_nodes)])
