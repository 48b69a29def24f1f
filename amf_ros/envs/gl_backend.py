"""MuJoCo's OpenGL backend where there is no display: OSMesa, unless the user chose one.

Why: with ``MUJOCO_GL`` unset MuJoCo uses GLFW, which needs an X or Wayland display. On a headless robot PC or a
CI machine the first render then fails, and MuJoCo's next try (from an executor thread) never returned, so
sim_bridge ignored SIGINT and SIGTERM until ``ros2 launch`` killed it. ``scripts/env.sh`` exports ``MUJOCO_GL=osmesa``;
a node started from another shell (a user's own ROS workspace) did not have it. MuJoCo reads the variable when it is
first imported, so the node calls this before anything imports mujoco.
"""

from __future__ import annotations

import os
from collections.abc import MutableMapping

HEADLESS_GL = "osmesa"
"""The backend chosen without a display: software rendering, on every CPU (Debian's libosmesa6)."""


def default_headless_gl(environ: MutableMapping[str, str] | None = None) -> str | None:
    """Set ``MUJOCO_GL`` when neither it nor a display is set: to PyOpenGL's platform if that names a headless one
    (egl or osmesa; MuJoCo refuses a mismatch), else OSMesa.

    Returns the backend it chose, or None when it left the environment alone (a backend chosen, or a display)."""
    env = os.environ if environ is None else environ
    if env.get("MUJOCO_GL") or env.get("DISPLAY") or env.get("WAYLAND_DISPLAY"):
        return None
    platform = env.get("PYOPENGL_PLATFORM", "").strip().lower()
    env["MUJOCO_GL"] = platform if platform in ("egl", "osmesa") else HEADLESS_GL
    return env["MUJOCO_GL"]


__all__ = ["HEADLESS_GL", "default_headless_gl"]
