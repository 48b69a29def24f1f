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

_ARM = WidowXArmConfig()


@dataclass(frozen=True)
class WidowxDriverParams:
    """Every ROS parameter of widowx_driver with its default, description and range (the single source of all three;
    the node declares them from here, `ros2 param describe` shows them)."""

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
        "interbotix_xs_msgs/OperatingModes service called once at start to set the arm's time-based motion "
        "profile (empty = leave as is).",
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

    def arm_config(self) -> WidowXArmConfig:
        """The settings of the arm's own logic (:class:`~amf_ros.robots.widowx_arm.WidowXArm`) from these
        parameters."""
        return WidowXArmConfig(**{f.name: getattr(self, f.name) for f in dataclasses.fields(WidowXArmConfig)})
