"""The console shows what is real (issue 29, item 6), without ROS: per-node liveness, stream warnings that honour the
recorder's own rule for an idle simulator, an honest camera state, a loss axis that shows the whole curve, expected
answers as information, and the alpha(c) label that matches the mixture the code computes."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path

import pytest
import yaml

from amf_ros.bringup.graph import CONSOLE_NODE, overrides
from amf_ros.console.model import ConsoleModel, answer_level, loss_axis, node_rows
from amf_ros.console.protocol import Command
from amf_ros.runtime.operator_console import OperatorConsole

ROOT = Path(__file__).resolve().parents[2]
TASKS = {"carrot": "put carrot on plate", "spoon": "put the spoon on the towel"}
WATCH = ["widowx_driver", "policy_server", "task_selector", "demo_recorder"]


# -- 1. liveness ---------------------------------------------------------------------------------------------
def test_liveness_down_not_ready_ready_from_graph_status_and_supervisor():
    m = ConsoleModel(TASKS)
    m.watch_nodes = WATCH
    assert [r["state"] for r in m.section("nodes")] == ["unknown"] * 4  # before the first graph check
    # robot:=real without Octo and Interbotix: the driver exited, the loop nodes say why they wait
    m.on_node_status("policy_server", "not ready: parameter 'checkpoint' is not set: pass the Octo checkpoint")
    m.on_recorder_status({"recording": False, "ready": False, "not_ready_reason": "no publisher on /amf/action",
                          "topics": []})
    sup = {"widowx_driver": {"state": "down", "exit_code": 3, "reason": "Interbotix not installed",
                             "log": "/ws/logs/widowx_driver.log"},
           "policy_server": {"state": "running", "exit_code": None}}
    m.on_graph({"policy_server", "task_selector", "demo_recorder", "operator_console"}, sup)
    rows = {r["node"]: r for r in m.section("nodes")}
    assert rows["widowx_driver"]["state"] == "down"
    assert "exit code 3" in rows["widowx_driver"]["reason"] and "Interbotix" in rows["widowx_driver"]["reason"]
    assert rows["policy_server"] == {"node": "policy_server", "state": "not ready",
                                     "reason": "parameter 'checkpoint' is not set: pass the Octo checkpoint"}
    assert rows["demo_recorder"]["state"] == "not ready" and "/amf/action" in rows["demo_recorder"]["reason"]
    assert rows["task_selector"]["state"] == "ready"
    # ros2 launch (no status file): a crashed node is simply gone from the graph
    m.on_node_status("policy_server", "ready: octo backend, checkpoint /c")
    m.on_graph({"demo_recorder"}, None)
    rows = {r["node"]: r for r in m.section("nodes")}
    assert rows["policy_server"]["state"] == "down" and rows["policy_server"]["reason"] == "not in the ROS graph"
    m.on_graph(set(WATCH), None)
    assert {r["node"]: r for r in m.section("nodes")}["policy_server"] == {
        "node": "policy_server", "state": "ready", "reason": "octo backend, checkpoint /c"}


def test_a_respawning_node_is_down_even_while_its_name_lingers_in_the_graph():
    rows = node_rows(["task_selector"], {"task_selector"}, {}, {"task_selector": {"state": "respawning",
                                                                                 "exit_code": 1}})
    assert rows == [{"node": "task_selector", "state": "down", "reason": "exited, being restarted; exit code 1"}]


@pytest.mark.parametrize("robot, arm", [("real", "widowx_driver"), ("sim", "sim_bridge"),
                                        ("sim_widowx", "sim_bridge")])
def test_bringup_tells_the_console_which_nodes_to_watch(robot, arm):
    over = overrides(robot, workspace="/tmp/ws")
    watch = over[CONSOLE_NODE]["watch_nodes"]
    assert arm in watch and {"policy_server", "task_selector", "demo_recorder"} <= set(watch)
    assert CONSOLE_NODE not in watch
    assert over[CONSOLE_NODE]["status_workspace"] == "/tmp/ws"  # where `amf up` writes graphs/<namespace>/status.json


def test_server_pushes_liveness_and_camera_sections():
    aiohttp = pytest.importorskip("aiohttp")
    from amf_ros.console.server import ConsoleServer

    async def receive(ws, name, want=lambda data: True):
        for _ in range(100):  # bounded: a section is pushed within a few push periods of its change
            doc = json.loads((await ws.receive(timeout=5.0)).data)
            if doc["type"] == name or (doc["type"] == "section" and doc["name"] == name and want(doc["data"])):
                return doc
        raise AssertionError(f"no {name} pushed")

    async def run(model, port):
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(f"http://127.0.0.1:{port}/ws")
            hello = await receive(ws, "hello")
            assert hello["sections"]["nodes"] == []
            assert hello["sections"]["camera"] == {"topics": [], "publishers": {}}
            model.watch_nodes = ["task_selector"]
            model.on_graph(set(), None)
            sec = await receive(ws, "nodes", lambda rows: rows and rows[0]["state"] != "unknown")
            assert sec["data"] == [{"node": "task_selector", "state": "down", "reason": "not in the ROS graph"}]
            model.on_camera_sources(["/amf/camera/image_raw"], {"/amf/camera/image_raw": 0})
            sec = await receive(ws, "camera", lambda data: data["topics"])
            assert sec["data"] == {"topics": ["/amf/camera/image_raw"], "publishers": {"/amf/camera/image_raw": 0}}
            await ws.close()

    model = ConsoleModel(TASKS)
    server = ConsoleServer(model, lambda cmd, reply: reply(True, ""), port=0, push_period_s=0.05)
    port = server.start()
    try:
        asyncio.run(run(model, port))
    finally:
        server.stop()


# -- 2. stream warnings for an idle simulator ----------------------------------------------------------------
def _idle_sim_streams(recorder_fraction):
    now = [100.0]
    m = ConsoleModel(TASKS, stale_after_s=1.0, min_rate_fraction=0.5, clock=lambda: now[0])
    m.recorder_min_rate_fraction = recorder_fraction
    m.on_recorder_status({"recording": False, "topics": ["/amf/observation/state"], "topic_nominal_hz": [17.6]})
    for i in range(3):  # the idle Metaworld arm re-publishes every 0.5-0.7 s: 1.5 Hz over the 2 s window
        now[0] = 100.0 + 0.66 * i
        m.monitor.arrived("/amf/observation/state")
    return m, now


def test_idle_simulator_is_not_slow_when_the_recorder_is_configured_not_to_warn():
    m, now = _idle_sim_streams(0.0)  # config/sim.yaml, sim_widowx.yaml: demo_recorder min_rate_fraction 0.0
    assert m.section("streams")[0]["warning"] == ""
    now[0] += 1.5  # a stream that stops is still flagged, rule or not
    assert m.section("streams")[0]["warning"].startswith("stale")
    m, _ = _idle_sim_streams(None)  # recorder rule unknown: the console's own threshold
    assert m.section("streams")[0]["warning"] == "slow: 1.5 Hz, nominal 17.6 Hz"
    m, _ = _idle_sim_streams(0.8)  # the console never warns above its own threshold
    assert m.section("streams")[0]["warning"] == "slow: 1.5 Hz, nominal 17.6 Hz"


def test_the_simulator_configs_really_say_no_rate_warnings():
    for name in ("sim.yaml", "sim_widowx.yaml"):
        cfg = yaml.safe_load((ROOT / "config" / name).read_text())
        assert cfg["/**/demo_recorder"]["ros__parameters"]["min_rate_fraction"] == 0.0


# -- 3. camera -----------------------------------------------------------------------------------------------
def test_camera_section_says_whether_anything_publishes():
    m = ConsoleModel(TASKS)
    v = m.versions()["camera"]
    m.on_camera_sources(["/amf/camera/image_raw"], {})
    assert m.section("camera") == {"topics": ["/amf/camera/image_raw"], "publishers": {"/amf/camera/image_raw": 0}}
    m.on_camera_sources(["/amf/camera/image_raw"], {})
    assert m.versions()["camera"] == v + 1  # unchanged: no push
    m.on_camera_sources(["/amf/camera/image_raw"], {"/amf/camera/image_raw": 1})
    assert m.section("camera")["publishers"] == {"/amf/camera/image_raw": 1}


def test_the_embedded_widowx_renders_its_camera_by_default_and_the_page_is_honest_otherwise():
    cfg = yaml.safe_load((ROOT / "config" / "sim_widowx.yaml").read_text())
    sim = cfg["/**/sim_bridge"]["ros__parameters"]
    assert sim["render"] is True
    assert sim["image_topic"] in cfg["/**/operator_console"]["ros__parameters"]["image_topics"]
    page = (ROOT / "amf_ros/console/static/index.html").read_text()
    js = (ROOT / "amf_ros/console/static/console.js").read_text()
    assert "no camera frames yet</span>" not in page and "no camera configured" in page + js


# -- 4. the loss chart ---------------------------------------------------------------------------------------
def test_loss_axis_shows_the_whole_curve():
    assert loss_axis([100.0, 2.0, 0.5, 0.3, 0.25]) == {"log": True}  # a first loss of 100 flattens a linear axis
    axis = loss_axis([-1.0] + [0.2 + 0.01 * i for i in range(40)] + [50.0])  # not all positive: robust range
    lo, hi = axis["range"]
    assert lo < 0.2 and 0.59 < hi < 5.0  # the outliers leave the chart, the curve spans it
    assert loss_axis([0.5, 0.4, 0.3]) == {"range": [pytest.approx(0.28), pytest.approx(0.52)]}
    assert loss_axis([1.0]) == {} and loss_axis([math.nan, 1.0]) == {}
    m = ConsoleModel(TASKS)
    m.on_fine_tune(True, message="starting")
    for step, loss in ((1, 100.0), (10, 0.5), (20, 0.1)):
        m.on_fine_tune(True, step, 300, loss)
    assert m.section("policy")["fine_tune"]["loss_axis"] == {"log": True}


# -- 5. normal events are not errors -------------------------------------------------------------------------
def test_expected_answers_are_information():
    assert answer_level(False, "not recording (EndEpisode for 'ep_1')") == "info"
    assert answer_level(False, "episode ep_1 not saved: OSError: disk full") == "error"
    assert answer_level(True, "saved 17 steps") == "info"
    m = ConsoleModel(TASKS)  # the README's end_episode after the scripted teleop already ended the episode
    m.on_recorder_status({"recording": False, "ready": True, "last_error": "not recording (EndEpisode for 'ep_1')"})
    rec = m.section("recorder")
    assert rec["last_error"] == "" and rec["last_note"] == "not recording (EndEpisode for 'ep_1')"
    m.on_recorder_status({"recording": False, "ready": True, "last_error": "episode ep_2 not saved: disk full"})
    assert m.section("recorder")["last_error"] == "episode ep_2 not saved: disk full"


def test_save_while_idle_is_logged_as_information():
    m = ConsoleModel(TASKS)
    console = OperatorConsole(m, object(), auto_ask=False)  # refused before any output is used
    console.on_recorder_status({"recording": False, "ready": True})
    got = []
    console.handle(Command("save_success", ""), lambda ok, text: got.append((ok, text)))
    assert got and got[0][0] is False and got[0][1].startswith("not recording")
    assert m.section("log")[0]["level"] == "info"


# -- 6. the alpha(c) label -----------------------------------------------------------------------------------
def test_alpha_label_says_what_the_mixture_computes():
    src = (ROOT / "amf_ros/policies/adaptive_prior.py").read_text()
    assert "a * a_finetuned + (1 - a) * a_prior" in src  # alpha weighs the fine-tuned head
    page = (ROOT / "amf_ros/console/static/index.html").read_text()
    doc = (ROOT / "docs/console.md").read_text()
    for text in (page, doc):
        flat = " ".join(text.split())
        assert "near 1 = leans on the fine-tuned head" in flat
        assert "near 1 = the task still leans on the pre-trained skill" not in flat


def test_hello_lists_every_section():
    m = ConsoleModel(TASKS)
    assert {"nodes", "camera"} <= set(m.snapshot())
    json.dumps(m.snapshot())
