"""Logging from nodes when the severity is data: one rclpy call site per severity.

rclpy (``rclpy.impl.rcutils_logger.RcutilsLogger.log``, 9.x) keys a context by its call site (function, file, line
and bytecode offset of the first frame outside rclpy) and raises ``ValueError: Logger severity cannot be changed
between calls.`` when one call site logs at a second severity, with or without throttle/once/skip_first (a changed
logger name, filter or filter parameter at one call site raises too). So a line such as
``{"info": logger.info, "warn": logger.warn}.get(level, logger.error)(text)`` or ``(warn if bad else info)(text)``
crashes the node the first time the severity differs from its first call there (issue 33: scripted_teleop died on a
reset during a demonstration, before it could end the episode).

The rule every node follows (test/ros/test_logs.py checks it over amf_ros/ros/ with the AST, and runs the nodes'
``log`` methods against rclpy's logger): ``get_logger()`` is only ever called as ``get_logger().<severity>(...)``
with a literal severity method, never ``warn`` (rclpy 9.1.2 wraps ``warn`` in ``typing_extensions.deprecated``, so
the wrapper's one line is the call site of every ``warn()`` in the process and two of them with different filters
crash: sim_bridge died on an e-stop request that way); where the severity is a value, call :func:`log_at`, whose
branches are one call site each; where a library wants a log function, pass :func:`log_fn` (never a bound logger
method, whose call site would be the library's line).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

LEVELS = ("debug", "info", "warn", "error")
"""The severities :func:`log_at` takes ("warning" is read as "warn"; anything else is logged as an error)."""


def log_at(node: Any, level: str, text: str) -> None:
    """Log ``text`` on ``node``'s logger at ``level`` (see :data:`LEVELS`), each severity from its own call site."""
    if level == "info":
        node.get_logger().info(text)
    elif level in ("warn", "warning"):
        node.get_logger().warning(text)
    elif level == "debug":
        node.get_logger().debug(text)
    else:
        node.get_logger().error(text)


def log_fn(node: Any, level: str) -> Callable[[str], None]:
    """A one-argument log function at the fixed ``level`` on ``node``'s logger (for a library's ``log=``/``warn=``)."""
    return lambda text: log_at(node, level, text)
