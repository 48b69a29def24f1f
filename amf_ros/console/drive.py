"""Driving from the console page, without ROS: the input state a browser sends while a person drives, and which
browser's input the console republishes as ``sensor_msgs/Joy`` on ``teleop/console_joy`` (docs/console.md, "Drive").

One code path for every input device: the page never commands the arm. It sends its held keys and gamepad as the
**console mapping** (7 axes, 4 buttons, below); operator_console republishes the newest input of the browser that
drives as a Joy at ``drive_rate_hz`` while it is fresh, and publishes nothing once that browser has been silent for
``silence_s``; the teleop node turns the Joy into arm actions (deadman, speed, bounds, its own silence rule).

Console mapping (shared with the teleop node's config/teleop/console.yaml):

=====  =========================================================  =======  ==========================================
axis   meaning                                                    button   meaning
=====  =========================================================  =======  ==========================================
0      x, + forward (away from the base)                          0        deadman (1 = held)
1      y, + left                                                  1        fine speed (1 = fine, 0 = coarse)
2      z, + up                                                    2        gripper toggle (the teleop node acts on
3-5    roll, pitch, yaw (+ = counter-clockwise about x, y, z)              its rising edge)
6      gripper: -1 close, +1 open, 0 no change (analog allowed)  3        rotation enable
=====  =========================================================  =======  ==========================================

Every change is published: each input that differs from the one before is queued (:meth:`DriveSession.drain`) and
published at once, in order, so a key pressed and let go between two republish ticks still reaches the teleop node
as a press and a release (its gripper toggle acts on the press; its deadman must be seen released before a press
counts, which is why the page sends an all-released input before the first input of every press).

Who drives: one browser at a time. The first to send input drives; another browser's input is refused while the
driver holds its deadman and is fresh, and takes over once the driver released its deadman or went silent. A driver
whose page closes (its WebSocket ends) is released at once: one input with everything released (deadman 0) is
republished until the silence rule ends it, so the teleop node sees the deadman drop before the silence.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

AXES = ("x", "y", "z", "roll", "pitch", "yaw", "gripper")
"""The console mapping's axes, in Joy order (each in [-1, 1])."""
BUTTONS = ("deadman", "fine", "gripper_toggle", "rotation")
"""The console mapping's buttons, in Joy order (each 0 or 1)."""
PENDING_MAX = 32
"""Changed inputs kept for publishing at once (the node drains them within an executor turn; a page sends a change
per key event, so 32 are more than any burst of key events between two turns)."""
SOURCES = ("keyboard", "gamepad", "release")
"""What produced an input: held keys, the browser's Gamepad API, or the page releasing everything (deadman key up
with nothing else held, focus lost, page hidden or closed, Drive switched off)."""


@dataclass(frozen=True)
class DriveInput:
    """One input state of a page: ``axes`` (7 floats in [-1, 1]) and ``buttons`` (4 ints, 0/1), the console
    mapping (module docstring); ``source`` one of :data:`SOURCES`."""

    axes: tuple[float, ...]
    buttons: tuple[int, ...]
    source: str = "keyboard"

    def __post_init__(self) -> None:
        if len(self.axes) != len(AXES) or len(self.buttons) != len(BUTTONS):
            raise ValueError(f"expected {len(AXES)} axes and {len(BUTTONS)} buttons, got {len(self.axes)} and "
                             f"{len(self.buttons)}")
        if not all(math.isfinite(a) and -1.0 <= a <= 1.0 for a in self.axes):
            raise ValueError(f"axes must be finite and in [-1, 1], got {self.axes}")
        if not all(b in (0, 1) for b in self.buttons):
            raise ValueError(f"buttons must be 0 or 1, got {self.buttons}")
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")

    @classmethod
    def released(cls) -> DriveInput:
        """Everything released: no motion, deadman 0."""
        return cls(axes=(0.0,) * len(AXES), buttons=(0,) * len(BUTTONS), source="release")

    @property
    def deadman(self) -> bool:
        """Whether the deadman is held."""
        return bool(self.buttons[0])

    def joy(self) -> tuple[list[float], list[int]]:
        """``(axes, buttons)`` of the sensor_msgs/Joy to publish (the console mapping, unchanged)."""
        return [float(a) for a in self.axes], [int(b) for b in self.buttons]

    def as_dict(self) -> dict[str, Any]:
        """For the page: named axes and buttons."""
        return {"axes": dict(zip(AXES, self.axes, strict=True)),
                "buttons": dict(zip(BUTTONS, self.buttons, strict=True)), "source": self.source}


class DriveSession:
    """Which browser drives, and the input to republish (module docstring). Thread-safe: the web server's thread
    writes, the node's timer reads.

    Args:
        silence_s: an input older than this is not republished (the page sends every 50 ms while anything is held).
        clock: monotonic seconds (a fake in tests).
    """

    def __init__(self, silence_s: float = 0.5, clock: Callable[[], float] = time.monotonic) -> None:
        if not silence_s > 0:
            raise ValueError(f"silence_s must be > 0, got {silence_s=}")
        self.silence_s = float(silence_s)
        self._clock = clock
        self._lock = threading.Lock()
        self._driver = ""
        self._input: DriveInput | None = None
        self._at = -math.inf
        self._pending: deque[DriveInput] = deque(maxlen=PENDING_MAX)
        self.counts = {"inputs": 0, "refused": 0, "takeovers": 0, "releases": 0, "changes_dropped": 0}

    def put(self, client: str, inp: DriveInput) -> tuple[bool, str]:
        """A browser's input. Returns ``(changed, refusal)``: ``changed`` when it differs from the input being
        republished (it is queued for :meth:`drain`: publish at once), ``refusal`` "" when accepted, else why not
        (another browser drives)."""
        now = self._clock()
        with self._lock:
            fresh = now - self._at <= self.silence_s
            if self._driver and self._driver != client and fresh and self._input is not None:
                if self._input.deadman or not inp.deadman:
                    self.counts["refused"] += 1
                    why = ("holds its deadman" if self._input.deadman else "is driving")
                    return False, f"browser {self._driver} {why}: release it there first"
                self.counts["takeovers"] += 1
            changed = not fresh or self._driver != client or self._input is None or \
                (self._input.axes, self._input.buttons) != (inp.axes, inp.buttons)
            self._driver, self._input, self._at = client, inp, now
            self.counts["inputs"] += 1
            if changed:
                self._queue(inp)
            return changed, ""

    def _queue(self, inp: DriveInput) -> None:
        if len(self._pending) == self._pending.maxlen:
            self.counts["changes_dropped"] += 1
        self._pending.append(inp)

    def drain(self) -> list[DriveInput]:
        """The changed inputs not published yet, oldest first (each to be published once, now)."""
        with self._lock:
            out = list(self._pending)
            self._pending.clear()
            return out

    def release(self, client: str) -> bool:
        """Browser ``client`` is gone (its WebSocket closed): if it drives and is fresh, its input becomes
        everything released (deadman 0), republished until the silence rule ends it. True if that happened."""
        now = self._clock()
        with self._lock:
            if client != self._driver or now - self._at > self.silence_s:
                return False
            self._input, self._at = DriveInput.released(), now
            self._queue(self._input)
            self.counts["releases"] += 1
            return True

    def latest(self) -> DriveInput | None:
        """The driver's newest input while fresh (to republish now), else None (silence: publish nothing)."""
        with self._lock:
            if self._input is None or self._clock() - self._at > self.silence_s:
                return None
            return self._input

    def status(self) -> dict[str, Any]:
        """For the page: the driving browser ("" when nobody's input is fresh), its input and its age."""
        with self._lock:
            age = self._clock() - self._at
            fresh = self._input is not None and age <= self.silence_s
            return {"driver": self._driver if fresh else "", "last_driver": self._driver,
                    "input": self._input.as_dict() if fresh and self._input is not None else None,
                    "deadman": bool(fresh and self._input is not None and self._input.deadman),
                    "age_s": round(age, 3) if math.isfinite(age) else None, **self.counts}
