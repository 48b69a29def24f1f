"""`amf up`'s supervisor with fake node processes (issue 33 items 3 and 9), no ROS.

* A node that keeps crashing is respawned up to its retry limit, then said to be down for good, loudly: one ERROR
  line naming the node, its last exit code and its log file, and ``down`` in the status file (what a console can
  read), while the other nodes keep running.
* A node that exits with NO_RESPAWN_EXIT (its place is taken by another graph) is not respawned at all.
* The workspace locks (bringup/graph_lock.py): a second holder of a node's place is refused with one line naming the
  first; the place is free again once the holder is killed with SIGKILL (flock dies with its process); the graph's
  claim (`amf up`, the launch files) refuses when its own lock or any node lock of its graph is held.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from amf_ros.bringup import graph, graph_lock, up
from amf_ros.bringup.lifetime import NO_RESPAWN_EXIT
from amf_ros.bringup.processes import NodeProcesses

BOUND_S = 30.0
"""Bound on each wait for fake processes that exit at once (a loaded 2-core machine starts python in < 5 s)."""


def _fake(tmp_path: Path, specs: list[graph.NodeSpec], code: dict[str, str]) -> NodeProcesses:
    nodes = NodeProcesses(specs, log_dir=tmp_path / "logs")
    nodes.command = lambda spec: [sys.executable, "-c", code[spec.name]]
    return nodes.start()


def _supervise_until(nodes: NodeProcesses, done, status: Path | None = None) -> None:
    deadline = time.monotonic() + BOUND_S
    while not done() and time.monotonic() < deadline:
        up.supervise_step(nodes, status)
        time.sleep(0.05)
    assert done(), f"not reached within {BOUND_S} s: given up {nodes.given_up}, restarts {nodes.restarts}"


def test_a_node_down_for_good_is_said_loudly_with_its_exit_code_and_log(tmp_path, caplog) -> None:
    specs = [graph.NodeSpec("crashy", "crashy", "", respawn_delay_s=0.05, respawn_max_retries=3),
             graph.NodeSpec("steady", "steady", "")]
    status = tmp_path / "graphs" / "amf" / graph_lock.STATUS_FILE
    nodes = _fake(tmp_path, specs, {"crashy": "print('boom'); raise SystemExit(3)",
                                    "steady": "import time; time.sleep(60)"})
    try:
        with caplog.at_level(logging.INFO):
            _supervise_until(nodes, lambda: "crashy" in nodes.given_up, status)
            for _ in range(3):  # later passes say nothing new
                up.supervise_step(nodes, status)
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1, errors  # exactly one error line, naming node, exit code and log file
        line = errors[0]
        assert "crashy" in line and "code 3" in line and str(tmp_path / "logs" / "crashy.log") in line, line
        assert "4 times" in line and "DOWN FOR GOOD" in line, line  # the first run and its 3 respawns
        assert nodes.restarts == {"crashy": 3} and nodes.procs["steady"].poll() is None
        state = json.loads(status.read_text())["nodes"]
        assert state["crashy"]["state"] == "down" and state["crashy"]["exit_code"] == 3
        assert state["crashy"]["log"].endswith("crashy.log") and state["steady"]["state"] == "running"
    finally:
        nodes.stop(timeout=5)


def test_a_node_that_refuses_to_start_is_not_respawned(tmp_path, caplog) -> None:
    specs = [graph.NodeSpec("second", "second", "", respawn_delay_s=0.05, respawn_max_retries=3)]
    nodes = _fake(tmp_path, specs, {"second": f"raise SystemExit({NO_RESPAWN_EXIT})"})
    try:
        with caplog.at_level(logging.INFO):
            _supervise_until(nodes, lambda: "second" in nodes.given_up)
        assert nodes.restarts == {} and nodes.given_up == {"second": NO_RESPAWN_EXIT}
        errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
        assert len(errors) == 1 and "refused to start" in errors[0] and f"code {NO_RESPAWN_EXIT}" in errors[0]
    finally:
        nodes.stop(timeout=5)


HOLDER = """
import sys, time
from amf_ros.bringup.graph_lock import hold_node_lock
lock = hold_node_lock(sys.argv[1], "amf", "demo_recorder")
print("held", flush=True)
time.sleep(120)
"""


def test_a_nodes_place_is_refused_while_held_and_free_after_its_holder_is_killed(tmp_path) -> None:
    ws = str(tmp_path / "ws")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, ws], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(graph_lock.PlaceTakenError) as info:
            graph_lock.hold_node_lock(ws, "/amf", "demo_recorder")
        line = str(info.value)
        assert "\n" not in line and f"pid {holder.pid}" in line and "/amf/demo_recorder" in line, line
        other = graph_lock.hold_node_lock(ws, "/robot2", "demo_recorder")  # another namespace: its own place
        other.release()
        os.kill(holder.pid, signal.SIGKILL)
        holder.wait(timeout=BOUND_S)
        taken = graph_lock.hold_node_lock(ws, "amf", "demo_recorder")  # the kernel freed it with the process
        taken.release()
    finally:
        if holder.poll() is None:
            holder.kill()
            holder.wait()


def test_amf_up_claims_its_place_or_names_who_has_it(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(graph_lock, "answering_nodes", lambda specs, env=None: [])  # the ROS graph check: a DDS test
    ws = str(tmp_path / "ws")
    specs = graph.plan("sim", workspace=ws, console=False)
    place = graph_lock.claim_graph(specs, ws, "amf")
    try:
        with pytest.raises(graph_lock.PlaceTakenError, match=f"a graph in namespace /amf .*pid {os.getpid()}"):
            graph_lock.claim_graph(specs, ws, "amf")
    finally:
        place.release()
    node = graph_lock.hold_node_lock(ws, "amf", "task_selector")  # e.g. a graph of `ros2 launch`
    try:
        with pytest.raises(graph_lock.PlaceTakenError, match="/amf/task_selector"):
            graph_lock.claim_graph(specs, ws, "amf")
        robot2 = graph.plan("sim", workspace=ws, console=False, namespace="robot2")
        graph_lock.claim_graph(robot2, ws, "robot2").release()  # another namespace on the same workspace is free
    finally:
        node.release()
    graph_lock.claim_graph(specs, ws, "amf").release()  # free again: the refused claim released its own lock
    monkeypatch.setattr(graph_lock, "answering_nodes", lambda specs, env=None: ["/amf/policy_server"])
    with pytest.raises(graph_lock.PlaceTakenError, match=r"\['/amf/policy_server'\] already answer"):
        graph_lock.claim_graph(specs, ws, "amf")


def test_the_nodes_that_lock_are_the_nodes_with_a_workspace() -> None:
    from amf_ros.bringup.params import schema

    every = set(graph.SIM_NODES) | set(graph.node_names("real")) | {graph.CONSOLE_NODE}
    assert set(graph_lock.NODE_LOCKERS) == {n for n in every if any(p.name == "workspace" for p in schema(n))}


STUCK = """
import faulthandler, signal, time
from amf_ros.bringup.lifetime import STACK_DUMP_SIGNAL
faulthandler.register(STACK_DUMP_SIGNAL, all_threads=True)  # as every node's spin() does
signal.signal(signal.SIGINT, signal.SIG_IGN)

def stuck_in_clean_up():
    print("ready", flush=True)
    while True:
        time.sleep(0.05)

stuck_in_clean_up()
"""


def test_a_node_that_outlives_its_stop_timeout_leaves_its_stacks_in_its_log_before_sigkill(tmp_path, caplog) -> None:
    """A node still running after the stop timeout is killed, and its log says where it was stuck (the CI failure
    of session 43: a task_selector SIGKILLed 5 s into its stop left no trace of why)."""
    nodes = _fake(tmp_path, [graph.NodeSpec("stuck", "stuck", "")], {"stuck": STUCK})
    log_file = tmp_path / "logs" / "stuck.log"
    deadline = time.monotonic() + BOUND_S
    while "ready" not in (log_file.read_text() if log_file.exists() else "") and time.monotonic() < deadline:
        time.sleep(0.05)
    with caplog.at_level(logging.WARNING):
        codes = nodes.stop(timeout=0.5)
    assert nodes.killed == {"stuck"} and codes["stuck"] == -signal.SIGKILL
    text = log_file.read_text(errors="replace")
    assert "stuck_in_clean_up" in text and "(most recent call first)" in text, text
    assert any("stuck" in r.getMessage() and str(log_file) in r.getMessage() for r in caplog.records)
