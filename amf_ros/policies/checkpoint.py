"""Checkpoints as a directory of safetensors + JSON, written atomically and verified on load (never pickle).

Layout: ``<dir>/weights.safetensors`` (all tensors) and ``<dir>/meta.json`` = {"format", "meta" (config etc.),
"sha256" of the weights file, "tensors": {name: {"dtype", "shape"}}}. The directory is written under a temporary
name, fsynced and renamed into place, so readers see the old checkpoint or the new one, never half of one. Loading
checks the format, the hash, and every tensor's dtype and shape, and raises :class:`CheckpointError` (a ValueError)
saying what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Mapping

import numpy as np
import torch

from amf_ros.atomic import default_mode, replace_dir

FORMAT = "amf_ros.checkpoint/1"
WEIGHTS = "weights.safetensors"
META = "meta.json"


class CheckpointError(ValueError):
    """A checkpoint is missing, corrupt, or does not match what the caller expects."""


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())


def save_checkpoint(path: str | os.PathLike, tensors: Mapping[str, torch.Tensor | np.ndarray],
                    meta: Mapping[str, Any]) -> Path:
    """Write ``tensors`` and JSON-able ``meta`` to directory ``path`` atomically (replacing an old one)."""
    from safetensors.torch import save as st_save

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    flat = {k: (torch.from_numpy(np.ascontiguousarray(v)) if isinstance(v, np.ndarray) else v.detach())
            .contiguous().cpu() for k, v in tensors.items()}
    blob = st_save(flat)
    doc = {"format": FORMAT, "meta": dict(meta), "sha256": hashlib.sha256(blob).hexdigest(),
           "tensors": {k: {"dtype": str(v.dtype).replace("torch.", ""), "shape": list(v.shape)}
                       for k, v in sorted(flat.items())}}
    text = json.dumps(doc, indent=2, allow_nan=False, sort_keys=True) + "\n"
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent))
    try:
        os.chmod(tmp, default_mode(directory=True))
        _write_file(tmp / WEIGHTS, blob)
        _write_file(tmp / META, text.encode("utf-8"))
        replace_dir(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def read_meta(path: str | os.PathLike) -> dict[str, Any]:
    """The verified-format ``meta.json`` document of a checkpoint (without loading the weights)."""
    path = Path(path)
    meta_path = path / META
    if not path.is_dir():
        raise CheckpointError(f"checkpoint directory {path} does not exist")
    if not meta_path.is_file():
        raise CheckpointError(f"{path} is not a checkpoint: {META} is missing")
    try:
        doc = json.loads(meta_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CheckpointError(f"{meta_path} is corrupt (not valid JSON: {exc})") from exc
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise CheckpointError(f"{meta_path}: unsupported checkpoint format {got!r}, expected {FORMAT!r}")
    for key in ("meta", "sha256", "tensors"):
        if key not in doc:
            raise CheckpointError(f"{meta_path} is missing the {key!r} field")
    return doc


def load_checkpoint(path: str | os.PathLike) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """Read a checkpoint, verifying hash, tensor names, dtypes and shapes; returns (tensors, meta)."""
    from safetensors import SafetensorError
    from safetensors.torch import load as st_load

    path = Path(path)
    doc = read_meta(path)
    weights = path / WEIGHTS
    if not weights.is_file():
        raise CheckpointError(f"{path}: {WEIGHTS} is missing")
    blob = weights.read_bytes()
    digest = hashlib.sha256(blob).hexdigest()
    if digest != doc["sha256"]:
        raise CheckpointError(f"{weights} is corrupt: sha256 {digest[:12]}... does not match "
                              f"{doc['sha256'][:12]}... recorded in {META}")
    try:
        tensors = st_load(blob)
    except (SafetensorError, ValueError, RuntimeError) as exc:
        raise CheckpointError(f"{weights} could not be parsed: {exc}") from exc
    want = doc["tensors"]
    if set(tensors) != set(want):
        raise CheckpointError(f"{path}: tensor names differ from {META}: missing {sorted(set(want) - set(tensors))},"
                              f" unexpected {sorted(set(tensors) - set(want))}")
    for k, spec in want.items():
        got = {"dtype": str(tensors[k].dtype).replace("torch.", ""), "shape": list(tensors[k].shape)}
        if got != spec:
            raise CheckpointError(f"{path}: tensor {k!r} is {got}, {META} says {spec}")
    return tensors, doc["meta"]


def check_shapes(tensors: Mapping[str, torch.Tensor], expected: Mapping[str, torch.Tensor], where: str) -> None:
    """Raise CheckpointError unless ``tensors`` has exactly the keys and shapes of ``expected`` (a state_dict)."""
    missing = sorted(set(expected) - set(tensors))
    unexpected = sorted(set(tensors) - set(expected))
    if missing or unexpected:
        raise CheckpointError(f"{where}: checkpoint does not match the model: missing {missing}, "
                              f"unexpected {unexpected}")
    for k, v in expected.items():
        if tuple(tensors[k].shape) != tuple(v.shape):
            raise CheckpointError(f"{where}: {k!r} has shape {tuple(tensors[k].shape)} in the checkpoint, "
                                  f"the model expects {tuple(v.shape)} (config mismatch?)")
