"""Service calls from inside a node with a bound: an answer or, after ``timeout_s``, a reason, never silence.

Why: ``client.call_async`` from a callback must not be waited on (that would block the executor), and a future
whose server vanished (a killed recorder, a simulator restarting) never completes, so whoever hoped for its answer
waits forever. Here a one-shot timer ends the wait: ``done`` is called exactly once.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

from rclpy.node import Node


def call_bounded(node: Node, client: Any, request: Any, timeout_s: float,
                 done: Callable[[Any | None, str], None]) -> None:
    """Call ``client`` asynchronously; ``done(response, "")`` on the answer or ``done(None, why)`` after
    ``timeout_s`` (the pending request is dropped, a late answer ignored). Callable from any callback."""
    lock, state = threading.Lock(), {"done": False, "timer": None}

    def finish(response: Any | None, why: str) -> bool:
        with lock:
            if state["done"]:
                return False
            state["done"] = True
            timer = state["timer"]
        if timer is not None:
            timer.cancel()
            node.destroy_timer(timer)
        done(response, why)
        return True

    future = client.call_async(request)

    def on_timeout() -> None:
        if finish(None, f"no answer from {client.srv_name} within {timeout_s:g} s (is its node running?)"):
            client.remove_pending_request(future)

    with lock:
        if not state["done"]:
            state["timer"] = node.create_timer(timeout_s, on_timeout)
    future.add_done_callback(lambda f: finish(f.result(), "" if f.result() is not None else "no answer"))
