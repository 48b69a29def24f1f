"""Benchmark jobs whose results outlive the run: `amf bench ... --resume-dir DIR`.

Why: a camera grid on a small machine is days of CPU (docs/ros-robot.md, "The camera benchmark"): it is run in slices
(``--seeds``/``--first-seed``, ``--methods``) and gets killed. Without this, every slice pre-trains its seeds again
(21-23 min of one core per camera seed) and a killed run loses every finished job. With it, each pre-trained
checkpoint and each finished job's record stay under ``DIR/<suite>_<key>/``, written atomically by the job itself
when it ends, and a rerun (another slice, or the same command after a kill) reuses them.

The key hashes the whole config except what only chooses *which* jobs run (methods, seeds, first seed) and every
source file of the package and the task files: a changed setting or changed code starts a new directory, so a reused
record is always what this run would have computed (the jobs are deterministic in their seeds).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import logging
import shutil
from pathlib import Path
from typing import Any, Callable

from amf_ros.atomic import atomic_write_json
from amf_ros.data.replay import replay_beside

log = logging.getLogger(__name__)

SELECTION_FIELDS = ("methods", "seeds", "first_seed")
"""Config fields that pick jobs without changing any job's result: left out of the key, so slices share it."""


def code_digest() -> str:
    """Hash of every Python source of the package and of its task files (what a job's result depends on besides
    its config)."""
    root = Path(__file__).resolve().parents[1]
    tasks = root.parent / "config" / "tasks"
    h = hashlib.sha256()
    for path in sorted([*root.rglob("*.py"), *tasks.glob("*.yaml")]):
        h.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def resume_key(config: Any) -> str:
    """12 hex digits naming a benchmark config (a dataclass; :data:`SELECTION_FIELDS` left out) and the code."""
    fields = {k: v for k, v in dataclasses.asdict(config).items() if k not in SELECTION_FIELDS}
    h = hashlib.sha256(json.dumps(fields, sort_keys=True, default=str).encode())
    h.update(code_digest().encode())
    return h.hexdigest()[:12]


def checkpoint_dir(root: str | Path, allocation: str, seed: int) -> Path:
    """Where a benchmark run keeps the pre-trained checkpoint of (allocation, seed) under ``root`` (its temporary
    directory, or a :class:`JobRecords` directory)."""
    return Path(root) / f"pretrained_{allocation}_{seed}"


def recorded(fn: Callable[..., dict[str, Any]], record: str, *args: Any) -> dict[str, Any]:
    """``fn(*args)``, its result written atomically to ``record`` (JSON) before it is returned: run as the job
    itself (in the worker), so a job that finished is kept even if the run is killed before the others end."""
    result = fn(*args)
    atomic_write_json(Path(record), result)
    return result


class JobRecords:
    """The kept results of one benchmark config under ``root/<suite>_<key>``.

    Pre-training records sit beside their checkpoint directories; a pre-training job without its record (never run,
    or killed) is run again from an empty checkpoint directory, and the method records of that seed are dropped with
    it (they came from the checkpoint being replaced).
    """

    def __init__(self, root: str | Path, config: Any) -> None:
        self.dir = Path(root) / f"{config.suite}_{resume_key(config)}"
        self.dir.mkdir(parents=True, exist_ok=True)

    def checkpoint(self, allocation: str, seed: int) -> Path:
        """Where the pre-trained checkpoint of (allocation, seed) lives."""
        return checkpoint_dir(self.dir, allocation, seed)

    def pretrain_record(self, allocation: str, seed: int) -> Path:
        """The record of (allocation, seed)'s pre-training job (written after its checkpoint)."""
        return self.checkpoint(allocation, seed).with_suffix(".json")

    def method_record(self, allocation: str, seed: int, method: str) -> Path:
        """The record of one method's rounds on (allocation, seed)."""
        return self.dir / f"run_{allocation}_{seed}_{method}.json"

    def load(self, path: Path) -> dict[str, Any] | None:
        """The record at ``path``, or None when it is missing or unreadable (then its job runs again)."""
        if not path.is_file():
            return None
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable benchmark record %s (%s); its job runs again", path, exc)
            return None
        return record if isinstance(record, dict) else None

    def load_pretrain(self, allocation: str, seed: int) -> dict[str, Any] | None:
        """The kept pre-training record of (allocation, seed) when its checkpoint is there too; otherwise None, and
        the seed's partial checkpoint and method records are removed so that everything of it runs again."""
        record = self.load(self.pretrain_record(allocation, seed))
        ckpt = self.checkpoint(allocation, seed)
        if record is not None and ckpt.is_dir():
            return record
        shutil.rmtree(ckpt, ignore_errors=True)
        shutil.rmtree(replay_beside(ckpt), ignore_errors=True)
        for stale in self.dir.glob(f"run_{allocation}_{seed}_*.json"):
            stale.unlink()
        return None
