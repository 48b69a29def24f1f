"""envs/gl_backend.py: OSMesa where there is no display and no backend chosen; nothing else changed."""

from __future__ import annotations

from amf_ros.envs.gl_backend import HEADLESS_GL, default_headless_gl


def test_headless_without_a_choice_gets_osmesa():
    env: dict[str, str] = {}
    assert default_headless_gl(env) == HEADLESS_GL == "osmesa"
    assert env == {"MUJOCO_GL": "osmesa"}
    env = {"PYOPENGL_PLATFORM": "egl"}  # MuJoCo refuses a backend other than PyOpenGL's platform
    assert default_headless_gl(env) == "egl" and env["MUJOCO_GL"] == "egl"


def test_a_choice_or_a_display_is_left_alone():
    for env in ({"MUJOCO_GL": "egl"}, {"DISPLAY": ":0"}, {"WAYLAND_DISPLAY": "wayland-0"}):
        before = dict(env)
        assert default_headless_gl(env) is None and env == before
