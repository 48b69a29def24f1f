"""What teleop does, without ROS: controls from a person's input device -> EefDeltaAction vectors for the arm, held
by a deadman (the devices and mappings: :mod:`amf_ros.runtime.teleop_input`).

:class:`Teleop` turns :class:`~amf_ros.runtime.teleop_input.Controls` into one 7-D action per control period, in
BridgeData units (translation m/step, rotation rad/step, gripper 1 = open, 0 = closed), clipped to the arm driver's
per-axis bounds.

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

Take-over from the policy (amf_ros/runtime/handover.py; HG-DAgger): every press and release is also sent as a
request (ControlSource on ``control/request``; a release carries its ArmStop's stamp). While policy_server announces
a run_policy goal on ``control``, a press does not drive at once: the teleop waits until policy_server answers
``human`` with this node's name (it has stopped the policy and dropped its actions in flight), then drives with
every action stamped after that answer. Its release hands control back. Outside a goal a press drives at once, as
in a plain demonstration. A goal that starts while this node drives without having been granted control, or that
ends while it holds it, stops it (an ArmStop; the deadman must be pressed again); the ArmStop of the hand-over
itself (policy_server's, stamped at or before the grant) does not.

Speed: full deflection moves ``max_translation * coarse_scale`` (or ``fine_scale``) per action; rotation likewise
with ``max_rotation``, only while rotation is enabled. Dead zone per axis, rescaled so full deflection stays 1.
Frame 'view' rotates the operator's (forward, left) by ``view_yaw_deg`` about z into the base frame. Gripper: a
toggle button flips open/closed; an analog axis (-1 close .. +1 open) sets 0.5 + 0.5 * value while deflected and
snaps to the nearer end (0 or 1) when released; both only while the deadman is held.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from amf_ros.runtime.teleop_input import (  # re-exported: the teleop node and its users import them from here
    AXES,
    BUTTONS,
    DEFAULT_MAPPING,
    MODES,
    PYSPACEMOUSE_HINT,
    ButtonControl,
    Controls,
    JoyDecoder,
    JoyMapping,
    SpaceMouseReader,
    Term,
    load_mapping,
    mapping_path,
    spacemouse_axes,
    twist_axes,
)

__all__ = ["AXES", "BUTTONS", "DEFAULT_MAPPING", "MODES", "PYSPACEMOUSE_HINT", "ButtonControl", "Controls",
           "JoyDecoder", "JoyMapping", "SpaceMouseReader", "Teleop", "TeleopConfig", "TeleopLoop", "TeleopOutputs",
           "Term", "dead_zone", "load_mapping", "mapping_path", "spacemouse_axes", "state_json", "twist_axes"]

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

    # Optional: ``send_request(source, stamp_ns)`` publishes a ControlSource on ``control/request`` ("human" = the
    # deadman is pressed, "" = released); outputs without it take no part in take-overs.


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
    control: str = ""  # the newest ControlSource on `control`: "policy", "human" (a goal runs) or "" (none)
    holder: str = ""  # the node it names
    arbiter: str = ""  # policy_server's name (the node of its "policy" / "" announcements)
    waiting: bool = False  # pressed during a goal: waiting for policy_server's grant
    granted_ns: int = -1  # stamp of the grant this node drives under (-1 = none: a plain demonstration)
    requested: bool = False  # a "human" request is outstanding (a release request follows it)
    takeovers: int = 0


class Teleop:
    """Controls in, actions and stops out (see the module docstring). Thread-safe: inputs arrive on ROS callbacks
    or a device thread, :meth:`tick` runs on :class:`TeleopLoop`'s thread.

    Args:
        config: speeds, bounds, frame, timing.
        mapping: the device's mapping (for its fine/rotation modes).
        out: the effects.
        clock: node time now, ns (stamps actions and stops).
        input_name: shown in the state.
        node_name: this node's fully qualified name (what policy_server's grant names).
    """

    def __init__(self, config: TeleopConfig, mapping: JoyMapping, out: TeleopOutputs, clock: Callable[[], int],
                 input_name: str = "joy", node_name: str = "teleop") -> None:
        self.config, self.mapping, self._out, self._clock = config, mapping, out, clock
        self.input_name, self.node_name = input_name, node_name
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
            s.controls, s.last_input_ns = c, now
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
                elif s.waiting:
                    s.waiting = False
                    self._request("", now)
            elif not prev.deadman and s.armed and not s.driving and not s.waiting:
                if s.control:  # a run_policy goal: drive once policy_server hands over control
                    s.waiting = True
                else:
                    s.driving, s.granted_ns = True, -1
                    self._wake.set()  # act now (at most one action per period still holds)
                self._request("human", now)  # after the state it answers: the grant may come back at once
            if s.driving:
                if c.gripper_toggle and not prev.gripper_toggle:
                    s.gripper = 0.0 if s.gripper >= 0.5 else 1.0
                g = float(dead_zone(np.array([c.gripper]), self.config.dead_zone)[0])
                if g != 0.0:
                    s.gripper, s.analog = 0.5 + 0.5 * g, True
                elif s.analog:
                    s.gripper, s.analog = (1.0 if s.gripper >= 0.5 else 0.0), False
            self._publish_state(now)

    def on_foreign_stop(self, source: str, reason: str, stamp_ns: int = 0) -> None:
        """An ArmStop from another node (the console's Stop, a policy goal ending): stop driving (or waiting for
        control) until the deadman is released and pressed again. policy_server's ArmStop of a hand-over to this node
        (stamped at or before the grant, or arriving while it waits for the grant) does not count."""
        with self._lock:
            s, now = self._s, self._clock()
            ours = bool(source) and source == s.arbiter
            if s.waiting and ours:
                return
            if s.driving and ours and s.granted_ns >= 0 and 0 < stamp_ns <= s.granted_ns:
                return
            if s.driving or s.waiting:
                s.driving, s.waiting, s.armed, s.granted_ns = False, False, False, -1
                s.last_stop = f"stop from {source or '?'}: {reason[:200]}"
                if s.requested:
                    self._request("", now)
                self._publish_state(now)

    def on_control(self, source: str, node: str, stamp_ns: int) -> None:
        """policy_server's ControlSource on ``control``: who commands the arm (see the module docstring)."""
        with self._lock:
            s, now = self._s, self._clock()
            s.control, s.holder = source, node
            if source != "human":
                s.arbiter = node or s.arbiter
            mine = source == "human" and node == self.node_name
            if mine and s.waiting and s.controls.deadman:
                s.waiting, s.driving, s.granted_ns = False, True, int(stamp_ns)
                s.takeovers += 1
                self._wake.set()
            elif mine and s.driving:  # a goal started while this node drove: it keeps control
                s.granted_ns = int(stamp_ns)
            elif s.driving and (source == "policy" or (source == "human" and not mine) or
                                (source == "" and s.granted_ns >= 0)):
                why = "the run_policy goal ended" if source == "" else f"control passed to {node or source}"
                self._stop(now, f"{why} while this node drove")
                s.armed = False
            elif s.waiting and source == "":  # the goal ended before handing over: press again to drive
                s.waiting, s.armed = False, False
                s.last_stop = "the run_policy goal ended before handing over control"
                self._request("", now)
            self._publish_state(now)

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
            silent = now - s.last_input_ns > cfg.silence_periods * cfg.period_ns
            if s.driving and silent:
                self._stop(now, f"input silent for {(now - s.last_input_ns) / 1e9:.2f} s")
                s.armed = False
            elif s.waiting and silent:
                s.waiting, s.armed = False, False
                self._request("", now)
            elif s.driving and now - s.last_action_ns >= 0.9 * cfg.period_ns:  # 10 % slack for timer jitter
                sent = self.action()
                stamp = max(now, s.last_action_ns + 1, s.granted_ns + 1)
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
        """Stop driving: the ArmStop (stamped at or after the last action), then the release request with its stamp
        (while holding control, the release hands it back to the policy)."""
        s = self._s
        stamp = max(now, s.last_action_ns)
        s.driving, s.stops, s.last_stop, s.granted_ns = False, s.stops + 1, reason, -1
        self._out.send_stop(stamp, reason)
        if s.requested:
            self._request("", stamp)

    def _request(self, source: str, stamp_ns: int) -> None:
        """Send a take-over request ("human") or its release ("") to policy_server, if the outputs can."""
        self._s.requested = source == "human"
        send = getattr(self._out, "send_request", None)
        if send is not None:
            send(source, int(stamp_ns))

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
                    "actions": s.actions, "stops": s.stops, "last_stop": s.last_stop,
                    "control": s.control or "none", "in_control": self._in_control(), "waiting": s.waiting,
                    "takeovers": s.takeovers}

    def _in_control(self) -> str:
        """Who commands the arm as this node sees it: "human" (this node drives), "policy", "human (other)" or
        "none"."""
        s = self._s
        if s.driving:
            return "human"
        if s.control == "human":
            return "human" if s.holder == self.node_name else "human (other)"
        return s.control or "none"

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


