"""Issue 33 item 1 without ROS: the tasks a graph serves are a function of its configuration, and a policy learns a
configured task it does not know from its demonstrations.

task_selector serves its ``tasks_file`` whichever checkpoint is loaded (none, the pre-trained one, a later round), and
adds the tasks its policy copy lacks to that copy, so AMF scores them after the warm start instead of answering
"unknown task(s)"; policy_server's fine-tune learns the tasks of the recorded episodes the checkpoint lacks (with the
episodes' instruction) instead of refusing the dataset, and the new round knows them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("metaworld")

from synthetic_store import write_synthetic_episodes  # noqa: E402

from amf_ros.bench.tiny_checkpoint import tiny_checkpoint  # noqa: E402
from amf_ros.bringup.params.task_selector import TaskSelectorParams  # noqa: E402
from amf_ros.data.task_set import load_task_set  # noqa: E402
from amf_ros.data.tasks import checkpoint_tasks  # noqa: E402
from amf_ros.envs.metaworld_suite import tasks_file  # noqa: E402
from amf_ros.policies.fine_tuning import FineTuneSettings  # noqa: E402
from amf_ros.policies.loading import load_native  # noqa: E402
from amf_ros.runtime.policy_server import PolicyRuntime  # noqa: E402
from amf_ros.runtime.task_selector import TaskSelectorRuntime  # noqa: E402

KNOWN = ("faucet-open", "drawer-close")  # what the checkpoint was built for; the task file has six


def _params(root: Path) -> TaskSelectorParams:
    return TaskSelectorParams(tasks_file=str(tasks_file()), checkpoint_dir=str(root / "ckpts"),
                              dataset_dir=str(root / "data"), selector="amf", selection_policy="latest")


def test_task_selector_serves_its_tasks_file_whichever_checkpoint_is_loaded(tmp_path) -> None:
    configured = list(load_task_set(tasks_file()).instructions)
    assert len(configured) == 6 and set(KNOWN) < set(configured)
    before = TaskSelectorRuntime(_params(tmp_path))  # first start: no checkpoint yet
    assert list(before.instructions) == configured
    tiny_checkpoint(tmp_path / "ckpts" / "round_0000", KNOWN)
    after = TaskSelectorRuntime(_params(tmp_path))  # a restart once the pre-trained checkpoint exists
    assert after.checkpoint and list(after.instructions) == configured  # not the checkpoint's two
    policy = after.selection.policy
    assert policy is not None and set(configured) <= set(policy.tasks)  # the other four added to its copy
    assert any("new to the policy" in note for note in after.notes), after.notes
    write_synthetic_episodes(tmp_path / "data", configured)  # the warm start is done: AMF scores every task
    decision = after.next_task()
    assert not decision.warm_start and decision.tasks == configured
    assert np.all(np.isfinite(decision.scores)), decision.message
    reloaded, _ = before.on_checkpoint(str(tmp_path / "ckpts" / "round_0000"))  # the announcement, same result
    assert reloaded and list(before.instructions) == configured
    assert np.all(np.isfinite(before.next_task().scores))


def test_fine_tune_learns_the_tasks_of_the_episodes_the_checkpoint_lacks(tmp_path) -> None:
    pre = tiny_checkpoint(tmp_path / "pretrained", KNOWN)
    new = ("reach", "faucet-close")
    write_synthetic_episodes(tmp_path / "data", (*KNOWN, *new))
    rt = PolicyRuntime(load_native(pre), pre, tmp_path / "ckpts", tmp_path / "data", torch_threads=1,
                       settings=FineTuneSettings(steps=4, batch_size=16, alpha_steps=2))
    try:
        result = rt.fine_tune(tasks=["reach"])  # a goal may name a task the policy learns from its episodes
        assert set(result.tasks) >= {*KNOWN, "reach"} and "faucet-close" not in result.tasks
        result = rt.fine_tune()  # every episode
    finally:
        rt.close()
    learned = checkpoint_tasks(result.checkpoint)
    assert set(learned) == {*KNOWN, *new} and learned["reach"] == "do reach"  # the episodes' instruction
    assert set(rt.policy.tasks) == {*KNOWN, *new} and result.round == 2
    chunk = rt.policy.act({"state": np.zeros(39, np.float32)}, "faucet-close")
    assert chunk.shape == (rt.policy.action_horizon, 4) and np.all(np.isfinite(chunk))
    with pytest.raises(ValueError, match="unknown task"):  # neither known nor recorded: still refused
        rt.fine_tune(tasks=["push"])
