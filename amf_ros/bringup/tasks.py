"""Task sets for the nodes: ``{task key: instruction}`` from a task YAML (config/tasks/*.yaml) or a policy."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence


def read_instructions(path: str | Path) -> dict[str, str]:
    """Ordered ``{key: instruction}`` from a task file ``{tasks: [{key, instruction, ...}, ...]}``."""
    import yaml

    from amf_ros.bringup.graph import resolve_config

    p = resolve_config(path)
    with open(p, encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    entries = doc.get("tasks") if isinstance(doc, dict) else None
    if not isinstance(entries, list) or not entries:
        raise ValueError(f"{p}: expected a non-empty list under 'tasks'")
    out: dict[str, str] = {}
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not e.get("key") or not e.get("instruction"):
            raise ValueError(f"{p}: tasks[{i}] needs 'key' and 'instruction', got {e!r}")
        out[str(e["key"])] = str(e["instruction"])
    return out


def read_max_steps(path: str | Path) -> dict[str, int]:
    """``{key: max_steps}`` of the entries of a task file that give one."""
    import yaml

    from amf_ros.bringup.graph import resolve_config

    with open(resolve_config(path), encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    return {str(e["key"]): int(e["max_steps"]) for e in doc.get("tasks", []) if isinstance(e, dict)
            and "key" in e and "max_steps" in e}


def task_set(tasks_file: str, policy: Any = None, keys: Sequence[str] = ()) -> dict[str, str]:
    """The configured task set: ``tasks_file`` if given, else the policy's own tasks; restricted to ``keys``."""
    if tasks_file:
        table = read_instructions(tasks_file)
    elif policy is not None and getattr(policy, "instructions", None):
        table = dict(policy.instructions)
    elif policy is not None and getattr(policy, "tasks", None):
        table = {t: t for t in policy.tasks}
    else:
        raise ValueError("no task set: set the 'tasks_file' parameter or load a checkpoint")
    if keys:
        unknown = [k for k in keys if k not in table]
        if unknown:
            raise ValueError(f"unknown task(s) {unknown} in 'tasks'; known: {list(table)}")
        table = {k: table[k] for k in keys}
    return table
