"""sim_bridge over DDS: the action in flight when an episode ends is no error; a real refusal still is.

Issue 29 ("goals end with the truth"): every solved rollout ended with ``[ERROR] refused action: the episode ... is
over`` in sim_bridge's log, for the action the policy had computed before it saw the episode end. That one is
expected (logged at info, once); an invalid action is still an error.
"""

from __future__ import annotations

import time

import pytest
import yaml
from robot_testutil import make_action, wait_action_path, wait_for

pytestmark = pytest.mark.ros

LIMIT = 3
"""The simulator's step limit for reach here: the episode ends (done) after this many actions."""


def _wait_log(procs, text: str, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while text not in procs.log_tail("sim_bridge", 100_000):
        assert time.monotonic() < deadline, f"{text!r} not in the log within {timeout:.0f} s:\n" + \
            procs.log_tail("sim_bridge")
        time.sleep(0.1)
    return procs.log_tail("sim_bridge", 100_000)


def test_the_action_in_flight_at_the_episode_end_is_logged_at_info_not_as_an_error(start_nodes, client_node,
                                                                                   tmp_path):
    from amf_ros.msg import EefDeltaAction, TaskStatus
    from amf_ros.paths import resolve_config
    from amf_ros.ros import qos

    doc = yaml.safe_load(resolve_config("config/tasks/metaworld.yaml").read_text())
    doc["tasks"] = [dict(t, max_steps=LIMIT) for t in doc["tasks"] if t["key"] in ("reach", "push")]
    tasks = tmp_path / "tasks.yaml"
    tasks.write_text(yaml.safe_dump(doc))
    procs = start_nodes({"sim_bridge": {"backend": "metaworld", "tasks_file": str(tasks), "initial_task": "reach",
                                        "seed": 3, "render": False}}, name="late_action")
    pub = client_node.create_publisher(EefDeltaAction, "/amf/action", qos.ACTIONS)
    wait_action_path(pub, procs)

    def send(a7) -> None:
        pub.publish(make_action(a7, client_node.get_clock().now().nanoseconds))

    steps = [-1]  # the simulator's step count, from its latched status (a late match still gets the newest)
    client_node.create_subscription(TaskStatus, "/amf/sim/status", lambda m: steps.__setitem__(0, m.steps),
                                    qos.LATCHED)
    wait_for(lambda: steps[0] == 0, 30.0, "the simulator's status at step 0")
    # LIMIT actions end the episode, each sent once the arm applied the one before (the action topic keeps only the
    # newest action: a loaded arm would otherwise skip some and the episode would not end); the next one, sent right
    # after the last was applied, was "in flight": it arrives well within LATE_ACTION_S (2 s) of the end.
    for k in range(LIMIT):
        send([0.0] * 6 + [1.0])
        wait_for(lambda k=k: steps[0] > k, 30.0, f"the arm applying action {k + 1} of {LIMIT}")
    send([0.0] * 6 + [1.0])
    log = _wait_log(procs, "in flight when the episode ended")
    refusals = [line for line in log.splitlines() if "refused action: the episode" in line]
    assert refusals and all(line.startswith("[INFO]") for line in refusals), refusals
    # a real refusal is still an error
    send([float("nan")] * 6 + [1.0])
    log = _wait_log(procs, "not 7 finite values")
    assert any(line.startswith("[ERROR]") and "not 7 finite values" in line for line in log.splitlines()), log[-2000:]
