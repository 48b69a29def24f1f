"""What a browser may send the operator console over its WebSocket, validated before anything acts on it.

Why a closed list: the console drives a robot. A message is one JSON object ``{"op": ..., ...}`` of at most
:data:`MAX_MESSAGE_BYTES`; anything else (not JSON, not an object, an unknown op, a wrong field type, a task that is
not a candidate, a number out of its range) is refused with a line saying why, and nothing is called. No pickle, no
eval, nothing executable.

Two kinds of message: the operations of :data:`OPS` (string fields only; each answered with a ``result``), and the
Drive panel's input state ``{"op": "drive", "axes": [7 numbers in [-1, 1]], "buttons": [4 of 0/1], "source":
"keyboard" | "gamepad" | "release"}`` (:mod:`amf_ros.console.drive`), sent ~20 times a second while a person drives
and answered only when refused.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any, Collection

from amf_ros.console.drive import AXES, BUTTONS, SOURCES, DriveInput

MAX_MESSAGE_BYTES = 4096
OPS: dict[str, tuple[str, ...]] = {
    "ask": (),                       # /next_task
    "start": ("task",),              # StartEpisode for a task (the decision's when omitted: "task": "")
    "save_success": (),              # EndEpisode success=true
    "save_failure": (),              # EndEpisode success=false
    "discard": (),                   # EndEpisode discard=true
    "rerecord": (),                  # discard the current/last take and start the same task again
    "fine_tune": (),                 # /fine_tune goal
    "cancel_fine_tune": (),
    "evaluate": ("task",),           # /run_policy goal
    "cancel_evaluate": (),
    "stop_all": (),                  # ArmStop + cancel every goal this console started
    "reset_sim": ("task",),          # simulator only: a fresh scene of a task (shown only when sim/reset exists)
    "view": ("mode",),               # the camera rate this browser wants: "watch" (display_rate_hz) or "drive"
}
"""Operation -> its fields (all strings). Every operation answers with a ``result`` message (ok, text)."""

VIEW_MODES = ("watch", "drive")
"""Values of the ``view`` op's ``mode``: the camera at ``display_rate_hz`` or at ``drive_display_rate_hz``."""
DRIVE_OP = "drive"
DRIVE_FIELDS = ("axes", "buttons", "source")


class BadCommandError(ValueError):
    """A message that the console refuses (the text says why)."""


@dataclass(frozen=True)
class Command:
    """One validated operation from a browser: ``op`` (a key of OPS), ``task`` and ``mode`` ("" when the op takes
    none)."""

    op: str
    task: str = ""
    mode: str = ""


def parse_command(raw: str | bytes, tasks: Collection[str]) -> Command:
    """Validate one WebSocket message that must be an operation of :data:`OPS` (a ``drive`` input is refused).

    Args:
        raw: the message text.
        tasks: the task keys a ``task`` field may name ("" is allowed where the decision or current task is meant).
    Raises:
        BadCommandError: with the reason, for anything but a well-formed known operation.
    """
    msg = parse_message(raw, tasks)
    if not isinstance(msg, Command):
        raise BadCommandError(f"{DRIVE_OP}: not an operation here")
    return msg


def parse_message(raw: str | bytes, tasks: Collection[str]) -> Command | DriveInput:
    """Validate one WebSocket message: an operation of :data:`OPS` or a Drive input.

    Args:
        raw: the message text.
        tasks: the task keys a ``task`` field may name ("" is allowed where the decision or current task is meant).
    Raises:
        BadCommandError: with the reason, for anything but a well-formed known operation or Drive input.
    """
    if isinstance(raw, bytes):
        raise BadCommandError("binary messages are not accepted; send a JSON object as text")
    if len(raw.encode("utf-8", "replace")) > MAX_MESSAGE_BYTES:
        raise BadCommandError(f"message longer than {MAX_MESSAGE_BYTES} bytes")
    try:
        doc: Any = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadCommandError(f"not JSON: {exc.msg} at position {exc.pos}") from None
    if not isinstance(doc, dict):
        raise BadCommandError(f"expected a JSON object, got {type(doc).__name__}")
    op = doc.get("op")
    if op == DRIVE_OP:
        return _drive(doc)
    if not isinstance(op, str) or op not in OPS:
        raise BadCommandError(f"unknown op {str(op)[:40]!r}; known: {', '.join([*OPS, DRIVE_OP])}")
    extra = set(doc) - {"op", *OPS[op]}
    if extra:
        raise BadCommandError(f"{op}: unexpected field(s) {sorted(str(k)[:40] for k in extra)}")
    task = doc.get("task", "")
    if "task" in OPS[op]:
        if not isinstance(task, str):
            raise BadCommandError(f"{op}: task must be a string")
        if task and task not in tasks:
            raise BadCommandError(f"{op}: unknown task {task[:80]!r}; candidates: {', '.join(sorted(tasks))}")
    mode = doc.get("mode", "")
    if "mode" in OPS[op] and (not isinstance(mode, str) or mode not in VIEW_MODES):
        raise BadCommandError(f"{op}: mode must be one of {', '.join(VIEW_MODES)}, got {str(mode)[:40]!r}")
    return Command(op=op, task=task, mode=mode)


def _drive(doc: dict[str, Any]) -> DriveInput:
    """A Drive input: exactly 7 finite numbers in [-1, 1], 4 buttons 0/1 (JSON numbers, not booleans), a source."""
    extra = set(doc) - {"op", *DRIVE_FIELDS}
    missing = [k for k in DRIVE_FIELDS if k not in doc]
    if extra or missing:
        raise BadCommandError(f"{DRIVE_OP}: unexpected field(s) {sorted(str(k)[:40] for k in extra)}" if extra else
                              f"{DRIVE_OP}: missing field(s) {missing}")
    axes, buttons, source = doc["axes"], doc["buttons"], doc["source"]
    if not isinstance(axes, list) or len(axes) != len(AXES):
        raise BadCommandError(f"{DRIVE_OP}: axes must be a list of {len(AXES)} numbers ({', '.join(AXES)})")
    for name, a in zip(AXES, axes, strict=True):
        # bool is an int in Python; JSON's NaN / Infinity literals are accepted by json.loads: refuse both
        if isinstance(a, bool) or not isinstance(a, (int, float)) or not math.isfinite(a) or not -1.0 <= a <= 1.0:
            raise BadCommandError(f"{DRIVE_OP}: axis {name} must be a number in [-1, 1], got {str(a)[:40]!r}")
    if not isinstance(buttons, list) or len(buttons) != len(BUTTONS):
        raise BadCommandError(f"{DRIVE_OP}: buttons must be a list of {len(BUTTONS)} values ({', '.join(BUTTONS)})")
    for name, b in zip(BUTTONS, buttons, strict=True):
        if isinstance(b, bool) or b not in (0, 1):
            raise BadCommandError(f"{DRIVE_OP}: button {name} must be 0 or 1, got {str(b)[:40]!r}")
    if not isinstance(source, str) or source not in SOURCES:
        raise BadCommandError(f"{DRIVE_OP}: source must be one of {', '.join(SOURCES)}, got {str(source)[:40]!r}")
    return DriveInput(axes=tuple(float(a) for a in axes), buttons=tuple(int(b) for b in buttons), source=source)
