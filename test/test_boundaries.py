"""The boundary the layout promises: only amf_ros/ros/ imports rclpy, and the ROS-free runtime tests pass with
rclpy unavailable (DESIGN.md, rules of the house)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from testpaths import REPO

PKG = REPO / "amf_ros"
ROS_ONLY = ("rclpy", "rcl_interfaces", "launch", "launch_ros")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
    return found


def test_only_the_ros_folder_imports_rclpy() -> None:
    offenders = {}
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(PKG)
        if rel.parts[0] == "ros":
            continue
        bad = _imports(path) & set(ROS_ONLY)
        if bad:
            offenders[str(rel)] = sorted(bad)
    assert offenders == {}, f"modules outside amf_ros/ros/ import ROS: {offenders}"


def test_the_ast_check_would_catch_an_import(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from rclpy.node import Node\n    return Node\n")
    assert "rclpy" in _imports(probe)


def test_runtime_tests_pass_without_rclpy() -> None:
    """Run test/runtime in a fresh interpreter in which `import rclpy` fails, as on a machine without ROS."""
    code = ("import sys; sys.modules.update({m: None for m in %r}); import pytest; "
            "sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-k', 'not without_rclpy', %r]))"
            % (ROS_ONLY, str(REPO / "test" / "runtime")))
    res = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONDONTWRITEBYTECODE": "1"})
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
    assert " passed" in res.stdout and "error" not in res.stdout.splitlines()[-1]
