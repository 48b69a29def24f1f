"""The one task-set reader (amf_ros/data/task_set.py) on every task file of config/tasks and on bad files."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest

from amf_ros.data.task_set import load_task_set

TASK_FILES = sorted(Path(__file__).resolve().parents[2].joinpath("config", "tasks").glob("*.yaml"))


@pytest.mark.parametrize("path", TASK_FILES, ids=lambda p: p.name)
def test_every_task_file_reads_with_keys_instructions_and_cut_offs(path: Path) -> None:
    tasks = load_task_set(path)
    assert len(tasks) >= 4 and len(set(tasks.keys)) == len(tasks)
    assert all(tasks.instructions.values()) and set(tasks.max_steps) == set(tasks.keys)
    # suite-specific fields stay with the row: Metaworld/SIMPLER name an environment, the WidowX a source and target
    # (the WidowX family also its skill and its split: pre-training or new task)
    assert all(set(s.fields) in ({"env_name"}, {"source", "target"}, {"source", "target", "skill", "split"})
               for s in tasks)
    first, last = tasks.keys[0], tasks.keys[-1]
    assert load_task_set(f"config/tasks/{path.name}", [last, first]).keys == [last, first]


def test_rows_become_the_suites_own_spec_type() -> None:
    @dataclass(frozen=True)
    class Spec:
        key: str
        instruction: str
        env_name: str
        max_steps: int = 7

    specs = load_task_set("config/tasks/metaworld.yaml", ["push"]).typed(Spec)
    assert specs == [Spec("push", "push the puck to the goal", "push-v3", 150)]


@pytest.mark.parametrize(("text", "error"), [
    ("tasks: []\n", "non-empty list under 'tasks'"),
    ("other: 1\n", "non-empty list under 'tasks'"),
    ("tasks:\n  - {key: a}\n", r"tasks\[0\] needs 'key' and 'instruction'"),
    ("tasks:\n  - {key: a, instruction: x, max_steps: many}\n", "max_steps must be an integer"),
    ("tasks:\n  - {key: a, instruction: x}\n  - {key: a, instruction: y}\n", "duplicate task keys"),
])
def test_bad_task_files_are_refused_with_the_reason(tmp_path: Path, text: str, error: str) -> None:
    bad = tmp_path / "tasks.yaml"
    bad.write_text(text)
    with pytest.raises(ValueError, match=error):
        load_task_set(bad)


def test_unknown_keys_and_missing_files_are_refused() -> None:
    with pytest.raises(ValueError, match=r"unknown WidowX task keys \['nope'\]; known: \["):
        load_task_set("config/tasks/widowx_sim.yaml", ["carrot_on_plate", "nope"], "WidowX")
    with pytest.raises(ValueError, match="config file not found"):
        load_task_set("config/tasks/no_such_file.yaml")
