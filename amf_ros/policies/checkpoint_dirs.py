"""The checkpoint-directory convention of the package, in one place: fine-tuned checkpoints are ``round_NNNN``
directories under a ``checkpoint_dir`` (written atomically by amf_ros.policies.checkpoint), the newest round is the
one to serve, and any other directory (e.g. a pre-trained one) is round 0."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Callable, TypeVar

T = TypeVar("T")

_ROUND_DIR = re.compile(r"^round_(\d{4,})$")


def round_checkpoints(checkpoint_dir: str | Path) -> list[Path]:
    """The ``round_NNNN`` checkpoint directories in ``checkpoint_dir``, oldest round first ([] if none)."""
    root = Path(checkpoint_dir)
    if not root.is_dir():
        return []
    rounds = sorted((int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _ROUND_DIR.match(p.name)))
    return [p for _, p in rounds]


def newest_checkpoint(checkpoint_dir: str | Path) -> Path | None:
    """The newest ``round_NNNN`` checkpoint directory in ``checkpoint_dir`` (None if there is none)."""
    rounds = round_checkpoints(checkpoint_dir)
    return rounds[-1] if rounds else None


def resolve_checkpoint(checkpoint: str, checkpoint_dir: str) -> Path:
    """The checkpoint to start from: ``checkpoint`` if given, else the newest in ``checkpoint_dir``."""
    if checkpoint:
        path = Path(checkpoint)
        if not path.is_dir():
            raise ValueError(f"checkpoint directory does not exist: {checkpoint!r}")
        return path
    path = newest_checkpoint(checkpoint_dir)
    if path is None:
        raise no_checkpoint_error(checkpoint_dir)
    return path


def no_checkpoint_error(checkpoint_dir: str | Path) -> ValueError:
    """The error of a node that was given no checkpoint and finds no round in ``checkpoint_dir``."""
    return ValueError(f"no checkpoint given and no round_NNNN checkpoint in {str(checkpoint_dir)!r}; "
                      "run `amf pretrain` or set the 'checkpoint' parameter")


def round_of(path: str | Path) -> int:
    """Fine-tuning round of a checkpoint directory (``round_0007`` -> 7; anything else, e.g. pretrained -> 0)."""
    m = _ROUND_DIR.match(Path(path).name)
    return int(m.group(1)) if m else 0


def load_newest_good(checkpoint_dir: str | Path, load: Callable[[Path], T],
                     warn: Callable[[str], None]) -> tuple[T, Path] | None:
    """Load the newest ``round_NNNN`` that loads; a newer one that does not (corrupt, half-copied by hand, from an
    incompatible version) is skipped with a warning saying why, so one bad round never keeps a node down.

    Returns:
        (loaded object, its path), or None when ``checkpoint_dir`` holds no round at all.
    Raises:
        ValueError: rounds exist but none of them loads (each one's error in the message).
    """
    rounds = round_checkpoints(checkpoint_dir)
    errors = []
    for path in reversed(rounds):
        try:
            return load(path), path
        except (ValueError, OSError, KeyError) as exc:  # CheckpointError is a ValueError
            errors.append(f"{path.name}: {exc}")
            warn(f"checkpoint {path} cannot be loaded ({type(exc).__name__}: {exc}); trying the round before it")
    if rounds:
        raise ValueError(f"no checkpoint under {str(checkpoint_dir)!r} loads: " + "; ".join(errors))
    return None
