"""Benchmark jobs whose results outlive the run: `amf bench ... --resume-dir DIR`.

Why: a camera grid on a small machine is days of CPU (docs/ros-robot.md, "The camera benchmark"): it is run in slices
(``--seeds``/``--first-seed``, ``--methods``) and gets killed. Without this, every slice pre-trains its seeds again
(21-23 min of one core per camera seed) and a killed run loses every finished job. With it, each pre-trained
checkpoint and each finished job's record stay under ``DIR/<suite>_<key>/``, written atomically by the job itself
when it ends, and a rerun (another slice, or the same command after a kill) reuses them.

The key hashes the whole config except what only chooses *which* jobs run (methods, seeds, first seed) and every
source file of the package and the task files: a changed setting or changed code starts a new directory, so a reused
record is always what this run would have computed (the jobs are deterministic in their seeds). Pre-trained
checkpoints live under a second key that also leaves out the settings only the method jobs read
(:data:`METHOD_FIELDS`: AMF's criterion, the rounds, fine-tuning, replay): runs that compare such settings, say the
paper's batch conditioning against another, pre-train each seed once.
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


METHOD_FIELDS = (*SELECTION_FIELDS, "allocations", "rounds", "demos_per_round", "replay_fraction",
                 "success_threshold", "finetune_steps", "alpha_steps", "alpha_lr", "alpha_beta", "criterion_form",
                 "noise_var", "prior_var", "selection_copy", "criterion_targets", "condition_on_data", "hallucinate",
                 "hallucination_weight", "batch_conditioning", "frames_per_demo", "max_points")
"""Config fields no pre-training job reads (bench/metaworld.py ``pretrain_job``: the allocation is in the checkpoint's
name): left out of the pre-training key. A field missing here only costs sharing; one wrongly here would reuse a
checkpoint pre-trained otherwise, so each was checked against ``pretrain_job`` and ``camera_pretrain_job``."""


def code_digest() -> str:
    """Hash of every Python source of the package and of its task files (what a job's result depends on besides
    its config)."""
    root = Path(__file__).resolve().parents[1]
    tasks = root.parent / "config" / "tasks"
    h = hashlib.sha256()
    for path in sorted([*root.rglob("*.py"), *tasks.glob("*.yaml")]):
        h.update(str(path.relative_to(root.parent)).encode() + b"\0" + path.read_bytes())
    return h.hexdigest()


def resume_key(config: Any, leave_out: tuple[str, ...] = SELECTION_FIELDS) -> str:
    """12 hex digits naming a benchmark config (a dataclass; the ``leave_out`` fields left out) and the code."""
    fields = {k: v for k, v in dataclasses.asdict(config).items() if k not in leave_out}
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
    """The kept results of one benchmark config: method records under ``root/<suite>_<key>``, pre-trained
    checkpoints under ``root/<suite>_pretrained_<key without METHOD_FIELDS>`` (shared by configs that differ only
    in what the method jobs read).

    Pre-training records sit beside their checkpoint directories; a pre-training job without its record (never run,
    or killed) is run again from an empty checkpoint directory, and this config's method records of that seed are
    dropped with it (they came from the checkpoint being replaced).
    """

    def __init__(self, root: str | Path, config: Any) -> None:
        self.dir = Path(root) / f"{config.suite}_{resume_key(config)}"
        self.pretrained = Path(root) / f"{config.suite}_pretrained_{resume_key(config, METHOD_FIELDS)}"
        for d in (self.dir, self.pretrained):
            d.mkdir(parents=True, exist_ok=True)

    def checkpoint(self, allocation: str, seed: int) -> Path:
        """Where the pre-trained checkpoint of (allocation, seed) lives."""
        return checkpoint_dir(self.pretrained, allocation, seed)

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
