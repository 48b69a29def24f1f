"""Atomic file writes: write to a temporary file in the same directory, fsync, rename.

Why: a crash or a full disk must never leave a half-written results file, checkpoint or episode behind
a name that readers trust (anti-pattern "data valid only after a clean shutdown").
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any


def fsync_dir(path: str | os.PathLike) -> None:
    """fsync a directory so that a rename inside it is durable."""
    fd = os.open(os.fspath(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_dir(filled: str | os.PathLike, path: str | os.PathLike) -> Path:
    """Put the complete directory ``filled`` (a sibling of ``path``) at ``path`` in one rename: fsync it, move an
    old ``path`` aside, rename, fsync the parent, remove the old one. Readers see the old directory or the new one,
    never half of one. The caller removes ``filled`` if this raises."""
    import shutil
    import uuid

    filled, path = Path(filled), Path(path)
    fsync_dir(filled)
    old = None
    if path.exists():
        old = path.parent / f".{path.name}.old-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        os.replace(path, old)
    os.replace(filled, path)
    fsync_dir(path.parent)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)
    return path


def process_umask() -> int:
    """The process umask, read without changing it (os.umask would race with other threads)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def default_mode(directory: bool = False) -> int:
    """Mode a plain open()/mkdir() would give: tempfile's private 0600/0700 must not leak into results that other
    users (or a web server showing docs/results) read."""
    return (0o777 if directory else 0o666) & ~process_umask()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically; on any error the old file (if any) is untouched."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.fchmod(fd, default_mode())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """UTF-8 text version of :func:`atomic_write_bytes`."""
    return atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: str | os.PathLike, obj: Any, indent: int | None = 2) -> Path:
    """JSON version of :func:`atomic_write_bytes` (NaN is refused: it is not valid JSON)."""
    return atomic_write_text(path, json.dumps(obj, indent=indent, allow_nan=False) + "\n")
