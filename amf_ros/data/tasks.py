"""Task sets for the nodes: ``{task key: instruction}`` from a task YAML (read by :mod:`amf_ros.data.task_set`) or a
policy, and the rules a task key must follow."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from amf_ros.data.schema import MAX_TASK_KEY_CHARS
from amf_ros.data.task_set import load_task_set
from amf_ros.policies.base import Policy


def checkpoint_tasks(path: str | Path) -> dict[str, str]:
    """``{key: instruction}`` a policy checkpoint was built for (read from its metadata, no model loaded)."""
    from amf_ros.policies.checkpoint import read_meta

    meta = read_meta(path).get("meta", {})
    keys, texts = list(meta.get("tasks", [])), list(meta.get("instructions", []))
    if not keys or len(keys) != len(texts):
        raise ValueError(f"{path}: checkpoint metadata lists no tasks/instructions")
    return dict(zip(keys, texts, strict=True))


def task_set(tasks_file: str, policy: Policy | None = None, keys: Sequence[str] = ()) -> dict[str, str]:
    """The candidate task set ``{key: instruction}``: a function of the configuration, the same on every start.

    ``keys`` if given; else every task of ``tasks_file``; else (no task file configured) the tasks the policy
    knows. Instructions come from ``tasks_file`` when it lists the task, else from the policy. A configured task the
    policy does not know is still a candidate: the node adds it to its policy copy
    (:func:`amf_ros.policies.loading.learn_tasks`) and policy_server learns it from its demonstrations (issue 33).
    """
    table = load_task_set(tasks_file).instructions if tasks_file else {}
    known = dict(policy.instructions) if policy is not None else {}
    if keys:
        chosen = list(keys)
    elif table:
        chosen = list(table)
    elif known:
        chosen = list(known)
    else:
        raise ValueError("no task set: set the 'tasks_file' or 'tasks' parameter, or load a checkpoint")
    out: dict[str, str] = {}
    for k in chosen:
        if k in table:
            out[k] = table[k]
        elif k in known:
            out[k] = known[k]
        else:
            raise ValueError(f"unknown task {k!r} in 'tasks'; known: {sorted(set(table) | set(known))}")
    return out


def episode_instructions(dataset_dir: str | Path) -> dict[str, str]:
    """``{task: instruction}`` of the tasks with a committed episode in the store (the oldest episode's
    instruction); {} without a store. What a fine-tune teaches a policy for a task its checkpoint lacks."""
    from amf_ros.data.store import EpisodeStore

    if not Path(dataset_dir).is_dir():
        return {}
    store = EpisodeStore(dataset_dir, create=False)
    out: dict[str, str] = {}
    for eid in store.episode_ids():
        meta = store.meta(eid)
        out.setdefault(meta.task, meta.instruction)
    return out


def task_key_problem(key: str) -> str:
    """Why ``key`` cannot be a task key, or "" if it can: non-empty, printable (no NUL, no control characters), at
    most MAX_TASK_KEY_CHARS characters. The message quotes at most 40 characters of the key (bounded logs)."""
    if not key:
        return "the task key is empty"
    shown = repr(key[:40]) + ("..." if len(key) > 40 else "")
    if len(key) > MAX_TASK_KEY_CHARS:
        return f"task key of {len(key)} characters (at most {MAX_TASK_KEY_CHARS}): {shown}"
    if not key.isprintable():
        return f"task key with non-printable characters: {shown}"
    return ""


def check_task_keys(keys: Sequence[str], known: Sequence[str] = ()) -> None:
    """Raise ValueError naming the first bad, repeated or (when ``known`` is given) unknown key."""
    for key in keys:
        problem = task_key_problem(key)
        if problem:
            raise ValueError(problem)
    repeated = sorted(k for k, n in Counter(keys).items() if n > 1)
    if repeated:
        raise ValueError(f"task(s) {_some(repeated)} given more than once")
    unknown = [k for k in keys if known and k not in known]
    if unknown:
        raise ValueError(f"unknown task(s) {_some(unknown)}; known tasks: {list(known)}")


def _some(keys: Sequence[str], shown: int = 10) -> str:
    """The first ``shown`` keys as a list, and how many there are in all when there are more (a request may name
    any number of keys; the answer stays bounded)."""
    return str(list(keys[:shown])) + (f" (and {len(keys) - shown} more)" if len(keys) > shown else "")
