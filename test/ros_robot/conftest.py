"""Fixtures for the robot-side ROS tests (demo_recorder, sim_bridge, scripted_teleop).

Every node runs as its own OS process over real DDS on loopback, in a ROS_DOMAIN_ID picked for this test
session; the in-test client node lives in the same domain. Node processes are always stopped in teardown
(SIGINT, then SIGKILL).
"""

from __future__ import annotations

import os
import random
import socket
import threading
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

from amf_ros._optional import has

REPO = Path(__file__).resolve().parents[2]
INSTALL_LIB = REPO / "install" / "amf_ros" / "lib" / "amf_ros"


def _domain_free(domain: int) -> bool:
    """Heuristic: the Fast DDS unicast port of participant 0 in ``domain`` can be bound (nobody uses it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.bind(("127.0.0.1", 7400 + 250 * domain + 11))
        except OSError:
            return False
    return True


@pytest.fixture(scope="session")
def ros_env() -> dict[str, str]:
    """Environment of node processes and of the test's own rclpy context: a domain of our own, loopback only."""
    if not has("rclpy"):
        pytest.skip("rclpy is not importable: run `bash scripts/setup.sh` and `source scripts/env.sh`")
    if not INSTALL_LIB.is_dir():
        pytest.skip(f"no colcon install at {INSTALL_LIB}: run `bash scripts/setup.sh`")
    rng = random.Random(os.getpid() ^ int.from_bytes(os.urandom(4), "little"))
    domain = next((d for d in (rng.randint(1, 100) for _ in range(50)) if _domain_free(d)), rng.randint(1, 100))
    env = {"ROS_DOMAIN_ID": str(domain), "ROS_AUTOMATIC_DISCOVERY_RANGE": "LOCALHOST", "PYTHONUNBUFFERED": "1"}
    os.environ.update(env)
    os.environ.pop("RMW_IMPLEMENTATION", None)
    return env


@pytest.fixture(scope="session")
def rclpy_session(ros_env):
    """rclpy initialised once per session, after ROS_DOMAIN_ID is set."""
    import rclpy

    rclpy.init()
    yield rclpy
    rclpy.try_shutdown()


@pytest.fixture
def client_node(rclpy_session) -> Iterator[Any]:
    """An rclpy node spun by a background MultiThreadedExecutor (futures complete while the test waits)."""
    from rclpy.executors import MultiThreadedExecutor
    from rclpy.node import Node

    node = Node(f"ros_robot_test_{os.getpid()}_{random.randint(0, 10**6)}")
    executor = MultiThreadedExecutor(num_threads=2)
    executor.add_node(node)
    thread = threading.Thread(target=executor.spin, daemon=True)
    thread.start()
    yield node
    executor.shutdown()
    node.destroy_node()
    thread.join(timeout=5)


def write_params(path: Path, sections: dict[str, dict[str, Any]]) -> Path:
    """Write a ROS params file ``{node: {ros__parameters: {...}}}``."""
    doc = {name: {"ros__parameters": values} for name, values in sections.items()}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.fixture
def start_nodes(ros_env, tmp_path) -> Iterator[Any]:
    """``start(params: {node: {param: value}}) -> NodeProcesses`` (each node its own process); stopped at teardown."""
    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.processes import NodeProcesses

    started: list[NodeProcesses] = []

    def start(sections: dict[str, dict[str, Any]], name: str = "nodes",
              env: dict[str, str] | None = None) -> NodeProcesses:
        params = write_params(tmp_path / f"{name}.yaml", sections)
        specs = [NodeSpec(name=n, executable=n, params_file=str(params)) for n in sections]
        procs = NodeProcesses(specs, log_dir=tmp_path / f"logs_{name}", env={**ros_env, **(env or {})})
        started.append(procs)
        return procs.start()

    yield start
    for procs in started:
        procs.stop(timeout=5.0)
        for name in procs.procs:  # shown by pytest only when the test failed
            print(f"----- log of {name} -----\n{procs.log_tail(name, 4000)}")


# Let the test modules import the helpers next to this file (pytest runs with --import-mode=importlib).
import sys  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
