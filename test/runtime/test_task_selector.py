"""runtime/task_selector.py without ROS: the node's path (store -> TaskSelection.next_task) scores the same
episodes as the benchmark's path (bench/metaworld.py amf_score_fn), a reload during a request cannot mix two
policies' embeddings, and TaskSelectorRuntime's policy life cycle (initial choice, latest vs frozen, pretrain counts).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from amf_ros.bringup.params.task_selector import TaskSelectorParams  # noqa: E402
from amf_ros.runtime.task_selector import TaskSelection, TaskSelectorRuntime  # noqa: E402
from amf_ros.threads import limit_threads  # noqa: E402

TASKS = ["faucet-open", "drawer-close", "push", "drawer-open"]
ORDER = TASKS + ["push", "faucet-open", "push", "drawer-close"]  # warm start, then 4 more episodes


@pytest.fixture(autouse=True)
def _one_thread():
    limit_threads(1)


def _write_store(root: Path, tasks: list[str], seed: int = 0) -> None:
    """Episodes of 20-40 steps: random 39-D states, in-range native actions recorded as 7-D EefDeltaActions."""
    from amf_ros.data.store import EpisodeStore
    from amf_ros.policies.action_spaces import native_to_eef7

    store = EpisodeStore(root)
    rng = np.random.default_rng(seed)
    for task in tasks:
        steps = int(rng.integers(20, 41))
        states = rng.normal(size=(steps, 39)).astype(np.float32)
        native = rng.uniform(-0.9, 0.9, (steps, 4)).astype(np.float32)
        t0 = time.time_ns()
        store.write_episode(task, f"do {task}", [
            {"observation": {"state": s}, "action": np.asarray(native_to_eef7(a), np.float32),
             "stamp_ns": t0 + k * 100_000_000} for k, (s, a) in enumerate(zip(states, native, strict=True))],
            robot="synthetic", control_rate_hz=10.0)


def _policy(dataset: Path, horizon: int = 4, seed: int = 0):
    """A small state policy (hash task encoder), fitted briefly on the store so its embeddings are not trivial."""
    from amf_ros.data.transitions import load_transitions
    from amf_ros.envs.metaworld_suite import load_tasks
    from amf_ros.training.pretrain import make_policy

    policy = make_policy(load_tasks(keys=TASKS), task_encoder="hash", action_horizon=horizon, seed=seed)
    policy.fit(load_transitions(dataset, action_space="metaworld"), 20, batch_size=64)
    return policy


@pytest.mark.parametrize("frames,targets,condition_on_data", [(8, "warm", True), (16, "all", True),
                                                              (5, "warm", False)])
def test_node_path_and_benchmark_path_score_the_same_episodes(tmp_path, frames, targets, condition_on_data):
    from amf_ros.bench.metaworld import MetaworldBenchConfig, amf_score_fn
    from amf_ros.data.transitions import EpisodeCache
    from amf_ros.envs.metaworld_rollouts import Demo

    _write_store(tmp_path / "data", ORDER)
    policy = _policy(tmp_path / "data")
    # node path: the store, the embedding cache, the selector
    sel = TaskSelection("amf", {t: f"do {t}" for t in TASKS}, tmp_path / "data", frames_per_episode=frames,
                        targets=targets, condition_on_data=condition_on_data)
    sel.set_policy(policy, "ckpt")
    decision = sel.next_task()
    assert not decision.warm_start and decision.tasks == TASKS and decision.demo_counts == [2, 2, 3, 1]
    # benchmark path: the same recorded episodes as the benchmark's demonstrations (labels = recorded actions)
    episodes = EpisodeCache(tmp_path / "data", "metaworld").episodes()
    demos = [Demo(task=str(ep["task"][0]), seed=0, obs=ep["state"], actions=ep["action"],
                  expert_actions=ep["action"], success=True) for _, ep in episodes]
    assert [d.task for d in demos] == ORDER
    cfg = MetaworldBenchConfig(tasks=TASKS, task_encoder="hash", frames_per_demo=frames, criterion_targets=targets,
                               condition_on_data=condition_on_data)
    bench = amf_score_fn(policy, demos, [i < len(TASKS) for i in range(len(demos))], cfg)(TASKS, [])
    # Both run the same float64 criterion on the same float32 embeddings: equal up to float64 rounding (the
    # criterion's sums are ~1e2 terms, so 1e-9 relative is far above rounding and far below any real difference).
    np.testing.assert_allclose(decision.scores, bench, rtol=1e-9, atol=0)
    assert len(set(np.round(bench, 6))) == len(TASKS)  # the scores actually discriminate between tasks
    assert decision.task == TASKS[int(np.argmin(bench))]
    ess = {"warm": [1.0] * 4, "all": [2.0, 2.0, 3.0, 1.0]}[targets]
    assert decision.effective_sample_size == ess


class _FakePolicy:
    """embed = tanh(state @ W): a deterministic per-row embedding of its own; ``on_first_embed`` runs once."""

    def __init__(self, seed: int, on_first_embed=None) -> None:
        self.w = np.random.default_rng(seed).normal(size=(39, 6))
        self.on_first_embed = on_first_embed
        self.calls = 0

    def embed(self, tr):
        self.calls += 1
        if self.calls == 1 and self.on_first_embed is not None:
            self.on_first_embed()
        return np.tanh(np.asarray(tr["state"], np.float64) @ self.w)


def _scores(dataset: Path, policy) -> list[float]:
    sel = TaskSelection("amf", {t: f"do {t}" for t in TASKS}, dataset)
    sel.set_policy(policy, "alone")
    return sel.next_task().scores


def test_a_reload_during_a_request_does_not_mix_policies(tmp_path):
    _write_store(tmp_path / "data", ORDER)
    sel = TaskSelection("amf", {t: f"do {t}" for t in TASKS}, tmp_path / "data")
    new = _FakePolicy(2)
    # the reload lands while the request is embedding with the old policy (as set_policy from the checkpoint
    # callback group would, on another executor thread)
    old = _FakePolicy(1, on_first_embed=lambda: sel.set_policy(new, "new"))
    sel.set_policy(old, "old")
    during = sel.next_task()
    assert sel.checkpoint == "new" and "policy: old" in during.message
    np.testing.assert_array_equal(during.scores, _scores(tmp_path / "data", _FakePolicy(1)))  # old policy only
    after = sel.next_task()  # the new policy's cache must not hold the old policy's embeddings
    assert "policy: new" in after.message and new.calls > 0
    np.testing.assert_array_equal(after.scores, _scores(tmp_path / "data", _FakePolicy(2)))
    assert not np.allclose(after.scores, during.scores)


def _params(tmp_path: Path, **kw) -> TaskSelectorParams:
    from amf_ros.envs.metaworld_suite import tasks_file

    values = dict(tasks=tuple(TASKS), tasks_file=str(tasks_file()), checkpoint_dir=str(tmp_path / "ckpts"),
                  dataset_dir=str(tmp_path / "data"))
    return TaskSelectorParams(**{**values, **kw})


def _save(policy, path: Path, counts: dict[str, int] | None = None) -> str:
    policy.save(path)
    if counts is not None:
        (path / "pretrain.json").write_text(json.dumps({"pretrain_counts": counts}))
    return str(path.resolve())


@pytest.mark.parametrize("selection_policy", ["latest", "frozen"])
def test_runtime_policy_life_cycle(tmp_path, selection_policy):
    _write_store(tmp_path / "data", ORDER)
    policy = _policy(tmp_path / "data", horizon=1)
    first = _save(policy, tmp_path / "ckpts" / "round_0001", {"push": 3})
    newer = _save(policy, tmp_path / "ckpts" / "round_0002", {"push": 5})
    rt = TaskSelectorRuntime(_params(tmp_path, selection_policy=selection_policy, selector="rebalancing"))
    assert rt.checkpoint == newer and rt.selection.pretrain_counts == {"push": 5}  # the newest at start
    assert rt.notes == [] and list(rt.instructions) == TASKS
    assert rt.on_checkpoint(newer) == (False, f"checkpoint {newer} is already loaded")
    reloaded, note = rt.on_checkpoint(first)
    if selection_policy == "latest":
        assert reloaded and rt.checkpoint == first and rt.reloads == 1 and rt.selection.pretrain_counts == {"push": 3}
    else:
        assert not reloaded and "frozen keeps" in note and rt.checkpoint == newer and rt.reloads == 0
    bad = str(tmp_path / "no_such_checkpoint")
    if selection_policy == "latest":
        with pytest.raises(Exception, match="no_such_checkpoint"):
            rt.on_checkpoint(bad)
        assert rt.checkpoint == first and rt.reloads == 1  # a bad checkpoint changes nothing
    else:
        assert rt.on_checkpoint(bad)[0] is False and rt.checkpoint == newer  # frozen never loads
    d = rt.next_task()
    assert not d.warm_start and d.task in TASKS


def test_runtime_without_checkpoint_and_without_pretrain_counts(tmp_path):
    _write_store(tmp_path / "data", TASKS[:2])
    rt = TaskSelectorRuntime(_params(tmp_path))
    assert rt.checkpoint == "" and rt.selection.policy is None and "no policy yet" in rt.notes[0]
    d = rt.next_task()  # warm start needs no policy
    assert d.warm_start and d.task in TASKS[2:]
    _write_store(tmp_path / "data2", TASKS)
    rt2 = TaskSelectorRuntime(_params(tmp_path, dataset_dir=str(tmp_path / "data2")))
    with pytest.raises(ValueError, match="needs a policy"):
        rt2.next_task()
    path = _save(_policy(tmp_path / "data2", horizon=1), tmp_path / "ckpts" / "round_0001", {"push": 1})
    rt3 = TaskSelectorRuntime(_params(tmp_path, dataset_dir=str(tmp_path / "data2"), pretrain_counts=False))
    assert rt3.checkpoint == path and rt3.selection.pretrain_counts is None
    assert rt2.on_checkpoint(path)[0] and np.all(np.isfinite(rt2.next_task().scores))


def test_batch_size_is_bounded_by_the_candidates_and_max_batch_size(tmp_path):
    """A huge batch_size (2**32 - 1 over the wire) is refused at once with the largest allowed value, instead of
    running one selection pass per requested member."""
    tasks = {t: f"do {t}" for t in ("a", "b", "c")}
    sel = TaskSelection("round_robin", tasks, tmp_path / "data", max_batch_size=2)
    for batch, limit in ((2**32 - 1, 2), (3, 2)):
        with pytest.raises(ValueError, match=f"ask for at most {limit}"):
            sel.next_task([], batch)
    with pytest.raises(ValueError, match="ask for at most 1"):
        sel.next_task(["a"], 2)
    d = sel.next_task([], 2)
    assert len(d.selected_tasks) == 2
    assert len(TaskSelection("uniform", tasks, tmp_path / "data").next_task([], 0).selected_tasks) == 1


def test_batch_conditioning_recorded_over_the_node_path(tmp_path):
    """batch_conditioning "recorded" in the node (its exact incremental criterion, kept between requests): a batch
    and another robot's pending task are scored as the uncached criterion scores them (core/amf_nn.py), also after
    a new episode; a pending task with a recording counts as that recording, not as its target states."""
    from amf_ros.core.amf_nn import amf_nn_score_fn, warm_start_validation
    from amf_ros.core.selectors import make_selector
    from amf_ros.data.transitions import EpisodeCache

    _write_store(tmp_path / "data", ORDER)
    policy = _FakePolicy(3)
    sel = TaskSelection("amf", {t: f"do {t}" for t in TASKS}, tmp_path / "data", batch_conditioning="recorded")
    paper = TaskSelection("amf", {t: f"do {t}" for t in TASKS}, tmp_path / "data")
    sel.set_policy(policy, "p")
    paper.set_policy(policy, "p")
    for new_episode in (False, True):
        if new_episode:
            _write_store(tmp_path / "data", ["drawer-open"], seed=5)
        episodes = [ep for _, ep in EpisodeCache(tmp_path / "data", "metaworld").episodes()]
        plain = amf_nn_score_fn(policy, episodes, warm_start_validation([str(e["task"][0]) for e in episodes]),
                                max_points=None, batch_conditioning="recorded")
        counts = {t: sum(str(e["task"][0]) == t for e in episodes) for t in TASKS}
        want = make_selector("amf", tasks=TASKS).select(TASKS, counts, np.random.default_rng(0), batch_size=3,
                                                        score_fn=plain)
        assert not want.warm_start
        assert sel.next_task([], 3).selected_tasks == want.tasks
        got, expected = sel.next_task([], 1, pending=["push"]).scores, plain(TASKS, ["push"])
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-9 * np.abs(expected).max())
        assert not np.allclose(got, paper.next_task([], 1, pending=["push"]).scores, rtol=1e-6)
    with pytest.raises(ValueError, match="batch_conditioning must be"):
        TaskSelection("amf", {"a": "do a"}, tmp_path / "data", batch_conditioning="real")


def test_a_warm_start_batch_larger_than_the_unseen_tasks_is_refused_saying_what_to_ask(tmp_path):
    """AMF scores need a first demonstration of every task: with 2 of 3 tasks unseen, batch 3 cannot be chosen yet;
    the refusal names the unseen tasks and the largest batch that works (which then works)."""
    tasks = {t: f"do {t}" for t in ("a", "b", "c")}
    _write_store(tmp_path / "data", ["a"])
    sel = TaskSelection("amf", tasks, tmp_path / "data")
    with pytest.raises(ValueError, match=re.escape("ask for batch_size <= 2")) as info:
        sel.next_task([], 3)
    assert "['b', 'c']" in str(info.value) and "score_fn" not in str(info.value)
    d = sel.next_task([], 2)
    assert sorted(d.selected_tasks) == ["b", "c"] and d.warm_start


def test_task_keys_are_checked_with_bounded_messages(tmp_path):
    """Empty, non-printable (NUL), over-long, repeated and unknown keys are refused; the message quotes at most 40
    characters of a key, so a 1 MB key cannot flood the log."""
    tasks = {t: f"do {t}" for t in ("a", "b")}
    sel = TaskSelection("round_robin", tasks, tmp_path / "data")
    for cands, text in (([""], "empty"), (["a\0b"], "non-printable"), (["x" * 10**6], "at most 128"),
                        (["a", "a"], "more than once"), (["a", "zz"], "unknown task(s) ['zz']")):
        with pytest.raises(ValueError, match=re.escape(text)) as info:
            sel.next_task(cands)
        assert len(str(info.value)) < 300


# -- fleet: several robots, one selector (issue 17) ------------------------------------------------------------------
def test_pending_assignments_expire_and_end_when_recorded():
    from amf_ros.runtime.task_selector import PendingAssignments

    now = [0.0]
    pa = PendingAssignments(timeout_s=10.0, clock=lambda: now[0])
    pa.assign("robot1", ["push"])
    pa.assign("robot2", ["drawer-open"])
    assert pa.active() == [("robot1", "push"), ("robot2", "drawer-open")]
    assert pa.active(exclude="robot1") == [("robot2", "drawer-open")]
    assert pa.recorded("robot2", "drawer-open") and not pa.recorded("robot2", "drawer-open")
    pa.assign("robot1", ["faucet-open"])  # asking again replaces the previous assignment
    assert pa.active() == [("robot1", "faucet-open")]
    now[0] = 9.9
    assert pa.active() == [("robot1", "faucet-open")]
    now[0] = 10.0  # the robot died or discarded its take: the assignment stops counting
    assert pa.active() == [] and pa.expired == [("robot1", "faucet-open")]
    off = PendingAssignments(timeout_s=0.0)
    off.assign("robot1", ["push"])
    assert off.active() == []


def test_concurrent_warm_start_requests_get_different_tasks_then_duplicate(tmp_path):
    """Three robots ask before anything is recorded: three different unseen tasks; a fourth, with every unseen
    task assigned, duplicates the least-assigned one and says so."""
    _write_store(tmp_path / "data", ["push"])
    rt = TaskSelectorRuntime(_params(tmp_path, assignment_timeout_s=60.0))
    got = [rt.next_task(robot=f"robot{i}") for i in (1, 2, 3)]
    assert sorted(d.task for d in got) == ["drawer-close", "drawer-open", "faucet-open"]
    assert all(d.warm_start for d in got)
    assert got[2].pending == [("robot1", got[0].task), ("robot2", got[1].task)]
    fourth = rt.next_task(robot="robot4")
    assert fourth.task in {d.task for d in got} and "demonstrated twice" in fourth.message
    assert rt.on_episode("robot1", got[0].task)  # robot1 recorded its task: its assignment is done
    with pytest.raises(ValueError, match=r"robot name of 1000000 characters is too long \(at most 256\)") as info:
        rt.next_task(robot="r" * 1_000_000)  # the name keys an assignment: bounded (issue 33)
    assert len(str(info.value)) < 200 and len(rt.assignments.active()) == 3
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['k0', .*'k9'\] \(and 990 more\)") as info:
        rt.next_task([f"k{i}" for i in range(1000)])  # the answer names ten of them
    assert len(str(info.value)) < 400


def test_a_pending_assignment_steers_the_next_robot_away_unless_selection_is_independent(tmp_path):
    """After the warm start, two robots ask at the same instant. Joint selection: the second robot's request
    conditions on the first robot's pick (hallucinated, as a batch pick), so it gets another task; independent
    selection (assignment_timeout_s 0) sends both to the same task."""
    two = ["push", "drawer-open"]
    _write_store(tmp_path / "data", two)
    policy = _policy(tmp_path / "data", horizon=1)
    _save(policy, tmp_path / "ckpts" / "round_0001")
    for timeout, expect_different in ((60.0, True), (0.0, False)):
        rt = TaskSelectorRuntime(_params(tmp_path, tasks=tuple(two), assignment_timeout_s=timeout))
        first = rt.next_task(robot="robot1")
        second = rt.next_task(robot="robot2")
        assert not first.warm_start and not second.warm_start
        assert (second.task != first.task) is expect_different, (first.scores, second.scores)
        assert second.pending == ([("robot1", first.task)] if timeout else [])
        if timeout:  # the pick is the argmin of the conditioned criterion, the batch rule (Algorithm 1)
            batch = TaskSelection("amf", {t: t for t in two}, tmp_path / "data")
            batch.set_policy(rt.selection.policy, rt.checkpoint)
            assert batch.next_task([], 2).selected_tasks == [first.task, second.task]


@pytest.mark.parametrize("selector", ["dropout", "diversity"])
def test_peer_rules_are_served_after_their_warm_start(tmp_path, selector):
    """Over ROS the peer rules first demonstrate every task once (their states come from recorded episodes), then
    score every candidate with the policy; the ensemble rules are refused on a checkpoint without ensemble members,
    saying which parameter writes them (test_ensemble_members.py serves them)."""
    _write_store(tmp_path / "data", TASKS[:2])
    rt = TaskSelectorRuntime(_params(tmp_path, selector=selector))
    first = rt.next_task()
    assert first.warm_start and first.task in TASKS[2:]
    _write_store(tmp_path / "data", TASKS[2:], seed=1)
    _save(_policy(tmp_path / "data", horizon=1), tmp_path / "ckpts" / "round_0001")
    rt = TaskSelectorRuntime(_params(tmp_path, selector=selector))
    d = rt.next_task(batch_size=2)
    assert not d.warm_start and len(d.selected_tasks) == 2 and all(np.isfinite(d.scores))
    vfd = TaskSelectorRuntime(_params(tmp_path, selector="vfd"))
    with pytest.raises(ValueError, match="has no ensemble members .* parameter ensemble_members to 2 or more"):
        vfd.next_task()


def test_frozen_choice_is_kept_across_restarts(tmp_path):
    """Issue 29: after a restart "frozen" moved to the newest round. The first start freezes the newest checkpoint
    and records it (atomically) under checkpoint_dir; a restart after newer rounds keeps it; a gone or broken record
    freezes the newest again, saying so; 'latest' neither reads nor writes the record."""
    from amf_ros.runtime.task_selector import FROZEN_RECORD

    _write_store(tmp_path / "data", ORDER)
    policy = _policy(tmp_path / "data", horizon=1)
    first = _save(policy, tmp_path / "ckpts" / "round_0001")
    params = _params(tmp_path, selection_policy="frozen", selector="rebalancing")
    rt = TaskSelectorRuntime(params)
    record = tmp_path / "ckpts" / FROZEN_RECORD
    assert rt.checkpoint == first and json.loads(record.read_text()) == {"checkpoint": first}
    newer = _save(policy, tmp_path / "ckpts" / "round_0002")
    assert rt.on_checkpoint(newer)[0] is False
    restarted = TaskSelectorRuntime(params)
    assert restarted.checkpoint == first and any("frozen keeps" in n for n in restarted.notes)
    assert not list(record.parent.glob(f"*{FROZEN_RECORD}*.tmp*"))  # nothing left of the atomic write
    assert TaskSelectorRuntime(_params(tmp_path, selection_policy="latest", selector="rebalancing")).checkpoint == newer
    import shutil

    shutil.rmtree(first)  # the frozen checkpoint is gone: the newest is frozen instead, with a note
    gone = TaskSelectorRuntime(params)
    assert gone.checkpoint == newer and any("freezing the newest" in n for n in gone.notes)
    assert json.loads(record.read_text()) == {"checkpoint": newer}
    record.write_text("not json")
    assert TaskSelectorRuntime(params).checkpoint == newer and json.loads(record.read_text()) == {"checkpoint": newer}


def test_frozen_without_a_checkpoint_freezes_the_first_announced(tmp_path):
    """On an empty workspace the first announced checkpoint (the pre-trained one) is frozen, and a restart keeps it
    although checkpoint_dir then holds a newer round."""
    from amf_ros.runtime.task_selector import FROZEN_RECORD

    _write_store(tmp_path / "data", ORDER)
    policy = _policy(tmp_path / "data", horizon=1)
    params = _params(tmp_path, selection_policy="frozen", selector="rebalancing")
    rt = TaskSelectorRuntime(params)
    assert rt.checkpoint == "" and not (tmp_path / "ckpts" / FROZEN_RECORD).exists()
    pretrained = _save(policy, tmp_path / "cache" / "pretrained")
    assert rt.on_checkpoint(pretrained)[0] and rt.checkpoint == pretrained
    _save(policy, tmp_path / "ckpts" / "round_0001")
    assert TaskSelectorRuntime(params).checkpoint == pretrained


def test_replay_aware_selection_is_the_core_criterion_with_the_replayed_episodes(tmp_path):
    """With policy_server's replay (replay_dir, replay_fraction) the node's amf scores equal core/amf_nn.py's
    replay-aware criterion on the same episodes, differ from the paper's, and the replayed episodes are embedded once
    for every request on one policy."""
    from amf_ros.core.amf_nn import amf_nn_score_fn, warm_start_validation
    from amf_ros.data.transitions import EpisodeCache

    _write_store(tmp_path / "data", ORDER)
    _write_store(tmp_path / "replay", ["faucet-open", "drawer-close"] * 3, seed=3)  # the pre-trained tasks
    policy = _policy(tmp_path / "data")
    instructions = {t: f"do {t}" for t in TASKS}
    sel = TaskSelection("amf", instructions, tmp_path / "data", replay_dir=tmp_path / "replay", replay_fraction=0.5)
    sel.set_policy(policy, "ckpt")
    decision = sel.next_task()
    episodes = [ep for _, ep in EpisodeCache(tmp_path / "data", "metaworld").episodes()]
    replay = [ep for _, ep in EpisodeCache(tmp_path / "replay", "metaworld").episodes()]
    val = warm_start_validation([str(ep["task"][0]) for ep in episodes])
    want = amf_nn_score_fn(policy, episodes, val, replay=replay, replay_fraction=0.5, max_points=None)(TASKS, [])
    # the same float64 criterion on the same float32 embeddings, rows scaled in the same order: round-off only
    np.testing.assert_allclose(decision.scores, want, rtol=1e-9, atol=0)
    plain = TaskSelection("amf", instructions, tmp_path / "data")
    plain.set_policy(policy, "ckpt")
    assert np.max(np.abs(np.subtract(plain.next_task().scores, decision.scores))) > 1e-3  # the replay counts
    embedded = sum(1 for key, _ in sel._state.phi if isinstance(key, tuple) and key[0] == "replay")
    assert embedded == 6
    calls = []
    embed = policy.embed
    policy.embed = lambda tr: (calls.append(1), embed(tr))[1]
    try:
        np.testing.assert_allclose(sel.next_task().scores, decision.scores, rtol=1e-12, atol=0)
    finally:
        policy.embed = embed
    assert calls == []  # neither the recorded nor the replayed episodes were embedded again


def test_replay_aware_selection_refuses_embeddings_it_cannot_read(tmp_path):
    _write_store(tmp_path / "replay", ["faucet-open"])
    with pytest.raises(ValueError, match="needs the state policy"):
        TaskSelection("amf", {t: f"do {t}" for t in TASKS}, tmp_path / "data", replay_dir=tmp_path / "replay",
                      replay_fraction=0.5, episode_loader=lambda ids: None)
