"""Parameters of widowx_driver (declared by amf_ros.ros.nodes.widowx_driver; set in config/widowx.yaml).

widowx_driver adapts the amf_ros wire action (EefDeltaAction) to the Interbotix xs_sdk of a WidowX 250 6DOF
(amf_ros.robots.widowx does the maths): IK to arm joint targets, gripper PWM, Octo's 8-D proprio from joint states.
The parameters of the arm's own logic take their defaults from :class:`amf_ros.robots.widowx_arm.WidowXArmConfig`
(which the embedded WidowX simulator runs under too); :meth:`WidowxDriverParams.arm_config` builds it.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from amf_ros.bringup.params import param
from amf_ros.bringup.params._arm_status import arm_status_topic
from amf_ros.robots.widowx_arm import WidowXArmConfig
from amf_ros.robots.wxai import WXAIConfig

_ARM = WidowXArmConfig()
_WXAI = WXAIConfig()


@dataclass(frozen=True)
class WidowxDriverParams:
    """Every ROS parameter of widowx_driver with its default, description and range (the single source of all three;
    the node declares them from here, `ros2 param describe` shows them)."""

    backend: str = param(
        "interbotix",
        "Which arm: interbotix (a WidowX 250 6DOF through the Interbotix xs_sdk, executable widowx_driver) | wxai (a "
        "WidowX AI through Trossen's trossen_arm driver, executable wxai_driver: amf_ros/robots/wxai.py).",
        choices=("interbotix", "wxai"),
    )
    joint_states_topic: str = param("/wx250s/joint_states", "sensor_msgs/JointState of the arm (xs_sdk).")
    joint_group_topic: str = param(
        "/wx250s/commands/joint_group",
        "interbotix_xs_msgs/JointGroupCommand topic the arm joint targets are published on (position mode).",
    )
    joint_single_topic: str = param(
        "/wx250s/commands/joint_single", "interbotix_xs_msgs/JointSingleCommand topic for the gripper (PWM mode)."
    )
    operating_modes_service: str = param(
        "/wx250s/set_operating_modes",
        "interbotix_xs_msgs/OperatingModes service called at start to set the arm's time-based motion "
        "profile and the gripper's PWM mode (empty = leave both as xs_sdk's mode config set them).",
    )
    sdk_wait_s: float = param(
        60.0,
        "Bound on waiting at start for the Interbotix xs_sdk (a publisher on joint_states_topic and, when set, "
        "operating_modes_service), s: checked every 0.1 s, what is missing logged every 5 s, so a driver started "
        "before xs_sdk still connects; after the bound the node ends with one line naming what it missed (exit 1; "
        "launch and amf up restart it). 0 = look once.",
        range=(0.0, 600.0),
    )
    arm_group: str = param("arm", "xs_sdk joint group of the six arm joints.")
    gripper_name: str = param("gripper", "xs_sdk name of the gripper joint.")
    action_topic: str = param("action", "amf_ros/EefDeltaAction commands (policy_server or a teleop).")
    applied_action_topic: str = param(
        "action/applied",
        "Echo of every action sent to the arm as a joint target (the received amf_ros/EefDeltaAction unchanged); "
        "dropped, refused, ignored (e-stop, no joint state) and IK-failed actions are not echoed. demo_recorder "
        "records this topic so that a demonstration holds exactly the actions the arm executed ('' = no echo).",
    )
    state_topic: str = param(
        "observation/state",
        "amf_ros/StateVector with Octo's 8-D WidowX proprio [x, y, z, roll, pitch, yaw, pad, gripper], "
        "published for every joint state.",
    )
    estop_service: str = param(
        "widowx/estop",
        "std_srvs/SetBool: true engages the emergency stop (the arm holds its current joints and every action "
        "is refused), false releases it.",
    )
    frame_id: str = param("wx250s/base_link", "header.frame_id of the published state.")
    workspace_low: tuple[float, ...] = param(
        _ARM.workspace_low,
        "Lower corner of the allowed end-effector target, m (base frame; Octo's WidowX eval bounds).",
    )
    workspace_high: tuple[float, ...] = param(
        _ARM.workspace_high, "Upper corner of the allowed end-effector target, m."
    )
    max_translation: float = param(
        _ARM.max_translation, "Largest translation per action and axis, m.", range=(0.001, 0.2)
    )
    max_rotation: float = param(
        _ARM.max_rotation, "Largest rotation per action and Euler angle, rad.", range=(0.001, 1.0)
    )
    max_joint_speed: float = param(
        _ARM.max_joint_speed,
        "Largest commanded joint speed, rad/s (URDF limit: pi); a longer step is shortened along the same "
        "joint direction.",
        range=(0.01, 3.14159),
    )
    control_period_s: float = param(
        _ARM.control_period_s,
        "Duration of one action (BridgeData: 0.2 s); sets the speed limit per step and the xs_sdk profile time.",
        range=(0.02, 5.0),
    )
    action_timeout_s: float = param(
        _ARM.action_timeout_s,
        "The arm's cap on an action's age, s: an action older than the smaller of this and its own valid_for, "
        "unstamped, or stamped before the last ArmStop is dropped and the arm holds. 0 = only the action's "
        "valid_for.",
        range=(0.0, 60.0),
    )
    stop_topic: str = param(
        "stop",
        "ArmStop topic (amf_ros/ArmStop): actions stamped at or before a stop are dropped and the arm holds "
        "(amf_ros/robots/action_gate.py).",
    )
    arm_status_topic: str = arm_status_topic()
    gripper_pressure: float = param(
        _ARM.gripper_pressure, "Gripper effort in [0, 1], mapped to PWM between the two limits.", range=(0.0, 1.0)
    )
    gripper_pwm_low: float = param(
        _ARM.gripper_pwm_low, "Gripper PWM at pressure 0 (Interbotix default).", range=(0.0, 885.0)
    )
    gripper_pwm_high: float = param(
        _ARM.gripper_pwm_high, "Gripper PWM at pressure 1 (Interbotix default).", range=(0.0, 885.0)
    )
    start_stopped: bool = param(
        _ARM.start_stopped, "Start with the emergency stop engaged (release with the estop service)."
    )

    wxai_ip: str = param(
        _WXAI.ip,
        "backend wxai: IPv4 address of the WidowX AI's controller; required, no default here (config/wxai.yaml ships "
        "Trossen's factory address; launch: wxai_ip:=, amf up: --wxai-ip). An empty one is refused at start.",
    )
    wxai_end_effector: str = param(
        "wxai_v0_follower", "backend wxai: trossen_arm.StandardEndEffector variant (wxai_v0_follower | "
        "wxai_v0_leader | wxai_v0_base)."
    )
    wxai_workspace_high: tuple[float, ...] = param(
        _WXAI.workspace_high,
        "backend wxai: upper corner of the allowed end-effector target, m (the gripper pointing down reaches z = "
        "0.15 m over x 0.15-0.35 m; workspace_low is shared).",
    )
    wxai_gripper_open_m: float = param(
        _WXAI.gripper_open_m, "backend wxai: carriage position of the open gripper, m (closed = 0).",
        range=(0.005, 0.044),
    )
    wxai_connect_timeout_s: float = param(
        _WXAI.connect_timeout_s,
        "backend wxai: bound on connecting to the controller, s; an address that does not answer within it ends the "
        "node with one line naming it (exit 1, restarted by launch / amf up).",
        range=(0.5, 120.0),
    )
    state_rate_hz: float = param(
        20.0, "backend wxai: rate the arm is read and the proprio published, Hz (the arm publishes no joint states).",
        range=(1.0, 200.0),
    )

    def wxai_config(self) -> WXAIConfig:
        """The WidowX AI backend's settings (:class:`~amf_ros.robots.wxai.WXAIConfig`) from these parameters."""
        return WXAIConfig(ip=self.wxai_ip, end_effector=self.wxai_end_effector,
                          connect_timeout_s=self.wxai_connect_timeout_s, workspace_low=tuple(self.workspace_low),
                          workspace_high=tuple(self.wxai_workspace_high), max_translation=self.max_translation,
                          max_rotation=self.max_rotation, control_period_s=self.control_period_s,
                          action_timeout_s=self.action_timeout_s, gripper_open_m=self.wxai_gripper_open_m,
                          start_stopped=self.start_stopped)

    def arm_config(self) -> WidowXArmConfig:
        """The settings of the arm's own logic (:class:`~amf_ros.robots.widowx_arm.WidowXArm`) from these
        parameters."""
        return WidowXArmConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(WidowXArmConfig)})
