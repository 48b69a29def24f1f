"""What a browser may send the operator console over its WebSocket, validated before anything acts on it.

Why a closed list: the console drives a robot. A message is one JSON object ``{"op": ..., ...}`` of at most
:data:`MAX_MESSAGE_BYTES`; anything else (not JSON, not an object, an unknown op, a wrong field type, a task that is
not a candidate) is refused with a line saying why, and nothing is called. No pickle, no eval, nothing executable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Collection

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
}
"""Operation -> its fields (all strings). Every operation answers with a ``result`` message (ok, text)."""


class BadCommandError(ValueError):
    """A message that the console refuses (the text says why)."""


@dataclass(frozen=True)
class Command:
    """One validated operation from a browser: ``op`` (a key of OPS) and ``task`` ("" when the op takes none)."""

    op: str
    task: str = ""


def parse_command(raw: str | bytes, tasks: Collection[str]) -> Command:
    """Validate one WebSocket message.

    Args:
        raw: the message text.
        tasks: the task keys a ``task`` field may name ("" is allowed where the decision or current task is meant).
    Raises:
        BadCommandError: with the reason, for anything but a well-formed known operation.
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
    if not isinstance(op, str) or op not in OPS:
        raise BadCommandError(f"unknown op {str(op)[:40]!r}; known: {', '.join(OPS)}")
    extra = set(doc) - {"op", *OPS[op]}
    if extra:
        raise BadCommandError(f"{op}: unexpected field(s) {sorted(str(k)[:40] for k in extra)}")
    task = doc.get("task", "")
    if "task" in OPS[op]:
        if not isinstance(task, str):
            raise BadCommandError(f"{op}: task must be a string")
        if task and task not in tasks:
            raise BadCommandError(f"{op}: unknown task {task[:80]!r}; candidates: {', '.join(sorted(tasks))}")
    return Command(op=op, task=task)
