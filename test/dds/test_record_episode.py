"""End to end over real DDS: sim_bridge + scripted_teleop + demo_recorder, each its own process.

An episode started on the recorder is demonstrated by the scripted expert through the simulator and appears on
disk with the expected task, steps and success; every recorded (state, action) pair is the pair the expert
actually used (the expert's own action on the recorded state).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest
from robot_testutil import call, recorder_call, wait_for

pytestmark = pytest.mark.ros

TASK = "reach"


def loop_params(dataset, **recorder):
    rec = {"dataset_dir": str(dataset), "tasks_file": "config/tasks/metaworld.yaml", "robot": "metaworld",
           "control_rate_hz": 40.0, "sync_mode": "on_action", "chunk_steps": 10, "status_period_s": 0.5,
           "action_topic": "action/applied"}  # as config/sim.yaml: what the arm executed
    rec.update(recorder)
    return {"sim_bridge": {"backend": "metaworld", "tasks_file": "config/tasks/metaworld.yaml",
                           "initial_task": TASK, "idle_publish_period_s": 0.3},
            "scripted_teleop": {"tasks_file": "config/tasks/metaworld.yaml", "control_rate_hz": 40.0},
            "demo_recorder": rec}


def test_episode_recorded_end_to_end_with_the_experts_pairs(start_nodes, client_node, tmp_path):
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from amf_ros.data.store import EpisodeStore
    from amf_ros.envs.metaworld_suite import MetaworldTaskEnv, load_tasks
    from amf_ros.msg import EpisodeInfo
    from amf_ros.policies.action_spaces import native_to_eef7
    from amf_ros.srv import ResetTask, StartEpisode, TaskSuccess

    dataset = tmp_path / "dataset"
    procs = start_nodes(loop_params(dataset), name="loop")
    announced: list = []
    lock = threading.Lock()
    client_node.create_subscription(EpisodeInfo, "/amf/episodes", lambda m: announced.append(m),
                                    QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
    for seed in (5, 6):  # two episodes in a row: the recorder and the operator go back to idle in between
        assert call(client_node, ResetTask, "/amf/sim/reset", ResetTask.Request(task=TASK, seed=seed), 30).ok

        def started():
            res = recorder_call(client_node, StartEpisode, "/amf/recorder/start_episode",
                                StartEpisode.Request(task=TASK))
            return res if res.ok else None
        res = wait_for(started, 30, "StartEpisode to succeed (topics alive, teleop publishing)", poll=0.3)
        wait_for(lambda res=res: any(m.episode_id == res.episode_id for m in list(announced)), 60,
                 f"episode {res.episode_id} to be announced on /amf/episodes")
        sim = call(client_node, TaskSuccess, "/amf/sim/success", TaskSuccess.Request())
        with lock:
            info = [m for m in announced if m.episode_id == res.episode_id][0]
        assert info.task == TASK and info.success and sim.success
        assert info.num_steps == sim.steps, "on_action mode: one recorded step per simulator step"

    store = EpisodeStore(dataset, create=False)
    assert len(store) == 2
    expert = MetaworldTaskEnv(load_tasks(keys=[TASK])[0])
    for ep in store.episodes():
        assert ep.meta.task == TASK and ep.meta.instruction == expert.spec.instruction and ep.meta.success
        assert ep.meta.robot == "metaworld" and len(ep) == ep.meta.num_steps > 10
        state, action = ep.steps["observation/state"], ep.steps["action"]
        assert state.shape == (len(ep), 39) and action.shape == (len(ep), 7)
        # The pairing: each action is the expert's action on the state stored with it.
        want = np.stack([native_to_eef7(expert.expert_action(s.astype(np.float64))) for s in state])
        np.testing.assert_array_equal(action, want.astype(np.float32))
        # Each stream keeps its own stamp, and the state precedes the action computed from it.
        assert (ep.steps["stamp/observation/state"] < ep.steps["stamp/action"]).all()
        assert (np.diff(ep.steps["stamp/observation/state"]) > 0).all()
        assert ep.steps["is_terminal"][-1] and not ep.steps["is_terminal"][:-1].any()
    assert procs.dead() == {}


def test_an_action_the_arm_dropped_is_not_recorded(start_nodes, client_node, tmp_path):
    """The recorder records the arm's echo (action/applied), so a command the arm dropped as stale never enters
    the demonstration: one stale and one fresh action, both stamped inside the episode -> one simulator step, one
    recorded step (recording the command topic gives two)."""
    import time

    from robot_testutil import make_action

    from amf_ros.msg import EefDeltaAction
    from amf_ros.ros import qos
    from amf_ros.srv import EndEpisode, ResetTask, StartEpisode, TaskSuccess

    procs = start_nodes({k: v for k, v in loop_params(tmp_path / "dataset").items() if k != "scripted_teleop"},
                        name="dropped")
    pub = client_node.create_publisher(EefDeltaAction, "/amf/action", qos.ACTIONS)
    wait_for(lambda: pub.get_subscription_count() >= 1, 30, "sim_bridge's action subscription")
    assert call(client_node, ResetTask, "/amf/sim/reset", ResetTask.Request(task=TASK, seed=3), 30).ok

    def started():
        res = recorder_call(client_node, StartEpisode, "/amf/recorder/start_episode", StartEpisode.Request(task=TASK))
        return res if res.ok else None
    ep = wait_for(started, 30, "StartEpisode to succeed (state heard, the arm's echo publisher there)", poll=0.3)
    stamp = client_node.get_clock().now().nanoseconds  # after the episode start: a recorder would take it
    time.sleep(1.5)  # sim_bridge's cap on an action's age is 1 s: by now the action is stale
    pub.publish(make_action([0.01, 0, 0, 0, 0, 0, 1], stamp))
    wait_for(lambda: "stale action dropped" in procs.log_tail("sim_bridge", 20000), 30, "the arm to drop it")
    pub.publish(make_action([0.01, 0, 0, 0, 0, 0, 1], client_node.get_clock().now().nanoseconds))
    wait_for(lambda: call(client_node, TaskSuccess, "/amf/sim/success", TaskSuccess.Request()).steps == 1, 30,
             "the simulator to step on the fresh action")
    end = recorder_call(client_node, EndEpisode, "/amf/recorder/end_episode",
                        EndEpisode.Request(episode_id=ep.episode_id, success=False, discard=False), 30)
    assert end.ok and end.num_steps == 1, end.message
    assert procs.dead() == {}


def test_rerecord_discards_the_demonstration_in_progress_and_the_operator_starts_over(start_nodes, client_node,
                                                                                      tmp_path):
    """recorder/rerecord right after StartEpisode: the first episode is gone from the store; the scripted operator
    drops it (if it had begun: the two statuses may reach it as one) and demonstrates the new one, committed."""
    from rclpy.qos import QoSProfile, ReliabilityPolicy

    from amf_ros.data.store import EpisodeStore
    from amf_ros.msg import EpisodeInfo
    from amf_ros.srv import ResetTask, StartEpisode

    dataset = tmp_path / "dataset"
    procs = start_nodes(loop_params(dataset), name="rerecord")
    announced: list = []
    client_node.create_subscription(EpisodeInfo, "/amf/episodes", announced.append,
                                    QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))
    assert call(client_node, ResetTask, "/amf/sim/reset", ResetTask.Request(task=TASK, seed=7), 30).ok

    def started():
        res = recorder_call(client_node, StartEpisode, "/amf/recorder/start_episode", StartEpisode.Request(task=TASK))
        return res if res.ok else None
    first = wait_for(started, 30, "StartEpisode to succeed", poll=0.3)
    again = recorder_call(client_node, StartEpisode, "/amf/recorder/rerecord", StartEpisode.Request(), 30)
    assert again.ok and first.episode_id in again.message and again.episode_id != first.episode_id, again.message
    wait_for(lambda: any(m.episode_id == again.episode_id for m in list(announced)), 60,
             f"episode {again.episode_id} to be announced")
    store = EpisodeStore(dataset, create=False)
    assert store.episode_ids() == [again.episode_id] and not store.partial()
    assert store.meta(again.episode_id).success and store.meta(again.episode_id).num_steps > 10
    teleop = procs.log_tail("scripted_teleop", 20000)  # it may never have seen the first episode's status
    assert first.episode_id not in teleop or f"episode {first.episode_id} ended by someone else" in teleop, teleop
    assert procs.dead() == {}
