"""The AMF loop over real DDS, every node its own process (issue 5 acceptance), plus bad input and concurrency.

One graph (the five nodes of launch/sim.launch.py, from the same YAML) is brought up per module; the tests run in
file order against it: bad input on an empty store first, then 3 rounds of the loop, then run_policy during a
fine-tune and cancellation.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest
from ros_system_util import REPO, make_checkpoint

pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASKS = ("reach", "push")

@pytest.fixture(scope="module")
def graph_run(ros_env, rclpy_context, tmp_path_factory):
    """The sim graph with a tiny checkpoint, this module's dataset/checkpoint dirs, and a client."""
    from amf_ros.bringup import graph
    from amf_ros.bringup.params import schema
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.loop.nodes import node_overrides
    from amf_ros.loop.run import LoopConfig
    from amf_ros.ros.client import AMFClient

    run = tmp_path_factory.mktemp("loop")
    ckpt = make_checkpoint(run / "pretrained", TASKS)
    config = REPO / "config" / "sim.yaml"
    assert {p.name for p in schema("policy_server")} >= {"control_rate_hz"}
    extra = node_overrides(run, LoopConfig(selector="amf"))
    # selection_policy latest: this module also checks that task_selector reloads announced checkpoints
    extra["task_selector"] += ["-p", f"tasks:=[{', '.join(TASKS)}]", "-p", "selection_policy:=latest"]
    # This module checks the loop (rounds, reloads, refusals, a goal during a fine-tune), not latency: a 2-core CI
    # machine stalled sim_bridge ~0.6 s right after a reset and the goal ended "observation stale" (twice in six CI
    # runs). Staleness is checked by the fault probes (test_fault_probes.py), with sim.yaml's 0.5 s.
    extra["policy_server"] = [*extra.get("policy_server", []), "-p", "observation_stale_periods:=30.0",
                              "-p", "action_valid_for_s:=3.0"]
    procs = NodeProcesses(graph.sim_plan(str(config), checkpoint=str(ckpt), console=False), log_dir=run / "logs",
                          env=ros_env,
                          extra_args=extra).start()
    client = AMFClient(f"amf_test_loop_{int(time.time() * 1e3) % 100000}", record_actions=True)
    try:
        client.wait_ready(timeout=120)
        yield run, ckpt, client, procs
    finally:
        client.close()
        codes = procs.stop()
        print("node exit codes:", codes)


def _alive(procs) -> None:
    assert procs.dead() == {}, {n: procs.log_tail(n) for n in procs.dead()}


def test_bad_input_gets_clear_errors_and_nodes_keep_running(graph_run) -> None:
    run, _, client, procs = graph_run
    resp = client.next_task(["reach", "fly-to-the-moon"], require_ok=False)
    assert not resp.ok and "fly-to-the-moon" in resp.message
    t0 = time.monotonic()
    resp = client.next_task(batch_size=2**32 - 1, require_ok=False)  # refused at once, not 2**32 selection passes
    # 2**32 greedy selection passes would take days: 30 s only tells the two apart (a loaded round trip: < 1 s)
    assert not resp.ok and f"ask for at most {len(TASKS)}" in resp.message and time.monotonic() - t0 < 30
    ft = client.fine_tune(steps=5, timeout=60)
    assert not ft.ok and "no episodes" in ft.message
    rp = client.run_policy("fly-to-the-moon", max_steps=3, timeout=60)
    assert not rp.ok and "unknown task" in rp.message
    assert client.next_task().ok  # still answering
    _alive(procs)


def test_three_rounds_of_the_loop(graph_run) -> None:
    from amf_ros.data.store import EpisodeStore

    run, ckpt, client, procs = graph_run
    store = EpisodeStore(run / "dataset", create=False)
    policy_seen = str(ckpt)
    for r in range(1, 4):
        d = client.next_task()
        assert d.ok and d.task in TASKS and list(d.tasks) == list(TASKS) and len(d.scores) == len(TASKS)
        assert d.warm_start == (r <= len(TASKS)), d.message
        if not d.warm_start:
            assert np.all(np.isfinite(d.scores)) and d.task == TASKS[int(np.argmin(d.scores))]
            assert list(d.effective_sample_size) == [1.0] * len(TASKS)  # one validation (warm-start) episode each
        assert f"policy: {policy_seen}" in d.message, "task_selector did not reload the announced checkpoint"
        assert sum(d.demo_counts) == r - 1

        client.reset(d.task, seed=100 + r)
        ep = client.start_episode(d.task, d.instruction)
        info = client.wait_episode(ep.episode_id, timeout=120)
        sim = client.success()  # nothing has stepped the arm since the operator ended the episode
        episode = store.load(ep.episode_id, images=False)
        assert episode.meta.task == d.task and info.task == d.task
        assert len(episode) == info.num_steps == sim.steps > 5, (len(episode), info.num_steps, sim.steps)

        before = {c.path for c in client.seen.checkpoints}
        ft = client.fine_tune(steps=30, timeout=300)
        assert ft.ok, ft.message
        assert Path(ft.checkpoint).name == f"round_{r:04d}" and (Path(ft.checkpoint) / "meta.json").is_file()
        client.wait_for(lambda ft=ft, before=before: ft.checkpoint in {c.path for c in client.seen.checkpoints}
                        - before, 30, "/amf/checkpoint announcing the new checkpoint")
        policy_seen = ft.checkpoint

        client.reset(d.task, seed=1000)
        n0 = len(client.seen.actions)
        res = client.run_policy(d.task, max_steps=40, timeout=120)
        _assert_run(res, client.seen.actions[n0:], 40)
    # task_selector reloads the last checkpoint as well
    client.wait_for(lambda: f"policy: {policy_seen}" in client.next_task().message, 30, "task_selector reload")
    _alive(procs)


def _assert_run(res, actions: list, max_steps: int, when: str = "") -> None:
    """A run_policy goal that ended by its own rules, every action of it received here: counts, not timing.

    It ends ok with ``max_steps`` steps, or earlier only when the simulator reported success; each step published
    one /amf/action. The control rate is the machine's as much as the code's: `amf bench ros_latency` measures it
    (idle and during a fine-tune, the precise numbers); a median-rate check here failed on loaded 2-core runs.
    """
    info = f"{when}: {len(actions)} actions received; server: {res.message}"
    assert res.ok, info
    assert 1 <= res.steps <= max_steps and (res.success or res.steps == max_steps), info
    assert len(actions) == res.steps, info


def test_run_policy_during_fine_tune_and_cancel(graph_run) -> None:
    """run_policy keeps its rate while a fine-tune trains in the background; a second fine-tune is refused; a
    cancelled fine-tune saves nothing."""
    run, _, client, procs = graph_run
    ckpts = sorted((run / "checkpoints").iterdir())
    progress: list = []
    pending = client.send_fine_tune(steps=200000, feedback=progress.append)
    client.wait_for(lambda: len(progress) > 0, 60, "feedback of the background fine-tune")
    from amf_ros.ros.client import ROSCallError

    with pytest.raises(ROSCallError, match="goal rejected"):  # a busy server rejects in its goal callback
        client.fine_tune(steps=5, timeout=60)
    client.reset("reach", seed=2000)
    n0 = len(client.seen.actions)
    res = client.run_policy("reach", max_steps=30, timeout=120)
    _assert_run(res, client.seen.actions[n0:], 30, "during fine-tuning")
    # ordering: the whole goal ran while the 200000-step fine-tune kept training (it ends only when cancelled
    # below), so the fine-tune did not hold the control loop
    assert not pending.done(), "the background fine-tune ended before run_policy did"
    client.cancel_fine_tunes()
    result = client.wait_result(pending, timeout=60)
    assert not result.ok and "cancelled" in result.message
    assert sorted((run / "checkpoints").iterdir()) == ckpts
    _alive(procs)
