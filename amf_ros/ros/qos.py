"""The QoS profiles of the package, defined once (every node and the client use these).

Why these: recorded streams must not lose messages (reliable; images too, since Fast DDS drops large best-effort
frames now and then: docs/ros-system.md); states that a late subscriber must see are latched (transient_local,
depth 1); what the policy acts on and what an arm is commanded with are the newest value only.
"""

from __future__ import annotations

from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
"""Status and announcements a late subscriber must see at once (recorder status, checkpoint, task status)."""

STREAM = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
"""Streams where every message counts: actions (one simulator step each), observations that are recorded."""

EVENTS = QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE)
"""Sparse events nobody may miss (episode announcements)."""

COMMANDS = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
"""Commands to and states from a real arm's driver."""

ACTIONS = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE)
"""Commands to an arm (EefDeltaAction), publisher and arm side: only the newest action is kept, never a queue, so an
arm that was paused finds at most one action waiting (and drops it if it is stale: amf_ros/robots/action_gate.py).
demo_recorder subscribes with STREAM (its own deeper queue): it records every action."""

LATEST = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
"""Inputs where only the newest value matters (the camera frame the policy acts on)."""


def images(depth: int) -> QoSProfile:
    """Reliable keep-last camera stream of ``depth`` frames (recorded images must not be dropped)."""
    return QoSProfile(depth=int(depth), reliability=ReliabilityPolicy.RELIABLE)
