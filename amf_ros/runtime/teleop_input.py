"""A person's input device without ROS: axes and buttons -> :class:`Controls` (what teleop acts on).

One code path for every device: a sensor_msgs/Joy (gamepad drivers, spacenav's Joy, the operator console's Drive
panel), a Twist (spacenav) with the buttons of a Joy, or a SpaceMouse read with pyspacemouse
(:class:`SpaceMouseReader`) all become axes and buttons; a mapping (config/teleop/<name>.yaml,
:class:`JoyMapping`) turns them into :class:`Controls` (6 motion axes and a gripper axis in [-1, 1], four
buttons). :mod:`amf_ros.runtime.teleop` turns controls into actions.
"""

from __future__ import annotations

import importlib
import math
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

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
