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


class GoalCall:
    """A goal sent by :func:`send_goal_bounded`; :meth:`cancel` asks its server to cancel it (also before the server
    has accepted it: the cancel is sent on acceptance)."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.handle: Any = None
        self.finished = False
        self._cancel_done: Callable[[Any | None, str], None] | None = None
        self._lock = threading.Lock()

    def cancel(self, done: Callable[[Any | None, str], None]) -> None:
        """``done(response, "")`` when the server answered the cancel request, ``done(None, why)`` if there is
        nothing to cancel."""
        with self._lock:
            if self.finished:
                handle = None
            elif self.handle is None:
                self._cancel_done = done
                return
            else:
                handle = self.handle
        if handle is None:
            done(None, f"{self.what} already finished")
            return
        handle.cancel_goal_async().add_done_callback(lambda f: done(f.result(), ""))

    def _accepted(self, handle: Any) -> None:
        with self._lock:
            self.handle = handle
            pending, self._cancel_done = self._cancel_done, None
        if pending is not None:
            self.cancel(pending)


def send_goal_bounded(node: Node, client: Any, goal: Any, timeout_s: float,
                      done: Callable[[Any | None, str], None],
                      feedback: Callable[[Any], None] | None = None) -> GoalCall:
    """Send an action goal without waiting: ``done(result, "")`` with the action's result message, or
    ``done(None, why)`` when the server is absent, rejects the goal, or no result arrives within ``timeout_s`` (the
    goal is then cancelled). ``feedback(msg.feedback)`` for each feedback message. Callable from any callback."""
    call = GoalCall(getattr(client, "_action_name", "action"))
    lock, state = threading.Lock(), {"timer": None}

    def finish(result: Any | None, why: str) -> None:
        with call._lock:
            if call.finished:
                return
            call.finished = True
        with lock:
            timer = state["timer"]
        if timer is not None:
            timer.cancel()
            node.destroy_timer(timer)
        done(result, why)

    if not client.server_is_ready():
        done(None, f"action {call.what} is not available (is its node running?)")
        call.finished = True
        return call

    def on_timeout() -> None:
        handle = call.handle
        finish(None, f"no result from {call.what} within {timeout_s:g} s; cancelling it")
        if handle is not None:
            handle.cancel_goal_async()

    def on_goal(future: Any) -> None:
        handle = future.result()
        if handle is None or not handle.accepted:
            finish(None, f"{call.what}: goal rejected")
            return
        call._accepted(handle)
        handle.get_result_async().add_done_callback(
            lambda f: finish(f.result().result if f.result() is not None else None,
                             "" if f.result() is not None else "no result"))

    with lock:
        state["timer"] = node.create_timer(timeout_s, on_timeout)
    cb = (lambda msg: feedback(msg.feedback)) if feedback is not None else None
    client.send_goal_async(goal, feedback_callback=cb).add_done_callback(on_goal)
    return call
