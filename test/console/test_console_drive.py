"""The Drive panel's logic without ROS: validation of the page's input message, input -> Joy (the console mapping), the
session's silence and one-driver rules, the teleop state shown, and the server's drive path and camera rates on a
real socket (docs/console.md, "Drive")."""

from __future__ import annotations

import asyncio
import json
import math
import threading

import numpy as np
import pytest

from amf_ros.console.drive import AXES, BUTTONS, DriveInput, DriveSession
from amf_ros.console.model import ConsoleModel
from amf_ros.console.protocol import MAX_MESSAGE_BYTES, BadCommandError, Command, parse_command, parse_message
from amf_ros.runtime.operator_console import OperatorConsole

aiohttp = pytest.importorskip("aiohttp")

TASKS = {"carrot": "put carrot on plate"}
AX = [0.5, -1, 0, 0, 0, 0.25, 1]
BT = [1, 0, 0, 1]


def _msg(**kw):
    return json.dumps({"op": "drive", "axes": AX, "buttons": BT, "source": "keyboard", **kw})


# -- protocol ------------------------------------------------------------------------------------------------
def test_a_drive_message_parses_to_the_console_mapping():
    inp = parse_message(_msg(), TASKS)
    assert inp == DriveInput(axes=(0.5, -1.0, 0.0, 0.0, 0.0, 0.25, 1.0), buttons=(1, 0, 0, 1), source="keyboard")
    axes, buttons = inp.joy()
    assert axes == [0.5, -1.0, 0.0, 0.0, 0.0, 0.25, 1.0] and buttons == [1, 0, 0, 1]
    assert all(type(a) is float for a in axes) and all(type(b) is int for b in buttons)  # Joy: float32[], int32[]
    assert inp.deadman and inp.as_dict()["axes"]["yaw"] == 0.25 and inp.as_dict()["buttons"]["rotation"] == 1
    assert len(AXES) == 7 and len(BUTTONS) == 4


@pytest.mark.parametrize("doc, why", [
    ({"axes": AX[:6]}, "axes must be a list of 7"),
    ({"axes": AX + [0]}, "axes must be a list of 7"),
    ({"axes": "fast"}, "axes must be a list"),
    ({"axes": [1.5, 0, 0, 0, 0, 0, 0]}, "axis x must be a number in"),
    ({"axes": [0, -1.01, 0, 0, 0, 0, 0]}, "axis y must be a number in"),
    ({"axes": [0, 0, True, 0, 0, 0, 0]}, "axis z must be a number"),
    ({"axes": [0, 0, 0, "1", 0, 0, 0]}, "axis roll must be a number"),
    ({"axes": [0, 0, 0, 0, None, 0, 0]}, "axis pitch must be a number"),
    ({"buttons": [1, 0, 0]}, "buttons must be a list of 4"),
    ({"buttons": [2, 0, 0, 0]}, "button deadman must be 0 or 1"),
    ({"buttons": [0, True, 0, 0]}, "button fine must be 0 or 1"),
    ({"buttons": [0, 0, -1, 0]}, "button gripper_toggle must be 0 or 1"),
    ({"source": "telepathy"}, "source must be one of"),
    ({"source": 1}, "source must be one of"),
    ({"speed": 3}, "unexpected field"),
])
def test_malformed_drive_messages_are_refused_with_a_reason(doc, why):
    with pytest.raises(BadCommandError, match=why):
        parse_message(_msg(**doc), TASKS)


def test_drive_message_edge_cases():
    for literal in ("NaN", "Infinity", "-Infinity"):  # json.loads accepts these literals: refused as not finite
        raw = '{"op": "drive", "axes": [%s, 0, 0, 0, 0, 0, 0], "buttons": [0, 0, 0, 0], "source": "keyboard"}' % literal
        with pytest.raises(BadCommandError, match="axis x"):
            parse_message(raw, TASKS)
    with pytest.raises(BadCommandError, match="missing field"):
        parse_message('{"op": "drive", "axes": [0, 0, 0, 0, 0, 0, 0], "buttons": [0, 0, 0, 0]}', TASKS)
    with pytest.raises(BadCommandError, match="longer than"):
        parse_message(_msg(source="keyboard" + " " * MAX_MESSAGE_BYTES), TASKS)
    with pytest.raises(BadCommandError, match="not an operation"):  # the command path never takes a drive input
        parse_command(_msg(), TASKS)
    ends = parse_message(_msg(axes=[-1, 1, -1, 1, -1, 1, -1], buttons=[0, 1, 1, 0]), TASKS)  # the range's ends
    assert ends.axes == (-1.0, 1.0, -1.0, 1.0, -1.0, 1.0, -1.0) and ends.buttons == (0, 1, 1, 0)


def test_view_mode_is_one_of_two():
    assert parse_command('{"op": "view", "mode": "drive"}', TASKS) == Command("view", "", "drive")
    assert parse_command('{"op": "view", "mode": "watch"}', TASKS) == Command("view", "", "watch")
    for bad in ('{"op": "view", "mode": "fast"}', '{"op": "view"}', '{"op": "view", "mode": 1}'):
        with pytest.raises(BadCommandError, match="mode must be one of"):
            parse_command(bad, TASKS)


def test_drive_input_checks_its_own_values():
    with pytest.raises(ValueError, match="7 axes"):
        DriveInput(axes=(0.0,) * 6, buttons=(0,) * 4)
    with pytest.raises(ValueError, match="finite"):
        DriveInput(axes=(math.nan,) + (0.0,) * 6, buttons=(0,) * 4)
    released = DriveInput.released()
    assert released.joy() == ([0.0] * 7, [0] * 4) and not released.deadman and released.source == "release"


# -- session: silence, one driver, release --------------------------------------------------------------------
def _inp(deadman=1, x=0.0, source="keyboard"):
    return DriveInput(axes=(x, 0, 0, 0, 0, 0, 0), buttons=(deadman, 0, 0, 0), source=source)


def test_silence_rule_republishes_while_fresh_then_nothing():
    now = [10.0]
    s = DriveSession(silence_s=0.5, clock=lambda: now[0])
    assert s.latest() is None and s.status()["driver"] == ""
    assert s.put("b1", _inp(x=1.0)) == (True, "")
    assert s.put("b1", _inp(x=1.0)) == (False, "")  # unchanged: the timer republishes it, no extra publish
    assert s.put("b1", _inp(x=0.5)) == (True, "")   # changed: publish at once
    now[0] += 0.5
    assert s.latest() == _inp(x=0.5)  # exactly silence_s old: still fresh
    now[0] += 0.01
    assert s.latest() is None and s.status()["driver"] == "" and s.status()["last_driver"] == "b1"
    assert s.put("b1", _inp(x=0.5)) == (True, "")  # after a silence the same input is news: publish at once


def test_a_closed_page_releases_at_once_then_silence():
    now = [0.0]
    s = DriveSession(silence_s=0.5, clock=lambda: now[0])
    s.put("b1", _inp(x=1.0))
    assert not s.release("b2")  # not the driver: nothing happens
    assert s.latest() == _inp(x=1.0)
    now[0] += 0.2
    assert s.release("b1")
    assert s.latest() == DriveInput.released() and not s.latest().deadman
    assert s.drain() == [_inp(x=1.0), DriveInput.released()]  # both published at once, in order
    now[0] += 0.51
    assert s.latest() is None
    assert not s.release("b1")  # already silent: nothing to release
    assert s.counts["releases"] == 1


def test_one_browser_drives_at_a_time():
    now = [0.0]
    s = DriveSession(silence_s=0.5, clock=lambda: now[0])
    s.put("b1", _inp(deadman=1, x=1.0))
    changed, why = s.put("b2", _inp(deadman=1, x=-1.0))
    assert not changed and "browser b1 holds its deadman" in why
    assert s.latest() == _inp(deadman=1, x=1.0)
    s.put("b1", _inp(deadman=0))  # b1 lets go of its deadman, its page still fresh
    assert "browser b1 is driving" in s.put("b2", _inp(deadman=0, x=-1.0))[1]  # no takeover without a deadman
    assert s.put("b2", _inp(deadman=1, x=-1.0)) == (True, "")  # takeover with the deadman held
    assert s.status()["driver"] == "b2" and s.counts["takeovers"] == 1
    assert "browser b2" in s.put("b1", _inp(deadman=1))[1]
    now[0] += 0.6  # b2 silent: anyone may drive
    assert s.put("b1", _inp(deadman=0)) == (True, "")
    assert s.counts["refused"] == 3


def test_runtime_shows_who_drives_and_the_teleop_state():
    now = [0.0]
    model = ConsoleModel(TASKS)
    console = OperatorConsole(model, outputs=None, drive=DriveSession(silence_s=0.5, clock=lambda: now[0]))
    v0 = model.versions()["drive"]
    assert console.drive_input("b1", _inp(x=1.0)) == (True, "")
    section = model.section("drive")["session"]
    assert section["driver"] == "b1" and section["deadman"] is True and section["input"]["axes"]["x"] == 1.0
    assert console.drive_publish(tick=False) == [_inp(x=1.0)]  # the change, at once
    assert console.drive_publish(tick=False) == []  # published once
    assert console.drive_publish(tick=True) == [_inp(x=1.0)]  # republished on every tick while fresh
    v1 = model.versions()["drive"]
    assert v1 > v0
    console.drive_input("b1", _inp(x=1.0))  # the same input again: nothing to push, nothing queued
    assert model.versions()["drive"] == v1 and console.drive_publish(tick=False) == []
    # a press and a release between two executor turns: both published, in order (the teleop node sees the edge)
    toggle = DriveInput(axes=(0,) * 7, buttons=(1, 0, 1, 0))
    console.drive_input("b1", toggle)
    console.drive_input("b1", _inp(x=1.0))
    assert console.drive_publish(tick=True) == [toggle, _inp(x=1.0)]
    now[0] += 0.6
    assert console.drive_publish(tick=True) == []
    assert model.section("drive")["session"]["driver"] == ""  # the page says nobody drives
    console.on_teleop_state(json.dumps({"input": "console", "deadman": True, "speed": "fine", "age_s": float("nan"),
                                        "nested": {"a": 1}, **{f"k{i}": i for i in range(40)}}))
    teleop = model.section("drive")["teleop"]
    assert teleop["input"] == "console" and teleop["deadman"] is True and teleop["age_s"] is None
    assert teleop["nested"] == '{"a": 1}' and len(teleop) == 24
    json.dumps(model.section("drive"), allow_nan=False)  # valid JSON for a browser
    console.on_teleop_state("deadman held")
    assert model.section("drive")["teleop"] == {"state": "deadman held"}
    assert "not JSON" in model.section("drive")["teleop_error"]


# -- the server: drive inputs, release on close, camera rates ---------------------------------------------------
class Served:
    def __init__(self, **kw):
        from amf_ros.console.camera import FrameSlot
        from amf_ros.console.server import ConsoleServer

        self.model = ConsoleModel(TASKS)
        self.frames = FrameSlot()
        self.inputs: list[tuple[str, DriveInput]] = []
        self.released: list[str] = []
        self.lock = threading.Lock()

        def on_drive(client, inp):
            with self.lock:
                self.inputs.append((client, inp))
            return "" if inp.source != "gamepad" else "no gamepads today"

        self.server = ConsoleServer(self.model, lambda c, r: r(True, "ok"), port=0, frames=self.frames,
                                    push_period_s=0.05, on_drive=on_drive, on_drive_release=self.released.append,
                                    **kw)
        self.port = self.server.start()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.server.stop()


async def _receive_until(ws, predicate, timeout=5.0):
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while loop.time() < deadline:
        msg = await ws.receive(timeout=max(0.01, deadline - loop.time()))
        doc = json.loads(msg.data)
        if predicate(doc):
            return doc
    raise AssertionError("expected message not received")


def test_server_hands_drive_inputs_on_and_releases_a_closed_page():
    async def run(s):
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(f"http://127.0.0.1:{s.port}/ws")
            hello = await _receive_until(ws, lambda d: d["type"] == "hello")
            client = hello["client"]
            assert client.startswith("b") and "drive" in hello["sections"]
            await ws.send_str(_msg())
            await ws.send_str(_msg(source="gamepad"))  # refused by on_drive: answered with the reason
            res = await _receive_until(ws, lambda d: d["type"] == "result")
            assert res == {"type": "result", "op": "drive", "ok": False, "text": "no gamepads today"}
            await ws.send_str(_msg(axes=[2, 0, 0, 0, 0, 0, 0]))  # invalid: never reaches on_drive
            res = await _receive_until(ws, lambda d: d["type"] == "result")
            assert res["op"] == "invalid" and "axis x" in res["text"]
            await ws.close()
            return client

    with Served() as s:
        client = asyncio.run(run(s))
        deadline = threading.Event()
        for _ in range(100):  # the release runs when the server sees the socket end
            if s.released:
                break
            deadline.wait(0.02)
        assert s.released == [client]
        assert [(c, i.source) for c, i in s.inputs] == [(client, "keyboard"), (client, "gamepad")]
        assert s.inputs[0][1].axes == tuple(float(a) for a in AX)
        assert s.server.stats["drive_refused"] == 1 and s.server.stats["bad_messages"] == 1


def test_camera_newest_frame_only_and_driving_rate_on_request():
    """Frames put faster than they are shown: a browser gets the newest, never a queue; ``view drive`` answers with
    the driving rate and a driving browser is sent each new frame."""
    async def run(s):
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(f"http://127.0.0.1:{s.port}/ws")
            await _receive_until(ws, lambda d: d["type"] == "hello")
            await ws.send_str('{"op": "view", "mode": "drive"}')
            res = await _receive_until(ws, lambda d: d["type"] == "result")
            assert res["ok"] and res["text"] == "camera at up to 20 frames/s"
            for level in (10, 60, 110, 160, 210):  # a burst: only the newest may be shown
                s.frames.put("cam", np.full((256, 256, 3), level, np.uint8))
            cam = await _receive_until(ws, lambda d: d["type"] == "camera")
            while cam["seq"] < 5:  # the encoder may have caught the first one of the burst
                cam = await _receive_until(ws, lambda d: d["type"] == "camera")
            assert cam["seq"] == 5 and cam["stamp"] is None
            seen = [cam["seq"]]
            for level in (30, 90):  # one at a time: each one is sent (drive mode: every encoded frame)
                s.frames.put("cam", np.full((256, 256, 3), level, np.uint8))
                seen.append((await _receive_until(ws, lambda d: d["type"] == "camera"))["seq"])
            await ws.close()
            return cam, seen

    import base64

    import cv2

    with Served(display_rate_hz=1.0, drive_display_rate_hz=20.0) as s:
        cam, seen = asyncio.run(run(s))
    rgb = cv2.imdecode(np.frombuffer(base64.b64decode(cam["jpeg"]), np.uint8), cv2.IMREAD_COLOR)
    assert rgb.shape == (256, 256, 3)  # 256x256 is sent as it is (no resize below 320 px)
    assert abs(float(rgb.mean()) - 210) < 3  # the newest frame's content (JPEG error on a flat image: ~0)
    assert seen == [5, 6, 7]
    assert s.server.stats["camera_encoded"] <= 4  # at most the burst's first, its newest, and the two singles
