"""The lifecycle every node's ``main()`` shares: init, build, spin, and a shutdown that always ends in time.

Why: Ctrl-C / SIGTERM must end a node quietly and within seconds, also while a long goal runs. rclpy's signal
handler shuts the context down; the context's ``on_shutdown`` hook then calls the node's ``close()`` at once (from
the signal handler's thread), which stops the node's runtime threads and processes, so that any executor callback
waiting on them returns within its bound and the executor can stop. Ctrl-C while the node is still being built
shows up as an invalid context (an RCLError from the constructor) and also exits quietly; any other error still
ends the process with a traceback.

Executors (``executor=``): ``multi`` (:class:`PooledExecutor`: rclpy's MultiThreadedExecutor with the fix of
ros2/rclpy#1452 back-ported, for nodes whose action execute callbacks wait on a runtime thread while other callbacks
must keep running), ``multi_rclpy`` (the unpatched MultiThreadedExecutor of the installed rclpy, kept to measure
against), ``single`` (SingleThreadedExecutor), ``events`` (rclpy.experimental.EventsExecutor). A node with an
``executor_kind`` attribute (set from its ``executor`` parameter) picks its own. Which node uses which, and why:
docs/ros-system.md ("Executors").
"""

from __future__ import annotations

import logging
import signal
import sys
import threading
from typing import Any, Callable, Sequence

import rclpy
from rclpy.executors import (
    ConditionReachedException,
    Executor,
    ExternalShutdownException,
    MultiThreadedExecutor,
    ShutdownException,
    SingleThreadedExecutor,
    TimeoutException,
)
from rclpy.node import Node

from amf_ros.bringup.lifetime import NO_RESPAWN_EXIT, NoRespawnError, die_with_parent_if_asked

EXECUTORS = ("multi", "multi_rclpy", "single", "events")


class StartupError(RuntimeError):
    """A node cannot start for a reason its operator can fix (missing GPU, package, file): :func:`spin` prints the
    message as one line on stderr and exits with status 1, no traceback."""


class PooledExecutor(MultiThreadedExecutor):
    """MultiThreadedExecutor whose spin thread never re-dispatches a callback that waits in the pool's queue.

    Why: rclpy <= 9.1.2 yields a task again while it sits in the thread pool's queue (it is neither executing
    nor done), so the spin thread loops without waiting, holding the GIL, until a pool thread gets the GIL to
    start it: every message then costs a burst of busy looping, and every other thread of the process (the
    control thread) waits for the GIL meanwhile (ros2/rclpy#1452, fixed upstream by ros2/rclpy#1547). Here a
    dispatched task reports itself as executing until a pool thread picks it up, which is that fix.
    """

    def _spin_once_impl(self, timeout_sec: Any = None, wait_condition: Callable[[], bool] = lambda: False) -> None:
        try:
            handler, _entity, _node = self.wait_for_ready_callbacks(timeout_sec, None, wait_condition)
        except (ExternalShutdownException, ShutdownException, TimeoutException, ConditionReachedException):
            return
        handler.executing = lambda: True  # type: ignore[method-assign]  # queued: not to be yielded again

        def start() -> None:
            handler.__dict__.pop("executing", None)  # Task.executing() again (True while it runs)
            handler()

        self._executor.submit(start)
        self._futures.append(handler)
        for future in self._futures[:]:
            if future.done():
                self._futures.remove(future)
                future.result()  # raise any exception of a callback, like MultiThreadedExecutor


def make_executor(kind: str, num_threads: int = 4) -> Executor:
    """An rclpy executor by name (see the module docstring)."""
    if kind == "multi":
        return PooledExecutor(num_threads=num_threads)
    if kind == "multi_rclpy":
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
        except Exception:
            logging.getLogger(__name__).exception("error while closing %s", node.get_name() if node else "?")


def _ignore_further_interrupts() -> None:
    """Shutdown has begun: a Ctrl-C in the terminal of ``ros2 launch`` reaches a node twice (from the terminal and
    forwarded by launch), and users press it again; a KeyboardInterrupt inside the bounded clean-up would end the
    node with a traceback and exit code -2 instead of 0. SIGTERM and SIGKILL still stop it."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def spin(make_node: Callable[[], Node], args: Sequence[str] | None = None, executor: str = "multi",
         num_threads: int = 4) -> None:
    """Initialise rclpy, build the node with ``make_node()``, spin it until shutdown, then clean up.

    A node may define ``close()``: it is called as soon as shutdown starts (signal or error) and once more after
    spinning ends; it must be idempotent and must not block for long.
    """
    die_with_parent_if_asked()  # started by ros2 launch: do not outlive it (bringup/lifetime.py)
    rclpy.init(args=args)
    node: Node | None = None
    ex: Executor | None = None
    exit_code = 0
    try:
        node = make_node()
        built = node
        rclpy.get_default_context().on_shutdown(lambda: _close(built))
        ex = make_executor(getattr(node, "executor_kind", executor), num_threads)
        ex.add_node(node)
        ex.spin()
    except (KeyboardInterrupt, ExternalShutdownException):
        pass
    except StartupError as exc:
        print(f"{exc}", file=sys.stderr)
        exit_code = 1
    except NoRespawnError as exc:  # e.g. another graph holds this node's place (bringup/graph_lock.py)
        print(f"{exc}", file=sys.stderr)
        exit_code = NO_RESPAWN_EXIT
    except Exception:
        if rclpy.ok():
            raise  # a real error; an interrupted start shows up as an invalid context instead
    finally:
        _ignore_further_interrupts()
        _close(node)
        if ex is not None:
            ex.shutdown(timeout_sec=2.0)
        if node is not None:
            node.destroy_node()
        rclpy.try_shutdown()
    if exit_code:
        sys.exit(exit_code)
