"""Input adapters of demo_recorder: message -> what the synchroniser is fed, refusing bad messages (no rclpy).

Why a module: the node stays a thin adapter, and these checks are unit-testable without ROS. Each converter
takes a message (an rclpy message or anything with the same fields) and returns either the message itself,
after checking it converts to finite values (so that amf_ros.data's synchroniser converts it exactly as the
bag importer does, keeping state entry names), or an already converted array (images: the conversion is the
check; adapters for message types the synchroniser does not know). Any problem raises ValueError naming it.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from amf_ros.data import ros_convert

Converter = Callable[[Any], Any]


def finite(kind: str, arr: np.ndarray) -> np.ndarray:
    """``arr`` unchanged, or ValueError if it holds NaN/inf (a NaN never reaches the store)."""
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{kind} has NaN/inf values: {np.asarray(arr).tolist()}")
    return arr


def checked(kind: str, to_array: Callable[[Any], np.ndarray]) -> Converter:
    """Validate a message (conversion + finite values) and pass the message itself on."""
    def convert(msg: Any) -> Any:
        finite(kind, to_array(msg))
        return msg
    return convert


def widowx_proprio(msg: Any) -> np.ndarray:
    """sensor_msgs/JointState of a wx250s -> Octo's 8-D proprio (amf_ros.robots.widowx), float32 (8,)."""
    from amf_ros.robots import widowx, wx250s

    q, grip = widowx.parse_joint_state(list(msg.name), list(msg.position))
    return finite("proprio", widowx.proprio(wx250s.fk(q), grip).astype(np.float32))


def twist_to_eef7(period_s: float, gripper: float) -> Converter:
    """geometry_msgs/TwistStamped (m/s, rad/s) held for one control period -> EefDeltaAction vector (7,) float32."""
    if not period_s > 0 or not 0.0 <= gripper <= 1.0:
        raise ValueError(f"need period_s > 0 and gripper in [0, 1], got {period_s=} {gripper=}")

    def convert(msg: Any) -> np.ndarray:
        lin, ang = msg.twist.linear, msg.twist.angular
        a7 = np.array([lin.x, lin.y, lin.z, ang.x, ang.y, ang.z, 0.0]) * period_s
        a7[6] = gripper
        return finite("action", a7.astype(np.float32))
    return convert


def image(msg: Any) -> np.ndarray:
    """sensor_msgs/Image -> RGB uint8 (H, W, 3); an unsupported encoding raises ValueError naming it."""
    return ros_convert.image_to_rgb(msg)


ACTION_CONVERTERS: dict[str, Callable[[float, float], Converter]] = {
    "eef_delta": lambda period_s, gripper: checked("action", ros_convert.action_to_array),
    "twist_stamped": twist_to_eef7,
}
"""action_type parameter -> factory(control period s, twist gripper) -> converter."""

STATE_CONVERTERS: dict[str, Converter] = {
    "state_vector": checked("state", lambda m: ros_convert.state_vector_to_array(m)[1]),
    "joint_state": checked("joint state", lambda m: ros_convert.joint_state_to_array(m)[1]),
    "widowx_proprio": widowx_proprio,
}
"""state_type parameter -> converter."""
