"""The operator console without ROS: message validation, the model the page reads, the command rules, the server's
access control and pushes (aiohttp on a real socket, a real WebSocket client)."""

from __future__ import annotations

import asyncio
import json
import threading
import time

import numpy as np
import pytest

from amf_ros.console.model import ConsoleModel, gains
from amf_ros.console.protocol import MAX_MESSAGE_BYTES, OPS, BadCommandError, Command, parse_command
from amf_ros.runtime.operator_console import OperatorConsole

TASKS = {"carrot": "put carrot on plate", "spoon": "put the spoon on the towel"}


# -- protocol ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("raw, why", [
    ("{not json", "not JSON"),
    ("[1, 2]", "expected a JSON object"),
    ('{"op": "launch_missiles"}', "unknown op"),
    ('{"op": 3}', "unknown op"),
    ('{"op": "start", "task": "teleport"}', "unknown task"),
    ('{"op": "start", "task": 5}', "task must be a string"),
    ('{"op": "ask", "task": "carrot"}', "unexpected field"),
    ('{"op": "start", "task": "carrot", "__class__": 1}', "unexpected field"),
    (b'{"op": "ask"}', "binary"),
    ('{"op": "ask", "pad": "' + "x" * MAX_MESSAGE_BYTES + '"}', "longer than"),
])
def test_malformed_messages_are_refused_with_a_reason(raw, why):
    with pytest.raises(BadCommandError, match=why):
        parse_command(raw, TASKS)


def test_every_op_parses():
    for op, fields in OPS.items():
        doc = {"op": op, **({"task": "spoon"} if "task" in fields else {}),
               **({"mode": "drive"} if "mode" in fields else {})}
        assert parse_command(json.dumps(doc), TASKS) == Command(op, doc.get("task", ""), doc.get("mode", ""))
    assert parse_command('{"op": "start", "task": ""}', TASKS) == Command("start", "")


# -- model ---------------------------------------------------------------------------------------------------
def test_gains_are_relative_to_the_least_informative_task():
    assert gains([2.0, 1.5, 3.0]) == [1.0, 1.5, 0.0]
    assert gains([float("nan"), 1.0]) == [None, 0.0]
    assert gains([]) == []


def _decision(**kw):
    base = {"ok": True, "task": "spoon", "instruction": "", "tasks": ["carrot", "spoon"], "scores": [2.0, 1.0],
            "demo_counts": [3, 1], "effective_sample_size": [2.5, 1.0], "warm_start": False, "selector": "amf",
            "compute_time": 0.1, "message": ""}
    return {**base, **kw}


def test_decision_gains_only_for_amf_after_its_warm_start():
    m = ConsoleModel(TASKS)
    m.on_decision(_decision())
    assert m.section("selector")["decision"]["gains"] == [0.0, 1.0]
    m.on_decision(_decision(warm_start=True, scores=[1.0, 0.0]))
    assert m.section("selector")["decision"]["gains"] == [None, None]
    m.on_decision(_decision(selector="uniform"))
    assert m.section("selector")["decision"]["gains"] == [None, None]


def test_stream_warnings_stale_slow_and_idle_quiet():
    now = [100.0]
    m = ConsoleModel(TASKS, stale_after_s=1.0, min_rate_fraction=0.5, clock=lambda: now[0])
    m.idle_quiet = {"/amf/action"}
    m.on_recorder_status({"recording": False, "topics": ["/amf/state", "/amf/cam", "/amf/action"],
                          "topic_nominal_hz": [10.0, 10.0, 0.0]})
    for i in range(20):  # state at 10 Hz, camera at 2 Hz over the last 2 s
        now[0] = 100.0 + 0.1 * i
        m.monitor.arrived("/amf/state")
        if i % 5 == 0:
            m.monitor.arrived("/amf/cam")
    rows = {r["topic"]: r for r in m.section("streams")}
    assert rows["/amf/state"]["warning"] == ""
    assert rows["/amf/cam"]["warning"].startswith("slow")
    assert rows["/amf/action"]["warning"] == ""  # idle: no actions is normal
    now[0] += 1.5  # everything stops
    rows = {r["topic"]: r for r in m.section("streams")}
    assert rows["/amf/state"]["warning"].startswith("stale")
    m.on_recorder_status({"recording": True, "topics": ["/amf/action"], "topic_nominal_hz": [0.0]})
    assert {r["topic"]: r for r in m.section("streams")}["/amf/action"]["warning"] == "never heard"


def test_outcomes_make_the_success_curve_by_acting_round():
    m = ConsoleModel(TASKS)
    m.on_checkpoint("/c/round_0002", 2, ["carrot", "spoon"], [1.0, 0.05])
    m.on_outcome("carrot", True, 17)
    m.on_outcome("carrot", False, 60)
    assert m.section("policy")["success"] == {"carrot": [[2, 1.0], [2, 0.0]]}
    assert m.section("policy")["alphas"] == {"carrot": 1.0, "spoon": pytest.approx(0.05)}


def test_fine_tune_loss_curve_kept_after_it_ends_reset_at_the_next():
    m = ConsoleModel(TASKS)
    m.on_fine_tune(True, message="starting")
    m.on_fine_tune(True, 10, 300, 0.5)
    m.on_fine_tune(True, 20, 300, 0.4)
    m.on_fine_tune(False, message="done")
    assert m.section("policy")["fine_tune"]["losses"] == [[10, 0.5], [20, 0.4]]
    m.on_fine_tune(True, message="starting")
    assert m.section("policy")["fine_tune"]["losses"] == []


# -- the command rules ---------------------------------------------------------------------------------------
class FakeOutputs:
    """Records calls; answers with the prepared results at once (as a fast ROS graph would, later)."""

    def __init__(self):
        self.calls = []
        self.pending = {}

    def _do(self, name, done, *args, result=None):
        self.calls.append((name, *args))
        self.pending[name] = done

    def answer(self, name, res, why=""):
        self.pending.pop(name)(res, why)

    def next_task(self, done): self._do("next_task", done)
    def start_episode(self, task, instruction, done): self._do("start", done, task, instruction)
    def rerecord(self, task, done): self._do("rerecord", done, task)
    def end_episode(self, episode_id, success, discard, done): self._do("end", done, episode_id, success, discard)
    def fine_tune(self, feedback, done): self._do("fine_tune", done)
    def run_policy(self, task, feedback, done): self._do("run_policy", done, task)
    def cancel(self, goal, done): self._do("cancel", done, goal)
    def stop_arm(self, reason): self.calls.append(("stop", reason))
    def reset_sim(self, task, done): self._do("reset", done, task)


def _console(auto_ask=False):
    out = FakeOutputs()
    return OperatorConsole(ConsoleModel(TASKS), out, auto_ask=auto_ask), out


def _replies():
    got = []
    return got, lambda ok, text: got.append((ok, text))


def test_start_while_recording_is_refused_and_save_names_the_episode():
    c, out = _console()
    got, reply = _replies()
    c.on_recorder_status({"recording": True, "episode_id": "ep_1", "task": "spoon"})
    c.handle(Command("start", "carrot"), reply)
    assert got[-1][0] is False and "already recording ep_1" in got[-1][1]
    assert not [k for k in out.calls if k[0] == "start"]
    c.handle(Command("save_success"), reply)
    assert out.calls[-1] == ("end", "ep_1", True, False)
    out.answer("end", {"ok": True, "num_steps": 17})
    assert got[-1] == (True, "ep_1 (spoon) saved as success, 17 steps")


def test_start_uses_the_decision_and_needs_one():
    c, out = _console()
    got, reply = _replies()
    c.handle(Command("start", ""), reply)
    assert got[-1][0] is False and "Ask" in got[-1][1]
    c.handle(Command("ask"), reply)
    out.answer("next_task", _decision())
    c.handle(Command("start", ""), reply)
    assert out.calls[-1] == ("start", "spoon", TASKS["spoon"])


def test_asks_are_folded_while_one_is_in_flight():
    c, out = _console(auto_ask=True)
    c.ask()
    c.on_episode({"episode_id": "ep_1", "task": "spoon", "num_steps": 3, "success": True})
    c.on_checkpoint("/c/round_0001", 1, ["carrot", "spoon"], [1.0, 1.0])
    assert [k[0] for k in out.calls].count("next_task") == 1
    out.answer("next_task", _decision())
    assert [k[0] for k in out.calls].count("next_task") == 2  # one more for what happened meanwhile


def test_evaluate_resets_the_sim_first_and_refuses_during_a_demo():
    c, out = _console()
    got, reply = _replies()
    c.on_sim(True)
    c.handle(Command("evaluate", "carrot"), reply)
    assert out.calls[-1] == ("reset", "carrot")
    out.answer("reset", {"ok": True})
    assert out.calls[-1] == ("run_policy", "carrot")
    c.handle(Command("evaluate", "spoon"), reply)
    assert got[-1][0] is False and "already evaluating carrot" in got[-1][1]
    out.answer("run_policy", {"ok": True, "success": True, "steps": 12})
    assert got[-1] == (True, "carrot: success in 12 steps")
    c.on_recorder_status({"recording": True, "episode_id": "ep_2", "task": "spoon"})
    c.handle(Command("evaluate", "carrot"), reply)
    assert got[-1][0] is False and "during a demonstration" in got[-1][1]


def test_with_a_teleop_node_evaluate_runs_during_a_recording_without_a_reset_and_shows_who_is_in_control():
    c, out = _console()
    got, reply = _replies()
    c.on_sim(True)
    c.on_teleop_state(json.dumps({"input": "console", "driving": False}))
    c.on_recorder_status({"recording": True, "episode_id": "ep_3", "task": "carrot"})
    c.handle(Command("evaluate", "carrot"), reply)
    assert out.calls[-1] == ("run_policy", "carrot")  # no scene reset: it would end the episode
    assert [k for k in out.calls if k[0] == "reset"] == []
    drive = c.model.section("drive")
    assert drive["control"]["source"] == "none"
    c.on_control("policy", "/amf/policy_server", 10)
    assert c.model.section("drive")["control"] == {"source": "policy", "node": "/amf/policy_server", "stamp_ns": 10}
    c.on_control("human", "/amf/teleop", 20)
    assert c.model.section("drive")["control"]["source"] == "human"
    c.on_control("", "/amf/policy_server", 30)
    assert c.model.section("drive")["control"]["source"] == "none"


def test_stop_all_publishes_a_stop_and_cancels_running_goals():
    c, out = _console()
    got, reply = _replies()
    c.handle(Command("fine_tune"), reply)
    c.handle(Command("fine_tune"), reply)
    assert got[-1][0] is False and "already running" in got[-1][1]
    c.handle(Command("stop_all"), reply)
    assert ("stop", "operator console: Stop all") in out.calls and ("cancel", "fine_tune") in out.calls
    assert got[-1][0] is True


def test_sim_reset_only_with_a_simulator():
    c, out = _console()
    got, reply = _replies()
    c.handle(Command("reset_sim", "carrot"), reply)
    assert got[-1][0] is False and "no simulator" in got[-1][1]


# -- server --------------------------------------------------------------------------------------------------
aiohttp = pytest.importorskip("aiohttp")


def test_non_loopback_bind_needs_a_token():
    from amf_ros.console.server import ConsoleServer

    with pytest.raises(ValueError, match="token"):
        ConsoleServer(ConsoleModel(TASKS), lambda c, r: None, host="0.0.0.0")


class Served:
    def __init__(self, **kw):
        from amf_ros.console.camera import FrameSlot
        from amf_ros.console.server import ConsoleServer

        self.model = ConsoleModel(TASKS)
        self.commands = []
        self.frames = FrameSlot()

        def dispatch(cmd, reply):
            self.commands.append(cmd)
            threading.Timer(0.05, reply, (True, f"did {cmd.op}")).start()  # answered later, from another thread

        self.server = ConsoleServer(self.model, dispatch, port=0, frames=self.frames, push_period_s=0.05,
                                    display_rate_hz=20.0, **kw)
        self.port = self.server.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.stop()


async def _session(port, path="/ws", headers=None):
    session = aiohttp.ClientSession()
    ws = await session.ws_connect(f"http://127.0.0.1:{port}{path}", headers=headers or {})
    return session, ws


async def _receive_until(ws, predicate, timeout=5.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = await ws.receive(timeout=max(0.01, deadline - time.monotonic()))
        doc = json.loads(msg.data)
        if predicate(doc):
            return doc
    raise AssertionError("expected message not received")


def test_server_pushes_sections_and_camera_and_answers_commands():
    async def run(s):
        session, ws = await _session(s.port)
        hello = await _receive_until(ws, lambda d: d["type"] == "hello")
        assert hello["tasks"] == list(TASKS) and hello["camera"] is True
        s.model.on_decision(_decision())
        sec = await _receive_until(ws, lambda d: d["type"] == "section" and d["name"] == "selector"
                                   and d["data"]["decision"] is not None)
        assert sec["data"]["decision"]["task"] == "spoon"
        s.frames.put("/amf/camera/image_raw", np.full((256, 256, 3), 128, np.uint8))
        cam = await _receive_until(ws, lambda d: d["type"] == "camera")
        assert cam["name"] == "/amf/camera/image_raw" and len(cam["jpeg"]) > 100
        await ws.send_str('{"op": "start", "task": "carrot"}')
        res = await _receive_until(ws, lambda d: d["type"] == "result")
        assert res == {"type": "result", "op": "start", "ok": True, "text": "did start"}
        await ws.send_str("definitely not json")
        res = await _receive_until(ws, lambda d: d["type"] == "result")
        assert res["ok"] is False and "not JSON" in res["text"]
        await ws.send_str('{"op": "ask"}')  # the connection survived the bad message
        assert (await _receive_until(ws, lambda d: d["type"] == "result"))["ok"] is True
        await ws.close()
        await session.close()

    with Served() as s:
        asyncio.run(run(s))
        assert [c.op for c in s.commands] == ["start", "ask"]
        assert s.server.stats["camera_encoded"] == 1  # one frame, encoded once for every browser


def test_token_cross_origin_and_static_files():
    async def run(s):
        async with aiohttp.ClientSession() as session:
            base = f"http://127.0.0.1:{s.port}"
            async with session.get(base + "/") as r:
                assert r.status == 401 and "token" in await r.text()
            async with session.get(base + "/?token=wrong") as r:
                assert r.status == 401
            async with session.get(base + "/?token=s3cret") as r:
                assert r.status == 200 and "operator console" in await r.text()
            async with session.get(base + "/api/state", headers={"Authorization": "Bearer s3cret"}) as r:
                assert r.status == 200 and "selector" in await r.json()
            with pytest.raises(aiohttp.WSServerHandshakeError):
                await session.ws_connect(base + "/ws")
            with pytest.raises(aiohttp.WSServerHandshakeError):
                await session.ws_connect(base + "/ws?token=s3cret", headers={"Origin": "http://evil.example"})
            ws = await session.ws_connect(base + "/ws?token=s3cret", headers={"Origin": base})
            await ws.close()
            async with session.get(base + "/static/console.js") as r:
                assert r.status == 200
            for bad in ("/static/../server.py", "/static/%2e%2e/server.py", "/static/nope.js"):
                async with session.get(base + bad + "?token=s3cret") as r:
                    assert r.status == 404, bad  # only the shipped files, never a path built from the URL

    with Served(token="s3cret") as s:
        asyncio.run(run(s))
