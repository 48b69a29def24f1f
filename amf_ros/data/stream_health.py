"""Per-stream health of a recording: measured rate, gaps, dropped and duplicated samples, and "too slow" warnings.

Why: the failures operators report against other recorders are silent ones: data recorded at a lower rate but
stamped at a higher one (LeRobot PR #2786), camera frames dropped without a warning (trossen_sdk#111), episodes
collapsed without a word (strands-labs/robots#708). Every message's own header stamp passes through here, so the
numbers are the publisher's, not the recorder's receive times; the same code measures a live recording and a
bag import.

Rules (times are stream time: the newest stamp seen on any stream, so a dead stream's rate falls to 0):

* **nominal rate** of a stream, fixed once per episode: the larger of the rate heard before the episode (median
  period of its last ``history`` messages) and its rate over the episode's first ``window_s``. The larger,
  because a simulator's state is published slowly while idle and at the control rate while stepping, and a
  camera already slow at the start must still be caught against its earlier rate.
* **recent rate**: messages stamped within the ``window_s`` that ends ``lag_s`` before stream time, divided by
  ``window_s`` (a resolution of 1 / ``window_s``: +-0.5 Hz with the default 2 s). The lag, because streams are
  delivered with some skew: on a loaded machine one topic's messages reach the recorder a few hundred ms after
  another's of the same stamp, and a window ending at the newest stamp would count the late stream short.
* a stream is **slow** while its recent rate is below ``min_fraction`` x nominal (checked once the nominal is
  known; never for ``unwatched`` streams, by default the action); each change (slow / back) is reported once as an
  event line.
* **dropped** (estimate): for each gap longer than 1.5 nominal periods, ``round(gap / period) - 1`` samples;
  **duplicated**: a stamp equal to the stream's previous one; **out of order**: a stamp older than it.
"""

from __future__ import annotations

from collections import deque
from dataclasses import asdict, dataclass, field

import numpy as np

_S = 1e9


@dataclass
class StreamReport:
    """One stream's numbers for the current (or last) episode; JSON-able with :meth:`as_dict`."""

    messages: int = 0
    rate_hz: float = 0.0  # over the episode: (messages - 1) / (last stamp - first stamp)
    recent_hz: float = 0.0  # over the last window_s
    min_recent_hz: float | None = None  # lowest recent rate after the first window (None: shorter episode)
    nominal_hz: float = 0.0  # 0 = not known yet
    max_gap_s: float = 0.0
    dropped: int = 0
    duplicated: int = 0
    out_of_order: int = 0
    slow: bool = False
    slow_s: float = 0.0  # stream time spent slow

    def as_dict(self) -> dict:
        """The report as JSON-able values for the episode metadata, floats rounded to 4 digits."""
        return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in asdict(self).items()}


@dataclass
class _Stream:
    history: deque = field(default_factory=deque)  # stamps (ns) of the last `history` messages, any time
    window: deque = field(default_factory=deque)  # stamps within the recent window, episode only
    first_ns: int = 0
    last_ns: int = 0
    pre_hz: float = 0.0
    slow_since_ns: int = 0
    report: StreamReport = field(default_factory=StreamReport)


class StreamHealth:
    """Tracks ``streams`` (name -> display name, e.g. the topic) across episodes.

    Args:
        streams: stream key -> name used in event lines (the topic).
        min_fraction: a stream below this fraction of its nominal rate is slow (0 = never).
        window_s: the window of the recent rate and of the nominal rate's first measurement.
        history: messages kept between episodes to measure the rate heard before one.
        unwatched: streams measured but never reported slow (the action stream: its pace is the operator's or
            the policy's, a sensor's is its own).
        lag_s: delivery skew between streams the recent rate tolerates (see the module docstring).
    """

    def __init__(self, streams: dict[str, str], min_fraction: float = 0.8, window_s: float = 2.0,
                 history: int = 50, unwatched: tuple[str, ...] = ("action",), lag_s: float = 0.5) -> None:
        if not 0.0 <= min_fraction < 1.0 or window_s <= 0 or history < 3:
            raise ValueError(f"need 0 <= min_fraction < 1, window_s > 0, history >= 3; got {min_fraction=}, "
                             f"{window_s=}, {history=}")
        self.names = dict(streams)
        self.min_fraction = float(min_fraction)
        self._unwatched = set(unwatched)
        self._window_ns = int(window_s * _S)
        self._lag_ns = int(lag_s * _S)
        self._streams = {k: _Stream(history=deque(maxlen=history)) for k in streams}
        self._active = False
        self._start_ns: int | None = None
        self._now_ns = 0
        self._events: list[tuple[str, str]] = []

    # -- episodes -------------------------------------------------------------------------------------------------
    def begin(self, start_ns: int | None) -> None:
        """A new episode from ``start_ns`` (stream time; None = its first message): counters reset, the rate heard
        so far is remembered."""
        self._active, self._start_ns = True, None if start_ns is None else int(start_ns)
        self._now_ns = self._start_ns or 0
        self._events.clear()
        for s in self._streams.values():
            periods = np.diff(np.asarray(s.history, dtype=np.int64))
            periods = periods[periods > 0]
            s.pre_hz = float(_S / np.median(periods)) if len(periods) >= 3 else 0.0
            s.window.clear()
            s.first_ns = s.last_ns = s.slow_since_ns = 0
            s.report = StreamReport()

    def end(self) -> dict[str, dict]:
        """Close the episode; returns every stream's report as JSON-able dicts (for the episode metadata)."""
        self._update_rates()
        for s in self._streams.values():
            if s.report.slow:
                s.report.slow_s += (self._now_ns - self._lag_ns - s.slow_since_ns) / _S
        self._active = False
        return {k: s.report.as_dict() for k, s in self._streams.items()}

    # -- messages -------------------------------------------------------------------------------------------------
    def feed(self, stream: str, stamp_ns: int) -> None:
        """One message of ``stream`` stamped ``stamp_ns`` (streams not tracked are ignored)."""
        s = self._streams.get(stream)
        if s is None:
            return
        stamp_ns = int(stamp_ns)
        s.history.append(stamp_ns)
        if not self._active:
            return
        if self._start_ns is None:
            self._start_ns = stamp_ns
        if stamp_ns < self._start_ns:
            return
        r = s.report
        if r.messages and stamp_ns == s.last_ns:
            r.duplicated += 1
            return
        if r.messages and stamp_ns < s.last_ns:
            r.out_of_order += 1
            return
        if r.messages:
            gap = stamp_ns - s.last_ns
            r.max_gap_s = max(r.max_gap_s, gap / _S)
            if r.nominal_hz > 0 and gap > 1.5 * _S / r.nominal_hz:
                r.dropped += int(round(gap * r.nominal_hz / _S)) - 1
        else:
            s.first_ns = stamp_ns
        s.last_ns = stamp_ns
        r.messages += 1
        s.window.append(stamp_ns)
        self._now_ns = max(self._now_ns, stamp_ns)
        self._update_rates()

    def events(self) -> list[tuple[str, str]]:
        """(level "warn" | "info", line) for each stream that became slow or recovered since the last call."""
        out, self._events = self._events, []
        return out

    def reports(self) -> dict[str, StreamReport]:
        """Every stream's current report (zeros between episodes until the next one starts)."""
        return {k: s.report for k, s in self._streams.items()}

    def warnings(self) -> list[str]:
        """One line per stream slow now."""
        return [self._slow_line(k, s) for k, s in self._streams.items() if s.report.slow]

    # -- internals ------------------------------------------------------------------------------------------------
    def _update_rates(self) -> None:
        if not self._active:
            return
        window = self._window_ns
        now = self._now_ns - self._lag_ns  # the window ends here: later stamps may still be in flight elsewhere
        full_window = self._start_ns is not None and now - self._start_ns >= window
        for key, s in self._streams.items():
            r = s.report
            while s.window and s.window[0] <= now - window:
                s.window.popleft()
            r.recent_hz = sum(1 for t in s.window if t <= now) * _S / window
            if r.messages >= 2 and s.last_ns > s.first_ns:
                r.rate_hz = (r.messages - 1) * _S / (s.last_ns - s.first_ns)
            if not full_window:
                continue
            if r.nominal_hz == 0.0:  # the episode's own rate so far: exact for a regular stream (a count is +-1)
                r.nominal_hz = max(s.pre_hz, r.rate_hz)
            r.min_recent_hz = r.recent_hz if r.min_recent_hz is None else min(r.min_recent_hz, r.recent_hz)
            if r.nominal_hz <= 0 or self.min_fraction <= 0 or key in self._unwatched:
                continue
            slow = r.recent_hz < self.min_fraction * r.nominal_hz
            if slow and not r.slow:
                r.slow, s.slow_since_ns = True, now
                self._events.append(("warn", self._slow_line(key, s)))
            elif not slow and r.slow:
                r.slow = False
                r.slow_s += (now - s.slow_since_ns) / _S
                self._events.append(("info", f"{self.names[key]} back to {r.recent_hz:.1f} Hz "
                                             f"(nominal {r.nominal_hz:.1f} Hz)"))

    def _slow_line(self, key: str, s: _Stream) -> str:
        r = s.report
        return (f"{self.names[key]} at {r.recent_hz:.1f} Hz over the last {self._window_ns / _S:g} s, below "
                f"{self.min_fraction:.0%} of its nominal {r.nominal_hz:.1f} Hz ({r.dropped} samples dropped so far)")


def summarize(streams: dict[str, dict]) -> str:
    """One line per stream for `amf inspect`: rate vs nominal, max gap, dropped/duplicated, time slow."""
    lines = []
    for key, r in sorted(streams.items()):
        slow = f", slow for {r['slow_s']:.1f} s" if r.get("slow_s") else ""
        lines.append(f"{key}: {r['rate_hz']:.1f} Hz (nominal {r['nominal_hz']:.1f}), max gap {r['max_gap_s']:.2f} s, "
                     f"{r['dropped']} dropped, {r['duplicated']} duplicated{slow}")
    return "; ".join(lines)
