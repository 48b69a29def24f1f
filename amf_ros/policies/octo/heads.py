"""Octo head checkpoints: which Octo checkpoint a fine-tuned head belongs to, and the head a node starts from.

A head checkpoint is an ordinary ``round_NNNN`` policy checkpoint (loaded by ``load_octo_policy`` of
:mod:`amf_ros.policies.octo.policy`) plus a marker file, ``octo_source.json``, naming the Octo checkpoint (the frozen
trunk) it was made from: a head only makes sense on the trunk whose embeddings it was trained on. The marker's ``key``
(:func:`checkpoint_key`) is computed from files only (no JAX), so task_selector can find heads and cached embeddings
without loading Octo.
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

from amf_ros.atomic import atomic_write_json

if TYPE_CHECKING:
    from amf_ros.policies.agent import TaskConditionedPolicy

log = logging.getLogger(__name__)

MARKER = "octo_source.json"
"""File inside a head checkpoint naming the Octo checkpoint it was made from."""


def checkpoint_key(octo_checkpoint: str | Path) -> str:
    """Identity of an Octo checkpoint for markers and cache keys: resolved path, config, statistics and the orbax
    steps (files only, no JAX)."""
    from amf_ros.policies.octo.checkpoint import read_checkpoint

    info = read_checkpoint(octo_checkpoint)
    root = Path(info.path).resolve()
    h = hashlib.sha256(str(root).encode())
    for name in ("config.json", "dataset_statistics.json"):
        p = root / name
        if p.is_file():
            h.update(p.read_bytes())
    h.update(json.dumps(sorted(int(s) for s in info.steps)).encode())
    return h.hexdigest()[:16]


def made_from(path: str | Path, key: str) -> bool:
    """True if the head checkpoint ``path`` carries a marker naming the Octo checkpoint ``key`` (an unreadable
    marker counts as no marker, with a warning)."""
    marker = Path(path) / MARKER
    if not marker.is_file():
        return False
    try:
        return json.loads(marker.read_text()).get("key") == key
    except ValueError:
        log.warning("unreadable %s", marker)
        return False


def newest_octo_round(checkpoint_dir: str | Path, key: str) -> Path | None:
    """Newest ``round_NNNN`` whose marker says it was fine-tuned from the Octo checkpoint ``key``."""
    from amf_ros.policies.checkpoint_dirs import round_checkpoints

    return next((p for p in reversed(round_checkpoints(checkpoint_dir)) if made_from(p, key)), None)


def write_marker(path: str | Path, octo_checkpoint: str | Path, key: str) -> None:
    """Record which Octo checkpoint (trunk) a saved head belongs to."""
    atomic_write_json(Path(path) / MARKER, {"octo_checkpoint": str(Path(octo_checkpoint).resolve()), "key": key})


def is_octo_policy(path: str | Path) -> bool:
    """True for a head checkpoint written by the octo backend (has the marker)."""
    return (Path(path) / MARKER).is_file()


def initial_octo_head(trunk: Any, octo_checkpoint: str, checkpoint_dir: str | Path, instructions: Mapping[str, str],
                      head_checkpoint: str = "") -> tuple[TaskConditionedPolicy, Path]:
    """(policy, its checkpoint directory) the octo backend starts serving with: ``head_checkpoint`` if given, else
    the newest ``round_NNNN`` made from the same Octo checkpoint (marker), else Octo's pretrained head (fine-tuned
    copy + frozen prior), saved as ``round_0000`` so that fine-tuning and task_selector load it like any checkpoint.
    Called through :func:`amf_ros.policies.loading.initial_policy`."""
    from amf_ros.policies.octo.policy import load_octo_policy, octo_policy

    key = checkpoint_key(octo_checkpoint)
    path = Path(head_checkpoint) if head_checkpoint else newest_octo_round(checkpoint_dir, key)
    if path is not None:
        if not path.is_dir():
            raise ValueError(f"head checkpoint directory does not exist: {str(path)!r}")
        log.info("Octo head from %s", path)
        return load_octo_policy(path), path
    if not instructions:
        raise ValueError("the octo backend needs a task set: set 'tasks_file' (keys and instructions)")
    policy = octo_policy(trunk.head_params(), trunk.action_statistics(), dict(instructions))
    path = Path(checkpoint_dir) / "round_0000"
    if path.exists():
        raise ValueError(f"{path} exists but was not made from Octo checkpoint {octo_checkpoint!r}; use another "
                         "'checkpoint_dir'")
    saved = Path(policy.save(path))
    write_marker(saved, octo_checkpoint, key)
    log.info("Octo pretrained head (fine-tuned copy + frozen prior) saved as %s", saved)
    return policy, saved
