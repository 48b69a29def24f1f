"""A node that waits for an input instead of dying without it: the not-ready state of policy_server and
task_selector with backend octo (issue 29, "Degrade, don't die").

Why: with ``robot:=real`` and no Octo installed, no ``checkpoint`` set, or one that does not exist (yet), a node that
raised at start was respawned three times with a traceback each and then stayed down; no restart can fix a missing
input. Instead the node starts, says ``not ready: <reason and what to do>`` once (log line and its latched status
topic), answers every request with that reason, and becomes ready when the input appears.

How: :meth:`Readiness.check` is cheap (a few ``stat`` calls and a module lookup, no import of Octo/JAX); the node
calls it from a timer every :data:`CHECK_PERIOD_S` while not ready (and at once when a checkpoint is announced).
When the inputs look present and differ from the ones the last failed attempt saw, it builds the backend (seconds:
loading the trunk) on a thread of its own, never in the executor callback; at start the build runs inline, as it
always did, so a node whose inputs are present is ready when it says so.
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Callable

from amf_ros._optional import has, require
from amf_ros.bringup.preflight import tasks_problem
from amf_ros.policies.octo.checkpoint import CONFIG_FILE, EXAMPLE_BATCH_FILE, STATISTICS_FILE
from amf_ros.policies.octo.trunk import DEFAULT_TRUNK_FACTORY

CHECK_PERIOD_S = 2.0
"""How often a not-ready node looks for its missing input (cheap: stat calls and a module lookup)."""

OCTO_HELP = "README.md, 'Deploying with Octo'"


def one_line(text: str, limit: int = 400) -> str:
    """``text`` on one line, at most ``limit`` characters (a reason for a log line, a status and a goal result)."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= limit else flat[:limit - 3] + "..."


def octo_inputs(checkpoint: str, trunk_factory: str = DEFAULT_TRUNK_FACTORY,
                need_octo: bool = True) -> tuple[str, object]:
    """(what is missing for the octo backend, "" if nothing; a signature of the inputs that changes when they do).

    Args:
        checkpoint: the node's ``checkpoint`` parameter (the Octo checkpoint directory).
        trunk_factory: ``octo_trunk_factory``; the package ``octo`` is needed only by the default (real) trunk.
        need_octo: False where the node needs Octo only later (task_selector loads the trunk on first use).
    """
    if not checkpoint:
        return (f"parameter 'checkpoint' is not set: pass the Octo checkpoint directory "
                f"(checkpoint:=~/octo_ckpt/octo-small-1.5, {OCTO_HELP}) and start again", None)
    p = Path(checkpoint).expanduser()
    if str(checkpoint).startswith(("hf://", "gs://")):
        return f"parameter 'checkpoint' is {checkpoint!r}: give a local directory ({OCTO_HELP})", None
    if not p.is_dir():
        return (f"the Octo checkpoint directory {str(p)!r} (parameter 'checkpoint') does not exist: download it "
                f"there ({OCTO_HELP}); looked for again every {CHECK_PERIOD_S:g} s", None)
    files = (CONFIG_FILE, EXAMPLE_BATCH_FILE, STATISTICS_FILE)
    stamps = tuple(_mtime(p / f) for f in files)
    missing = [f for f, t in zip(files, stamps, strict=True) if t is None]
    if missing:
        return (f"{str(p)!r} (parameter 'checkpoint') is not an Octo checkpoint: missing {missing} ({OCTO_HELP}); "
                f"looked for again every {CHECK_PERIOD_S:g} s", stamps)
    octo = not need_octo or trunk_factory != DEFAULT_TRUNK_FACTORY or has("octo")
    if not octo:
        try:
            require("octo", feature="the Octo trunk")
        except ImportError as exc:
            return one_line(f"{exc}; looked for again every {CHECK_PERIOD_S:g} s"), (stamps, False)
    return "", (stamps, True)


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


class Readiness:
    """The not-ready state machine: ``reason`` ("" = ready), a cheap :meth:`check`, a build on a thread.

    Args:
        probe: ``() -> (reason, signature)``: what is missing ("" = nothing), cheaply (see :func:`octo_inputs`).
        build: makes the backend from the inputs (may take seconds; raises when it cannot).
        on_change: called with the new reason ("" = ready) whenever it changes (from the checking or building
            thread).
    """

    def __init__(self, probe: Callable[[], tuple[str, object]], build: Callable[[], None],
                 on_change: Callable[[str], None] = lambda _reason: None) -> None:
        self.probe, self.build, self.on_change = probe, build, on_change
        self.reason = "starting"
        self._lock = threading.Lock()
        self._building = False
        self._failed: object = ()  # signature of the inputs the last failed build saw: not tried again as they are
        self.thread: threading.Thread | None = None

    @property
    def ready(self) -> bool:
        """True once the backend is built."""
        return not self.reason

    def not_ready(self) -> str:
        """``"not ready: <reason>"`` for a request's answer, "" when ready."""
        return f"not ready: {self.reason}" if self.reason else ""

    def check(self, inline: bool = False) -> bool:
        """Look for the inputs; build when they are present and new (``inline``: here, else on a thread). Returns
        True if a build ran inline or was started. Cheap unless ``inline``."""
        with self._lock:
            if not self.reason or self._building:
                return False
            reason, signature = self.probe()
            changed = bool(reason) and self._set(reason)
            start = self._building = not reason and signature != self._failed
        if changed:
            self.on_change(reason)
        if not start:
            return False
        if inline:
            self._build(signature)
        else:
            self.thread = threading.Thread(target=self._build, args=(signature,), name="become-ready", daemon=True)
            self.thread.start()
        return True

    def _build(self, signature: object) -> None:
        try:
            self.build()
            reason = ""
        except Exception as exc:  # any failure of the backend's start: reported, tried again when the inputs change
            reason = one_line(f"{type(exc).__name__}: {exc}")
        with self._lock:
            self._building = False
            if reason:
                self._failed = signature
            changed = self._set(reason)
        if changed:
            self.on_change(reason)

    def _set(self, reason: str) -> bool:
        """Record ``reason`` (under the lock); True if it changed (the caller then calls on_change, unlocked)."""
        changed, self.reason = reason != self.reason, reason
        return changed


def config_problem(tasks_file: str, tasks: tuple[str, ...] | list[str] = ()) -> str:
    """What is wrong with a node's task configuration that no restart can fix ("" = nothing): ``tasks_file`` that
    cannot be read, or a key in ``tasks`` that it does not list. The node exits with it (NO_RESPAWN_EXIT). The same
    check the launch files and `amf up` make before starting any node (amf_ros.bringup.preflight.tasks_problem); a
    node started on its own makes it here."""
    return tasks_problem(tasks_file, tasks)
