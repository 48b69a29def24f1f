"""amf_ros.runtime.teleop without rclpy: mappings, deadman, dead zone, bounds, frames, silence, speed, gripper, the
tick thread and the SpaceMouse reader, on a fake clock and fake outputs."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from teleop_doubles import PERIOD_NS
from teleop_doubles import ManualClock as Clock
from teleop_doubles import TeleopOut as Out

from amf_ros.runtime.teleop import (
    Controls,
    JoyDecoder,
    JoyMapping,
    SpaceMouseReader,
    Teleop,
    TeleopConfig,
    TeleopLoop,
    dead_zone,
    load_mapping,
    spacemouse_axes,
    twist_axes,
)

REPO = Path(__file__).resolve().parents[2]
MAPPINGS = sorted(p.stem for p in (REPO / "config" / "teleop").glob("*.yaml"))
# A handful of float64 multiplications and one division per entry: a few ulps of values <= 1.
TOL = 16 * np.finfo(np.float64).eps


def console(x=0.0, y=0.0, z=0.0, roll=0.0, pitch=0.0, yaw=0.0, grip=0.0, deadman=True, fine=False, toggle=False,
            rotation=False) -> tuple[list[float], list[int]]:
    """A console Joy (teleop_interface: 7 axes, 4 buttons)."""
    return [x, y, z, roll, pitch, yaw, grip], [int(deadman), int(fine), int(toggle), int(rotation)]


def rig(mapping: str = "console", **config) -> tuple[Teleop, JoyDecoder, Out, Clock]:
    clock, out = Clock(), Out()
    m = load_mapping(mapping)
    t = Teleop(TeleopConfig(**config), m, out, clock, input_name="console")
    return t, JoyDecoder(m), out, clock


def feed(t: Teleop, d: JoyDecoder, joy: tuple[list[float], list[int]]) -> None:
    t.on_controls(d.joy(*joy))


def drive(t: Teleop, d: JoyDecoder, clock: Clock, joy: tuple[list[float], list[int]]) -> np.ndarray:
    """Arm (deadman released), press with ``joy``, one tick: the action sent."""
    feed(t, d, console(deadman=False))
    feed(t, d, joy)
    clock.advance()
    a = t.tick()
    assert a is not None
    return a


# ---- mappings -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", MAPPINGS)
def test_every_shipped_mapping_loads_with_a_held_deadman(name: str) -> None:
    m = load_mapping(name)
    assert m.deadman.buttons and m.deadman.mode == "held"
    assert {"x", "y", "z"} <= set(m.axes)


def test_shipped_mappings_and_defaults() -> None:
    assert {"xbox", "ps4", "ps5", "gamepad", "spacenav", "spacemouse", "console"} <= set(MAPPINGS)
    assert load_mapping("", "console").name.endswith("console.yaml")
    assert load_mapping("", "joy").name.endswith("xbox.yaml")
    assert load_mapping("", "twist").button_events and not load_mapping("", "spacemouse").button_events


def test_console_mapping_is_the_interface() -> None:
    """teleop_interface.md: axes x y z roll pitch yaw gripper = 0..6; buttons deadman, fine, toggle, rotation."""
    d = JoyDecoder(load_mapping("console"))
    c = d.joy(*console(0.1, 0.2, 0.3, 0.4, 0.5, 0.6, -0.7, deadman=True, fine=True, toggle=False, rotation=True))
    np.testing.assert_allclose(c.motion, [0.1, 0.2, 0.3, 0.4, 0.5, 0.6], atol=TOL)
    assert c.gripper == pytest.approx(-0.7, abs=TOL)
    assert (c.deadman, c.fine, c.gripper_toggle, c.rotation) == (True, True, False, True)
    c = d.joy(*console(deadman=False, toggle=True))
    assert (c.deadman, c.gripper_toggle) == (False, True)


def test_xbox_mapping_sticks_buttons_and_triggers() -> None:
    d = JoyDecoder(load_mapping("xbox"))
    axes = [0.0] * 8
    buttons = [0] * 11
    # joy_linux reports 0.0 for both triggers until they are first pressed: read as rest, so no gripper motion
    assert d.joy(axes, buttons).gripper == 0.0
    axes[1], axes[0], axes[4], buttons[5] = 1.0, -0.5, 0.25, 1  # left stick up and right, right stick up, RB
    c = d.joy(axes, buttons)
    np.testing.assert_allclose(c.motion[:3], [1.0, -0.5, 0.25], atol=TOL)
    assert c.deadman and not c.rotation
    axes[5], axes[2] = -1.0, 1.0  # RT fully pressed, LT at rest: close
    assert d.joy(axes, buttons).gripper == pytest.approx(-1.0, abs=TOL)
    axes[5], axes[2] = 1.0, -1.0  # LT pressed: open
    assert d.joy(axes, buttons).gripper == pytest.approx(1.0, abs=TOL)
    axes[5] = 0.0  # RT at a literal 0.0 after it moved: half pressed (contributes 0), not rest (would be -0.5)
    assert d.joy(axes, buttons).gripper == pytest.approx(0.5, abs=TOL)
    # a shorter message (another pad) reads missing axes as rest and missing buttons as released
    assert d.joy([0.0, 0.5], [0] * 4) == Controls(motion=(0.5, 0.0, 0.0, 0.0, 0.0, 0.0))


def test_spacenav_button_events_keep_the_held_buttons() -> None:
    """spacenav's Joy: a press of button 1 arrives as buttons [0, 1] although button 0 is still held; motion
    messages carry no buttons."""
    d = JoyDecoder(load_mapping("spacenav"))
    assert d.buttons([1]).deadman  # left pressed
    c = d.joy([0.3, 0, 0, 0, 0, 0], [])  # motion only
    assert c.deadman and c.motion[0] == pytest.approx(0.3, abs=TOL)
    c = d.buttons([0, 1])  # right pressed: left still held
    assert c.deadman and c.gripper_toggle
    c = d.buttons([0, 0])
    assert c.deadman and not c.gripper_toggle
    assert not d.buttons([0]).deadman  # left released


@pytest.mark.parametrize("doc, match", [
    ({"axes": {"x": [{"axis": 0}]}}, "deadman"),
    ({"axes": {"forward": [{"axis": 0}]}, "buttons": {"deadman": [0]}}, "unknown outputs"),
    ({"axes": {"x": [{"axis": 0, "button": 1}]}, "buttons": {"deadman": [0]}}, "exactly one of axis or button"),
    ({"axes": {"x": [{"axes": 0}]}, "buttons": {"deadman": [0]}}, "axes.x"),
    ({"axes": {}, "buttons": {"deadman": {"buttons": [0], "mode": "toggle"}}}, "held"),
    ({"axes": {}, "buttons": {"deadman": [0], "fine": {"buttons": [1], "mode": "sticky"}}}, "mode"),
])
def test_malformed_mappings_are_refused_with_the_reason(doc: dict, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        JoyMapping.from_dict(doc, "bad.yaml")


def test_twist_and_spacemouse_axes_follow_spacenav_order() -> None:
    np.testing.assert_allclose(twist_axes((0.2, -0.4, 0.6), (0.1, 0.0, -0.8), 0.8),
                               [0.25, -0.5, 0.75, 0.125, 0.0, -1.0], atol=TOL)
    state = SimpleNamespace(x=0.5, y=0.25, z=-0.5, roll=0.1, pitch=0.2, yaw=0.3, buttons=[1, 0])
    axes, buttons = spacemouse_axes(state)  # pyspacemouse: x right, y away -> ROS: x forward, y left
    np.testing.assert_allclose(axes, [0.25, -0.5, -0.5, 0.1, 0.2, -0.3], atol=TOL)
    assert buttons == [1, 0]


# ---- deadman -------------------------------------------------------------------------------------------------------

def test_nothing_is_published_unless_the_deadman_is_held() -> None:
    t, d, out, clock = rig()
    for _ in range(5):
        feed(t, d, console(x=1.0, deadman=False))
        clock.advance()
        assert t.tick() is None
    assert out.events == []
    a = drive(t, d, clock, console(x=1.0))
    assert len(out.actions) == 1 and a[0] > 0


def test_a_deadman_held_at_start_or_after_a_silence_must_be_pressed_again() -> None:
    t, d, out, clock = rig()
    for _ in range(3):  # the first message already holds the deadman: not armed
        feed(t, d, console(x=1.0))
        clock.advance()
        t.tick()
    assert out.events == []
    feed(t, d, console(deadman=False))
    feed(t, d, console(x=1.0))
    clock.advance()
    assert t.tick() is not None


def test_release_stops_at_once_and_nothing_follows() -> None:
    """The ArmStop is sent by the release itself, stamped at the release, after every action (all stamped before
    it): the arm drops what it has not applied and gets nothing more, within one period."""
    t, d, out, clock = rig()
    drive(t, d, clock, console(x=1.0))
    clock.advance(0.5)
    t_release = clock()
    feed(t, d, console(x=1.0, deadman=False))
    assert out.stops == [("deadman released", t_release)]
    assert out.events[-1][0] == "stop"
    assert all(stamp <= t_release for _, _, stamp in out.events)
    for _ in range(5):
        clock.advance()
        feed(t, d, console(x=1.0, deadman=False))
        assert t.tick() is None
    assert out.events[-1][0] == "stop" and len(out.actions) == 1


def test_at_most_one_action_per_period_even_across_a_release_and_press() -> None:
    t, d, out, clock = rig()
    drive(t, d, clock, console(x=1.0))
    t0 = out.events[-1][2]
    clock.advance(0.2)
    feed(t, d, console(deadman=False))
    feed(t, d, console(x=1.0))
    assert t.tick() is None  # 0.2 period after the last action
    assert t.due_in_s() == pytest.approx(0.8 * PERIOD_NS / 1e9, abs=1e-9)
    clock.advance(0.8)
    assert t.tick() is not None and out.events[-1][2] - t0 >= 0.9 * PERIOD_NS


def test_an_arm_stop_from_another_node_disarms_until_pressed_again() -> None:
    t, d, out, clock = rig()
    drive(t, d, clock, console(x=1.0))
    t.on_foreign_stop("/amf/operator_console", "stop all")
    clock.advance()
    feed(t, d, console(x=1.0))
    assert t.tick() is None and len(out.actions) == 1
    feed(t, d, console(deadman=False))
    feed(t, d, console(x=1.0))
    clock.advance()
    assert t.tick() is not None


def test_a_silent_input_stops_the_arm_and_publishes_nothing() -> None:
    t, d, out, clock = rig(silence_periods=3.0)
    drive(t, d, clock, console(x=1.0))
    clock.advance(2.0)  # exactly N periods since the last message: still alive
    assert t.tick() is not None
    clock.advance(0.5)
    assert t.tick() is None
    assert out.stops and out.stops[-1][0].startswith("input silent")
    n = len(out.events)
    for _ in range(5):
        clock.advance()
        assert t.tick() is None
    assert len(out.events) == n
    feed(t, d, console(x=1.0))  # the device is back, deadman still held: not armed
    clock.advance()
    assert t.tick() is None


# ---- motion --------------------------------------------------------------------------------------------------------

def test_dead_zone_zeroes_small_values_and_rescales_the_rest() -> None:
    np.testing.assert_allclose(dead_zone(np.array([0.05, -0.1, 0.55, -1.0, 2.0]), 0.1),
                               [0.0, 0.0, 0.5, -1.0, 1.0], atol=TOL)
    t, d, out, clock = rig(dead_zone=0.2)
    a = drive(t, d, clock, console(x=0.19, y=-0.2, z=0.6))
    np.testing.assert_allclose(a[:3], [0.0, 0.0, 0.5 * 0.05 * 0.4], atol=TOL)


def test_full_deflection_speeds_and_bounds() -> None:
    """Coarse = max x coarse_scale, fine = max x fine_scale; nothing beyond the driver's per-axis bounds, in any
    frame and at any scale."""
    t, d, out, clock = rig(coarse_scale=0.4, fine_scale=0.1)
    a = drive(t, d, clock, console(x=1.0, y=-1.0, z=1.0, roll=1.0, rotation=True))
    np.testing.assert_allclose(a[:4], [0.02, -0.02, 0.02, 0.1], atol=TOL)
    feed(t, d, console(x=1.0, fine=True))
    clock.advance()
    np.testing.assert_allclose(t.tick()[:3], [0.005, 0.0, 0.0], atol=TOL)
    rng = np.random.default_rng(0)
    for frame, yaw in (("base", 0.0), ("view", 45.0), ("view", -120.0)):
        t, d, out, clock = rig(coarse_scale=1.0, frame=frame, view_yaw_deg=yaw)
        feed(t, d, console(deadman=False))
        for _ in range(50):
            v = rng.uniform(-1.5, 1.5, 6)
            feed(t, d, console(*v, rotation=True))
            clock.advance()
            a = t.tick()
            assert np.all(np.abs(a[:3]) <= 0.05) and np.all(np.abs(a[3:6]) <= 0.25) and 0.0 <= a[6] <= 1.0


def test_view_frame_rotates_forward_and_left_about_z() -> None:
    s = 0.05 * 0.4
    for yaw, want in ((0.0, [s, 0.0]), (90.0, [0.0, s]), (180.0, [-s, 0.0]), (-90.0, [0.0, -s])):
        t, d, out, clock = rig(frame="view", view_yaw_deg=yaw)
        a = drive(t, d, clock, console(x=1.0, z=0.5))  # forward (away from the camera)
        np.testing.assert_allclose(a[:2], want, atol=TOL)
        assert a[2] == pytest.approx((0.5 - 0.1) / 0.9 * s, abs=TOL)  # z is never rotated
    t, d, out, clock = rig(frame="view", view_yaw_deg=45.0, coarse_scale=1.0)
    a = drive(t, d, clock, console(x=1.0, y=1.0))  # forward-left at 45 deg: all along base +y, clipped there
    np.testing.assert_allclose(a[:2], [0.0, 0.05], atol=1e-12)


def test_rotation_only_while_enabled() -> None:
    t, d, out, clock = rig()
    a = drive(t, d, clock, console(yaw=1.0))
    assert np.all(a[3:6] == 0.0)
    feed(t, d, console(yaw=1.0, rotation=True))
    clock.advance()
    assert t.tick()[5] == pytest.approx(0.25 * 0.4, abs=TOL)
    t, d, out, clock = rig("spacemouse")  # no rotation button in this mapping: always on
    feed(t, d, ([0.0] * 6, [0, 0]))
    feed(t, d, ([0.0, 0, 0, 0, 0, 1.0], [1, 0]))
    clock.advance()
    assert t.tick()[5] == pytest.approx(0.25 * 0.4, abs=TOL)


def test_fine_toggle_flips_on_each_press() -> None:
    t, d, out, clock = rig("xbox")
    axes, buttons = [0.0] * 8, [0] * 11
    t.on_controls(d.joy(axes, buttons))
    axes[1], buttons[5] = 1.0, 1
    for press, want in ((False, 0.02), (True, 0.005), (False, 0.005), (True, 0.02)):
        buttons[2] = int(press)
        t.on_controls(d.joy(axes, buttons))
        clock.advance()
        assert t.tick()[0] == pytest.approx(want, abs=TOL)


def test_gripper_toggle_and_analog_only_while_driving() -> None:
    t, d, out, clock = rig()
    feed(t, d, console(deadman=False, toggle=True))  # not driving: ignored
    feed(t, d, console(deadman=False))
    assert drive(t, d, clock, console())[6] == 1.0
    for toggle, want in ((True, 0.0), (False, 0.0), (True, 1.0), (False, 1.0)):
        feed(t, d, console(toggle=toggle))
        clock.advance()
        assert t.tick()[6] == want
    feed(t, d, console(grip=-0.6))  # analog close, 60 %
    clock.advance()
    assert t.tick()[6] == pytest.approx(0.5 - 0.5 * (0.6 - 0.1) / 0.9, abs=TOL)
    feed(t, d, console(grip=0.0))  # released: snaps to closed
    clock.advance()
    assert t.tick()[6] == 0.0


def test_state_says_what_the_console_shows() -> None:
    t, d, out, clock = rig()
    drive(t, d, clock, console(x=1.0, fine=True))
    s = t.state()
    assert (s["input"], s["deadman"], s["driving"], s["speed"], s["actions"]) == ("console", True, True, "fine", 1)
    assert s["input_age_s"] == pytest.approx(PERIOD_NS / 1e9, abs=1e-9)
    feed(t, d, console(deadman=False))
    s = out.states[-1]
    assert not s["driving"] and s["stops"] == 1 and s["last_stop"] == "deadman released"
    json.dumps(s)


def test_config_is_validated() -> None:
    for bad in ({"control_rate_hz": 0.0}, {"frame": "camera"}, {"dead_zone": 1.0}, {"silence_periods": 0.5}):
        with pytest.raises(ValueError, match="bad teleop settings"):
            TeleopConfig(**bad)


# ---- threads -------------------------------------------------------------------------------------------------------

def _wait(cond, timeout_s: float = 10.0) -> None:
    end = time.monotonic() + timeout_s
    while not cond():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.005)


def test_loop_ticks_while_held_and_never_after_the_release() -> None:
    out = Out()
    m = load_mapping("console")
    t = Teleop(TeleopConfig(control_rate_hz=50.0), m, out, time.time_ns)
    d = JoyDecoder(m)
    loop = TeleopLoop(t).start()
    try:
        feed(t, d, console(deadman=False))
        feed(t, d, console(x=1.0))
        _wait(lambda: len(out.actions) >= 3)
        feed(t, d, console(deadman=False))
        n = len(out.events)
        time.sleep(0.1)  # five periods: the loop keeps ticking, publishes nothing
    finally:
        loop.close()
    assert out.events[n - 1][0] == "stop" and len(out.events) == n
    stamps = [s for kind, _, s in out.events if kind == "action"]
    assert all(b - a >= 0.9 * 20e6 for a, b in zip(stamps, stamps[1:], strict=False))


class FakeDevice:
    def __init__(self) -> None:
        self.reads, self.closed = 0, False

    def read(self):
        self.reads += 1
        return SimpleNamespace(x=0.0, y=1.0, z=0.0, roll=0.0, pitch=0.0, yaw=0.0, buttons=[1, 0])

    def close(self) -> None:
        self.closed = True


def test_spacemouse_reader_missing_package_says_what_to_install() -> None:
    said: list[tuple[str, str]] = []

    def missing():
        raise ImportError("No module named 'pyspacemouse'")

    r = SpaceMouseReader(lambda a, b: None, lambda lv, text: said.append((lv, text)), module=missing).start()
    _wait(lambda: said)
    r.close()
    assert said[0][0] == "error" and "pip install pyspacemouse" in said[0][1] and "hidapi" in said[0][1]


def test_spacemouse_reader_retries_then_reads_on_its_thread() -> None:
    dev, tries, samples, said = FakeDevice(), [], [], []

    def open_(device=None):
        tries.append(device)
        if len(tries) < 2:
            raise RuntimeError("No connected or supported devices found.")
        return dev

    r = SpaceMouseReader(lambda a, b: samples.append((a, b, threading.current_thread().name)),
                         lambda lv, text: said.append((lv, text)), rate_hz=200.0, retry_s=0.01,
                         module=lambda: SimpleNamespace(open=open_)).start()
    _wait(lambda: len(samples) >= 3)
    r.close()
    assert dev.closed and said[0][0] == "warn" and said[1] == ("info", "SpaceMouse connected: device")
    axes, buttons, thread = samples[0]
    assert axes[0] == pytest.approx(1.0) and buttons == [1, 0] and thread == "spacemouse"
