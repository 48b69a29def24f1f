"""Log lines and reply messages of bounded size: a refusal quotes at most the head of what it refuses.

Why: a refused request can carry 100 kB (a fuzzer's candidate list); logging it whole wrote 364 MB for 7,405
refusals. A line says how big the input was and shows its first characters.
"""

from __future__ import annotations

import time

MAX_CHARS = 300
"""Longest text a log line or a refusal message quotes."""


def bounded(text: str, limit: int = MAX_CHARS) -> str:
    """``text`` if it fits in ``limit`` characters, else its head and how long it was (control characters
    escaped, so a NUL or a newline in a task key cannot split or hide a log line)."""
    text = str(text)
    safe = text if text.isprintable() else text.encode("unicode_escape").decode("ascii")
    if len(safe) <= limit:
        return safe
    return f"{safe[:limit]}... ({len(text)} characters in all)"


class ErrorThrottle:
    """At most one log line per ``period_s`` per kind of problem (a broken 30 Hz camera or a fuzzing client must not
    flood the log); the suppressed ones are counted into the next line."""

    def __init__(self, period_s: float = 1.0) -> None:
        self.period_s = period_s
        self._last: dict[tuple[str, str], tuple[float, int]] = {}  # kind -> (time of last line, suppressed)

    def line(self, kind: tuple[str, str], text: str, now: float | None = None,
             period_s: float | None = None) -> str | None:
        """The line to log for this problem now, or None if it is suppressed (``period_s``: this kind's own
        period instead of the instance's)."""
        now = time.monotonic() if now is None else now
        period_s = self.period_s if period_s is None else period_s
        last, suppressed = self._last.get(kind, (float("-inf"), 0))
        if now - last < period_s:
            self._last[kind] = (last, suppressed + 1)
            return None
        self._last[kind] = (now, 0)
        return text + (f" ({suppressed} similar messages not logged)" if suppressed else "")
