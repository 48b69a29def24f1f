"""Test doubles of teleop's surroundings, shared by the teleop tests: a node clock that moves only when told and the
outputs (actions, stops, control requests, state) recorded in one ordered list."""

from __future__ import annotations

import threading

import numpy as np

PERIOD_NS = 200_000_000
"""One control period at 5 Hz, ns (what :meth:`ManualClock.advance` steps by)."""


class ManualClock:
    """Node time on demand (ns), moved only by :meth:`advance`."""

    def __init__(self, t: int = 10**12) -> None:
        self.t = t

    def __call__(self) -> int:
        return self.t

    def advance(self, periods: float = 1.0) -> None:
        self.t += int(periods * PERIOD_NS)


class TeleopOut:
    """TeleopOutputs recording actions, stops and control requests in one ordered list of (kind, value, stamp), and
    every published state (thread-safe: the node's timer and the test may both send)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, object, int]] = []
        self.states: list[dict] = []
        self._lock = threading.Lock()

    def _add(self, kind: str, value: object, stamp_ns: int) -> None:
        with self._lock:
            self.events.append((kind, value, stamp_ns))

    def send_action(self, a7: np.ndarray, stamp_ns: int) -> None:
        self._add("action", np.array(a7), stamp_ns)

    def send_stop(self, stamp_ns: int, reason: str) -> None:
        self._add("stop", reason, stamp_ns)

    def send_state(self, state: dict) -> None:
        with self._lock:
            self.states.append(dict(state))

    @property
    def state(self) -> dict:
        """The last published state."""
        return self.states[-1]

    def kinds(self, kind: str) -> list[tuple[object, int]]:
        """(value, stamp) of every event of ``kind``, in order."""
        return [(v, t) for k, v, t in self.events if k == kind]

    @property
    def actions(self) -> list[np.ndarray]:
        return [v for v, _ in self.kinds("action")]

    @property
    def stops(self) -> list[tuple[str, int]]:
        return self.kinds("stop")


class TakeoverOut(TeleopOut):
    """:class:`TeleopOut` of a teleop that may take over from the policy: it also sends control requests (a teleop
    whose outputs have no ``send_request`` never asks for control)."""

    def send_request(self, source: str, stamp_ns: int) -> None:
        self._add("request", source, stamp_ns)
