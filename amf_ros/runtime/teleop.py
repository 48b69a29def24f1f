"""What teleop does, without ROS: a person's input device -> EefDeltaAction vectors for the arm, held by a deadman.

One code path for every device: a sensor_msgs/Joy (gamepad drivers, spacenav's Joy, the operator console's Drive
panel), a Twist (spacenav) with the buttons of a Joy, or a SpaceMouse read with pyspacemouse
(:class:`SpaceMouseReader`) all become axes and buttons; a mapping (config/teleop/<name>.yaml,
:class:`JoyMapping`) turns them into :class:`Controls` (6 motion axes and a gripper axis in [-1, 1], four
buttons) and :class:`Teleop` turns those into one 7-D action per control period, in BridgeData units (translation
m/step, rotation rad/step, gripper 1 = open, 0 = closed), clipped to the arm driver's per-axis bounds.

Safety rules (what the tests check):
- Deadman: an action is published only while the deadman is held. A press counts only after the deadman was seen
  released (at start, after the input went silent, after another node's ArmStop), so a button held while the
  node starts, or a device that comes back, never drives the arm by itself.
- Release: the ArmStop is published from the input callback at once (stamped then), under the same lock as the
  actions, so every action stamped before it that the arm has not applied yet is dropped (amf_ros/robots/
  action_gate.py), and nothing is published after it: the arm stops within one control period.
- Silence: no input message for ``silence_periods`` control periods while driving: an ArmStop, nothing published,
  the deadman must be pressed again.
- At most one action per control period (a release and a press in between do not shorten it).

Speed: full deflection moves ``max_translation * coarse_scale`` (or ``fine_scale``) per action; rotation likewise
with ``max_rotation``, only while rotation is enabled. Dead zone per axis, rescaled so full deflection stays 1.
Frame 'view' rotates the operator's (forward, left) by ``view_yaw_deg`` about z into the base frame. Gripper: a
toggle button flips open/closed; an analog axis (-1 close .. +1 open) sets 0.5 + 0.5 * value while deflected and
snaps to the nearer end (0 or 1) when released; both only while the deadman is held.
"""

from __future__ import annotations

import importlib
import json
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np

AXES = ("x", "y", "z", "roll", "pitch", "yaw", "gripper")
"""Output axes of a mapping: translation (operator frame), rotation, gripper (-1 close .. +1 open, 0 no change)."""
BUTTONS = ("deadman", "fine", "gripper_toggle", "rotation")
"""Output buttons of a mapping."""
MODES = ("held", "toggle")
"""How the fine-speed and rotation buttons act: on while held, or each press flips."""
DEFAULT_MAPPING = {"joy": "xbox", "twist": "spacenav", "spacemouse": "spacemouse", "console": "console"}
"""The mapping of each input when the ``mapping`` parameter is empty (config/teleop/<name>.yaml)."""
PYSPACEMOUSE_HINT = ("pip install pyspacemouse==2.1.0, and the hidapi C library (Debian/Ubuntu: sudo apt-get install "
                     "libhidapi-dev) with read access to /dev/hidraw* (a udev rule); or run the ROS `spacenav` driver "
                     "and use input 'twist'")


@dataclass(frozen=True)
class Term:
    """One contribution to an output axis: ``scale * axes[axis]`` or ``scale * buttons[button]``.

    ``rest`` is the value the axis reports untouched: joy_linux reports 0.0 for a trigger (rest +1.0) until it is
    first moved, so an axis with a non-zero ``rest`` reads ``rest`` until it has reported something other than 0.
    """

    axis: int = -1
    button: int = -1
    scale: float = 1.0
    rest: float = 0.0

    def __post_init__(self) -> None:
        if (self.axis >= 0) == (self.button >= 0):
            raise ValueError(f"a term needs exactly one of axis or button (an index >= 0), got {self}")
        if not (math.isfinite(self.scale) and math.isfinite(self.rest)):
            raise ValueError(f"a term's scale and rest must be finite, got {self}")


@dataclass(frozen=True)
class ButtonControl:
    """A button output: held while any of ``buttons`` is held; ``mode`` toggle: each press flips it."""

    buttons: tuple[int, ...]
    mode: str = "held"

    def __post_init__(self) -> None:
        if self.mode not in MODES or any(b < 0 for b in self.buttons):
            raise ValueError(f"a button control needs indices >= 0 and mode in {MODES}, got {self}")


@dataclass(frozen=True)
class JoyMapping:
    """Axes and buttons of one device -> :class:`Controls` (config/teleop/<name>.yaml; see :func:`load_mapping`).

    ``button_events``: the source sends button events, not states (spacenav's Joy: a message after a button
    change carries ``buttons[0..b]`` with only the last entry, button b, meaningful; motion messages carry no
    buttons), so only the last entry of a non-empty button list updates the held buttons.
    """

    name: str
    axes: Mapping[str, tuple[Term, ...]]
    deadman: ButtonControl
    fine: ButtonControl | None = None
    gripper_toggle: ButtonControl | None = None
    rotation: ButtonControl | None = None
    """None: rotation is always enabled."""
    button_events: bool = False

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any], name: str = "") -> JoyMapping:
        """Parse a mapping document (the YAML): ``axes: {x: [{axis: 1, scale: 1.0}], ...}``, ``buttons:
        {deadman: [5], fine: {buttons: [2], mode: toggle}, ...}``, optional ``button_events``; other top-level
        keys (``device``, ``driver``, ``notes``) are documentation.

        Raises:
            ValueError: an unknown axis or button name, a malformed term, or no deadman.
        """
        if not isinstance(doc, Mapping):
            raise ValueError(f"mapping {name!r}: expected a mapping document, got {type(doc).__name__}")
        axes_doc, buttons_doc = doc.get("axes") or {}, doc.get("buttons") or {}
        unknown = sorted(set(axes_doc) - set(AXES)) + sorted(set(buttons_doc) - set(BUTTONS))
        if unknown:
            raise ValueError(f"mapping {name!r}: unknown outputs {unknown}; axes are {AXES}, buttons {BUTTONS}")
        axes = {}
        for key, terms in axes_doc.items():
            if not isinstance(terms, list) or not all(isinstance(t, Mapping) for t in terms):
                raise ValueError(f"mapping {name!r}: axes.{key} must be a list of {{axis|button, scale, rest}}")
            try:
                axes[key] = tuple(Term(**{k: (float(v) if k in ("scale", "rest") else int(v)) for k, v in t.items()})
                                  for t in terms)
            except TypeError as exc:
                raise ValueError(f"mapping {name!r}: axes.{key}: {exc}") from None

        def control(key: str) -> ButtonControl | None:
            value = buttons_doc.get(key)
            if value is None:
                return None
            if isinstance(value, list):
                return ButtonControl(tuple(int(b) for b in value))
            if isinstance(value, Mapping) and set(value) <= {"buttons", "mode"}:
                return ButtonControl(tuple(int(b) for b in value.get("buttons", ())), str(value.get("mode", "held")))
            raise ValueError(f"mapping {name!r}: buttons.{key} must be a list of indices or {{buttons, mode}}")

        deadman = control("deadman")
        if deadman is None or not deadman.buttons or deadman.mode != "held":
            raise ValueError(f"mapping {name!r}: buttons.deadman must list at least one button, held")
        return cls(name, axes, deadman, control("fine"), control("gripper_toggle"), control("rotation"),
                   bool(doc.get("button_events", False)))


def mapping_path(name: str, input_name: str = "joy") -> Path:
    """The YAML of a mapping: ``name`` as a path, else config/teleop/<name>.yaml; empty = the input's default."""
    from amf_ros.paths import resolve_config

    name = name or DEFAULT_MAPPING[input_name]
    return resolve_config(name if name.endswith((".yaml", ".yml")) else f"config/teleop/{name}.yaml")


def load_mapping(name: str, input_name: str = "joy") -> JoyMapping:
    """Read and parse a mapping (see :func:`mapping_path`); ValueError names the file and the problem."""
    import yaml

    path = mapping_path(name, input_name)
    with open(path, encoding="utf-8") as fh:
        return JoyMapping.from_dict(yaml.safe_load(fh) or {}, name=str(path))


@dataclass(frozen=True)
class Controls:
    """One decoded input: what the operator asks for now."""

    motion: tuple[float, ...] = (0.0,) * 6
    """x, y, z (operator frame), roll, pitch, yaw, each in [-1, 1] (before the dead zone)."""
    gripper: float = 0.0
    """-1 close .. +1 open, 0 = no change."""
    deadman: bool = False
    fine: bool = False
    gripper_toggle: bool = False
    rotation: bool = False


class JoyDecoder:
    """Axes and buttons of one source -> :class:`Controls` with a :class:`JoyMapping` (keeps the latest of both, so
    a Twist stream and a buttons stream can be merged). Not thread-safe: call from one thread or under a lock."""

    def __init__(self, mapping: JoyMapping) -> None:
        self.mapping = mapping
        self._axes: list[float] = []
        self._moved: set[int] = set()  # axes that reported something other than 0 (see Term.rest)
        self._buttons: dict[int, int] = {}

    def joy(self, axes: Sequence[float], buttons: Sequence[int]) -> Controls:
        """A full sensor_msgs/Joy (axes and buttons)."""
        self._set_axes(axes)
        return self.buttons(buttons)

    def motion(self, axes: Sequence[float]) -> Controls:
        """Axes only (a Twist as 6 axes); the buttons stay as last seen."""
        self._set_axes(axes)
        return self.controls()

    def buttons(self, buttons: Sequence[int]) -> Controls:
        """Buttons only (a Joy of buttons, e.g. spacenav's); the axes stay as last seen."""
        values = [int(b) for b in buttons]
        if self.mapping.button_events:
            if values:
                self._buttons[len(values) - 1] = values[-1]
        else:
            self._buttons = dict(enumerate(values))
        return self.controls()

    def _set_axes(self, axes: Sequence[float]) -> None:
        self._axes = [float(v) if math.isfinite(float(v)) else 0.0 for v in axes]
        self._moved.update(i for i, v in enumerate(self._axes) if v != 0.0)

    def _term(self, t: Term) -> float:
        if t.button >= 0:
            return t.scale * float(self._buttons.get(t.button, 0) != 0)
        raw = self._axes[t.axis] if t.axis < len(self._axes) else t.rest
        return t.scale * (raw if t.axis in self._moved else t.rest)

    def _held(self, c: ButtonControl | None) -> bool:
        return c is not None and any(self._buttons.get(b, 0) != 0 for b in c.buttons)

    def controls(self) -> Controls:
        """The controls of the latest axes and buttons."""
        out = {k: max(-1.0, min(1.0, sum(self._term(t) for t in terms))) for k, terms in self.mapping.axes.items()}
        m = self.mapping
        return Controls(tuple(out.get(k, 0.0) for k in AXES[:6]), out.get("gripper", 0.0), self._held(m.deadman),
                        self._held(m.fine), self._held(m.gripper_toggle), self._held(m.rotation))


def twist_axes(linear: Sequence[float], angular: Sequence[float], full_scale: float = 1.0) -> list[float]:
    """A Twist -> 6 axes in spacenav's Joy order (linear x y z, angular x y z), divided by ``full_scale``."""
    return [float(v) / full_scale for v in (*linear, *angular)]


def spacemouse_axes(state: Any) -> tuple[list[float], list[int]]:
    """A pyspacemouse state -> (6 axes in spacenav's order and ROS convention, buttons).

    pyspacemouse's (legacy) axes: x right, y away from the user, z up; ``roll`` is about its y axis, ``pitch`` about
    its x axis, ``yaw`` about z, clockwise seen from above; spacenav (and ROS): x forward, y left, z up.
    """
    axes = [state.y, -state.x, state.z, state.roll, state.pitch, -state.yaw]
    return [float(v) for v in axes], [int(b) for b in getattr(state, "buttons", [])]


@dataclass(frozen=True)
class TeleopConfig:
    """How controls become actions (the node's parameters of the same names; units and ranges there)."""

    control_rate_hz: float = 5.0
    max_translation: float = 0.05
    max_rotation: float = 0.25
    coarse_scale: float = 0.4
    fine_scale: float = 0.1
    start_fine: bool = False
    dead_zone: float = 0.1
    frame: str = "base"
    view_yaw_deg: float = 0.0
    initial_gripper: float = 1.0
    silence_periods: float = 3.0
    state_period_s: float = 1.0

    def __post_init__(self) -> None:
        if not (self.control_rate_hz > 0 and self.max_translation > 0 and self.max_rotation >= 0
                and 0 <= self.coarse_scale <= 1 and 0 <= self.fine_scale <= 1 and 0 <= self.dead_zone < 1
                and self.frame in ("base", "view") and 0 <= self.initial_gripper <= 1 and self.silence_periods >= 1
                and self.state_period_s > 0):
            raise ValueError(f"bad teleop settings, got {self}")

    @property
    def period_ns(self) -> int:
        """One control period, ns."""
        return int(round(1e9 / self.control_rate_hz))


class TeleopOutputs(Protocol):
    """What the operator's device does to the world (the node publishes; tests record)."""

    def send_action(self, a7: np.ndarray, stamp_ns: int) -> None:
        """Publish one 7-D action stamped ``stamp_ns``."""

    def send_stop(self, stamp_ns: int, reason: str) -> None:
        """Publish an ArmStop stamped ``stamp_ns``."""

    def send_state(self, state: dict[str, Any]) -> None:
        """Publish the latched state (JSON-able dict)."""


def dead_zone(values: np.ndarray, zone: float) -> np.ndarray:
    """Values within +-zone -> 0, beyond it rescaled to reach 1 at full deflection (input clipped to [-1, 1])."""
    v = np.clip(np.asarray(values, dtype=np.float64), -1.0, 1.0)
    return np.where(np.abs(v) <= zone, 0.0, np.sign(v) * (np.abs(v) - zone) / (1.0 - zone))


@dataclass
class _State:
    controls: Controls = field(default_factory=Controls)
    last_input_ns: int = -1
    armed: bool = False  # the deadman was seen released since the start / the last disarm
    driving: bool = False
    fine: bool = False
    rotation_on: bool = True
    gripper: float = 1.0
    analog: bool = False  # the gripper axis is deflected
    last_action_ns: int = -(2**62)
    actions: int = 0
    stops: int = 0
    last_stop: str = ""


class Teleop:
    """Controls in, actions and stops out (see the module docstring). Thread-safe: inputs arrive on ROS callbacks
    or a device thread, :meth:`tick` runs on :class:`TeleopLoop`'s thread.

    Args:
        config: speeds, bounds, frame, timing.
        mapping: the device's mapping (for its fine/rotation modes).
        out: the effects.
        clock: node time now, ns (stamps actions and stops).
        input_name: shown in the state.
    """

    def __init__(self, config: TeleopConfig, mapping: JoyMapping, out: TeleopOutputs, clock: Callable[[], int],
                 input_name: str = "joy") -> None:
        self.config, self.mapping, self._out, self._clock = config, mapping, out, clock
        self.input_name = input_name
        self.device = "waiting for input"
        self._lock = threading.RLock()
        self._wake = threading.Event()
        self._s = _State(fine=config.start_fine, rotation_on=mapping.rotation is None,
                         gripper=float(config.initial_gripper))
        self._published: tuple[Any, ...] | None = None
        self._state_ns = -(2**62)
        yaw = math.radians(config.view_yaw_deg) if config.frame == "view" else 0.0
        self._rot = np.array([[math.cos(yaw), -math.sin(yaw)], [math.sin(yaw), math.cos(yaw)]])

    # ---- inputs -------------------------------------------------------------------------------------------------
    def on_controls(self, c: Controls) -> None:
        """One input sample: deadman press/release (a release publishes the ArmStop now), toggles, gripper."""
        with self._lock:
            s, now, prev = self._s, self._clock(), self._s.controls
            s.last_input_ns = now
            m = self.mapping
            if m.fine is not None:
                s.fine = c.fine if m.fine.mode == "held" else s.fine ^ (c.fine and not prev.fine)
            if m.rotation is not None:
                s.rotation_on = c.rotation if m.rotation.mode == "held" else s.rotation_on ^ (c.rotation and not
                                                                                             prev.rotation)
            if not c.deadman:
                s.armed = True
                if s.driving:
                    self._stop(now, "deadman released")
            elif not prev.deadman and s.armed and not s.driving:
                s.driving = True
                self._wake.set()  # act now (at most one action per period still holds)
            if s.driving:
                if c.gripper_toggle and not prev.gripper_toggle:
                    s.gripper = 0.0 if s.gripper >= 0.5 else 1.0
                g = float(dead_zone(np.array([c.gripper]), self.config.dead_zone)[0])
                if g != 0.0:
                    s.gripper, s.analog = 0.5 + 0.5 * g, True
                elif s.analog:
                    s.gripper, s.analog = (1.0 if s.gripper >= 0.5 else 0.0), False
            s.controls = c
            self._publish_state(now)

    def on_foreign_stop(self, source: str, reason: str) -> None:
        """An ArmStop from another node (the console's Stop, a policy goal ending): stop driving until the deadman
        is released and pressed again."""
        with self._lock:
            s = self._s
            if s.driving:
                s.driving, s.armed = False, False
                s.last_stop = f"stop from {source or '?'}: {reason[:200]}"
                self._publish_state(self._clock())

    def release(self, reason: str) -> None:
        """Stop driving now (the node shuts down): an ArmStop if the arm was being driven."""
        with self._lock:
            if self._s.driving:
                self._stop(self._clock(), reason)
                self._s.armed = False

    def set_device(self, text: str) -> None:
        """The device's condition (spacemouse: connected / not found / pyspacemouse missing), for the state."""
        with self._lock:
            self.device = text
            self._publish_state(self._clock())

    # ---- the control tick ---------------------------------------------------------------------------------------
    def tick(self) -> np.ndarray | None:
        """Stop a silent input; publish the action when driving and one period has passed; returns it (or None)."""
        with self._lock:
            s, now, cfg = self._s, self._clock(), self.config
            sent = None
            if s.driving and now - s.last_input_ns > cfg.silence_periods * cfg.period_ns:
                self._stop(now, f"input silent for {(now - s.last_input_ns) / 1e9:.2f} s")
                s.armed = False
            elif s.driving and now - s.last_action_ns >= 0.9 * cfg.period_ns:  # 10 % slack for timer jitter
                sent = self.action()
                stamp = max(now, s.last_action_ns + 1)
                s.last_action_ns, s.actions = stamp, s.actions + 1
                self._out.send_action(sent, stamp)
            self._publish_state(now)
            return sent

    def action(self) -> np.ndarray:
        """The 7-D action of the current controls (translation m, rotation rad, gripper), within the bounds."""
        with self._lock:
            s, cfg = self._s, self.config
            m = dead_zone(np.array(s.controls.motion), cfg.dead_zone)
            speed = cfg.fine_scale if s.fine else cfg.coarse_scale
            t = m[:3] * cfg.max_translation * speed
            t[:2] = self._rot @ t[:2]
            r = m[3:] * cfg.max_rotation * speed if s.rotation_on else np.zeros(3)
            return np.concatenate([np.clip(t, -cfg.max_translation, cfg.max_translation),
                                   np.clip(r, -cfg.max_rotation, cfg.max_rotation), [s.gripper]])

    def due_in_s(self) -> float:
        """Seconds until the next tick is useful: the next action when driving, else one period."""
        with self._lock:
            period = self.config.period_ns
            if not self._s.driving:
                return period / 1e9
            return max(0.0, (self._s.last_action_ns + period - self._clock()) / 1e9)

    def _stop(self, now: int, reason: str) -> None:
        s = self._s
        s.driving, s.stops, s.last_stop = False, s.stops + 1, reason
        self._out.send_stop(now, reason)

    # ---- state ----------------------------------------------------------------------------------------------------
    def state(self) -> dict[str, Any]:
        """What the console shows: input, device, deadman, driving, speed, rotation, gripper, input age, counts."""
        with self._lock:
            s, now = self._s, self._clock()
            return {"input": self.input_name, "mapping": self.mapping.name.rsplit("/", 1)[-1], "device": self.device,
                    "deadman": s.controls.deadman, "armed": s.armed, "driving": s.driving,
                    "speed": "fine" if s.fine else "coarse", "rotation": s.rotation_on,
                    "gripper": round(s.gripper, 3),
                    "input_age_s": None if s.last_input_ns < 0 else round((now - s.last_input_ns) / 1e9, 3),
                    "actions": s.actions, "stops": s.stops, "last_stop": s.last_stop}

    def _publish_state(self, now: int) -> None:
        state = self.state()
        key = tuple(v for k, v in state.items() if k not in ("input_age_s", "actions"))
        if key != self._published or now - self._state_ns >= self.config.state_period_s * 1e9:
            self._published, self._state_ns = key, now
            self._out.send_state(state)

    @property
    def wake(self) -> threading.Event:
        """Set when the deadman is pressed (the loop ticks at once)."""
        return self._wake


def state_json(state: Mapping[str, Any]) -> str:
    """The state as one JSON line (std_msgs/String on teleop/state)."""
    return json.dumps(dict(state), sort_keys=True)


class TeleopLoop:
    """Ticks a :class:`Teleop` on a thread of its own: when an action is due, at once on a deadman press, and at
    least once per control period (silence detection, state)."""

    def __init__(self, teleop: Teleop) -> None:
        self._teleop = teleop
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="teleop-loop", daemon=True)

    def start(self) -> TeleopLoop:
        """Start ticking."""
        self._thread.start()
        return self

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop ticking (bounded)."""
        self._stop.set()
        self._teleop.wake.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        wake = self._teleop.wake
        while not self._stop.is_set():
            self._teleop.tick()
            wake.wait(self._teleop.due_in_s())
            wake.clear()


class SpaceMouseReader:
    """Reads a 3Dconnexion SpaceMouse with pyspacemouse on a thread of its own (never on a ROS callback).

    pyspacemouse is imported on the thread, lazily: without it the node still runs and says what to install
    (``on_status``). A device not found (or lost) is retried every ``retry_s``. Each sample goes to
    ``on_sample(axes, buttons)`` (:func:`spacemouse_axes`) at ``rate_hz``.
    """

    def __init__(self, on_sample: Callable[[list[float], list[int]], None], on_status: Callable[[str, str], None],
                 device: str = "", rate_hz: float = 50.0, retry_s: float = 2.0,
                 module: Callable[[], Any] | None = None) -> None:
        self._on_sample, self._on_status, self._device = on_sample, on_status, device
        self._period, self._retry_s = 1.0 / rate_hz, retry_s
        self._import = module or (lambda: importlib.import_module("pyspacemouse"))
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spacemouse", daemon=True)

    def start(self) -> SpaceMouseReader:
        """Start reading."""
        self._thread.start()
        return self

    def close(self, timeout_s: float = 2.0) -> None:
        """Stop reading and close the device (bounded)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            psm = self._import()
        except ImportError as exc:
            self._on_status("error", f"pyspacemouse missing ({exc}): {PYSPACEMOUSE_HINT}")
            return
        said = ""
        while not self._stop.is_set():
            try:
                dev = psm.open(device=self._device or None)
                if not dev:
                    raise RuntimeError("no SpaceMouse found")
            except Exception as exc:  # pyspacemouse raises RuntimeError/ValueError/OSError when none is there
                text = f"no SpaceMouse: {type(exc).__name__}: {exc} (retrying every {self._retry_s:g} s)"
                if text != said:
                    self._on_status("warn", text)
                    said = text
                self._stop.wait(self._retry_s)
                continue
            said = ""
            self._on_status("info", f"SpaceMouse connected: {getattr(dev, 'name', '') or self._device or 'device'}")
            try:
                while not self._stop.is_set():
                    self._on_sample(*spacemouse_axes(dev.read()))
                    self._stop.wait(self._period)
            except Exception as exc:
                self._on_status("warn", f"SpaceMouse lost: {type(exc).__name__}: {exc}")
            finally:
                try:
                    dev.close()
                except Exception:  # a device already gone cannot be closed; nothing else to do
                    pass
