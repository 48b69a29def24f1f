"""Two robots on one machine and one ROS domain, by namespace alone (issue 29 item 7).

Before: `--namespace robot1` wrote the default namespace's sim/dataset and sim/checkpoints (one robot's fine-tune
became the other's policy at its next start), and both consoles took port 8765 (the second one failed to bind).
Now two `amf up config/sim.yaml --namespace robotK` with no --workspace and no --console-port each keep their data
under <workspace>/namespaces/<namespace>/ (amf_ros/paths.py) and serve their console on the namespace's own port
(amf_ros/bringup/graph.py, namespace_console_port): both pages answer, both next_task answer, an episode recorded by
robot1 is in robot1's store only.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import urllib.request

import pytest
from amf_process import amf_command, stop
from ros_system_util import REPO, make_checkpoint

pytestmark = [pytest.mark.ros, pytest.mark.slow, pytest.mark.timeout(1200)]

TASKS = ("reach", "push")
ROBOTS = ("robot1", "robot2")
START_BOUND_S = 300.0
"""Start-up of two graphs with a tiny checkpoint (about 20 s each idle; 2 cores shared with other test sessions)."""
STEP_BOUND_S = 180.0
"""Any other single wait (a service answer, a page, a scripted demonstration of at most 150 steps)."""


def _port_free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _page_status(port: int, timeout_s: float) -> int:
    """HTTP status of the console page on ``port``, retried until it answers (the console starts last)."""
    deadline, last = time.monotonic() + timeout_s, None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10) as resp:
                return int(resp.status)
        except OSError as exc:
            last = exc
            time.sleep(0.5)
    raise AssertionError(f"no console on port {port} within {timeout_s} s: {last}")


def test_two_namespaces_keep_separate_data_and_consoles(ros_env, rclpy_context, tmp_path) -> None:
    from amf_ros.bringup.graph import CONSOLE_PORT, namespace_console_port
    from amf_ros.data.store import EpisodeStore
    from amf_ros.ros.client import AMFClient

    ports = {name: namespace_console_port(name) for name in ROBOTS}
    assert len(set(ports.values())) == 2 and CONSOLE_PORT not in ports.values()
    busy = [p for p in ports.values() if not _port_free(p)]
    if busy:
        pytest.skip(f"console port(s) {busy} are in use on this machine (another console is running)")
    ckpt = make_checkpoint(tmp_path / "pretrained", TASKS)
    ws = tmp_path / "ws"
    env = {**os.environ, **ros_env, "AMF_WORKSPACE": str(ws)}  # the default workspace: no --workspace given
    procs: dict[str, subprocess.Popen] = {}
    clients: dict[str, AMFClient] = {}
    try:
        for name in ROBOTS:
            with open(tmp_path / f"{name}.log", "wb") as out:
                procs[name] = subprocess.Popen(
                    [*amf_command(), "up", str(REPO / "config" / "sim.yaml"), "--namespace", name,
                     "--checkpoint", str(ckpt), "--tasks", ",".join(TASKS), "--log-dir", str(tmp_path / name)],
                    env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        for name in ROBOTS:
            clients[name] = AMFClient(f"amf_test_two_ns_{name}_{os.getpid()}", namespace=name)
            clients[name].wait_ready(timeout=START_BOUND_S)
        for name in ROBOTS:
            assert procs[name].poll() is None, (tmp_path / f"{name}.log").read_text(errors="replace")
            assert _page_status(ports[name], STEP_BOUND_S) == 200
            d = clients[name].next_task(timeout=STEP_BOUND_S)
            assert d.ok and d.task in TASKS, d.message

        # robot1 records one episode: it lands in robot1's store only, and nothing under the default namespace's
        c = clients["robot1"]
        d = c.next_task(timeout=STEP_BOUND_S)
        c.reset(d.task, seed=3, timeout=STEP_BOUND_S)
        ep = c.start_episode(d.task, d.instruction, timeout=STEP_BOUND_S)
        c.wait_episode(ep.episode_id, timeout=STEP_BOUND_S)
        stores = {name: ws / "namespaces" / name / "sim" / "dataset" for name in ROBOTS}
        assert EpisodeStore(stores["robot1"], create=False).episode_ids() == [ep.episode_id]
        assert stores["robot2"].is_dir() and EpisodeStore(stores["robot2"], create=False).episode_ids() == []
        assert not (ws / "sim").exists()  # the default namespace's folders are untouched
        for name in ROBOTS:
            assert procs[name].poll() is None and "stays down" not in (tmp_path / f"{name}.log").read_text(
                errors="replace")
    finally:
        for client in clients.values():
            client.close()
        for proc in procs.values():
            stop(proc)
        for log in sorted(tmp_path.glob("**/*.log")):  # shown by pytest only when the test failed
            print(f"----- {log} -----\n{log.read_text(errors='replace')[-2000:]}")
    for name in ROBOTS:
        assert procs[name].returncode == 0, (tmp_path / f"{name}.log").read_text(errors="replace")[-3000:]
