"""The lifecycle every node's ``main()`` shares: init, build, spin, and a shutdown that always ends in time.

Why: Ctrl-C / SIGTERM must end a node quietly and within seconds, also while a long goal runs. rclpy's signal
handler shuts the context down; the context's ``on_shutdown`` hook then calls the node's ``close()`` at once (from
the signal handler's thread), which stops the node's runtime threads and processes, so that any executor callback
waiting on them returns within its bound and the executor can stop. Ctrl-C while the node is still being built
shows up as an invalid context (an RCLError from the constructor) and also exits quietly; any other error still
ends the process with a traceback.

Executors (``executor=``): ``multi`` (MultiThreadedExecutor, for nodes whose action execute callbacks wait on a
runtime thread while other callbacks must keep running), ``single`` (SingleThreadedExecutor), ``events``
(rclpy.experimental.EventsExecutor). Which node uses which, and why: docs/ros-system.md ("Executors").
"""

from __future__ import annotations

import logging
from typing import Callable, Sequence

import rclpy
from rclpy.executors import ExternalShutdownException, Executor, MultiThreadedExecutor, SingleThreadedExecutor
from rclpy.node import Node

EXECUTORS = ("multi", "single", "events")


def make_executor(kind: str, num_threads: int = 4) -> Executor:
    """An rclpy executor by name (see the module docstring)."""
    if kind == "multi":
        return MultiThreadedExecutor(num_threads=num_threads)
    if kind == "single":
        return SingleThreadedExecutor()
    if kind == "events":
        from rclpy.experimental import EventsExecutor

        return EventsExecutor()
    raise ValueError(f"executor must be one of {EXECUTORS}, got {kind=}")


def _close(node: Node | None) -> None:
    close = getattr(node, "close", None)
    if close is not None:
        try:
            close()
        except Exception:  # noqa: BLE001 - shutdown goes on; the error is logged
            logging.getLogger(__name__).exception("error while closing %s", node.get_name() if node else "?")


def spin(make_node: Callable[[], Node], args: Sequence[str] | None = None, executor: str = "multi",
         num_threads: int = 4) -> None:
    """Initialise rclpy, build the node with ``make_node()``, spin it until shutdown, then clean up.

    A node may define ``close()``: it is called as soon as shutdown starts (signal or error) and once more after
    spinning ends; it must be idempotent and must not block for long.
    """
    rclpy.init(args=args)
    node: Node | None = None
    ex = make_executor(executor, num_threads)
    try:
        node = make_node()
        built = node
        rclpy.get_default_context().on_shutdown(lambda: _close(built))
        ex.add_node(node)
        ex.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except Exception:
        if rclpy.ok():
            raise  # a real error; an interrupted start shows up as an invalid context instead
    finally:
        _close(node)
        ex.shutdown(timeout_sec=2.0)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
