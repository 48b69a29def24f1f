"""The lifecycle every node's ``main()`` shares: init, build, spin, and a shutdown that always ends in time.

Why: Ctrl-C / SIGTERM must end a node quietly and within seconds, also while a long goal runs, and an action
client must still get its goal's result. rclpy's own signal handler would shut the context down at once (no result
could be sent any more, and its ``on_shutdown`` hooks never run then), so :func:`spin` installs its own: the
executor spins on a thread of its own while the main thread waits for SIGINT/SIGTERM; then the node's ``close()``
runs with the context still valid (it stops the node's runtime threads and processes, so that every executor
callback waiting on them returns within its bound, and ends active goals with a result), the executor stops, and
only then the context goes. Every step is bounded. A signal while the node is still being built (first-start
pre-training takes a minute) interrupts the build at once and exits quietly; any other error still ends the
process with a traceback.

Executors (``executor=``): ``multi`` (:class:`PooledExecutor`: rclpy's MultiThreadedExecutor with the fix of
ros2/rclpy#1452 back-ported, for nodes whose action execute callbacks wait on a runtime thread while other callbacks
must keep running), ``multi_rclpy`` (the unpatched MultiThreadedExecutor of the installed rclpy, kept to measure
against), ``single`` (:class:`SingleExecutor`: SingleThreadedExecutor), ``events`` (rclpy.experimental.EventsExecutor).
A node with an ``executor_kind`` attribute (set from its ``executor`` parameter) picks its own. Which node uses which,
and why: docs/ros-system.md ("Executors").
"""

from __future__ import annotations

import atexit
import faulthandler
import logging
import os
import signal
import sys
import threading
from typing import Any, Callable, Sequence

import rclpy
from rclpy.exceptions import InvalidHandle
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
from rclpy.signals import SignalHandlerOptions

from amf_ros.bringup.lifetime import (
    NO_RESPAWN_EXIT,
    NODE_SHUTDOWN_DEADLINE_S,
    STACK_DUMP_SIGNAL,
    NoRespawnError,
    die_with_parent_if_asked,
)

EXECUTORS = ("multi", "multi_rclpy", "single", "events")


class StartupError(RuntimeError):
    """A node cannot start for a reason its operator can fix (missing GPU, package, file): :func:`spin` prints the
    message as one line on stderr and exits with status 1, no traceback."""


_DESTROYED_WHILE_WAITING = InvalidHandle
"""rclpy <= 9.1.2 builds its wait set in two passes: it enters each waitable (a subscription's QoS event handler),
skipping those already destroyed, then adds every waitable of its snapshot to the wait set; an entity destroyed by
another thread between the two passes raises InvalidHandle out of ``spin()`` and the spin thread dies, so the node
never runs a callback again (CI: a test's client node stopped receiving after a helper destroyed its subscription;
reproduced in tens of iterations with ``sys.setswitchinterval(1e-6)``). The wait set is rebuilt from the node's
current entities on the next spin, so the executors below drop that one wake-up and go on."""


class SingleExecutor(SingleThreadedExecutor):
    """rclpy's SingleThreadedExecutor that survives an entity destroyed while it builds its wait set
    (:data:`_DESTROYED_WHILE_WAITING`)."""

    def _spin_once_impl(self, timeout_sec: Any = None, wait_condition: Callable[[], bool] = lambda: False) -> None:
        try:
            super()._spin_once_impl(timeout_sec, wait_condition)
        except _DESTROYED_WHILE_WAITING:
            self._cb_iter = None  # the generator died with the error: a fresh one rebuilds the wait set


class PooledExecutor(MultiThreadedExecutor):
    """MultiThreadedExecutor whose spin thread never re-dispatches a callback that waits in the pool's queue.

    Why: rclpy <= 9.1.2 yields a task again while it sits in the thread pool's queue (it is neither executing
    nor done), so the spin thread loops without waiting, holding the GIL, until a pool thread gets the GIL to
    start it: every message then costs a burst of busy looping, and every other thread of the process (the
    control thread) waits for the GIL meanwhile (ros2/rclpy#1452, fixed upstream by ros2/rclpy#1547). Here a
    dispatched task reports itself as executing until a pool thread picks it up, which is that fix. It also survives
    an entity destroyed while it builds its wait set (:data:`_DESTROYED_WHILE_WAITING`).
    """

    def _spin_once_impl(self, timeout_sec: Any = None, wait_condition: Callable[[], bool] = lambda: False) -> None:
        try:
            handler, _entity, _node = self.wait_for_ready_callbacks(timeout_sec, None, wait_condition)
        except (ExternalShutdownException, ShutdownException, TimeoutException, ConditionReachedException):
            return
        except _DESTROYED_WHILE_WAITING:
            self._cb_iter = None  # the generator died with the error: a fresh one rebuilds the wait set
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
        return SingleExecutor()
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
    node with a traceback and exit code -2 instead of 0. A later SIGTERM changes nothing either (the clean-up is
    bounded); SIGKILL still stops it."""
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGINT, signal.SIG_IGN)


SIGNAL_POLL_S = 0.2
"""How often the main thread wakes while it waits for shutdown. Python runs a signal's handler only in the main
thread, when it next executes bytecode; the kernel may deliver SIGINT to any thread that does not block it (a DDS
or executor thread), and then nothing interrupts a main thread asleep in an untimed ``Event.wait()``: one node
stayed up 20 s after SIGINT with its main thread in that wait (py-spy, CI and locally under load)."""


class _Signals:
    """SIGINT/SIGTERM of this process: while the node is built they interrupt the build (KeyboardInterrupt in the
    main thread); afterwards they only set :attr:`signalled`, which the main thread polls while it waits on
    :attr:`stop` (set by the executor's end). Later signals change nothing (the shutdown under way is bounded).

    Why a plain attribute and not ``stop.set()`` in the handler: Python runs a signal handler in the main thread
    between two bytecodes, possibly inside ``stop.wait()`` while that thread holds the Event's lock; ``Event.set``
    there waits for that same lock for ever. A sim_bridge was found an hour after its SIGTERM with four nested
    handlers blocked in ``Event.set`` (py-spy, session 36); the handler now takes no lock."""

    def __init__(self) -> None:
        self.stop = threading.Event()
        self.signalled = False
        self.building = True
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._on_signal)

    def stopping(self) -> bool:
        """A signal came, or the executor ended."""
        return self.signalled or self.stop.is_set()

    def _on_signal(self, _signum: int, _frame: Any) -> None:
        first = not self.stopping()
        self.signalled = True
        if self.building and first:
            raise KeyboardInterrupt


def _bounded(fn: Callable[[], Any], timeout_s: float, what: str) -> None:
    """Run ``fn`` on a daemon thread and wait at most ``timeout_s`` for it (shutdown must not hang on one step)."""
    worker = threading.Thread(target=fn, name=what, daemon=True)
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        logging.getLogger(__name__).warning("%s did not end within %.1f s; exiting anyway", what, timeout_s)


def spin(make_node: Callable[[], Node], args: Sequence[str] | None = None, executor: str = "multi",
         num_threads: int = 4) -> None:
    """Initialise rclpy, build the node with ``make_node()``, spin it until shutdown, then clean up.

    A node may define ``close()``: it is called once shutdown starts (signal, or the executor ended), while the
    executor still spins, so that goals it ends can still send their result; it must be idempotent and bounded.
    """
    die_with_parent_if_asked()  # started by ros2 launch: do not outlive it (bringup/lifetime.py)
    faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True)  # `amf up` asks for the stacks before a SIGKILL
    rclpy.init(args=args, signal_handler_options=SignalHandlerOptions.NO)  # our own: _Signals
    signals = _Signals()
    node: Node | None = None
    ex: Executor | None = None
    spinner: threading.Thread | None = None
    spin_error: list[BaseException] = []
    exit_code = 0
    try:
        node = make_node()
        signals.building = False
        if signals.stopping():
            raise KeyboardInterrupt  # a signal arrived just as the build ended
        ex = make_executor(getattr(node, "executor_kind", executor), num_threads)
        ex.add_node(node)
        spinning = ex

        def run_executor() -> None:
            try:
                spinning.spin()
            except (KeyboardInterrupt, ExternalShutdownException, ShutdownException):
                pass
            except BaseException as exc:  # a callback raised: end the node with it (re-raised below)
                if not signals.stopping():
                    spin_error.append(exc)
                else:
                    logging.getLogger(__name__).warning("callback error during shutdown: %s: %s",
                                                        type(exc).__name__, exc)
            finally:
                signals.stop.set()

        spinner = threading.Thread(target=run_executor, name="executor", daemon=True)
        spinner.start()
        while not signals.stopping():  # a signal's handler runs in this wait (woken within SIGNAL_POLL_S)
            signals.stop.wait(SIGNAL_POLL_S)  # or the executor's end wakes it at once
    except KeyboardInterrupt:
        pass
    except StartupError as exc:
        print(f"{exc}", file=sys.stderr)
        exit_code = 1
    except NoRespawnError as exc:  # e.g. another graph holds this node's place (bringup/graph_lock.py)
        print(f"{exc}", file=sys.stderr)
        exit_code = NO_RESPAWN_EXIT
    except Exception:
        if rclpy.ok() and not signals.stopping():
            raise  # a real error; an interrupted start shows up as an invalid context instead
    finally:
        signals.building = False
        _ignore_further_interrupts()
        _watchdog(exit_code)
        _close(node)  # the executor still spins: goals end with a result that reaches their clients
        if ex is not None:
            stopping = ex
            _bounded(lambda: stopping.shutdown(timeout_sec=2.0), 3.0, "executor shutdown")
        if spinner is not None:
            spinner.join(2.0)  # its last callback (a goal's result being sent) ends before the context goes
        if node is not None:
            _destroy(node)
        rclpy.try_shutdown()
        rclpy.get_default_context().destroy()  # the DDS participant leaves now: peers drop this node at once
    if spin_error:
        raise spin_error[0]
    _exit_now(exit_code)


def _destroy(node: Node) -> None:
    """Destroy the node and its action servers and clients, which ``destroy_node`` leaves to the interpreter's
    teardown (skipped: :func:`_exit_now`); undestroyed, their DDS endpoints outlive the process until the lease ends
    and a client's ``wait_for_server`` finds a server that is gone (seen with a respawned policy_server)."""
    for waitable in list(node.waitables):
        destroy = getattr(waitable, "destroy", None)
        if destroy is not None:
            try:
                destroy()
            except Exception as exc:  # already destroyed, or rclpy refuses: the process ends anyway
                logging.getLogger(__name__).debug("destroying %r: %s", waitable, exc)
    node.destroy_node()


def _watchdog(code: int) -> None:
    """End the process with ``code`` if the clean-up is still running after ``NODE_SHUTDOWN_DEADLINE_S`` (10 s, why:
    bringup/lifetime.py; nothing is lost by ending then, close() ran first), and in any case a little later: a
    clean-up stuck inside an rclpy/Fast DDS call that holds the GIL (seen once: a task_selector busy in node
    destruction for over 60 s) starves a Python timer thread, so faulthandler's C watchdog, which needs no GIL, dumps
    the stacks and ends the process (exit code 1) 5 s after that."""
    def expire() -> None:
        print(f"shutdown did not finish within {NODE_SHUTDOWN_DEADLINE_S:.0f} s; exiting. Where each thread was:",
              file=sys.stderr, flush=True)
        faulthandler.dump_traceback(all_threads=True)  # the evidence of what hung (the log keeps it)
        os._exit(code)

    timer = threading.Timer(NODE_SHUTDOWN_DEADLINE_S, expire)
    timer.daemon = True
    timer.start()
    faulthandler.dump_traceback_later(NODE_SHUTDOWN_DEADLINE_S + 5.0, exit=True)


def _exit_now(code: int) -> None:
    """The node is shut down: end the process without the interpreter's teardown. Measured at a CPU load of 4 on 2
    cores: freeing a torch process's objects one by one took task_selector 2.3 s after its clean-up, and an object
    freed after rclpy's logging was finalised printed an ``RcutilsLogger.__del__`` traceback. Everything that
    matters was stopped, joined or flushed before (the node's ``close()``, the executor, the context); the atexit
    handlers still run (multiprocessing's releases the fine-tune worker's semaphores: no resource_tracker warning)."""
    atexit._run_exitfuncs()  # what the interpreter calls first; the teardown after it is skipped
    logging.shutdown()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)
