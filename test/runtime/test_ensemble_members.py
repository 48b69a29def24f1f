"""Ensemble members end to end without ROS (issue 15: SAVE's disagreement rules vfd, action_l2, gu over the nodes):
policy_server's runtime with ``ensemble_members = 2`` fine-tunes a second head every round in its worker process,
each from its own previous-round weights, and writes it inside the round (``round_NNNN/members/member_1``);
the acting head is the one ``ensemble_members = 1`` writes; task_selector loads the members with the checkpoint
and scores with them, and refuses a checkpoint without members saying which parameter to set.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("metaworld")

from synthetic_store import write_synthetic_episodes  # noqa: E402

from amf_ros.bringup.params.task_selector import TaskSelectorParams  # noqa: E402
from amf_ros.policies.checkpoint import load_checkpoint  # noqa: E402
from amf_ros.policies.checkpoint_dirs import member_checkpoints, member_dir, round_checkpoints  # noqa: E402
from amf_ros.policies.fine_tuning import FineTuneSettings  # noqa: E402
from amf_ros.policies.loading import load_native  # noqa: E402
from amf_ros.runtime.policy_server import PolicyRuntime  # noqa: E402
from amf_ros.runtime.task_selector import TaskSelectorRuntime  # noqa: E402

TASKS = ("reach", "push")


@pytest.fixture(scope="module")
def rounds(tmp_path_factory):
    """Two fine-tune rounds with ensemble_members = 2 and one with 1, from one tiny diffusion checkpoint (one worker
    process for all three)."""
    from amf_ros.bench.tiny_checkpoint import tiny_checkpoint

    root = tmp_path_factory.mktemp("ensemble")
    pre = tiny_checkpoint(root / "pretrained", TASKS, head="diffusion")
    write_synthetic_episodes(root / "dataset", TASKS)
    kw = dict(settings=FineTuneSettings(steps=8, batch_size=16, alpha_steps=2), torch_threads=1)
    rt = PolicyRuntime(load_native(pre), pre, root / "ckpts", root / "dataset", ensemble_members=2, **kw)
    jobs, run = [], rt.worker.run
    rt.worker.run = lambda job, **k: (jobs.append(job), run(job, **k))[1]
    try:
        feedback: list[tuple[int, int, float]] = []
        first = rt.fine_tune(feedback=lambda s, n, loss: feedback.append((s, n, loss)))
        second = rt.fine_tune()
        single = PolicyRuntime(load_native(pre), pre, root / "single", root / "dataset", ensemble_members=1,
                               worker=rt.worker, **kw).fine_tune()
    finally:
        rt.close()
    return dict(root=root, pre=pre, first=first, second=second, single=single, jobs=jobs, feedback=feedback)


def _tensors(path: Path) -> dict[str, torch.Tensor]:
    return load_checkpoint(path)[0]


def test_each_round_writes_its_members_inside_it_and_they_continue_from_their_own_weights(rounds):
    first, second, jobs = rounds["first"], rounds["second"], rounds["jobs"]
    assert round_checkpoints(rounds["root"] / "ckpts") == [first.checkpoint, second.checkpoint]  # members unlisted
    assert first.members == [member_dir(first.checkpoint, 1)] == member_checkpoints(first.checkpoint)
    assert second.members == [member_dir(second.checkpoint, 1)]
    assert jobs[0].members == (str(rounds["pre"]),)  # round 1: from the acting checkpoint
    assert jobs[1].members == (str(member_dir(first.checkpoint, 1)),)  # round 2: from its own round-1 weights
    # feedback counts on through the member's steps: total 2 x 8 (the trainer's callback numbers steps from 0)
    assert [(s, n) for s, n, _ in rounds["feedback"]] == [(k, 16) for k in range(16)]
    acting, member = _tensors(first.checkpoint), _tensors(first.members[0])
    assert acting.keys() == member.keys()
    differ = [k for k in acting if not torch.equal(acting[k], member[k])]
    # another seed, the same frozen rest; members fit no adaptive prior (the disagreement rules read the heads)
    assert differ and all(k.startswith("head.") or k == "alpha.logits" for k in differ), differ


def test_the_acting_head_is_the_one_a_single_head_round_writes(rounds):
    """ensemble_members = 1 writes the round as before (no members/), and its weights equal the acting head of the
    ensemble round: the members change nothing about the policy that acts."""
    single = rounds["single"]
    assert single.members == [] and not (single.checkpoint / "members").exists()
    a, b = _tensors(single.checkpoint), _tensors(rounds["first"].checkpoint)
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert single.final_loss == rounds["first"].final_loss


def _params(rounds, ckpts: str, selector: str) -> TaskSelectorParams:
    return TaskSelectorParams(selector=selector, tasks=TASKS, tasks_file="", checkpoint_dir=str(rounds["root"] / ckpts),
                              dataset_dir=str(rounds["root"] / "dataset"))


@pytest.mark.parametrize("selector", ["vfd", "action_l2", "gu"])
def test_task_selector_scores_with_the_members_of_the_loaded_checkpoint(rounds, selector):
    rt = TaskSelectorRuntime(_params(rounds, "ckpts", selector))
    assert rt.checkpoint == str(rounds["second"].checkpoint.resolve())
    d = rt.next_task(batch_size=2)
    assert not d.warm_start and len(d.selected_tasks) == 2 and set(d.selected_tasks) <= set(TASKS)  # gu: a draw
    assert np.all(np.isfinite(d.scores))
    assert len({round(s, 12) for s in d.scores}) == 2  # the two tasks' disagreements differ


def test_a_checkpoint_without_members_is_refused_naming_the_parameter_and_a_reload_brings_them(rounds):
    rt = TaskSelectorRuntime(_params(rounds, "single", "vfd"))
    with pytest.raises(ValueError, match="has no ensemble members .* set policy_server's parameter ensemble_members"):
        rt.next_task()
    reloaded, note = rt.on_checkpoint(str(rounds["first"].checkpoint.resolve()))
    assert reloaded and "1 ensemble member(s)" in note
    assert np.all(np.isfinite(rt.next_task().scores))
    plain = TaskSelectorRuntime(_params(rounds, "ckpts", "dropout"))  # other rules never load members
    assert plain.selection._state.members == () and np.all(np.isfinite(plain.next_task().scores))
