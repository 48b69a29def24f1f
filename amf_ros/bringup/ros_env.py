"""A DDS domain of one's own: the ROS environment of a run, a benchmark or a test session and the nodes it starts.

Why one home: `amf run`, the graph benchmarks (faults, console load, ROS latency) and the tests each start a node
graph next to whatever else runs on the machine (another run, another test session, a user's robot). Each must
talk only to its own nodes, so each picks a ROS_DOMAIN_ID that looks unused and restricts discovery to this host.
"""

from __future__ import annotations

import os
import random
import socket

DOMAIN_IDS = range(1, 101)
"""Domain ids handed out (0, the default of every ROS install, is left to the user's own graph)."""


def domain_id_free(domain: int) -> bool:
    """Heuristic check that no other participant uses ``domain``: its Fast DDS unicast port can be bound."""
    port = 7400 + 250 * domain + 11  # RTPS user unicast port of participant 0 (PB + DG*d + d3)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_domain_id() -> int:
    """A random ROS_DOMAIN_ID of :data:`DOMAIN_IDS` that looks unused on this machine (any one after 50 tries)."""
    rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "little"))
    for _ in range(50):
        domain = rng.choice(DOMAIN_IDS)
        if domain_id_free(domain):
            return domain
    return rng.choice(DOMAIN_IDS)


def isolated_ros_env(domain_id: int | str | None = None, *, keep_discovery_range: bool = False) -> dict[str, str]:
    """Put this process, and the nodes started with the returned variables, in a domain of its own on this host.

    Sets both variables in ``os.environ`` too (rclpy reads them when this process initialises it) and returns them.

    Args:
        domain_id: the ROS_DOMAIN_ID to use; None = the one already set (non-empty), else :func:`free_domain_id`.
        keep_discovery_range: keep a ROS_AUTOMATIC_DISCOVERY_RANGE already set (e.g. SUBNET for a fleet across
            machines); otherwise discovery is LOCALHOST.
    """
    if domain_id is not None:
        os.environ["ROS_DOMAIN_ID"] = str(domain_id)
    elif not os.environ.get("ROS_DOMAIN_ID"):
        os.environ["ROS_DOMAIN_ID"] = str(free_domain_id())
    if keep_discovery_range:
        os.environ.setdefault("ROS_AUTOMATIC_DISCOVERY_RANGE", "LOCALHOST")
    else:
        os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
    return {"ROS_DOMAIN_ID": os.environ["ROS_DOMAIN_ID"],
            "ROS_AUTOMATIC_DISCOVERY_RANGE": os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"]}
