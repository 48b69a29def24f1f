"""Deserialise CDR that carries a few trailing bytes after the message, which rosbags refuses.

Why: messages serialised by rmw_fastrtps (the default middleware; e.g. ``rclpy.serialization.
serialize_message`` on Kilted) can end with up to 8 bytes past the last field (zeros or leftover buffer
content: seen with ``sensor_msgs/JointState``), while rosbags' strict reader raises "CDR message size
mismatch" when more than 3 bytes are left. The fields themselves decode identically, so this reader runs
rosbags' own deserialiser and accepts at most ``max_trailing`` extra bytes.
"""

from __future__ import annotations

from typing import Any


def lenient_deserialize(raw: bytes | memoryview, typename: str, typestore: Any, max_trailing: int = 8) -> Any:
    """Like ``typestore.deserialize_cdr`` but tolerating up to ``max_trailing`` bytes after the message.

    Raises:
        ValueError: unsupported encapsulation, undecodable data, or more trailing bytes than allowed.
    """
    raw = memoryview(bytes(raw))
    if len(raw) < 4 or bytes(raw[:2]) not in (b"\x00\x00", b"\x00\x01"):
        raise ValueError(f"{typename}: invalid or unsupported CDR encapsulation")
    msgdef = typestore.get_msgdef(typename)
    func = msgdef.deserialize_cdr_le if raw[1] else msgdef.deserialize_cdr_be
    try:
        message, pos = func(raw[4:], 0, msgdef.cls, typestore)
    except Exception as exc:  # struct.error, UnicodeDecodeError, ValueError, IndexError
        raise ValueError(f"{typename}: cannot deserialise CDR data: {exc}") from exc
    trailing = len(raw) - 4 - pos
    if trailing > max_trailing:
        raise ValueError(f"{typename}: {trailing} bytes left after the message (more than {max_trailing}); "
                         "the bag's message definition probably differs from this typestore's")
    return message
