"""What the simulated task suites share (Metaworld, SIMPLER, the embedded WidowX): the task-set YAML, the specs by
key, and the current task.

Why one home: sim_bridge talks to every suite through the same protocol (``task_keys``, ``task``,
``instruction``), and an unknown task is refused with the same message whichever suite is hosted.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any


def load_specs(path: Path, spec_cls: type, keys: Sequence[str] | None, what: str) -> list:
    """Rows of a task-set YAML (``{tasks: [{key, ...}, ...]}``) as ``spec_cls(**row)``, unique keys, optionally
    only ``keys`` in that order (unknown keys raise ValueError naming the known ones)."""
    import yaml

    with open(path, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    entries = doc.get("tasks") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{path}: expected a non-empty list under 'tasks', got {type(entries).__name__}")
    specs = [spec_cls(**entry) for entry in entries]
    by_key = {s.key: s for s in specs}
    if len(by_key) != len(specs):
        raise ValueError(f"{path}: duplicate task keys in {[s.key for s in specs]}")
    if keys is None:
        return specs
    unknown = [k for k in keys if k not in by_key]
    if unknown:
        raise ValueError(f"unknown {what} task keys {unknown}; known: {sorted(by_key)}")
    return [by_key[k] for k in keys]


class TaskSet:
    """Task specs by key (configuration order) and the key of the current task (None before the first reset).

    Args:
        specs: objects with ``key`` and ``instruction``.
        what: the suite's name for the error when ``specs`` is empty.
    """

    def __init__(self, specs: Sequence[Any], what: str) -> None:
        specs = list(specs)
        if not specs:
            raise ValueError(f"a {what} suite needs at least one task")
        self.specs: dict[str, Any] = {s.key: s for s in specs}
        self._current: str | None = None

    @property
    def task_keys(self) -> list[str]:
        """Task keys in configuration order."""
        return list(self.specs)

    @property
    def task(self) -> str | None:
        """Key of the current task (None before the first reset)."""
        return self._current

    def instruction(self, task: str) -> str:
        """The natural-language instruction of ``task``."""
        return self._spec(task).instruction

    def _spec(self, task: str | None) -> Any:
        if task not in self.specs:
            raise ValueError(f"unknown task {task!r}; this suite has {self.task_keys}")
        return self.specs[task]
