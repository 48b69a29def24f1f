"""`pip install .` in a fresh venv with no ROS: the library and the `amf` command work, nodes say they need rclpy.

Why: everything that is not a node must be usable on a machine without ROS (issue 2).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import venv
from pathlib import Path

import pytest
from testpaths import REPO

pytestmark = pytest.mark.slow


def _clean_env(venv_dir: Path) -> dict[str, str]:
    """The environment of a shell with no ROS and no project venv: only the new venv on PATH."""
    drop = ("PYTHONPATH", "AMENT_PREFIX_PATH", "CMAKE_PREFIX_PATH", "COLCON_PREFIX_PATH", "LD_LIBRARY_PATH",
            "VIRTUAL_ENV", "ROS_DISTRO", "ROS_VERSION", "ROS_PYTHON_VERSION", "PYTHONHOME")
    env = {k: v for k, v in os.environ.items() if k not in drop}
    paths = [p for p in env.get("PATH", "").split(os.pathsep) if ".venv" not in p and "install" not in p]
    env["PATH"] = os.pathsep.join([str(venv_dir / "bin"), *paths])
    return env


@pytest.fixture(scope="module")
def plain_venv(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    venv_dir = tmp_path_factory.mktemp("noros") / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(venv_dir)
    env = _clean_env(venv_dir)
    # Build from a copy so that build artefacts never land in the repository.
    src = venv_dir.parent / "src"
    shutil.copytree(REPO, src, ignore=shutil.ignore_patterns(".venv", "build", "install", "log", ".git",
                                                               "__pycache__", "runs", "out", "*.egg-info"))
    subprocess.run([str(venv_dir / "bin" / "pip"), "install", "-q", str(src)], env=env, check=True,
                   cwd=venv_dir.parent, timeout=600)
    return venv_dir, env


def _py(plain_venv: tuple[Path, dict[str, str]], code: str) -> subprocess.CompletedProcess:
    venv_dir, env = plain_venv
    return subprocess.run([str(venv_dir / "bin" / "python"), "-c", code], env=env, capture_output=True, text=True,
                          cwd=venv_dir.parent, timeout=120)


def test_there_is_really_no_ros(plain_venv):
    result = _py(plain_venv, "import rclpy")
    assert result.returncode != 0 and "rclpy" in result.stderr


def test_core_imports_without_ros(plain_venv):
    result = _py(plain_venv, "import amf_ros, amf_ros.core; print(amf_ros.__file__)")
    assert result.returncode == 0, result.stderr
    assert "site-packages" in result.stdout  # the installed copy, not the repository


def test_amf_help_runs(plain_venv):
    venv_dir, env = plain_venv
    result = subprocess.run([str(venv_dir / "bin" / "amf"), "--help"], env=env, capture_output=True, text=True,
                            cwd=venv_dir.parent, timeout=120)
    assert result.returncode == 0, result.stderr
    assert "bench" in result.stdout and "run" in result.stdout


def test_node_import_says_rclpy_is_needed(plain_venv):
    result = _py(plain_venv, "import amf_ros.ros.nodes.task_selector")
    assert result.returncode != 0
    assert "rclpy" in result.stderr and "is required" in result.stderr
    assert "Install:" in result.stderr


def test_generated_interfaces_are_absent_without_colcon(plain_venv):
    # pip installs the library only; interfaces come from the colcon build. The failure must be an ImportError.
    result = _py(plain_venv, "import amf_ros.srv")
    assert result.returncode != 0 and "ModuleNotFoundError" in result.stderr
