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
    must build them a SingleThreadedExecutor (SingleExecutor: the same, surviving an entity destroyed mid-wait)."""
    from amf_ros.ros.nodes.scripted_teleop import ScriptedTeleop
    from amf_ros.ros.nodes.sim_bridge import SimBridge
    from amf_ros.ros.nodes.teleop import TeleopNode
    from amf_ros.ros.spin import SingleExecutor, make_executor

    for node_class in (SimBridge, TeleopNode, ScriptedTeleop):
        ex = make_executor(getattr(node_class, "executor_kind", "multi"))
        try:
            assert type(ex) is SingleExecutor, node_class.__name__
        finally:
            ex.shutdown(timeout_sec=1)


def _spin_recording_death(ex) -> tuple[threading.Thread, list[BaseException]]:
    """A thread spinning ``ex`` (not started) and the list where it puts the error that ends its spin, if any."""
    error: list[BaseException] = []

    def run() -> None:
        try:
            ex.spin()
        except BaseException as exc:  # the failure under test: the spin thread dies
            error.append(exc)

    return threading.Thread(target=run, daemon=True), error


def _still_receives(node, thread: threading.Thread, prefix: str) -> bool:
    """Whether a fresh subscription of ``node`` gets a message within 10 s while ``thread`` spins it."""
    from std_msgs.msg import Empty

    topic = f"/{prefix}_{uuid.uuid4().hex[:8]}"
    got = threading.Event()
    node.create_subscription(Empty, topic, lambda _m: got.set(), 10)
    pub = node.create_publisher(Empty, topic, 10)
    deadline = time.monotonic() + 10.0
    while not got.is_set() and time.monotonic() < deadline and thread.is_alive():
        pub.publish(Empty())
        got.wait(0.1)
    return got.is_set()


def _churn_while_spinning(kind: str, seconds: float) -> tuple[bool, BaseException | None, int]:
    """Spin a node with executor ``kind`` while this thread creates and destroys subscriptions (as a test's client
    node does per call), with the GIL switching every microsecond so the executor's two-pass wait-set build is
    interleaved; then check a fresh subscription still receives. Returns (spin thread alive and receiving, its
    error, churn iterations)."""
    import sys

    from rclpy.node import Node
    from std_msgs.msg import Empty

    from amf_ros.ros.spin import make_executor

    node = Node(f"churn_{uuid.uuid4().hex[:8]}")
    ex = make_executor(kind, num_threads=2)
    ex.add_node(node)
    thread, error = _spin_recording_death(ex)
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    thread.start()
    n = 0
    try:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and thread.is_alive():
            node.destroy_subscription(node.create_subscription(Empty, "/amf_test_churn", lambda _m: None, 10))
            n += 1
    finally:
        sys.setswitchinterval(interval)
    receiving = _still_receives(node, thread, "amf_test_after_churn")
    ex.shutdown(timeout_sec=2.0)
    thread.join(5.0)
    node.destroy_node()
    return receiving, (error[0] if error else None), n


@pytest.mark.ros
@pytest.mark.parametrize("kind", ["single", "multi"])
def test_executor_survives_an_entity_destroyed_while_it_builds_its_wait_set(rclpy_context, kind: str) -> None:
    """rclpy 9.1.2 raises InvalidHandle out of spin() when another thread destroys an entity between its wait-set
    passes; the spin thread died and the node never ran a callback again (a CI failure: a test's client node stopped
    receiving). The package's executors drop that wake-up and keep spinning."""
    receiving, error, n = _churn_while_spinning(kind, seconds=4.0)
    assert error is None and receiving, (error, n)
    assert n > 100  # the churn really ran (the unpatched executor dies within tens of iterations)


def _destroyed_between_the_passes(kind: str) -> tuple[bool, BaseException | None]:
    """The race of :data:`amf_ros.ros.spin._DESTROYED_WHILE_WAITING`, made certain: spin a node with executor ``kind``
    and destroy one of its subscriptions exactly where another thread's destroy hurts, after the executor took its
    snapshot of the node's waitables (the subscription's QoS event handlers among them) and before it enters them.
    rclpy 9.1.2 reads the node's guard conditions after that snapshot, through ``can_execute``; the destroy runs there,
    on the spin thread. Then check a fresh subscription still receives. Returns (receiving, the spin thread's error).
    """
    from rclpy.guard_condition import GuardCondition
    from rclpy.node import Node
    from std_msgs.msg import Empty

    from amf_ros.ros.spin import make_executor

    node = Node(f"mid_build_{uuid.uuid4().hex[:8]}")
    ex = make_executor(kind, num_threads=2)
    doomed = [node.create_subscription(Empty, "/amf_test_doomed", lambda _m: None, 10)]
    assert doomed[0].event_handlers, "no QoS event handler: the race needs a waitable of the subscription"
    armed = threading.Event()
    destroyed = threading.Event()
    can_execute = ex.can_execute

    def can_execute_and_destroy(entity) -> bool:
        if armed.is_set() and doomed and isinstance(entity, GuardCondition):
            node.destroy_subscription(doomed.pop())  # its event handler is in this build's snapshot already
            destroyed.set()
        return can_execute(entity)

    ex.can_execute = can_execute_and_destroy
    wake = node.create_guard_condition(lambda: None)
    ex.add_node(node)
    thread, error = _spin_recording_death(ex)
    thread.start()
    try:
        armed.set()
        wake.trigger()  # a new wait-set build, which destroys the subscription between its passes
        assert destroyed.wait(20.0), "the executor never rebuilt its wait set"
        return _still_receives(node, thread, "amf_test_after_destroy"), (error[0] if error else None)
    finally:
        ex.shutdown(timeout_sec=2.0)
        thread.join(5.0)
        node.destroy_node()


@pytest.mark.ros
@pytest.mark.parametrize("kind", ["single", "multi"])
def test_executor_survives_a_subscription_destroyed_between_its_wait_set_passes(rclpy_context, kind: str) -> None:
    """The race above made certain: the package's executors drop that one wake-up and keep receiving."""
    receiving, error = _destroyed_between_the_passes(kind)
    assert error is None and receiving, error


@pytest.mark.ros
def test_unpatched_executor_dies_of_the_same_destroy(rclpy_context) -> None:
    """The check above can fail: the installed rclpy's MultiThreadedExecutor loses its spin thread to the same destroy
    (if a later rclpy fixes this, this test says so and the workaround in amf_ros.ros.spin can go). It was a 20 s churn
    that waited for the race to happen, and in one CI run beside a benchmark it did not happen in 24972 iterations."""
    from rclpy.exceptions import InvalidHandle

    receiving, error = _destroyed_between_the_passes("multi_rclpy")
    assert isinstance(error, InvalidHandle) and not receiving, error
