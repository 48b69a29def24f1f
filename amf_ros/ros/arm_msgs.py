"""The arm's command messages in one place: EefDeltaAction (stamp + validity horizon) and ArmStop, both ways.

Why one home: policy_server, scripted_teleop, the client and the tests publish actions; sim_bridge and
widowx_driver read them. The stamp/horizon convention (amf_ros/robots/action_gate.py) must be the same for all.
"""

from __future__ import annotations

from typing import Any, Sequence

from amf_ros.data.ros_convert import time_ns as stamp_ns
from amf_ros.msg import ArmStop, EefDeltaAction

NS = 1_000_000_000


def action_msg(a7: Sequence[float], stamp: Any, valid_for_s: float) -> EefDeltaAction:
    """A 7-D wire action (xyz, roll/pitch/yaw, gripper) stamped ``stamp`` (builtin_interfaces/Time), valid for
    ``valid_for_s`` seconds after it (0 = the arm's own cap only)."""
    a = [float(v) for v in a7]
    msg = EefDeltaAction(translation=a[:3], rotation=a[3:6], gripper=a[6])
    msg.header.stamp = stamp
    msg.valid_for.sec, msg.valid_for.nanosec = divmod(int(round(valid_for_s * NS)), NS)
    return msg


def action_fields(msg: EefDeltaAction) -> tuple[list[float], int, int]:
    """(a7, stamp ns, valid_for ns) of an EefDeltaAction."""
    a7 = [float(v) for v in (*msg.translation, *msg.rotation, msg.gripper)]
    return a7, stamp_ns(msg.header.stamp), stamp_ns(msg.valid_for)


def stop_msg(stamp: Any, source: str, reason: str) -> ArmStop:
    """An ArmStop: drop actions stamped up to ``stamp`` (a zero Time = when received)."""
    msg = ArmStop(source=source, reason=reason)
    msg.header.stamp = stamp
    return msg
