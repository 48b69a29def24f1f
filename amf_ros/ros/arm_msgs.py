"""The arm's command messages in one place: EefDeltaAction (stamp + validity horizon), ArmStop and ArmStatus, both
ways.

Why one home: policy_server, scripted_teleop, the client and the tests publish actions; sim_bridge and
widowx_driver read them. The stamp/horizon convention (amf_ros/robots/action_gate.py) must be the same for all.
"""

from __future__ import annotations

from typing import Any, Sequence

from amf_ros.data.ros_convert import time_ns as stamp_ns
from amf_ros.msg import ArmStatus, ArmStop, EefDeltaAction
from amf_ros.robots.action_gate import ActionCounts

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


def arm_status_msg(counts: ActionCounts, stamp: Any) -> ArmStatus:
    """An ArmStatus of ``counts`` stamped ``stamp`` (builtin_interfaces/Time)."""
    msg = ArmStatus(estop=bool(counts.estop), estop_engagements=int(counts.estop_engagements),
                    applied=int(counts.applied), refused_reasons=list(counts.refused),
                    refused_counts=[int(n) for n in counts.refused.values()])
    msg.header.stamp = stamp
    return msg


def arm_counts(msg: ArmStatus) -> ActionCounts:
    """The ActionCounts of an ArmStatus."""
    return ActionCounts(applied=int(msg.applied), estop=bool(msg.estop), estop_engagements=int(msg.estop_engagements),
                        refused={str(k): int(n) for k, n in zip(msg.refused_reasons, msg.refused_counts, strict=False)})
