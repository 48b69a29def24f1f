"""Message -> numpy conversion, duck-typed: works on rclpy messages and on rosbags-deserialised dataclasses.

Both carry the same field names (``header.stamp.sec``, ``encoding``, ``data``...), so nothing here imports
rclpy or rosbags. Supported:

* ``sensor_msgs/Image`` with encodings rgb8, bgr8, rgba8, bgra8, mono8 -> RGB uint8 (H, W, 3)
  (mono8 is replicated to 3 channels); any other encoding raises ValueError naming it.
* ``sensor_msgs/CompressedImage`` (PNG/JPEG) -> RGB uint8 (H, W, 3).
* ``sensor_msgs/JointState`` -> positions float64 (J,) with names.
* ``amf_ros/StateVector`` (header, names, values) -> float64 (S,) with names.
* ``amf_ros/EefDeltaAction`` (header, translation[3], rotation[3], gripper) -> float32 (7,)
  ``[dx, dy, dz, droll, dpitch, dyaw, gripper]`` (gripper 1 = open).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from amf_ros.data.codec import decode_image

_CHANNELS = {"rgb8": 3, "bgr8": 3, "rgba8": 4, "bgra8": 4, "mono8": 1}

KINDS = ("image", "compressed_image", "joint_state", "state_vector", "eef_delta_action")


def message_kind(msg: Any) -> str:
    """Which of :data:`KINDS` a message is, judged by its fields; ValueError if none."""
    if all(hasattr(msg, f) for f in ("translation", "rotation", "gripper")):
        return "eef_delta_action"
    if all(hasattr(msg, f) for f in ("height", "width", "encoding", "data")):
        return "image"
    if hasattr(msg, "format") and hasattr(msg, "data"):
        return "compressed_image"
    if hasattr(msg, "names") and hasattr(msg, "values"):
        return "state_vector"
    if hasattr(msg, "name") and hasattr(msg, "position"):
        return "joint_state"
    raise ValueError(f"unsupported message type {type(msg).__name__}: expected one of Image, CompressedImage, "
                     "JointState, StateVector, EefDeltaAction")


def time_ns(stamp: Any) -> int:
    """A ``builtin_interfaces/Time`` (or Duration; rclpy or rosbags) in integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def stamp_ns(msg: Any) -> int:
    """``header.stamp`` in integer nanoseconds (rclpy ``builtin_interfaces/Time`` or rosbags equivalent)."""
    return time_ns(msg.header.stamp)


def _bytes(data: Any) -> np.ndarray:
    """Message ``data`` (bytes, array.array, list, numpy) as a flat uint8 array without copying when possible."""
    if isinstance(data, np.ndarray):
        return data.reshape(-1).view(np.uint8) if data.dtype != np.uint8 else data.reshape(-1)
    if isinstance(data, (bytes, bytearray, memoryview)):
        return np.frombuffer(data, dtype=np.uint8)
    try:
        return np.frombuffer(memoryview(data), dtype=np.uint8)  # array.array('B') from rclpy
    except TypeError:
        return np.asarray(data, dtype=np.uint8)  # list of ints


def image_to_rgb(msg: Any) -> np.ndarray:
    """sensor_msgs/Image -> RGB uint8 (H, W, 3), honouring ``step`` (row padding)."""
    enc = str(msg.encoding).lower()
    if enc not in _CHANNELS:
        raise ValueError(f"sensor_msgs/Image encoding {msg.encoding!r} is not supported "
                         f"(supported: {', '.join(_CHANNELS)})")
    h, w, c = int(msg.height), int(msg.width), _CHANNELS[enc]
    step = int(msg.step) if int(getattr(msg, "step", 0) or 0) else w * c
    buf = _bytes(msg.data)
    if step < w * c or buf.size < step * h:
        raise ValueError(f"sensor_msgs/Image {w}x{h} {enc}: data has {buf.size} bytes, need {h} rows of "
                         f"step {step} >= {w * c}")
    img = buf[: step * h].reshape(h, step)[:, : w * c].reshape(h, w, c)
    if enc == "rgb8":
        return np.ascontiguousarray(img)
    if enc == "bgr8":
        return np.ascontiguousarray(img[:, :, ::-1])
    if enc == "rgba8":
        return np.ascontiguousarray(img[:, :, :3])
    if enc == "bgra8":
        return np.ascontiguousarray(img[:, :, 2::-1])
    return np.repeat(img, 3, axis=2)  # mono8


def compressed_to_rgb(msg: Any) -> np.ndarray:
    """sensor_msgs/CompressedImage (PNG or JPEG) -> RGB uint8 (H, W, 3)."""
    try:
        return decode_image(_bytes(msg.data))
    except ValueError as exc:
        raise ValueError(f"sensor_msgs/CompressedImage (format {msg.format!r}): {exc}") from exc


def joint_state_to_array(msg: Any) -> tuple[list[str], np.ndarray]:
    """sensor_msgs/JointState -> (names, positions float64 (J,))."""
    names = [str(n) for n in msg.name]
    pos = np.asarray(msg.position, dtype=np.float64).reshape(-1)
    if names and len(names) != pos.size:
        raise ValueError(f"JointState has {len(names)} names but {pos.size} positions")
    return names, pos


def state_vector_to_array(msg: Any) -> tuple[list[str], np.ndarray]:
    """amf_ros/StateVector -> (names, values float64 (S,))."""
    names = [str(n) for n in msg.names]
    values = np.asarray(msg.values, dtype=np.float64).reshape(-1)
    if names and len(names) != values.size:
        raise ValueError(f"StateVector has {len(names)} names but {values.size} values")
    return names, values


def action_to_array(msg: Any) -> np.ndarray:
    """amf_ros/EefDeltaAction -> float32 (7,) ``[dx, dy, dz, droll, dpitch, dyaw, gripper]``."""
    t = np.asarray(msg.translation, dtype=np.float32).reshape(-1)
    r = np.asarray(msg.rotation, dtype=np.float32).reshape(-1)
    if t.size != 3 or r.size != 3:
        raise ValueError(f"EefDeltaAction needs translation[3] and rotation[3], got {t.size} and {r.size}")
    return np.concatenate([t, r, np.asarray([msg.gripper], dtype=np.float32)])


def to_array(msg: Any) -> tuple[str, np.ndarray, list[str]]:
    """Convert any supported message: returns (kind, array, names); names are empty except for state kinds."""
    kind = message_kind(msg)
    if kind == "image":
        return kind, image_to_rgb(msg), []
    if kind == "compressed_image":
        return kind, compressed_to_rgb(msg), []
    if kind == "joint_state":
        names, arr = joint_state_to_array(msg)
        return kind, arr, names
    if kind == "state_vector":
        names, arr = state_vector_to_array(msg)
        return kind, arr, names
    return kind, action_to_array(msg), []


def fill_image(msg: Any, rgb: np.ndarray, encoding: str = "rgb8") -> Any:
    """Fill an (empty) Image message in place from RGB (H, W, 3) uint8 (for tests, bridges, bag writers)."""
    if encoding not in _CHANNELS:
        raise ValueError(f"fill_image: encoding {encoding!r} not supported")
    img = {"rgb8": rgb, "bgr8": rgb[:, :, ::-1], "rgba8": np.dstack([rgb, np.full(rgb.shape[:2], 255, np.uint8)]),
           "bgra8": np.dstack([rgb[:, :, ::-1], np.full(rgb.shape[:2], 255, np.uint8)]),
           "mono8": rgb[:, :, :1]}[encoding]
    img = np.ascontiguousarray(img, dtype=np.uint8)
    msg.height, msg.width = int(img.shape[0]), int(img.shape[1])
    msg.encoding = encoding
    msg.is_bigendian = 0
    msg.step = int(img.shape[1] * img.shape[2])
    if hasattr(type(msg), "_fields_and_field_types"):  # rclpy message: uint8[] wants array.array('B')
        import array

        msg.data = array.array("B", img.tobytes())
    else:  # rosbags dataclass: numpy uint8
        msg.data = img.reshape(-1)
    return msg
