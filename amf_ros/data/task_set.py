"""The task-set YAML (config/tasks/*.yaml): the one reader of every task file, for every suite and node.

Why one home: the Metaworld, embedded-WidowX and SIMPLER suites, the nodes (instructions for the recorder, the
console, the task selector) and `amf run` (episode cut-offs) all read the same files. The format::

    tasks:
      - key: carrot_on_plate             # task key used everywhere else (selectors, episodes, ROS services)
        instruction: "put carrot on plate"
        max_steps: 60                    # optional: episode cut-off in steps
        env_name: widowx_carrot_on_plate # any other field belongs to the suite (env_name, source, target, ...)

A row is read into a :class:`TaskSpec` (the fields every reader knows, the suite's own ones in ``fields``); a suite
turns it into its own validated spec type with :meth:`TaskSet.typed`.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class TaskSpec:
    """One row of a task file."""

    key: str
    """Task key, e.g. ``"carrot_on_plate"``."""
    instruction: str
    """Natural-language instruction given to the policy."""
    max_steps: int | None = None
    """Episode cut-off in steps; None when the row gives none (the suite's spec type has its default)."""
    fields: Mapping[str, Any] = field(default_factory=dict, hash=False)
    """The row's other fields, which belong to the suite (``env_name``, ``source``, ``target``, ...)."""

    def typed(self, spec_type: type[T]) -> T:
        """This row as ``spec_type(key=..., instruction=..., [max_steps=...], **fields)`` (the suite validates it)."""
        steps = {} if self.max_steps is None else {"max_steps": self.max_steps}
        return spec_type(key=self.key, instruction=self.instruction, **steps, **self.fields)


@dataclass(frozen=True)
class TaskSet:
    """The rows of one task file, in file order (or in the order of the keys asked for)."""

    path: Path
    specs: tuple[TaskSpec, ...]

    def __iter__(self) -> Iterator[TaskSpec]:
        return iter(self.specs)

    def __len__(self) -> int:
        return len(self.specs)

    @property
    def keys(self) -> list[str]:
        """Task keys in order."""
        return [s.key for s in self.specs]

    @property
    def instructions(self) -> dict[str, str]:
        """Ordered ``{key: instruction}``."""
        return {s.key: s.instruction for s in self.specs}

    @property
    def max_steps(self) -> dict[str, int]:
        """``{key: max_steps}`` of the rows that give one."""
        return {s.key: s.max_steps for s in self.specs if s.max_steps is not None}

    def typed(self, spec_type: type[T]) -> list[T]:
        """Every row as the suite's own spec type (see :meth:`TaskSpec.typed`)."""
        return [s.typed(spec_type) for s in self.specs]


def load_task_set(path: str | os.PathLike, keys: Sequence[str] | None = None, what: str = "") -> TaskSet:
    """Read a task file (looked up as :func:`amf_ros.paths.resolve_config` does: as given, then in the package).

    Args:
        path: the YAML file, e.g. ``"config/tasks/metaworld.yaml"``.
        keys: keep only these task keys, in this order (None = every row, in file order).
        what: the suite's name for the error on unknown keys (e.g. ``"Metaworld"``).
    Raises:
        ValueError: no such file, no non-empty list under ``tasks``, a row without ``key`` and ``instruction``, a
            ``max_steps`` that is not an integer, a repeated key, or an unknown key in ``keys``.
    """
    import yaml

    from amf_ros.paths import resolve_config

    p = resolve_config(path)
    with open(p, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    entries = doc.get("tasks") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{p}: expected a non-empty list under 'tasks', got {type(entries).__name__}")
    specs = [_row(p, i, e) for i, e in enumerate(entries)]
    by_key = {s.key: s for s in specs}
    if len(by_key) != len(specs):
        raise ValueError(f"{p}: duplicate task keys in {[s.key for s in specs]}")
    if keys is not None:
        unknown = [k for k in keys if k not in by_key]
        if unknown:
            name = f"{what} " if what else ""
            raise ValueError(f"unknown {name}task keys {unknown}; known: {sorted(by_key)}")
        specs = [by_key[k] for k in keys]
    return TaskSet(p, tuple(specs))


def _row(path: Path, i: int, entry: Any) -> TaskSpec:
    if not isinstance(entry, dict) or not entry.get("key") or not entry.get("instruction"):
        raise ValueError(f"{path}: tasks[{i}] needs 'key' and 'instruction', got {entry!r}")
    rest = {str(k): v for k, v in entry.items() if k not in ("key", "instruction", "max_steps")}
    steps = entry.get("max_steps")
    if steps is not None and (isinstance(steps, bool) or not isinstance(steps, int)):
        raise ValueError(f"{path}: tasks[{i}] max_steps must be an integer, got {steps!r}")
    return TaskSpec(str(entry["key"]), str(entry["instruction"]), steps, MappingProxyType(rest))
