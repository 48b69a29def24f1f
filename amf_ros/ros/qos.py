"""The QoS profiles of the package, defined once (every node and the client use these).

Why these: recorded streams must not lose messages (reliable; images too, since Fast DDS drops large best-effort
frames now and then: docs/ros-system.md); states that a late subscriber must see are latched (transient_local,
depth 1); what the policy acts on and what an arm is commanded with are the newest value only; services keep one
request per concurrent caller (SERVICES).
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

SERVICE_CALLERS = 1000
"""Concurrent callers one service (or action server's goal/result/cancel service) answers without losing a request.

A service's request queue is one keep-last history for all its clients together, and its responses wait in one more
until acknowledged. Every caller of this package has at most one request in flight per service (amf_ros/ros/
client.py, the console and scripted_teleop wait for each answer, bounded), so each queue must hold one request per
concurrent caller: a request that arrives while the queue is full of requests waiting for the executor replaces the
oldest, which is never answered. The default depth of 10 lost 89 of 3,594 next_task requests of 50 concurrent
clients (issue 33); the load a graph must take is a fleet's robots, their consoles and scripts and probes, 50 at
once measured, so 1000 leaves 20x. Memory is spent only on requests actually waiting (small; their free-text fields
are bounded: amf_ros/data/schema.py TEXT_LIMITS)."""

SERVICES = QoSProfile(depth=SERVICE_CALLERS, reliability=ReliabilityPolicy.RELIABLE,
                      durability=DurabilityPolicy.VOLATILE)
"""Every service server and client of the package, and the services of its action servers and clients (see
:data:`SERVICE_CALLERS`; reliable and volatile as rclpy's default for services, only deeper)."""


def action_services() -> dict[str, QoSProfile]:
    """The QoS keyword arguments of an rclpy ActionServer / ActionClient: its goal, result and cancel services."""
    return {"goal_service_qos_profile": SERVICES, "result_service_qos_profile": SERVICES,
            "cancel_service_qos_profile": SERVICES}

LATEST = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)
"""Inputs where only the newest value matters (the camera frame the policy acts on)."""


def images(depth: int) -> QoSProfile:
    """Reliable keep-last camera stream of ``depth`` frames (recorded images must not be dropped)."""
    return QoSProfile(depth=int(depth), reliability=ReliabilityPolicy.RELIABLE)
