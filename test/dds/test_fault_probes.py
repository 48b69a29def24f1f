"""Fault injection over DDS, every node its own process (issue 12 acceptance): the probes of `amf bench faults`
(amf_ros/bench/faults.py), one test per group, each asserting every row holds.

Findings covered (issue 12): 1 killed/frozen simulator mid-goal; 2 next_task denial of service; 3 stale motion
(frozen arm, stale/unstamped actions, operator stop); 4 supervision (killed recorder, `amf up` respawn and
SIGTERM/SIGHUP, SIGINT to every node during a goal and a fine-tune); 5 corrupt newest checkpoint and NaN
fine-tune; 6 recorder recovery and the teleop's bounded EndEpisode; 7 log volume under fuzz and key hygiene.
Time bounds get SLACK_S of scheduling allowance here (a loaded 2-core CI machine); the benchmark's table reports
the measured times against the bounds with 0.5 s.
"""

from __future__ import annotations

import signal
import time

import pytest

from amf_ros.bench import faults

pytestmark = [pytest.mark.ros, pytest.mark.slow]

SLACK_S = 3.0


def _check(rows: list) -> None:
    bad = [r for r in rows if not r.ok]
    assert not bad, "\n".join(f"{r.name}: bound {r.bound_s}, measured {r.measured_s:.2f}, {r.detail}" for r in bad)


@pytest.fixture(scope="module")
def graph(ros_env, rclpy_context, tmp_path_factory):
    from amf_ros.ros.client import AMFClient

    client = AMFClient(f"amf_test_faults_{int(time.time() * 1e3) % 100000}", record_actions=True)
    g = faults.LiveGraph(tmp_path_factory.mktemp("faults"), ros_env, client)
    try:
        g.start()
        yield g
    finally:
        client.close()
        g.stop()


def _logs(g) -> str:
    return "\n".join(f"--- {n}\n{g.procs.log_tail(n, 1500)}" for n in g.procs.procs)


def test_killed_simulator_ends_the_goal_and_the_next_goal_works(graph) -> None:
    _check(faults.probe_killed_simulator(graph, SLACK_S))


def test_frozen_simulator_ends_the_goal_and_no_stale_action_moves_the_arm(graph) -> None:
    _check(faults.probe_frozen_simulator(graph, SLACK_S, freeze_s=10.0))


def test_operator_stop_ends_the_goal(graph) -> None:
    _check(faults.probe_operator_stop(graph, SLACK_S))


def test_stale_and_unstamped_actions_are_never_applied(graph) -> None:
    _check(faults.probe_stale_actions(graph))


def test_next_task_flood_is_bounded_in_time_and_log(graph) -> None:
    _check(faults.probe_next_task_flood(graph, SLACK_S, requests=300, seed=1))


def test_killed_recorder_recovers_its_chunks_and_the_teleop_does_not_wait_forever(graph) -> None:
    _check(faults.probe_recorder_killed(graph))


def test_corrupt_newest_checkpoint_falls_back_and_nan_fine_tune_saves_nothing(graph) -> None:
    _check(faults.probe_checkpoints(graph, SLACK_S))


def test_sigint_during_run_policy_and_fine_tune_ends_every_node_within_3_s(graph) -> None:
    """Last: it ends the graph. Ctrl-C reaches every node at once (a terminal's process group) while a goal and a
    fine-tune run: each exits 0 within 3 s, without a traceback or an abort, and no checkpoint is left."""
    g, client = graph, graph.client
    client.reset("reach", seed=9)
    ep = client.start_episode("reach", "reach the goal")
    client.wait_episode(ep.episode_id, timeout=120)
    progress: list = []
    client.send_fine_tune(steps=1_000_000, feedback=progress.append)
    client.wait_for(lambda: len(progress) > 0, 120, "fine-tune feedback")
    g.start_goal("push")
    t0 = time.monotonic()
    for p in g.procs.procs.values():
        p.send_signal(signal.SIGINT)
    exits: dict[str, tuple[float, int | None]] = {}
    while len(exits) < len(g.procs.procs) and time.monotonic() < t0 + 10.0:
        for name, p in g.procs.procs.items():
            if name not in exits and p.poll() is not None:
                exits[name] = (time.monotonic() - t0, p.returncode)
        time.sleep(0.02)
    assert set(exits) == set(g.procs.procs), f"still running 10 s after SIGINT: {set(g.procs.procs) - set(exits)}"
    slow = {n: round(t, 2) for n, (t, _) in exits.items() if t > 3.0}
    failed = {n: code for n, (_, code) in exits.items() if code != 0}
    assert not slow and not failed, f"exit times {exits}\n{_logs(g)}"
    logs = _logs(g)
    assert "Traceback" not in logs and "terminate called" not in logs, logs
    assert not list((g.work / "checkpoints").glob("round_*")), "an interrupted fine-tune left a checkpoint behind"


def test_amf_up_respawns_a_killed_node_and_stops_on_sigterm_and_sighup(ros_env, rclpy_context, tmp_path) -> None:
    _check(faults.probe_amf_up_signals(tmp_path, ros_env, ("SIGTERM", "SIGHUP"), SLACK_S))
