"""The executor pieces of amf_ros.ros (in-process rclpy): PooledExecutor dispatches every ready callback once, and
Offload lets a single-threaded executor await a blocking call while its other callbacks keep running."""

from __future__ import annotations

import threading
import time
import uuid

import pytest


def _spin(executor, node) -> threading.Thread:
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    return thread


def _wait(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


@pytest.mark.ros
def test_pooled_executor_dispatches_each_callback_once(rclpy_context) -> None:
    """Messages arrive faster than two pool threads take them: each handler still goes to the pool exactly once
    (rclpy 9.1.2 re-yields a queued handler and re-submits it in a busy loop: ros2/rclpy#1452)."""
    from rclpy.callback_groups import ReentrantCallbackGroup
    from rclpy.node import Node
    from std_msgs.msg import Empty

    from amf_ros.ros.spin import PooledExecutor

    topic = f"/amf_test_pool_{uuid.uuid4().hex[:8]}"
    node = Node(f"pool_{uuid.uuid4().hex[:8]}")
    seen: list[float] = []
    lock = threading.Lock()

    def slow(_msg) -> None:
        time.sleep(0.03)  # keeps both pool threads busy, so later handlers wait in the queue
        with lock:
            seen.append(time.monotonic())

    node.create_subscription(Empty, topic, slow, 100, callback_group=ReentrantCallbackGroup())
    pub = node.create_publisher(Empty, topic, 100)
    ex = PooledExecutor(num_threads=2)
    submitted: list[object] = []
    submit = ex._executor.submit
    ex._executor.submit = lambda fn, *a: (submitted.append(fn), submit(fn, *a))[1]
    thread = _spin(ex, node)
    try:
        _wait(lambda: pub.get_subscription_count() > 0)
        for _ in range(30):
            pub.publish(Empty())
        _wait(lambda: len(seen) == 30)
        time.sleep(0.2)
        assert len(seen) == 30
        # one dispatch per message (+ at most a few for rclpy's own bookkeeping tasks), never a re-dispatch loop
        assert 30 <= len(submitted) <= 34, len(submitted)
    finally:
        ex.shutdown(timeout_sec=2)
        thread.join(timeout=5)
        node.destroy_node()


@pytest.mark.ros
def test_pooled_executor_raises_callback_errors_like_rclpy(rclpy_context) -> None:
    from rclpy.node import Node

    from amf_ros.ros.spin import PooledExecutor

    node = Node(f"pool_err_{uuid.uuid4().hex[:8]}")
    ex = PooledExecutor(num_threads=2)
    ex.add_node(node)

    def boom() -> None:
        raise ValueError("callback failed")

    node.create_timer(0.01, boom)
    try:
        with pytest.raises(ValueError, match="callback failed"):
            for _ in range(200):
                ex.spin_once(timeout_sec=0.05)
    finally:
        ex.shutdown(timeout_sec=2)
        node.destroy_node()


@pytest.mark.ros
@pytest.mark.parametrize("kind", ["single", "multi"])
def test_offload_awaits_a_blocking_call_while_other_callbacks_run(rclpy_context, kind: str) -> None:
    from rclpy.node import Node

    from amf_ros.ros.offload import Offload
    from amf_ros.ros.spin import make_executor

    node = Node(f"offload_{kind}_{uuid.uuid4().hex[:8]}")
    offload = Offload(node, inline=kind == "multi")
    ticks: list[float] = []
    node.create_timer(0.02, lambda: ticks.append(time.monotonic()))
    outcome: dict[str, object] = {}

    def blocking(x: int) -> int:
        time.sleep(0.5)
        if x < 0:
            raise ValueError("negative")
        return 2 * x

    async def goal(x: int) -> None:
        t0 = time.monotonic()
        try:
            outcome[x] = await offload(blocking, x)
        except ValueError as exc:
            outcome[x] = exc
        outcome[f"ticks_during_{x}"] = sum(t0 < t < time.monotonic() for t in ticks)

    ex = make_executor(kind, num_threads=4)
    thread = _spin(ex, node)
    try:
        ex.create_task(goal, 21)
        ex.create_task(goal, -1)
        _wait(lambda: "ticks_during_21" in outcome and "ticks_during_-1" in outcome)
        assert outcome[21] == 42
        assert isinstance(outcome[-1], ValueError)
        # the timer kept firing while both calls were in flight (0.5 s at 50 Hz: ~25 ticks each)
        assert outcome["ticks_during_21"] >= 10 and outcome["ticks_during_-1"] >= 10, outcome
    finally:
        ex.shutdown(timeout_sec=2)
        thread.join(timeout=5)
        node.destroy_node()


@pytest.mark.ros
def test_nodes_with_one_exclusive_group_spin_single_threaded() -> None:
    """sim_bridge, teleop and scripted_teleop keep every input in one mutually exclusive group: a pool only delays a
    message that arrives while another callback runs (sim_bridge's executor_kind has the measurement), so spin()
    must build them a SingleThreadedExecutor."""
    from rclpy.executors import SingleThreadedExecutor

    from amf_ros.ros.nodes.scripted_teleop import ScriptedTeleop
    from amf_ros.ros.nodes.sim_bridge import SimBridge
    from amf_ros.ros.nodes.teleop import TeleopNode
    from amf_ros.ros.spin import make_executor

    for node_class in (SimBridge, TeleopNode, ScriptedTeleop):
        ex = make_executor(getattr(node_class, "executor_kind", "multi"))
        try:
            assert type(ex) is SingleThreadedExecutor, node_class.__name__
        finally:
            ex.shutdown(timeout_sec=1)
