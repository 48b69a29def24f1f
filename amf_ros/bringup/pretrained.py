"""The embedded simulation's pre-trained policy: made by `amf pretrain` on first use, then cached.

Why cached: pre-training on scripted demonstrations takes a while; the cache key hashes every argument and the
source of the code that makes the checkpoint, so a changed recipe makes a new checkpoint instead of silently
reusing an old one. The command that reproduces a
cached checkpoint is written inside it (``pretrain.json``, key ``command``).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import Sequence

log = logging.getLogger("amf.run")

PRETRAIN_TARGET = "amf_ros.bench.pretrain:main"


def pretrain_args(seed: int, head: str = "diffusion") -> list[str]:
    """Arguments of `amf pretrain` for the embedded simulation (mismatched allocation, its defaults otherwise)."""
    return ["--allocation", "mismatched", "--seed", str(seed), "--head", head]


def recipe_key(args: Sequence[str]) -> str:
    """Hash of the pretrain arguments and of the code that makes the checkpoint (pretraining, policies, suite)."""
    root = Path(__file__).resolve().parents[1]
    sources = sorted([root / "bench" / "pretrain.py", *(root / "policies").glob("*.py"),
                      *(root / "envs").glob("metaworld*.py"), root.parent / "config" / "tasks" / "metaworld.yaml"])
    h = hashlib.sha256(json.dumps(list(args)).encode())
    for path in sources:
        if path.is_file():
            h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:10]


def ensure_pretrained(cache: Path, seed: int = 0, extra: Sequence[str] = (), head: str = "diffusion") -> Path:
    """Path of the cached pre-trained checkpoint for these arguments; runs `amf pretrain` if it is missing.

    `amf pretrain` writes its output directory atomically, so an interrupted first run leaves no cache entry.
    """
    from amf_ros.cli import _load

    args = [*pretrain_args(seed, head), *extra]
    key = recipe_key(args)
    final = cache / f"pretrained_{key}"
    if (final / "pretrain.json").is_file():
        log.info("using cached pre-trained checkpoint %s", final)
        return final
    cache.mkdir(parents=True, exist_ok=True)
    command = "amf pretrain " + " ".join([*args, "--out", str(final)])
    log.info("pre-training (first run only): %s", command)
    code = _load(PRETRAIN_TARGET)([*args, "--out", str(final)])
    if code:
        raise RuntimeError(f"`{command}` failed with exit code {code}")
    return final
