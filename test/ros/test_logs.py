"""No node logs at two severities from one call site (issue 33 item 2: rclpy raises ``ValueError: Logger severity
cannot be changed between calls.`` and scripted_teleop died on a reset during a demonstration). The rule of
amf_ros/ros/logs.py is checked statically over every file of amf_ros/ros/, and the nodes' ``log(level, text)``
methods are run against rclpy's own logger at every level in turn."""

from __future__ import annotations

import ast
import importlib
import inspect
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from ros_testing import require_ros

ROS_DIR = Path(__file__).resolve().parents[2] / "amf_ros" / "ros"
# Not "warn": rclpy 9.1.2 wraps it in typing_extensions.deprecated, so the call site rclpy records for every warn()
# of a process is the wrapper's one line, and two warn() calls with different filters (one throttled) crash the
# second (sim_bridge died that way on an e-stop request).
SEVERITIES = {"debug", "info", "warning", "error", "fatal"}


def logger_misuses(source: str, filename: str = "<src>") -> list[str]:
    """``file:line`` of every ``get_logger()`` that is not called at once as ``get_logger().<severity>(...)``: a stored
    logger, a bound severity method passed on or picked from a dict, ``.log(text, severity)`` with any severity."""
    tree = ast.parse(source, filename)
    parent = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    bad = []
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get_logger"):
            continue
        method = parent.get(node)
        call = parent.get(method)
        if not (isinstance(method, ast.Attribute) and method.attr in SEVERITIES and isinstance(call, ast.Call)
                and call.func is method):
            bad.append(f"{filename}:{node.lineno}: {ast.unparse(parent.get(node, node))[:100]}")
    return bad


def test_the_check_finds_the_call_sites_that_can_vary():
    """The patterns that crashed scripted_teleop and could crash the console, and two more; the fixed forms pass."""
    crashing = [
        '{"info": self.get_logger().info, "warn": self.get_logger().warn}.get(level, self.get_logger().error)(t)',
        "(self.get_logger().warn if bad else self.get_logger().info)(t)",
        "self.get_logger().log(t, severity)",
        "logger = self.get_logger()",
        "PolicyServer(p, log=self.get_logger().info)",
        "self.get_logger().warn(t, throttle_duration_sec=2.0)",
    ]
    for line in crashing:
        assert logger_misuses(line), line
    fine = ["self.get_logger().info(t)", "self.get_logger().error(t, throttle_duration_sec=2.0)",
            "self.get_logger().warning(t)", "log_at(self, level, t)"]
    assert [line for line in fine if logger_misuses(line)] == []


def test_no_node_picks_a_severity_at_run_time_from_one_call_site():
    files = sorted(ROS_DIR.rglob("*.py"))
    assert len(files) > 10 and any(f.name == "scripted_teleop.py" for f in files)
    bad = [hit for f in files for hit in logger_misuses(f.read_text(), str(f.relative_to(ROS_DIR.parent.parent)))]
    assert bad == [], "log with a literal severity or amf_ros.ros.logs.log_at / log_fn:\n" + "\n".join(bad)


def _logger_holder():
    """Something with ``get_logger()`` returning a real rclpy logger of its own name (fresh call-site contexts)."""
    import rclpy.logging

    logger = rclpy.logging.get_logger(f"amf_test_logs_{uuid.uuid4().hex[:8]}")
    return SimpleNamespace(get_logger=lambda: logger)


LEVEL_RUN = ["info", "warn", "error", "info", "debug", "warning", "error", "info"]


def test_rclpy_refuses_a_second_severity_at_one_call_site():
    """The premise, on rclpy's own logger: what the old one-line dispatch did raises; log_at does not."""
    require_ros()
    from amf_ros.ros.logs import log_at

    holder = _logger_holder()

    def old_dispatch(level: str, text: str) -> None:
        logger = holder.get_logger()
        {"info": logger.info, "warn": logger.warn}.get(level, logger.error)(text)

    old_dispatch("info", "first")
    with pytest.raises(ValueError, match="severity cannot be changed"):
        old_dispatch("error", "second")
    for level in LEVEL_RUN:
        log_at(holder, level, f"at {level}")


@pytest.mark.parametrize("module", ["scripted_teleop", "operator_console"])
def test_node_log_methods_take_every_level_in_turn(module):
    """Each node class's ``log(level, text)`` (the runtime's log lines) at info, then warn, then error, ...: no
    ValueError (scripted_teleop logged "demonstrating" at info, then "reset by someone else" at error)."""
    require_ros()
    mod = importlib.import_module(f"amf_ros.ros.nodes.{module}")
    classes = [c for _, c in inspect.getmembers(mod, inspect.isclass)
               if c.__module__ == mod.__name__ and "log" in vars(c)]
    assert classes, f"{module} has no node class with a log method"
    for cls in classes:
        holder = _logger_holder()
        for level in LEVEL_RUN:
            cls.log(holder, level, f"{cls.__name__} at {level}")


def test_rclpy_warn_shares_one_call_site_for_the_whole_process():
    """Why the check refuses ``.warn(``: two different warn() lines, one throttled, collide inside rclpy 9.1.2
    (its deprecated wrapper is the first frame outside rclpy); the same two lines with warning() do not."""
    require_ros()
    holder = _logger_holder()
    with pytest.warns(DeprecationWarning):
        holder.get_logger().warn("first", throttle_duration_sec=2.0)
    with pytest.raises(ValueError, match="filters cannot be changed"), pytest.warns(DeprecationWarning):
        holder.get_logger().warn("second, elsewhere, not throttled")
    holder = _logger_holder()
    holder.get_logger().warning("first", throttle_duration_sec=2.0)
    holder.get_logger().warning("second, elsewhere, not throttled")
