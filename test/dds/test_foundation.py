"""Foundation (issue 2): the colcon install exists, generated interfaces and the library are ONE package, and an
installed node executable answers a client in another process over real DDS (own ROS_DOMAIN_ID, loopback)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest
from ros_system_util import INSTALL_LIB, REPO, call, require_ros


def test_colcon_install_and_one_package() -> None:
    require_ros()
    assert (REPO / "install" / "setup.bash").is_file()
    srv = importlib.import_module("amf_ros.srv")
    core = importlib.import_module("amf_ros.core")
    from amf_ros.srv import NextTask  # noqa: F401  the generated type imports by its ROS name

    # Same package object: `amf_ros.srv` and `amf_ros.core` hang off one `amf_ros` module.
    assert sys.modules["amf_ros.srv"] is srv and srv.__name__.rsplit(".", 1)[0] == core.__name__.rsplit(".", 1)[0]
    assert sys.modules["amf_ros"].__dict__["srv"] is srv and sys.modules["amf_ros"].__dict__["core"] is core
    # The generated module lives in the colcon install, the hand-written one in the source tree / install symlink.
    assert "install" in Path(srv.__file__).resolve().as_posix() or "build" in Path(srv.__file__).resolve().as_posix()
    for exe in ("policy_server", "task_selector"):
        assert (INSTALL_LIB / exe).is_file(), f"{exe} is not installed in {INSTALL_LIB}"


@pytest.mark.ros
def test_installed_node_answers_client_in_another_process(ros_env, client_node, tmp_path) -> None:
    """task_selector (uniform selector, no policy needed) as its own process; this test process is the client."""
    from amf_ros.bringup.graph import find_executable
    from amf_ros.srv import NextTask

    params = tmp_path / "p.yaml"
    params.write_text("/**/task_selector:\n  ros__parameters:\n    selector: round_robin\n"
                      f"    tasks_file: {REPO / 'config/tasks/metaworld.yaml'}\n"
                      f"    dataset_dir: {tmp_path / 'dataset'}\n    checkpoint_dir: {tmp_path / 'ckpt'}\n")
    log = open(tmp_path / "node.log", "wb")
    proc = subprocess.Popen([str(find_executable("task_selector")), "--ros-args", "-r", "__ns:=/amf",
                             "--params-file", str(params)],
                            env={**__import__("os").environ, **ros_env}, stdout=log, stderr=subprocess.STDOUT)
    try:
        resp = call(client_node, NextTask, "/amf/next_task", NextTask.Request(), timeout=60)
        assert resp.ok, resp.message
        assert resp.task == "reach" and resp.instruction  # round_robin over zero counts: first task in file order
        assert list(resp.tasks)[:2] == ["reach", "push"] and list(resp.demo_counts) == [0] * len(resp.tasks)
        assert proc.poll() is None
    finally:
        proc.send_signal(2)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
    assert proc.returncode == 0, (tmp_path / "node.log").read_text()[-2000:]
