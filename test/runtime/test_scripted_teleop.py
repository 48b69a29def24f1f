"""amf_ros.runtime.scripted_teleop without rclpy: when the operator resets, acts, ends and discards, driven by fake
statuses, observations and a fake expert on a fake clock (one Metaworld test checks the real experts)."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.envs.suites import Expert, get_suite
from amf_ros.runtime.scripted_teleop import (
    RUNNING,
    ScriptedTeleop,
    SimStatus,
)

MS = 1_000_000
S = 1_000_000_000


class Out:
    """Records the operator's effects."""

    def __init__(self) -> None:
        self.actions: list = []
        self.ended: list = []
        self.resets: list = []
        self.lines: list = []

    def send_action(self, a7, stamp_ns):
        self.actions.append((stamp_ns, np.asarray(a7)))

    def end_episode(self, episode_id, success, discard):
        self.ended.append((episode_id, success, discard))

    def reset_sim(self, episode_id, task):
        self.resets.append((episode_id, task))

    def log(self, level, text):
        self.lines.append((level, text))

    def errors(self) -> str:
        return "\n".join(t for lv, t in self.lines if lv == "error")


class Clock:
    def __init__(self) -> None:
        self.t = 1000 * S

    def __call__(self) -> int:
        return self.t


def expert_act(obs):
    """A fake expert: moves by the observation's first value (so tests can tell which observation was used)."""
    return np.array([obs[0], 0, 0, 0, 0, 0, 1.0])


class Sim:
    """Publishes (state, status) pairs with one stamp, as sim_bridge does."""

    def __init__(self, teleop: ScriptedTeleop, clock: Clock, task: str = "reach") -> None:
        self.teleop, self.clock = teleop, clock
        self.task, self.resets, self.steps, self.success, self.done = task, 1, 0, False, False
        self.x = 0.0

    def publish(self, status_first: bool = False) -> int:
        stamp = self.clock()
        st = SimStatus(stamp, self.task, self.resets, self.steps, self.success, self.done)
        if status_first:
            self.teleop.on_sim_status(st)
            self.teleop.on_state(stamp, np.array([self.x, 0.0]))
        else:
            self.teleop.on_state(stamp, np.array([self.x, 0.0]))
            self.teleop.on_sim_status(st)
        return stamp

    def reset(self, task: str) -> None:
        self.task, self.resets, self.steps = task, self.resets + 1, 0
        self.success, self.done, self.x = False, False, 0.0

    def step(self, solved: bool = False) -> None:
        self.steps += 1
        self.x += 1.0
        self.success = self.success or solved
        self.done = self.success


def make(**kw):
    out, clock = Out(), Clock()
    experts = {"reach": Expert(expert_act, max_steps=kw.pop("expert_max_steps", 50)),
               "push": Expert(expert_act, max_steps=50)}
    teleop = ScriptedTeleop(experts, out, clock, control_rate_hz=kw.pop("rate", 10.0), **kw)
    return teleop, out, clock, Sim(teleop, clock)


def start(teleop, clock, task="reach", episode_id="ep1") -> int:
    clock.t += 10 * MS
    stamp = clock()
    teleop.on_recorder_status(True, episode_id, task, stamp)
    return stamp


def test_fresh_scene_of_the_right_task_is_demonstrated_without_reset_until_solved():
    teleop, out, clock, sim = make()
    sim.publish()  # the status held before the episode starts (e.g. amf run's seeded reset)
    start(teleop, clock)
    assert out.actions == [] and teleop.episode.phase != RUNNING, "waits for a status newer than the start"
    clock.t += 50 * MS
    first = sim.publish()  # idle re-publish: fresh, steps 0, right task
    assert out.resets == [] and len(out.actions) == 1 and out.actions[0][0] > first
    for k in range(3):
        clock.t += 100 * MS
        sim.step(solved=(k == 2))
        sim.publish()
    assert len(out.actions) == 3, "the third step solved the task: no action on the solved observation"
    np.testing.assert_array_equal([a[1][0] for a in out.actions], [0.0, 1.0, 2.0])  # each on the newest state
    assert out.ended == [("ep1", True, False)] and teleop.episode is None


def test_other_task_is_reset_once_and_demonstrated_after_the_reset_shows_up():
    teleop, out, clock, sim = make()
    start(teleop, clock, task="push")
    clock.t += 50 * MS
    sim.publish()  # sim on reach
    assert out.resets == [("ep1", "push")] and out.actions == []
    clock.t += 50 * MS
    sim.publish()  # an idle status of the old scene: still waiting, no second reset
    assert len(out.resets) == 1 and out.actions == []
    sim.reset("push")
    clock.t += 10 * MS
    sim.publish(status_first=True)  # the reset's first observation (status may come before the state)
    teleop.on_reset_reply("ep1", True, "reset to 'push'")
    assert len(out.actions) == 1 and len(out.resets) == 1
    assert out.ended == []


def test_used_scene_of_the_right_task_is_reset():
    teleop, out, clock, sim = make()
    sim.step()
    start(teleop, clock)
    clock.t += 50 * MS
    sim.publish()
    assert out.resets == [("ep1", "reach")], "steps > 0: the scene was used, a new one is needed"


def test_a_status_already_newer_than_the_start_decides_at_once():
    teleop, out, clock, sim = make()
    sim.publish()
    teleop.on_recorder_status(True, "ep1", "reach", clock() - 1)
    assert len(out.actions) == 1 and out.resets == []


@pytest.mark.parametrize("replied", [False, True])
def test_no_reset_reply_or_no_status_after_it_discards_after_the_timeout(replied):
    teleop, out, clock, sim = make(start_timeout_s=2.0)
    start(teleop, clock, task="push")
    clock.t += 10 * MS
    sim.publish()
    assert out.resets
    if replied:
        teleop.on_reset_reply("ep1", True, "ok")
    clock.t += int(1.9 * S)
    teleop.tick()
    assert out.ended == []
    clock.t += int(0.2 * S)
    teleop.tick()
    assert out.ended == [("ep1", False, True)] and teleop.episode is None
    assert ("no TaskStatus showing it" if replied else "no reply from the simulator's reset service") in out.errors()
    teleop.on_reset_reply("ep1", True, "late")  # a late answer changes nothing
    assert out.ended == [("ep1", False, True)] and out.actions == []


def test_refused_reset_discards_at_once():
    teleop, out, clock, sim = make()
    start(teleop, clock, task="push")
    clock.t += 10 * MS
    sim.publish()
    teleop.on_reset_reply("ep1", False, "unknown task 'push'")
    assert out.ended == [("ep1", False, True)] and "unknown task 'push'" in out.errors()


def test_no_fresh_status_discards_after_the_timeout():
    teleop, out, clock, sim = make(start_timeout_s=1.0)
    sim.publish()
    start(teleop, clock)
    clock.t += int(1.1 * S)
    teleop.tick()
    assert out.ended == [("ep1", False, True)] and "no simulator status" in out.errors()


def test_at_most_one_action_per_control_period_and_each_observation_used_once():
    teleop, out, clock, sim = make(rate=10.0)
    start(teleop, clock)
    clock.t += 10 * MS
    sim.publish()
    assert len(out.actions) == 1
    for _ in range(3):  # observations faster than the rate: acted on at the next tick only
        clock.t += 20 * MS
        sim.step()
        sim.publish()
    assert len(out.actions) == 1
    clock.t += 50 * MS
    teleop.tick()
    assert len(out.actions) == 2 and out.actions[1][1][0] == 3.0, "the newest observation"
    clock.t += 200 * MS
    teleop.tick()
    assert len(out.actions) == 2, "no new observation: no action"


def test_acts_only_when_the_status_of_the_same_stamp_is_in():
    teleop, out, clock, sim = make()
    start(teleop, clock)
    clock.t += 10 * MS
    sim.publish()
    clock.t += 200 * MS
    sim.step(solved=True)
    sim.done = True
    teleop.on_state(clock(), np.array([sim.x, 0.0]))  # state of the solving step, its status not yet in
    teleop.tick()
    assert len(out.actions) == 1 and out.ended == []
    teleop.on_sim_status(SimStatus(clock(), sim.task, sim.resets, sim.steps, True, True))
    assert out.ended == [("ep1", True, False)] and len(out.actions) == 1


def test_gives_up_after_max_steps_and_done_without_success_reports_failure():
    teleop, out, clock, sim = make(max_steps=2)
    start(teleop, clock)
    for _ in range(3):
        clock.t += 200 * MS
        sim.publish()
        sim.step()
    assert len(out.actions) == 2 and out.ended == [("ep1", False, False)]
    teleop2, out2, clock2, sim2 = make()
    start(teleop2, clock2)
    clock2.t += 10 * MS
    sim2.publish()
    clock2.t += 200 * MS
    sim2.step()
    sim2.done = True  # the task's max_steps reached in the simulator
    sim2.publish()
    assert out2.ended == [("ep1", False, False)] and len(out2.actions) == 1


def test_reset_by_someone_else_mid_episode_discards():
    teleop, out, clock, sim = make()
    start(teleop, clock)
    clock.t += 10 * MS
    sim.publish()
    sim.reset("push")
    clock.t += 200 * MS
    sim.publish()
    assert out.ended == [("ep1", False, True)] and "reset by someone else" in out.errors()


def test_recorder_status_rules():
    teleop, out, clock, sim = make()
    teleop.on_recorder_status(True, "ep0", "fly", clock())
    assert out.ended == [("ep0", False, True)] and "no scripted expert for task 'fly'" in out.errors()
    start(teleop, clock, episode_id="ep1")
    clock.t += 10 * MS
    sim.publish()
    n = len(out.actions)
    teleop.on_recorder_status(True, "ep1", "reach", clock())  # the same episode again: no restart
    assert teleop.episode is not None and teleop.episode.steps == n
    teleop.on_recorder_status(False, "", "", clock())  # ended by someone else: stop, no EndEpisode
    assert teleop.episode is None and len(out.ended) == 1
    clock.t += 200 * MS
    sim.step()
    sim.publish()
    assert len(out.actions) == n
    teleop.on_recorder_status(True, "ep1", "reach", clock())
    assert teleop.episode is None, "an episode is handled once"


def test_end_episode_false_stops_without_calling_the_recorder():
    teleop, out, clock, sim = make(end_episode=False)
    start(teleop, clock)
    clock.t += 10 * MS
    sim.publish()
    clock.t += 200 * MS
    sim.step(solved=True)
    sim.publish()
    assert out.ended == [] and teleop.episode is None and len(out.actions) == 1
    assert "solved after 1 actions" in out.lines[-1][1]


def test_a_failing_expert_discards():
    out, clock = Out(), Clock()
    teleop = ScriptedTeleop({"reach": Expert(lambda obs: np.full(7, np.nan), 10)}, out, clock)
    Sim(teleop, clock).publish()
    teleop.on_recorder_status(True, "ep1", "reach", clock() - 1)
    assert out.ended == [("ep1", False, True)] and "expert failed" in out.errors() and out.actions == []


def test_bad_configuration_is_refused():
    with pytest.raises(ValueError, match="control_rate_hz"):
        ScriptedTeleop({}, Out(), Clock(), control_rate_hz=0.0)


def test_metaworld_experts_act_in_the_wire_action_space():
    pytest.importorskip("metaworld")
    from amf_ros.envs.metaworld_suite import MetaworldTaskEnv, load_tasks
    from amf_ros.policies.action_spaces import native_to_eef7

    experts = get_suite("metaworld").scripted_experts("config/tasks/metaworld.yaml")
    env = MetaworldTaskEnv(load_tasks(keys=["reach"])[0])
    obs = env.reset(3)
    np.testing.assert_array_equal(experts["reach"].act(obs), native_to_eef7(env.expert_action(obs)))
    assert experts["reach"].max_steps == env.spec.max_steps
    noisy_experts = get_suite("metaworld").scripted_experts("config/tasks/metaworld.yaml", noise_std=0.5, seed=1)
    noisy = noisy_experts["reach"].act(obs)
    assert noisy.shape == (7,) and not np.allclose(noisy, experts["reach"].act(obs))


def test_a_stop_from_someone_else_discards_the_demonstration_and_no_action_follows():
    teleop, out, clock, sim = make()
    start(teleop, clock)
    clock.t += 50 * MS
    sim.publish()
    assert len(out.actions) == 1
    teleop.stop("stop from operator: hands off")
    assert out.ended == [("ep1", False, True)] and teleop.episode is None
    assert ("warn", "episode ep1: stop from operator: hands off; discarding it") in out.lines
    clock.t += 100 * MS
    sim.step()
    sim.publish()
    assert len(out.actions) == 1  # nothing after the stop
    teleop.stop("again")  # no episode: nothing to end
    assert len(out.ended) == 1


def test_widowx_experts_solve_their_tasks_from_the_published_state_alone() -> None:
    """scripted_teleop's WidowX experts see only the 14-D observation (no simulator handle) and solve each task."""
    pytest.importorskip("mujoco")
    from amf_ros.envs.widowx_sim.suite import WidowXSimSuite
    experts = get_suite("widowx").scripted_experts()
    suite = WidowXSimSuite(camera=False)
    assert sorted(experts) == sorted(suite.task_keys)
    for task in suite.task_keys:
        obs = suite.reset(task, 11)
        for _ in range(experts[task].max_steps):
            obs, success, done = suite.step_eef7(experts[task].act(obs))
            if done:
                break
        assert success, task
