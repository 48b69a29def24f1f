"""Running the installed `amf` command as a process, as a user's terminal does (tests of `amf up` in test/dds)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
from pathlib import Path


def amf_command() -> list[str]:
    """The installed `amf` console script of this interpreter's environment (`python -m amf_ros.cli` without one)."""
    exe = shutil.which("amf", path=str(Path(sys.executable).parent)) or shutil.which("amf")
    return [exe] if exe else [sys.executable, "-m", "amf_ros.cli"]


def free_port() -> int:
    """A TCP port free on loopback now (for a console that must not collide with a user's 8765)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stop(proc: subprocess.Popen, timeout_s: float = 60.0) -> None:
    """Ctrl-C an `amf up` started with start_new_session=True (it stops its nodes: SIGINT, SIGKILL after
    up.STOP_TIMEOUT_S); SIGKILL its whole session if it has not exited within ``timeout_s`` (its nodes die with it,
    PR_SET_PDEATHSIG)."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
