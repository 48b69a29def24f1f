"""A node process dies with the process that started it: no orphaned nodes driving an arm.

Why: `ros2 launch` exits on SIGTERM without stopping what it launched (launch_service.py: "using SIGTERM can
result in orphaned processes"), and a supervisor killed with SIGKILL cannot stop anything. A process supervisor
(systemd, docker, a test harness) sends exactly those. So the nodes ask the kernel for SIGTERM when their parent
dies (PR_SET_PDEATHSIG, Linux): `amf up` sets it in the child before exec, the launch files through the
environment variable below, read by ``amf_ros.ros.spin``; SIGTERM then stops the node cleanly.
"""

from __future__ import annotations

import os
import signal

DIE_WITH_PARENT_ENV = "AMF_DIE_WITH_PARENT"
"""Set to "1" in a node's environment (the launch files do): the node gets SIGTERM when its parent exits."""
NO_RESPAWN_EXIT = 78
"""Exit status of a node (or `amf up`) that must not be started again as it is: its place is taken by another
graph (bringup.graph_lock), or its configuration is wrong. `amf up` does not respawn a node that exits with it
(78 = EX_CONFIG of sysexits.h; under systemd: ``RestartPreventExitStatus=78``)."""


NODE_SHUTDOWN_DEADLINE_S = 10.0
"""Longest a node's clean-up after SIGINT/SIGTERM may take before the node ends itself anyway (amf_ros.ros.spin's
watchdog). Each step is bounded (close() ~3 s, the executor 3 s, its thread 2 s); destroying the node and the context
are rclpy calls without a timeout, and one CI run saw operator_console still alive 15 s after SIGINT. `ros2 launch`
gives a node 10 s before SIGKILL (SIGTERM at 5 s, which a stopping node ignores); `amf up` waits a little longer
than this deadline, so that the node's own watchdog, which writes why, comes first."""
STACK_DUMP_SIGNAL = signal.SIGUSR1
"""A node writes every thread's Python stack to stderr (its log) on this signal (faulthandler: a C handler, so it
works while a thread holds the GIL or the main thread never saw SIGINT); `amf up` sends it to a node that outlived
its stop timeout, just before SIGKILL, so that the log says where the node was stuck."""


class NoRespawnError(RuntimeError):
    """Raised while a node starts when a restart cannot help: ``amf_ros.ros.spin`` prints the message as one line
    and exits with :data:`NO_RESPAWN_EXIT`, no traceback."""


def stays_down(code: int | None, restarts: int, respawn: bool = True, max_retries: int = 3) -> str:
    """The respawn rule of `amf up` and of both launch files, for a node that exited on its own: "" = start it again
    (after its respawn delay), else why it stays down.

    Args:
        code: its exit status (negative: killed by that signal).
        restarts: how often it was started again already.
        respawn: its ``respawn`` (graph.NodeSpec).
        max_retries: its ``respawn_max_retries``.
    """
    if code == NO_RESPAWN_EXIT:
        return f"it refused to start (exit {NO_RESPAWN_EXIT}: a restart cannot help)"
    if not respawn:
        return "respawn off"
    if restarts >= max_retries:
        return f"it exited {restarts + 1} times, respawn retries used up"
    return ""


def alive(pid: int) -> bool:
    """True while process ``pid`` runs (a zombie, exited but not yet reaped, counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def die_with_parent() -> bool:
    """Ask the kernel for SIGTERM when the parent process dies; False where that is unavailable (not Linux)."""
    try:
        import ctypes

        return ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM) == 0  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        return False


def die_with_parent_if_asked() -> None:
    """In a node at start: :func:`die_with_parent` when the environment asks for it; if the parent is already gone
    (re-parented to init), SIGTERM right away (the kernel would not send it any more)."""
    if os.environ.get(DIE_WITH_PARENT_ENV) != "1" or not die_with_parent():
        return
    if os.getppid() == 1:
        os.kill(os.getpid(), signal.SIGTERM)
