"""The console's camera path, without ROS or the web server: the newest frame per stream, and its JPEG.

Why latest-only: the display runs at a few Hz (15 while someone drives), a camera at up to 30; an older frame is
worthless once a newer one exists, so :meth:`FrameSlot.put` replaces, nothing ever queues or slows the writer (a ROS
callback), and the encoder (amf_ros/console/server.py) always encodes the newest.
"""

from __future__ import annotations

import threading
from typing import Any, Callable

import numpy as np


class FrameSlot:
    """The newest camera frame per stream, written by ROS callbacks (cheap: a reference), read by the server, which
    sets :attr:`notify` to be woken by each new frame (module docstring).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._frames: dict[str, tuple[int, Any]] = {}
        self._seq = 0
        self.notify: Callable[[], None] | None = None  # set by the server: wakes its encoder (thread-safe)
        self.received = 0

    def put(self, name: str, frame: Any) -> None:
        """Keep only the newest frame of stream ``name``: an older frame is worthless once a newer one exists."""
        with self._lock:
            self._seq += 1
            self._frames[name] = (self._seq, frame)
            self.received += 1
        notify = self.notify
        if notify is not None:
            notify()

    def take_newer(self, seen: dict[str, int]) -> list[tuple[str, int, Any]]:
        """Frames newer than ``seen`` (name -> seq), as (name, seq, frame)."""
        with self._lock:
            return [(n, s, f) for n, (s, f) in self._frames.items() if s > seen.get(n, 0)]


def encode_jpeg(rgb: np.ndarray, max_width: int = 320, quality: int = 80) -> bytes:
    """An HxWx3 uint8 RGB image as a JPEG no wider than ``max_width`` (the page shows it small)."""
    import cv2

    img = np.asarray(rgb)
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    h, w = img.shape[:2]
    if w > max_width:
        img = cv2.resize(img, (max_width, max(1, round(h * max_width / w))), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(img[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return buf.tobytes()
