"""The checkpoint-directory convention of the package, in one place: fine-tuned checkpoints are ``round_NNNN``
directories under a ``checkpoint_dir`` (written atomically by amf_ros.policies.checkpoint), the newest round is the
one to serve, and any other directory (e.g. a pre-trained one) is round 0. Loading them: amf_ros.policies.loading.

Ensemble members (policy_server's ``ensemble_members``, for the disagreement rules vfd, action_l2 and gu): the extra
independently fine-tuned copies of a round live INSIDE that round's directory, ``round_NNNN/members/member_K``
(K = 1, 2, ...; member 0 is the round itself, the acting policy), each a checkpoint of its own. A round with
members is assembled under a hidden staging name and renamed into place whole (:func:`save_with_members`), so
every reader that lists rounds (:func:`round_checkpoints`, which only matches ``round_NNNN``) sees a round with all
of its members or no round at all; loading a round's policy never looks inside ``members/``.
"""

from __future__ import annotations

import os
import re
import shutil
import uuid
from pathlib import Path
from typing import Callable, Sequence

from amf_ros.atomic import fsync_dir, replace_dir

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


MEMBERS_DIR = "members"
"""Subdirectory of a round holding its extra ensemble members."""

_MEMBER_DIR = re.compile(r"^member_(\d+)$")


def member_dir(checkpoint: str | Path, k: int) -> Path:
    """Where ensemble member ``k`` (>= 1) of ``checkpoint`` lives: ``<checkpoint>/members/member_<k>``."""
    if k < 1:
        raise ValueError(f"ensemble member numbers start at 1 (0 is the checkpoint itself), got {k=}")
    return Path(checkpoint) / MEMBERS_DIR / f"member_{k}"


def member_checkpoints(checkpoint: str | Path) -> list[Path]:
    """The ensemble members of ``checkpoint`` (``members/member_K``), member 1 first ([] if it has none)."""
    root = Path(checkpoint) / MEMBERS_DIR
    if not root.is_dir():
        return []
    found = sorted((int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _MEMBER_DIR.match(p.name)))
    return [p for k, p in found if k >= 1]


def save_with_members(out: str | Path, save: Callable[[Path], object],
                      save_members: Sequence[Callable[[Path], object]]) -> Path:
    """Write a checkpoint and its ensemble members to ``out`` as one atomic step.

    ``save(dir)`` writes the checkpoint into a hidden staging directory next to ``out``, each ``save_members[k-1]``
    writes member k into ``member_dir(staging, k)``; the staging directory is fsynced and renamed to ``out``
    (an old ``out`` is moved aside first and removed after). On any error the staging directory is removed and
    ``out`` is untouched. Returns ``out``.
    """
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    staging = out.parent / f".{out.name}.staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        save(staging)
        for k, save_member in enumerate(save_members, start=1):
            save_member(member_dir(staging, k))
        if save_members:
            fsync_dir(staging / MEMBERS_DIR)
        replace_dir(staging, out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return out
