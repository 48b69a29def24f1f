"""The embedded simulation's pre-trained policy (Metaworld or WidowX): made by `amf pretrain` on first use, then
cached.

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


def pretrain_args(seed: int, head: str = "diffusion", suite: str = "metaworld") -> list[str]:
    """Arguments of `amf pretrain` for the embedded simulation (mismatched allocation, the suite's defaults
    otherwise); Metaworld's arguments carry no ``--suite`` (its default), so its cache entries keep their keys."""
    args = ["--allocation", "mismatched", "--seed", str(seed), "--head", head]
    return args if suite == "metaworld" else [*args, "--suite", suite]


def recipe_key(args: Sequence[str], suite: str = "metaworld") -> str:
    """Hash of the pretrain arguments and of the code that makes the checkpoint: pre-training, policies, the suite
    registry and the suite's own sources (:attr:`amf_ros.envs.suites.Suite.sources`: for "widowx" the widowx_sim
    package, the driver and kinematics it steps through and config/tasks/widowx_sim.yaml)."""
    from amf_ros.envs.suites import get_suite

    root = Path(__file__).resolve().parents[1]
    paths = [root / "training" / "pretrain.py", root / "envs" / "suites.py", *(root / "policies").glob("*.py")]
    for rel in get_suite(suite).sources:
        path = root.parent / rel
        paths.extend(path.glob("*.py") if path.is_dir() else [path])
    h = hashlib.sha256(json.dumps(list(args)).encode())
    for path in sorted(paths):
        if path.is_file():
            h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:10]


def ensure_pretrained(cache: Path, seed: int = 0, extra: Sequence[str] = (), head: str = "diffusion",
                      suite: str = "metaworld") -> Path:
    """Path of the cached pre-trained checkpoint of ``suite`` ("metaworld" or "widowx") for these arguments; runs
    `amf pretrain` if it is missing.

    `amf pretrain` writes its output directory atomically, so an interrupted first run leaves no cache entry.
    """
    from amf_ros.training.pretrain import main as pretrain_main

    args = [*pretrain_args(seed, head, suite), *extra]
    key = recipe_key(args, suite)
    final = cache / f"pretrained_{key}"
    if (final / "pretrain.json").is_file():
        log.info("using cached pre-trained checkpoint %s", final)
        return final
    cache.mkdir(parents=True, exist_ok=True)
    command = "amf pretrain " + " ".join([*args, "--out", str(final)])
    log.info("pre-training (first run only): %s", command)
    code = pretrain_main([*args, "--out", str(final)])
    if code:
        raise RuntimeError(f"`{command}` failed with exit code {code}")
    return final
