"""task_selector's ``progress`` selector without ROS: the evaluation history from policy_server's outcomes and
checkpoint announcements (runtime/task_selector.py EvaluationHistory), and decisions made from it."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from amf_ros.bringup.params.task_selector import TaskSelectorParams
from amf_ros.runtime.task_selector import EvaluationHistory, TaskSelectorRuntime

TASKS = ["faucet-open", "drawer-close", "push", "drawer-open"]


def _write_store(root: Path, tasks: list[str]) -> None:
    """One short synthetic episode per entry of ``tasks``."""
    from amf_ros.data.store import EpisodeStore

    store = EpisodeStore(root)
    rng = np.random.default_rng(0)
    for task in tasks:
        t0 = time.time_ns()
        store.write_episode(task, f"do {task}", [
            {"observation": {"state": rng.normal(size=39).astype(np.float32)},
             "action": np.zeros(7, np.float32), "stamp_ns": t0 + k * 100_000_000} for k in range(5)],
            robot="synthetic", control_rate_hz=10.0)


def _params(tmp_path: Path, **kw) -> TaskSelectorParams:
    from amf_ros.envs.metaworld_suite import tasks_file

    values = dict(tasks=tuple(TASKS), tasks_file=str(tasks_file()), checkpoint_dir=str(tmp_path / "ckpts"),
                  dataset_dir=str(tmp_path / "data"), selector="progress")
    return TaskSelectorParams(**{**values, **kw})


def test_outcomes_are_grouped_by_the_checkpoint_acting_at_their_stamp():
    h = EvaluationHistory()
    h.on_outcome("a", True, 25.0)  # arrives before its checkpoint's announcement: grouped by stamp, not arrival
    assert h.on_checkpoint(1, 20.0, {"a": 1, "b": 1})
    assert h.on_checkpoint(0, 10.0, {"a": 0, "b": 0})
    assert not h.on_checkpoint(1, 30.0, {"a": 5})  # the latched topic repeats a round: ignored
    for task, ok, stamp in [("a", False, 5.0), ("a", False, 12.0), ("a", True, 13.0), ("b", False, 14.0),
                            ("a", True, 26.0), ("b", True, 27.0)]:
        h.on_outcome(task, ok, stamp)
    evs = [(e.task, e.demos, e.success, e.episodes) for e in h.evaluations()]
    assert evs == [("a", 0, 0.5, 2), ("b", 0, 0.0, 1), ("a", 1, 1.0, 2), ("b", 1, 1.0, 1)]
    assert h.dropped == 1  # the outcome before any announcement (its demonstration counts are unknown)
    assert "7 evaluation episode(s) over 2 checkpoint(s)" in h.summary()


def test_progress_is_served_without_a_policy_from_the_history(tmp_path):
    rt = TaskSelectorRuntime(_params(tmp_path))
    assert rt.checkpoint == "" and not any("no policy yet" in n for n in rt.notes)  # progress needs none
    warm = rt.next_task(batch_size=2)
    assert warm.warm_start and len(set(warm.selected_tasks)) == 2
    t = 100.0
    rt.on_announcement(0, t)  # the pre-trained policy, evaluated: nothing solved
    for task in TASKS:
        for _ in range(4):
            t += 1.0
            rt.on_outcome(task, False, t)
    _write_store(tmp_path / "data", TASKS)  # the warm start recorded and fine-tuned on
    rt.on_announcement(1, t + 10.0)
    t += 10.0
    for task in TASKS:  # push learns fast, the others not at all
        for k in range(4):
            t += 1.0
            rt.on_outcome(task, task == "push" and k < 3, t)
    d = rt.next_task(batch_size=2)
    assert not d.warm_start and d.selected_tasks[0] == "push", d
    assert min(d.scores) == d.scores[TASKS.index("push")] and "history: 32 evaluation episode(s)" in d.message
    assert d.demo_counts == [1, 1, 1, 1]


def test_progress_without_outcomes_draws_among_equal_priors(tmp_path):
    _write_store(tmp_path / "data", TASKS)
    firsts = {TaskSelectorRuntime(_params(tmp_path, seed=s)).next_task().task for s in range(8)}
    assert len(firsts) > 1  # every task scores the prior's gain: ties at random, not the first task


def test_progress_parameters_reach_the_estimator(tmp_path):
    rt = TaskSelectorRuntime(_params(tmp_path, progress_ucb=0.0, progress_obs_var_floor=0.01))
    assert rt.selection.progress.ucb == 0.0 and rt.selection.progress.obs_var_floor == 0.01
    with pytest.raises(ValueError, match="slope_prior_sd"):
        TaskSelectorRuntime(_params(tmp_path, progress_slope_prior_sd=0.0))


def test_the_history_survives_a_restart_and_a_bad_file_is_replaced(tmp_path):
    from amf_ros.runtime.task_selector import PROGRESS_HISTORY

    rt = TaskSelectorRuntime(_params(tmp_path))
    rt.on_announcement(0, 10.0)
    rt.on_outcome("push", True, 11.0)
    rt.on_outcome("reach", False, 12.0)  # not a candidate of this task set: kept, scored by nobody
    again = TaskSelectorRuntime(_params(tmp_path))
    evs = [(e.task, e.demos, e.success, e.episodes) for e in again.selection.history.evaluations()]
    assert evs == [("push", 0, 1.0, 1), ("reach", 0, 0.0, 1)]
    assert any("2 episode(s) over 1 checkpoint(s) read from" in n for n in again.notes), again.notes
    assert not again.on_announcement(0, 50.0)  # the round was read back: a re-announcement is not a new group
    (tmp_path / "ckpts" / PROGRESS_HISTORY).write_text("{not json")
    fresh = TaskSelectorRuntime(_params(tmp_path))
    assert fresh.selection.history.evaluations() == [] and any("1 unreadable line" in n for n in fresh.notes)
    fresh.on_announcement(3, 60.0)
    assert TaskSelectorRuntime(_params(tmp_path)).selection.history.summary().endswith("over 1 checkpoint(s)")


def test_the_history_is_a_journal_one_line_per_event_a_torn_last_line_loses_only_itself(tmp_path):
    from amf_ros.runtime.task_selector import EvaluationHistory

    path = tmp_path / "h.jsonl"
    h = EvaluationHistory(path)
    h.on_checkpoint(0, 10.0, {"push": 2})
    for i in range(5):
        h.on_outcome("push", i % 2 == 0, 11.0 + i)
    lines = path.read_text().splitlines()
    assert len(lines) == 6  # appended, not rewritten: one line per event
    path.write_text("\n".join(lines) + '\n{"outcome": [20.0, "pu')  # a crash mid-append
    again = EvaluationHistory(path)
    assert [(e.task, e.demos, e.success, e.episodes) for e in again.evaluations()] == [("push", 2, 0.6, 5)]
    assert any("skipped 1 unreadable line" in n for n in again.notes), again.notes
    assert len(path.read_text().splitlines()) == 6  # compacted at start: the torn line is gone


def test_the_journal_is_compacted_to_the_newest_outcomes(tmp_path):
    from amf_ros.runtime.task_selector import EvaluationHistory

    path = tmp_path / "h.jsonl"
    h = EvaluationHistory(path, max_outcomes=4)
    h.on_checkpoint(0, 0.0, {"push": 1})
    for i in range(30):
        h.on_outcome("push", i >= 26, 1.0 + i)
        assert len(path.read_text().splitlines()) <= 2 * 4 + 2  # bounded: 2 x max_outcomes + the checkpoints
    again = EvaluationHistory(path, max_outcomes=4)
    assert [(e.success, e.episodes) for e in again.evaluations()] == [(1.0, 4)]  # the newest 4 outcomes


def test_a_history_of_the_former_json_format_is_read(tmp_path):
    import json

    from amf_ros.runtime.task_selector import EvaluationHistory

    (tmp_path / "h.json").write_text(json.dumps({"checkpoints": [[10.0, 0, {"push": 3}]],
                                                 "outcomes": [[11.0, "push", True], [12.0, "push", False]]}))
    h = EvaluationHistory(tmp_path / "h.jsonl")
    assert [(e.task, e.demos, e.success, e.episodes) for e in h.evaluations()] == [("push", 3, 0.5, 2)]
    assert len((tmp_path / "h.jsonl").read_text().splitlines()) == 3
