"""The signal handler of every node's ``spin()`` (amf_ros/ros/spin.py): it must take no lock.

Python runs a handler in the main thread between two bytecodes, possibly while that thread holds a lock inside
``Event.wait``. The handler used to call ``Event.set`` on the event the main thread waits on, which takes that lock:
a sim_bridge hung for an hour after SIGTERM with four nested handlers blocked there (session 36). The test holds the
event's lock in a thread and runs the handler in the same thread, as the main thread would: it must return at once
and the node must see the signal."""

from __future__ import annotations

import signal
import threading

import pytest


@pytest.fixture
def signals():
    """A _Signals with the process's SIGINT/SIGTERM handlers restored afterwards."""
    pytest.importorskip("rclpy")
    from amf_ros.ros.spin import _Signals

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield _Signals()
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_the_handler_returns_while_the_waiting_thread_holds_the_events_lock(signals) -> None:
    signals.building = False
    returned = threading.Event()

    def main_thread_in_wait() -> None:
        with signals.stop._cond:  # where Event.wait holds it (threading.Event's own Condition)
            signals._on_signal(signal.SIGTERM, None)
        returned.set()

    worker = threading.Thread(target=main_thread_in_wait, daemon=True)
    worker.start()
    assert returned.wait(5.0), "the signal handler blocked on the lock its own thread holds"
    assert signals.stopping()


def test_a_signal_while_building_interrupts_the_build_once(signals) -> None:
    with pytest.raises(KeyboardInterrupt):
        signals._on_signal(signal.SIGINT, None)
    signals._on_signal(signal.SIGTERM, None)  # later signals change nothing: the shutdown under way is bounded
    assert signals.stopping()


NODE = """
import sys
from rclpy.node import Node
from amf_ros.ros.spin import spin

class Quiet(Node):
    def __init__(self):
        super().__init__("stack_dump_probe")
        self.create_timer(0.1, lambda: print("spinning", flush=True))

spin(Quiet, ["--ros-args", "-r", "__ns:=/amf_test_stack_dump"])
"""
BOUND_S = 60.0
"""Bound on each wait for the probe node (rclpy's start on a loaded 2-core machine takes a few seconds)."""


def test_a_running_node_writes_its_stacks_on_the_dump_signal_and_stops_cleanly_after(tmp_path) -> None:
    """What `amf up` sends before it SIGKILLs a node that outlived its stop timeout (bringup/lifetime.py): the node's
    log must then say where each thread was, and the signal alone must not stop or disturb the node."""
    pytest.importorskip("rclpy")
    import os
    import subprocess
    import sys
    import time

    from amf_ros.bringup.lifetime import STACK_DUMP_SIGNAL

    err = tmp_path / "stderr.txt"
    env = {**os.environ, "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "PYTHONUNBUFFERED": "1"}
    with open(err, "wb") as fh:
        proc = subprocess.Popen([sys.executable, "-c", NODE], stdout=subprocess.PIPE, stderr=fh, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()  # the timer ran: the node spins (readline ends at EOF if it died)
        assert line.strip() == b"spinning", err.read_text(errors="replace")
        proc.send_signal(STACK_DUMP_SIGNAL)
        deadline = time.monotonic() + BOUND_S
        while "Thread 0x" not in err.read_text(errors="replace") and time.monotonic() < deadline:
            time.sleep(0.05)
        dump = err.read_text(errors="replace")
        assert "Thread 0x" in dump and "spin.py" in dump and "(most recent call first)" in dump, dump
        assert proc.poll() is None, dump  # the dump did not end the node
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=BOUND_S) == 0, err.read_text(errors="replace")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
