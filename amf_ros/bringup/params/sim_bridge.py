"""Parameters of sim_bridge (declared by amf_ros.ros.nodes.sim_bridge; set in config/*.yaml).

sim_bridge hosts a simulated arm behind the topics a real robot uses. Stepping semantics: every EefDeltaAction
received on ``action_topic`` is one environment step; the resulting observation is published at once, followed
by its TaskStatus on ``status_topic`` (same stamp).
"""

from __future__ import annotations

from dataclasses import dataclass

from amf_ros.bringup.params import param
from amf_ros.bringup.params._arm_status import arm_status_topic
from amf_ros.envs.suites import SUITES


@dataclass(frozen=True)
class SimBridgeParams:
    """Every ROS parameter of sim_bridge with its default, description and range (the single source of all three;
    the node declares them from here, `ros2 param describe` shows them)."""

    backend: str = param(
        "metaworld",
        "Simulator hosted by the bridge: 'metaworld' = the embedded Metaworld suite "
        "(amf_ros.envs.metaworld_suite), 'simpler' = SIMPLER WidowX scenes (amf_ros.envs.simpler, needs "
        "simpler_env), 'widowx' = the embedded WidowX 250s tabletop with SIMPLER's four tasks, driven through "
        "widowx_driver's runtime (amf_ros.envs.widowx_sim; MuJoCo, any CPU), 'wxai_sim' = the same tabletop with a "
        "WidowX AI in Trossen's trossen-arm-sim, driven by trossen_arm over loopback (amf_ros.envs.wxai_sim; "
        "real time).",
        choices=tuple(SUITES),
    )
    tasks_file: str = param(
        "",
        "Task set YAML of the backend (keys, instructions, max_steps); empty = the backend's default "
        "(config/tasks/metaworld.yaml for metaworld).",
    )
    initial_task: str = param("", "Task the arm is reset to at start (empty = the first task of the set).")
    seed: int = param(
        0,
        "First scene seed; a ResetTask request with a negative seed takes the next one of the sequence seed, "
        "seed+1, ...",
        range=(0, 2147483647),
    )
    render: bool = param(
        False,
        "Publish a rendered camera image after every reset and step (Metaworld: OSMesa, about 0.3 s per "
        "128x128 frame on one core, so stepping slows down accordingly).",
    )
    image_width: int = param(128, "Width of the rendered camera image, pixels.", range=(16, 4096))
    image_height: int = param(128, "Height of the rendered camera image, pixels.", range=(16, 4096))
    camera_name: str = param(
        "corner",
        "Simulator camera to render (Metaworld: corner, corner2, corner3, topview, behindGripper, gripperPOV).",
    )
    frame_id: str = param(
        "sim",
        "header.frame_id of published states and statuses; each camera's images carry '<frame_id>/<camera name>'.",
    )
    state_topic: str = param("observation/state", "Observation state topic (amf_ros/StateVector).")
    image_topic: str = param(
        "camera/image_raw", "Camera topic (sensor_msgs/Image rgb8, reliable QoS); used only when render is true."
    )
    wrist_camera_name: str = param(
        "",
        "Second simulator camera rendered with every frame when render is true, e.g. wrist on the embedded WidowX "
        "(the camera on its gripper); empty = none.",
    )
    wrist_image_topic: str = param(
        "camera/wrist/image_raw",
        "Topic of the second camera (sensor_msgs/Image rgb8, reliable QoS), same size as image_width x "
        "image_height; used only when render is true and wrist_camera_name is set.",
    )
    action_topic: str = param("action", "Action topic (amf_ros/EefDeltaAction); each message = one step.")
    applied_action_topic: str = param(
        "action/applied",
        "Echo of every action the simulator stepped on (the received amf_ros/EefDeltaAction unchanged), published "
        "before the observation it led to; dropped and refused actions are not echoed. demo_recorder records this "
        "topic so that a demonstration holds exactly the actions the arm executed ('' = no echo).",
    )
    max_action_age_s: float = param(
        1.0,
        "The arm's cap on an action's age, s: an action older than the smaller of this and its own valid_for, "
        "unstamped, or stamped before the last ArmStop is dropped (the simulator does not step). 0 = only the "
        "action's valid_for.",
        range=(0.0, 60.0),
    )
    stop_topic: str = param(
        "stop",
        "ArmStop topic (amf_ros/ArmStop): actions stamped at or before a stop are dropped and the arm holds "
        "(amf_ros/robots/action_gate.py).",
    )
    estop_service: str = param(
        "widowx/estop",
        "std_srvs/SetBool of a simulated arm with an emergency stop (backend widowx: widowx_driver's, same name as "
        "on the real arm): true holds the arm and refuses every action until false. Not offered by backends "
        "without one.",
    )
    arm_status_topic: str = arm_status_topic()
    reset_service: str = param("sim/reset", "Service (amf_ros/ResetTask) resetting the arm to a task.")
    success_service: str = param(
        "sim/success",
        "Service (amf_ros/TaskSuccess) reporting task, success since the reset and steps (kept for tools; per-tick "
        "readers take status_topic instead).",
    )
    status_topic: str = param(
        "sim/status",
        "Latched task status (amf_ros/TaskStatus: task, resets, steps, success, done), published right after every "
        "state with the same header.stamp.",
    )
    idle_publish_period_s: float = param(
        0.5,
        "When no observation was published for this long (no actions arriving), re-publish the current state "
        "stamped with the current time, as a real arm keeps publishing its joint states; lets late subscribers "
        "and the recorder see the topic alive. 0 = never.",
        range=(0.0, 3600.0),
    )
