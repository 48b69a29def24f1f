"""robot:=real without Octo and its checkpoint (issue 29 item 1): policy_server and task_selector start and stay up.

Before, both died at start with a traceback (``ValueError: the octo backend needs 'checkpoint'``), were respawned
three times and stayed down, and next_task never answered. Now, started as `amf up config/widowx.yaml --robot real`
starts them (the WidowX params, backend octo, no checkpoint):

* both stay up: no respawn, no traceback in their logs, one "not ready: ..." line each, latched on ``~/status``;
* next_task answers (warm start, without a policy) and says so;
* a run_policy goal gets a result: ok=false with the not-ready reason;
* a configuration error no restart fixes (an unknown task key) exits with NO_RESPAWN_EXIT and one line naming the
  parameter, and is not respawned.
"""

from __future__ import annotations

import os
import threading
import time

import pytest
from ros_system_util import REPO

pytestmark = [pytest.mark.ros, pytest.mark.slow, pytest.mark.timeout(900)]

START_BOUND_S = 240.0
"""Two node processes' start-up (python, rclpy, torch import; ~10 s idle), generously bounded for 2 shared cores."""
STEP_BOUND_S = 120.0
"""Any other single wait (a service answer, an action result)."""


def test_octo_nodes_without_checkpoint_stay_up_and_answer(ros_env, rclpy_context, tmp_path) -> None:
    from std_msgs.msg import String

    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.lifetime import NO_RESPAWN_EXIT
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.ros import qos
    from amf_ros.ros.client import AMFClient

    params = str(REPO / "config" / "widowx.yaml")
    ws = {"workspace": str(tmp_path / "ws")}
    specs = [NodeSpec("policy_server", "policy_server", params, overrides=ws, respawn_delay_s=0.1),
             NodeSpec("task_selector", "task_selector", params, overrides=ws, respawn_delay_s=0.1),
             NodeSpec("task_selector", "task_selector", params, namespace="amf_bad", respawn_delay_s=0.1,
                      overrides={**ws, "tasks": ["carrot_on_plate", "no_such_task"]})]
    nodes = NodeProcesses(specs, log_dir=tmp_path / "logs", env=ros_env).start()
    client = AMFClient(f"amf_test_not_ready_{os.getpid()}")
    status: dict[str, str] = {}
    lock = threading.Lock()

    def keep(name: str, msg: String) -> None:
        with lock:
            status[name] = msg.data

    for name in ("policy_server", "task_selector"):
        client.node.create_subscription(String, f"{name}/status", lambda m, n=name: keep(n, m), qos.LATCHED)
    supervising = threading.Event()

    def supervise() -> None:  # as `amf up` does: respawn what exits (that must not happen here)
        while not supervising.is_set():
            nodes.supervise()
            time.sleep(0.1)

    sup = threading.Thread(target=supervise, daemon=True)
    sup.start()
    try:
        d = client.next_task(timeout=START_BOUND_S)
        assert d.ok and d.warm_start and "answered without a policy" in d.message, d.message
        assert "not ready: parameter 'checkpoint' is not set" in d.message, d.message
        assert client.run_cli.wait_for_server(timeout_sec=START_BOUND_S)
        res = client.run_policy("carrot_on_plate", timeout=STEP_BOUND_S)
        assert not res.ok and res.message.startswith("not ready: parameter 'checkpoint' is not set"), res.message
        assert res.steps == 0
        deadline = time.monotonic() + STEP_BOUND_S
        while time.monotonic() < deadline and (len(status) < 2 or "amf_bad.task_selector" not in nodes.given_up):
            time.sleep(0.1)
        with lock:
            assert status.get("policy_server", "").startswith("not ready: parameter 'checkpoint'"), status
            assert status.get("task_selector", "").startswith("not ready: parameter 'checkpoint'"), status
        # the configuration error: one line naming the parameter, exit 78, not respawned
        assert nodes.given_up == {"amf_bad.task_selector": NO_RESPAWN_EXIT}, nodes.states()
        bad = nodes.log_tail("amf_bad.task_selector")
        lines = [ln for ln in bad.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith(
            "task_selector: parameter 'tasks': unknown task(s) ['no_such_task']; 'config/tasks/simpler_widowx.yaml' "
            "lists ['spoon_on_towel', "), bad
        assert nodes.restarts == {}, nodes.states()
        states = nodes.states()
        for name in ("policy_server", "task_selector"):
            assert states[name]["state"] == "running", states
            text = nodes.log_tail(name, chars=20000)
            assert "Traceback" not in text, text
            said = [ln for ln in text.splitlines() if ln.split("]: ", 1)[-1].startswith("not ready:")]
            assert len(said) == 1 and "[WARN]" in said[0], text  # said once (each answer repeats it, as an answer)
    finally:
        supervising.set()
        sup.join(5.0)
        client.close()
        codes = nodes.stop(timeout=10)
        for log in sorted((tmp_path / "logs").glob("*.log")):  # shown by pytest only when the test failed
            print(f"----- {log} -----\n{log.read_text(errors='replace')[-3000:]}")
    assert codes.get("policy_server") == 0 and codes.get("task_selector") == 0, codes


def test_widowx_driver_without_interbotix_exits_once_and_is_left_down(ros_env, tmp_path) -> None:
    """robot:=real without Interbotix: widowx_driver says which package to install in one line and exits with
    NO_RESPAWN_EXIT; `amf up`'s supervisor leaves it down at once (no restart installs a package)."""
    from amf_ros._optional import has
    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.lifetime import NO_RESPAWN_EXIT
    from amf_ros.bringup.processes import NodeProcesses

    if has("interbotix_xs_msgs"):
        pytest.skip("interbotix_xs_msgs is installed: widowx_driver would start")
    spec = NodeSpec("widowx_driver", "widowx_driver", str(REPO / "config" / "widowx.yaml"), respawn_delay_s=0.1)
    nodes = NodeProcesses([spec], log_dir=tmp_path / "logs", env=ros_env).start()
    try:
        deadline = time.monotonic() + START_BOUND_S
        while time.monotonic() < deadline and "widowx_driver" not in nodes.given_up:
            nodes.supervise()
            time.sleep(0.1)
        for _ in range(5):  # a respawn would come respawn_delay_s (0.1 s) after the exit
            nodes.supervise()
            time.sleep(0.1)
        assert nodes.given_up == {"widowx_driver": NO_RESPAWN_EXIT} and nodes.restarts == {}, nodes.states()
        lines = [ln for ln in nodes.log_tail("widowx_driver").splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("widowx_driver: interbotix_xs_msgs is not installed"), lines
        assert "refused to start (exit 78" in nodes.down_report("widowx_driver")
    finally:
        nodes.stop(timeout=10)
