"""A rosbags typestore that knows the amf_ros message types (read from the package's .msg files).

Why: bags recorded with Humble (sqlite3, no embedded definitions) and tests that write bags with rosbags
need ``amf_ros/msg/EefDeltaAction`` etc. registered; the .msg files in ``msg/`` are the single source.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from amf_ros._optional import require

PACKAGE = "amf_ros"


def amf_msg_dir() -> Path:
    """The directory holding amf_ros's .msg files: the source tree's ``msg/`` or an install's ``share``."""
    candidates = [Path(__file__).resolve().parents[2] / "msg"]
    for prefix in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep):
        if prefix:
            candidates.append(Path(prefix) / "share" / PACKAGE / "msg")
    for c in candidates:
        if (c / "EefDeltaAction.msg").is_file():
            return c
    raise FileNotFoundError(f"amf_ros .msg files not found in {[str(c) for c in candidates]}")


def make_typestore(distro: str = "ROS2_KILTED", msg_dir: str | os.PathLike | None = None) -> Any:
    """rosbags Typestore of ``distro`` plus every ``amf_ros/msg/*`` type."""
    typesys = require("rosbags.typesys", "rosbag2 import")
    # Older rosbags releases lack the newest distros; the sensor/std message definitions did not change.
    for name in (distro, "ROS2_JAZZY", "ROS2_HUMBLE"):
        if hasattr(typesys.Stores, name):
            store = typesys.get_typestore(getattr(typesys.Stores, name))
            break
    else:
        raise ValueError(f"rosbags knows no typestore {distro!r} (nor Jazzy/Humble)")
    types: dict[str, Any] = {}
    for path in sorted(Path(msg_dir or amf_msg_dir()).glob("*.msg")):
        types.update(typesys.get_types_from_msg(path.read_text(encoding="utf-8"), f"{PACKAGE}/msg/{path.stem}"))
    store.register(types)
    return store
