"""Process-level DDS tests: every node runs as its own OS process over real DDS on loopback.

The ROS_DOMAIN_ID is picked for this test session (ros_env, rclpy_context and client_node are session-wide:
test/conftest.py); the in-test client node lives in the same domain. Helpers: test/support/robot_testutil.py,
test/support/ros_system_util.py. Node processes are always stopped in teardown
(SIGINT, then SIGKILL).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml

# ros_env, rclpy_session and client_node are session-wide: test/conftest.py.


def write_params(path: Path, sections: dict[str, dict[str, Any]]) -> Path:
    """Write a ROS params file ``{node: {ros__parameters: {...}}}``."""
    doc = {f"/**/{name}": {"ros__parameters": values} for name, values in sections.items()}
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


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """A headless Chromium WebDriver for one test module (the console tests); skips without chromium."""
    from amf_ros.bench.console_graph import have_chromium, open_chromium, quit_chromium

    if not have_chromium():
        pytest.skip("needs Debian's chromium and chromium-driver and selenium (scripts/setup.sh installs them when "
                    "run as root)")
    driver = open_chromium(window_size="1400,1300")
    try:
        yield driver
    finally:
        quit_chromium(driver)


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    """Where the console tests save their screenshots (AMF_CONSOLE_SCREENSHOTS=DIR, else a temporary directory)."""
    path = Path(os.environ.get("AMF_CONSOLE_SCREENSHOTS") or tmp_path_factory.mktemp("screenshots"))
    path.mkdir(parents=True, exist_ok=True)
    print("console screenshots:", path)
    return path
