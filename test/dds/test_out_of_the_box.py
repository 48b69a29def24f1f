"""Out of the box (issue 27): `amf up config/sim.yaml` as a newcomer runs it, and `ros2 param dump` on every node.

A newcomer has no AMF_WORKSPACE, no ROS_HOME, no checkpoint and starts from any directory. test/conftest.py sets
AMF_WORKSPACE for the whole session (so no other test touches ~/.ros/amf); this test removes it (and ROS_HOME)
from the environment of `amf up`, points HOME at a temporary directory and runs from an EMPTY temporary working
directory, then checks:

* the workspace default is ``$HOME/.ros/amf``: the dataset is created there, the pre-trained checkpoint is cached
  under ``<workspace>/cache``, a fine-tuned round lands in ``<workspace>/sim/checkpoints``; nothing is written to
  the working directory;
* policy_server pre-trains on first use (``pretrain_if_missing``), announces that checkpoint and becomes ready;
  ``/amf/next_task`` answers ok;
* what ``ros2 param dump`` does, on every node that is up: the standard ``list_parameters`` and
  ``get_parameters`` services (rcl_interfaces) list every parameter of the node's table
  (amf_ros/bringup/params/<node>.py) with a value of the table's type.
"""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from amf_process import amf_command, free_port, stop
from ros_testing import wait_for, wait_future

pytestmark = [pytest.mark.ros, pytest.mark.slow, pytest.mark.timeout(1800)]

PRETRAIN_BOUND_S = 900.0
"""Pre-training on first use plus node start-up. About 1-2 min on an idle 2-core machine (policy_server pre-trains
with torch_threads: 1 inside its own process); the bound is generous because the same 2 cores are shared with other
test sessions and benchmark jobs, which stretched single-thread CPU work 3-5x in earlier runs."""
STEP_BOUND_S = 180.0
"""Any other single wait (a service answer, a demonstration of at most 150 simulator steps at 20 Hz, a short
fine-tune): each takes seconds when idle; bounded generously for the same reason."""
ROS_TYPES = {"bool": 1, "int": 2, "double": 3, "string": 4, "bool_array": 6, "int_array": 7, "double_array": 8,
             "string_array": 9}  # rcl_interfaces/msg/ParameterType


@pytest.fixture
def newcomer(ros_env, tmp_path) -> Iterator[dict[str, Any]]:
    """`amf up config/sim.yaml` from an empty cwd, HOME a temporary directory, no AMF_WORKSPACE / ROS_HOME."""
    cwd, home, logs = tmp_path / "cwd", tmp_path / "home", tmp_path / "logs"
    for d in (cwd, home):
        d.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("AMF_WORKSPACE", "ROS_HOME")}
    env.update(ros_env)
    env["HOME"] = str(home)
    # another console test may hold the default 8765 on this machine
    cmd = [*amf_command(), "up", "config/sim.yaml", "--log-dir", str(logs), "--console-port", str(free_port())]
    state = {"cwd": cwd, "workspace": home / ".ros" / "amf", "logs": logs, "up_log": tmp_path / "amf_up.log"}
    with open(state["up_log"], "wb") as out:
        proc = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        state["proc"] = proc
        try:
            yield state
        finally:
            stop(proc)
    print(f"----- amf up -----\n{state['up_log'].read_text(errors='replace')[-3000:]}")
    for log in sorted(logs.glob("*.log")):  # shown by pytest only when the test failed
        print(f"----- {log.name} -----\n{log.read_text(errors='replace')[-3000:]}")


def _logs(state: dict[str, Any]) -> str:
    text = state["up_log"].read_text(errors="replace")[-2000:]
    for log in sorted(state["logs"].glob("*.log")):
        text += f"\n----- {log.name} -----\n" + log.read_text(errors="replace")[-2000:]
    return text


def _param_dump(node: Any, fqn: str) -> dict[str, Any]:
    """``{name: ParameterValue}`` of node ``fqn`` through its list_parameters + get_parameters services (what
    ``ros2 param dump`` calls)."""
    from rcl_interfaces.srv import GetParameters, ListParameters

    lister = node.create_client(ListParameters, f"{fqn}/list_parameters")
    getter = node.create_client(GetParameters, f"{fqn}/get_parameters")
    try:
        for cli in (lister, getter):
            assert cli.wait_for_service(timeout_sec=STEP_BOUND_S), f"{cli.srv_name} did not appear"
        listed = wait_future(lister.call_async(ListParameters.Request(depth=ListParameters.Request.DEPTH_RECURSIVE)),
                             STEP_BOUND_S, f"{fqn}/list_parameters")
        names = list(listed.result.names)
        values = wait_future(getter.call_async(GetParameters.Request(names=names)), STEP_BOUND_S,
                             f"{fqn}/get_parameters")
        assert len(values.values) == len(names), (fqn, len(values.values), len(names))
        return dict(zip(names, values.values, strict=True))
    finally:
        node.destroy_client(lister)
        node.destroy_client(getter)


def test_sim_graph_out_of_the_box(newcomer, client_node) -> None:
    from amf_ros.bringup.graph import NAMESPACE, node_names
    from amf_ros.bringup.params import schema
    from amf_ros.ros.client import AMFClient

    proc, ws = newcomer["proc"], newcomer["workspace"]
    client = AMFClient(f"amf_test_ootb_{os.getpid()}")
    try:
        # policy_server pre-trains inside its constructor, then announces the checkpoint it acts with (latched)
        def announced() -> Any:
            assert proc.poll() is None, f"amf up exited with {proc.returncode}:\n{_logs(newcomer)}"
            assert "stays down" not in newcomer["up_log"].read_text(errors="replace"), \
                f"a node stayed down:\n{_logs(newcomer)}"
            return client.seen.checkpoints[-1] if client.seen.checkpoints else None

        try:
            ckpt = wait_for(announced, PRETRAIN_BOUND_S, "policy_server's first /amf/checkpoint", poll=0.5)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n{_logs(newcomer)}") from None
        cache = ws / "cache"
        assert Path(ckpt.path).parent == cache.resolve() and Path(ckpt.path).name.startswith("pretrained_"), ckpt.path
        assert (Path(ckpt.path) / "pretrain.json").is_file() and ckpt.round == 0
        client.wait_ready(timeout=STEP_BOUND_S)
        assert (ws / "sim" / "dataset").is_dir(), sorted(str(p) for p in ws.rglob("*"))[:20]

        # task_selector loads the announced checkpoint on a thread of its own; its answers name the policy they used
        answers: list[Any] = []

        def answered_with_policy() -> bool:
            answers.append(client.next_task(timeout=STEP_BOUND_S, require_ok=False))
            return answers[-1].ok and f"policy: {Path(ckpt.path)}" in answers[-1].message

        try:
            wait_for(answered_with_policy, STEP_BOUND_S, "/amf/next_task: ok with the pre-trained policy", poll=1.0)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; last answer: {answers[-1].message if answers else None}") from None
        decision = answers[-1]
        # the candidates are config/sim.yaml's tasks file, also those the pre-trained policy does not know yet (the
        # fine-tune below learns whichever the warm start chose; test_twenty_rounds.py runs 20 rounds)
        from amf_ros.data.task_set import load_task_set

        assert list(decision.tasks) == list(load_task_set("config/tasks/metaworld.yaml").instructions)
        assert set(ckpt.tasks) < set(decision.tasks), (list(decision.tasks), list(ckpt.tasks))
        assert decision.task in decision.tasks and len(decision.scores) == len(decision.tasks), decision.message

        # ros2 param dump, on every node of the graph (all up by now: the recorder heard the arm)
        expected = set(node_names("sim"))
        up = {name for name, ns in client_node.get_node_names_and_namespaces() if ns == f"/{NAMESPACE}"}
        assert expected <= up, f"nodes not up: {sorted(expected - up)} (seen {sorted(up)})"
        missing: list[str] = []
        for name in sorted(expected):
            dump = _param_dump(client_node, f"/{NAMESPACE}/{name}")
            for p in schema(name):
                value = dump.get(p.name)
                if value is None or value.type != ROS_TYPES[p.type]:
                    missing.append(f"{name}.{p.name}: {'not listed' if value is None else f'type {value.type}'}"
                                   f" (table: {p.type})")
        assert not missing, "parameters missing from the dump or without a value of their type:\n" + \
            "\n".join(missing)

        # one round: the recorded episode and the fine-tuned checkpoint land under the default workspace
        client.reset(decision.task, timeout=STEP_BOUND_S)
        episode = client.start_episode(decision.task, decision.instruction, timeout=STEP_BOUND_S)
        info = client.wait_episode(episode.episode_id, timeout=STEP_BOUND_S)
        assert Path(info.path).resolve().parent == (ws / "sim" / "dataset").resolve(), info.path
        result = client.fine_tune(steps=10, timeout=STEP_BOUND_S)
        assert result.ok, result.message
        assert decision.task in result.tasks, (decision.task, list(result.tasks))  # learned, also if it was new
        assert Path(result.checkpoint) == (ws / "sim" / "checkpoints" / "round_0001").resolve(), result.checkpoint
    finally:
        client.close()
    assert proc.poll() is None, f"amf up exited with {proc.returncode}:\n{_logs(newcomer)}"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(timeout=60) == 0, _logs(newcomer)
    assert list(newcomer["cwd"].iterdir()) == [], "written to the working directory"
