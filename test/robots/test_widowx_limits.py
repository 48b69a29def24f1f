"""widowx_driver through the library (parameters -> limits, stale actions, gripper stop) and as a process without
Interbotix (one line naming the package, non-zero exit). Its runtime: test/runtime/test_widowx_driver.py."""

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import yaml

from amf_ros._optional import HAS_RCLPY, has
from amf_ros.bringup.params import load, validate
from amf_ros.bringup.params.widowx_driver import WidowxDriverParams
from amf_ros.robots import widowx, wx250s

REPO = Path(__file__).resolve().parents[2]


def test_schema_defaults_and_yaml_build_valid_limits():
    lim = widowx.limits_from_params(load(WidowxDriverParams, {}))
    assert lim.workspace.low == (0.1, -0.15, -0.01) and lim.period_s == 0.2
    assert lim.gripper_pwm == pytest.approx(250.0)
    section = yaml.safe_load((REPO / "config" / "widowx.yaml").read_text())["/**/widowx_driver"]["ros__parameters"]
    assert validate("widowx_driver", section) == []
    p = load(WidowxDriverParams, section)
    assert widowx.limits_from_params(p).max_joint_speed == section["max_joint_speed"]
    with pytest.raises(ValueError, match="low < high"):
        widowx.limits_from_params(replace(p, workspace_low=(0.5, 0.0, 0.0), workspace_high=(0.4, 1.0, 1.0)))
    with pytest.raises(ValueError, match="gripper_pwm_low"):
        widowx.limits_from_params(replace(p, gripper_pwm_low=400.0))
    assert validate("widowx_driver", {"max_joint_speed": 9.0})  # out of range is reported


def test_gripper_limits():
    assert widowx.gripper_at_limit(True, 0.99) and not widowx.gripper_at_limit(True, 0.5)
    assert widowx.gripper_at_limit(False, 0.01) and not widowx.gripper_at_limit(False, 0.3)


def test_joint_state_stream_to_commands_like_the_node():
    """What the node does per message: observe joint states -> proprio; action -> JointGroupCommand values."""
    ad = widowx.WidowXAdapter(widowx.limits_from_params(load(WidowxDriverParams, {})))
    assert ad.apply(np.zeros(7)) is None  # before the first joint state: nothing is sent
    q = wx250s.ik(widowx.state_to_pose([0.3, 0.0, 0.15, 0, 0, 0]), guess=wx250s.NEUTRAL_JOINTS).q
    names = ["waist", "shoulder", "elbow", "forearm_roll", "wrist_angle", "wrist_rotate", "gripper",
             "left_finger", "right_finger"]
    proprio = ad.observe(names, [*q, 0.0, 0.037, -0.037])
    np.testing.assert_allclose(proprio, [0.3, 0.0, 0.15, 0, 0, 0, 0, 1.0], atol=2e-3)  # IK tol 1e-3
    cmd = ad.apply([0.0, 0.01, 0.0, 0, 0, 0, 1.0])
    assert len(cmd.arm) == 6 and cmd.gripper_pwm == pytest.approx(250.0)
    np.testing.assert_allclose(wx250s.fk(cmd.arm)[:3, 3], [0.3, 0.01, 0.15], atol=2e-3)


@pytest.mark.skipif(has("interbotix_xs_msgs"), reason="interbotix_xs_msgs is installed: this tests a machine without")
@pytest.mark.parametrize("distro", ["kilted", ""])
def test_node_without_interbotix_exits_with_one_line_naming_the_package(distro):
    """robot:=real without Interbotix: the installed widowx_driver prints one line (no traceback) naming the package
    for the ROS distribution in use, and exits non-zero within seconds."""
    import os
    import subprocess
    import sys

    from build_products import missing_build_product

    from amf_ros.bringup.graph import find_executable

    if not HAS_RCLPY:
        missing_build_product("rclpy is not importable: run `bash scripts/setup.sh`")
    try:
        exe = find_executable("widowx_driver")
    except FileNotFoundError as exc:  # the colcon install's node executable
        missing_build_product(str(exc))
    env = {k: v for k, v in os.environ.items() if k != "ROS_DISTRO"}
    if distro:
        env["ROS_DISTRO"] = distro
    # timeout: a node that waits for the missing arm instead of exiting raises TimeoutExpired; how fast a loaded
    # machine imports rclpy is no property of the code
    proc = subprocess.run([sys.executable, str(exe), "--ros-args", "-r", "__ns:=/amf"], env=env,
                          capture_output=True, text=True, timeout=30)
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.strip()]
    assert proc.returncode != 0, proc.returncode
    assert len(lines) == 1 and "Traceback" not in lines[0], lines
    package = f"ros-{distro}-interbotix-xs-msgs" if distro else "your ROS 2 distribution"
    assert lines[0].startswith("widowx_driver: interbotix_xs_msgs is not installed") and package in lines[0], lines
