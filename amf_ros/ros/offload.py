"""Await a blocking runtime call from an executor callback without blocking the executor's thread.

Why: an action's execute callback waits seconds to minutes (a run_policy goal, a fine-tune). On a pooled executor
(``inline=True``) the callback simply blocks one pool thread. On a single-threaded executor that would stop every
other callback, so the call runs on a plain thread of its own and the callback is a coroutine awaiting an rclpy
Future. The thread announces its end with an Empty message on the node's hidden ``~/_offload_done`` topic; that
subscription's callback resolves the Future on the executor thread, and the executor resumes the coroutine after
it. A message rather than a guard condition because rclpy's EventsExecutor supports no guard conditions and only
revisits a waiting coroutine after rcl activity; the waitset executors revisit it on every wake-up (cheap: one
``send``), so nothing polls in between.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import rclpy
from rclpy.node import Node
from rclpy.task import Future
from std_msgs.msg import Empty

from amf_ros.ros import qos


class Offload:
    """``await offload(fn, *args)`` returns (or raises) the outcome of ``fn(*args)``, run on its own thread."""

    def __init__(self, node: Node, inline: bool = False) -> None:
        self.inline = inline
        self._lock = threading.Lock()
        self._finished: list[tuple[Future, Any, BaseException | None]] = []
        if not inline:
            self._done = node.create_publisher(Empty, "~/_offload_done", qos.EVENTS)
            node.create_subscription(Empty, "~/_offload_done", lambda _msg: self._deliver(), qos.EVENTS)

    async def __call__(self, fn: Callable[..., Any], *args: Any) -> Any:
        """Run ``fn(*args)`` without blocking the executor thread (inline on a pooled executor); return its result."""
        if self.inline:
            return fn(*args)
        future: Future = Future()

        def work() -> None:
            try:
                out, err = fn(*args), None
            except BaseException as exc:
                out, err = None, exc
            with self._lock:
                self._finished.append((future, out, err))
            try:
                self._done.publish(Empty())
            except Exception:
                if rclpy.ok():
                    raise

        threading.Thread(target=work, name=f"offload:{getattr(fn, '__name__', 'call')}", daemon=True).start()
        return await future

    def _deliver(self) -> None:
        """Subscription callback (executor thread): resolve the futures of every finished call."""
        with self._lock:
            finished, self._finished = self._finished, []
        for future, out, err in finished:
            if err is None:
                future.set_result(out)
            else:
                future.set_exception(err)
