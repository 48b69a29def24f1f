"""What the simulated task suites share (Metaworld, SIMPLER, the embedded WidowX): the task specs by key and the
current task (the task files themselves are read by :mod:`amf_ros.data.task_set`).

Why one home: sim_bridge talks to every suite through the same protocol (``task_keys``, ``task``,
``instruction``), and an unknown task is refused with the same message whichever suite is hosted.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


class TaskSuite:
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
