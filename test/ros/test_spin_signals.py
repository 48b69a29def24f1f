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
