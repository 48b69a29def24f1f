"""A camera policy's observation: a camera frame with the arm state measured at the frame's time.

Why: the camera policy (``trunk: image_pretrained``) was trained on (frame, proprio) pairs of one instant. The
state and the frame of one control step arrive on two topics in either order, so pairing the newest state with the
newest frame acts on the previous frame about half of the time; measured through ROS on the embedded WidowX
(`amf run --arm widowx --trunk image_pretrained`, same checkpoint, 5 scenes per task): pre-trained tasks 0.20 / 0.10
that way, 0.30 / 0.50 paired by stamp; offline, acting one frame late took spoon_on_towel from 3/5 to 2/5 and
carrot_on_plate from 2/5 to 0/5.

Rule: a frame is paired once, with the buffered state nearest its stamp, as soon as one lies within ``tolerance_ns``
(at once if it is there, else when it arrives); a frame with no state that close is never acted on, and neither is
a state without a frame (the control loop then waits, and ends the goal when its observation timeout passes: no
action on a stale observation). A policy that also sees the wrist camera needs the wrist frame nearest the camera
frame's stamp within the same tolerance too (:meth:`FramePairing.on_wrist`). The embedded simulation stamps a step's
state and frames alike; a real camera and joint-state stream are paired within the tolerance. Unstamped inputs
(stamp 0) are stamped at arrival.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from typing import Callable, Sequence

import numpy as np

STATES_KEPT = 64
"""Recent states kept for pairing (a joint-state stream at 100 Hz: 0.64 s)."""
WRIST_FRAMES_KEPT = 8
"""Recent wrist frames kept for pairing (a 30 Hz camera: 0.27 s)."""


class FramePairing:
    """Pairs each camera frame with the state nearest its stamp and hands the pair on (thread-safe).

    Args:
        tolerance_ns: the largest |state stamp - frame stamp| of a pair, ns.
        emit: called with ``{"state": (D,) float32, "image": (H, W, 3) uint8}`` (and ``"wrist"`` with ``wrist``)
            and the frame's stamp as given (0 if it had none) once per paired frame.
        clock_ns: the time unstamped inputs get (default: monotonic ns).
        wrist: also pair a wrist frame (:meth:`on_wrist`); without, wrist frames are ignored.
    """

    def __init__(self, tolerance_ns: int, emit: Callable[[dict[str, np.ndarray], int], None],
                 clock_ns: Callable[[], int] = time.monotonic_ns, wrist: bool = False) -> None:
        if tolerance_ns < 0:
            raise ValueError(f"tolerance_ns must be >= 0, got {tolerance_ns=}")
        self.tolerance_ns = int(tolerance_ns)
        self._emit, self._clock = emit, clock_ns
        self.wrist = bool(wrist)
        self._lock = threading.Lock()
        self._states: deque[tuple[int, np.ndarray]] = deque(maxlen=STATES_KEPT)
        self._wrists: deque[tuple[int, np.ndarray]] = deque(maxlen=WRIST_FRAMES_KEPT)
        self._frame: tuple[int, np.ndarray, int] | None = None  # the newest frame not paired: stamp, rgb, as given
        self.paired = 0
        """Frames paired so far."""
        self.unpaired = 0
        """Frames replaced by a newer one before any state came within the tolerance."""

    def on_state(self, values: Sequence[float], stamp_ns: int = 0) -> None:
        """A state measured at ``stamp_ns``: pairs the waiting frame if it lies within the tolerance."""
        self._buffer(self._states, np.asarray(values, dtype=np.float32), stamp_ns)

    def on_frame(self, rgb: np.ndarray, stamp_ns: int = 0) -> None:
        """A frame taken at ``stamp_ns``: paired now with the nearest buffered state within the tolerance, or when
        such a state arrives; a waiting older frame is dropped."""
        stamp = int(stamp_ns) or self._clock()
        with self._lock:
            if self._frame is not None:
                self.unpaired += 1
            self._frame = (stamp, rgb, int(stamp_ns))
            pair = self._pair_locked()
        if pair is not None:
            self._emit(*pair)

    def on_wrist(self, rgb: np.ndarray, stamp_ns: int = 0) -> None:
        """A wrist frame taken at ``stamp_ns``: pairs the waiting camera frame if it completes it (ignored by a
        pairing without ``wrist``)."""
        if self.wrist:
            self._buffer(self._wrists, rgb, stamp_ns)

    def _buffer(self, items: deque[tuple[int, np.ndarray]], value: np.ndarray, stamp_ns: int) -> None:
        """Keep a stamped state or wrist frame, then pair the waiting camera frame if it is now complete."""
        stamp = int(stamp_ns) or self._clock()
        with self._lock:
            items.append((stamp, value))
            pair = self._pair_locked()
        if pair is not None:
            self._emit(*pair)

    def _pair_locked(self) -> tuple[dict[str, np.ndarray], int] | None:
        if self._frame is None or not self._states or (self.wrist and not self._wrists):
            return None
        stamp, rgb, given = self._frame
        gap, state = _nearest(self._states, stamp)
        if gap > self.tolerance_ns:
            return None
        out = {"state": state, "image": rgb}
        if self.wrist:
            gap, out["wrist"] = _nearest(self._wrists, stamp)
            if gap > self.tolerance_ns:
                return None
        self._frame = None
        self.paired += 1
        return out, given


def _nearest(items: deque[tuple[int, np.ndarray]], stamp: int) -> tuple[int, np.ndarray]:
    """(|gap| ns, value) of the item stamped nearest ``stamp``."""
    return min(((abs(s - stamp), v) for s, v in items), key=lambda gv: gv[0])
