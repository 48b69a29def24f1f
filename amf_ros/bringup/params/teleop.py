"""Parameters of teleop (declared by amf_ros.ros.nodes.teleop; logic in amf_ros.runtime.teleop).

teleop turns a person's input device into EefDeltaAction on the arm's action topic: a gamepad through
sensor_msgs/Joy (the ``joy`` / ``joy_linux`` / ``game_controller`` drivers), a SpaceMouse through
geometry_msgs/Twist or TwistStamped (``spacenav``) or read directly with ``pyspacemouse``, or the operator console's
Drive panel (sensor_msgs/Joy on ``teleop/console_joy``). Nothing is published unless the deadman is held.
The bounds default to the WidowX driver's (:class:`amf_ros.robots.widowx_arm.WidowXArmConfig`).
"""

from __future__ import annotations

from dataclasses import dataclass

from amf_ros.bringup.params import action_valid_for_param, param
from amf_ros.robots.widowx_arm import WidowXArmConfig

_ARM = WidowXArmConfig()

INPUTS = ("joy", "twist", "spacemouse", "console")
"""What the node reads: a Joy stream, a Twist stream (+ a Joy of its buttons), a SpaceMouse through pyspacemouse,
the console's Joy."""
FRAMES = ("base", "view")
"""Translation axes of the operator: the arm's base frame, or the camera's view (rotated by ``view_yaw_deg``)."""


@dataclass(frozen=True)
class TeleopParams:
    """Every ROS parameter of teleop with its default, description and range (the single source of all three;
    the node declares them from here, `ros2 param describe` shows them)."""

    input: str = param(
        "joy",
        "Input device: 'joy' (sensor_msgs/Joy on joy_topic: a gamepad through joy / joy_linux / game_controller, or "
        "spacenav's spacenav/joy with mapping spacenav), 'twist' (geometry_msgs/Twist on twist_topic, e.g. "
        "spacenav's spacenav/twist, buttons from the Joy on buttons_topic), 'spacemouse' (a 3Dconnexion SpaceMouse "
        "read directly with pyspacemouse, no ROS driver) or 'console' (the operator console's Drive panel: "
        "sensor_msgs/Joy on console_topic).",
        choices=INPUTS,
    )
    mapping: str = param(
        "",
        "Axis/button mapping: a name of config/teleop/<name>.yaml (xbox, ps4, ps5, gamepad, spacenav, spacemouse, "
        "console) or a YAML path; empty = the input's default (joy: xbox, twist: spacenav, spacemouse: spacemouse, "
        "console: console).",
    )
    joy_topic: str = param("/joy", "sensor_msgs/Joy of input 'joy' (the joy drivers publish /joy).")
    twist_topic: str = param("/spacenav/twist", "Motion of input 'twist' (geometry_msgs/Twist, or TwistStamped).")
    twist_stamped: bool = param(False, "Input 'twist' reads geometry_msgs/TwistStamped instead of Twist.")
    twist_full_scale: float = param(
        1.0,
        "Input 'twist': the Twist component value that counts as full deflection (spacenav: 1.0 with its "
        "full_scale; values beyond are clipped).",
        range=(1e-6, 1e6),
    )
    buttons_topic: str = param(
        "/spacenav/joy",
        "Input 'twist': sensor_msgs/Joy whose buttons carry the deadman and the gripper (its axes are ignored); "
        "'' = none (nothing is ever published: input 'twist' needs a deadman button).",
    )
    console_topic: str = param(
        "teleop/console_joy", "sensor_msgs/Joy of input 'console' (the operator console republishes the page's keys "
        "and gamepad at 20 Hz while a Drive session is active)."
    )
    spacemouse_device: str = param(
        "", "Input 'spacemouse': pyspacemouse device name (e.g. 'SpaceMouse Compact'); empty = the first one found."
    )
    control_rate_hz: float = param(
        1.0 / _ARM.control_period_s,
        "Actions per second while the deadman is held: the arm's control rate (WidowX: 5 Hz, BridgeData); one "
        "action is one control period of motion.",
        range=(0.1, 100.0),
    )
    max_translation: float = param(
        _ARM.max_translation,
        "The arm driver's largest translation per action and axis, m (widowx_driver max_translation); every action "
        "is clipped to it.",
        range=(1e-6, 1.0),
    )
    max_rotation: float = param(
        _ARM.max_rotation,
        "The arm driver's largest rotation per action and Euler angle, rad (widowx_driver max_rotation); every "
        "action is clipped to it.",
        range=(0.0, 3.2),
    )
    coarse_scale: float = param(
        0.4,
        "Coarse speed: full deflection moves max_translation x coarse_scale per action (and max_rotation x it).",
        range=(0.0, 1.0),
    )
    fine_scale: float = param(0.1, "Fine speed: as coarse_scale, while fine speed is selected.", range=(0.0, 1.0))
    start_fine: bool = param(False, "Start in fine speed (a toggle button switches; the console sends its own state).")
    dead_zone: float = param(
        0.1,
        "Axis values within +-dead_zone count as 0; beyond it the value is rescaled so that full deflection stays 1.",
        range=(0.0, 0.95),
    )
    frame: str = param(
        "base",
        "Translation axes of the operator: 'base' (the arm's base frame: x forward, y left, z up) or 'view' "
        "(forward = away from the camera, left = the camera's left; rotated by view_yaw_deg about z).",
        choices=FRAMES,
    )
    view_yaw_deg: float = param(
        0.0,
        "Frame 'view': the camera's viewing direction on the table as a yaw in the base frame, degrees (0 = the "
        "camera looks along +x, as the base frame; 180 = it faces the arm).",
        range=(-360.0, 360.0),
    )
    initial_gripper: float = param(
        1.0, "Gripper command until the operator changes it (BridgeData: 1 = open, 0 = closed).", range=(0.0, 1.0)
    )
    silence_periods: float = param(
        3.0,
        "An input with no message for this many control periods is silent: nothing is published, an ArmStop is "
        "sent if the arm was being driven, and the deadman must be released and pressed again.",
        range=(1.0, 1000.0),
    )
    action_topic: str = param("action", "The arm's action topic (amf_ros/EefDeltaAction).")
    action_valid_for_s: float = action_valid_for_param()
    stop_topic: str = param(
        "stop",
        "ArmStop topic (amf_ros/ArmStop): published when the deadman is released or the input falls silent while "
        "driving; a stop from another node makes the operator release and press the deadman again.",
    )
    control_topic: str = param(
        "control",
        "policy_server's latched amf_ros/ControlSource: while it announces a run_policy goal, a deadman press "
        "drives only once policy_server hands control to this node (a take-over); '' = ignore goals (not safe "
        "beside a running policy).",
    )
    control_request_topic: str = param(
        "control/request",
        "amf_ros/ControlSource this node publishes on every deadman press ('human') and release (''; stamped as "
        "its ArmStop): policy_server's take-over requests; '' = none.",
    )
    state_topic: str = param(
        "teleop/state",
        "Latched std_msgs/String JSON: input, device, deadman held, driving, speed, rotation, gripper, last "
        "input age, actions sent (the console shows it).",
    )
    state_period_s: float = param(
        1.0, "The state is republished at least this often (and on every change).", range=(0.05, 60.0)
    )
