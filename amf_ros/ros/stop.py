"""`amf stop`: the operator's stop button from a shell (an amf_ros/ArmStop on the graph's `stop` topic).

Every arm drops the actions sent so far and holds; a running run_policy goal and a scripted demonstration end.
Same as ``ros2 topic pub --once /amf/stop amf_ros/msg/ArmStop "{source: operator, reason: ...}"``, but it waits
(bounded) until the arms have discovered it, so the stop is not published into an empty graph and lost.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Sequence

import rclpy
from rclpy.duration import Duration

from amf_ros.bringup.graph import NAMESPACE
from amf_ros.ros.client import AMFClient

SETTLE_S = 1.0
"""Discovery has settled when no new subscriber paired for this long, s (all of a local graph pair within ~0.5 s)."""


def main(argv: Sequence[str] | None = None) -> int:
    """Command line of ``amf stop``: publish one ArmStop once the arms have discovered this publisher."""
    ap = argparse.ArgumentParser(prog="amf stop", description=__doc__.splitlines()[0])
    ap.add_argument("--reason", default="operator stop", help="why (shown in every node's log)")
    ap.add_argument("--namespace", default=NAMESPACE, help=f"namespace of the graph (default {NAMESPACE})")
    ap.add_argument("--timeout", type=float, default=5.0, help="wait at most this long for a subscriber, s")
    ns = ap.parse_args(argv)
    rclpy.init()
    client = AMFClient("amf_stop", namespace=ns.namespace)
    try:
        # Publish once discovery has settled: this new process pairs with the subscribers (each arm, policy_server,
        # scripted_teleop) one by one, and a stop sent before a pairing never arrives there. Settled = at least one
        # subscriber and no new one for SETTLE_S.
        deadline = time.monotonic() + ns.timeout
        count, since = 0, time.monotonic()
        while time.monotonic() < deadline:
            now_count = client.stop_pub.get_subscription_count()
            if now_count != count:
                count, since = now_count, time.monotonic()
            elif count > 0 and time.monotonic() - since >= SETTLE_S:
                break
            time.sleep(0.05)
        client.stop(ns.reason)
        acked = client.stop_pub.wait_for_all_acked(Duration(seconds=ns.timeout))  # delivered before we exit
    finally:
        client.close()
        rclpy.try_shutdown()
    if count == 0:
        print(f"amf stop: nobody subscribes to /{ns.namespace.strip('/')}/stop within {ns.timeout:g} s; "
              "published anyway", file=sys.stderr)
        return 1
    if not acked:
        print(f"amf stop: sent to {count} subscriber(s), not all acknowledged it within {ns.timeout:g} s",
              file=sys.stderr)
        return 1
    print(f"amf stop: delivered to {count} subscriber(s)")
    return 0
