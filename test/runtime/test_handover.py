"""A person's take-over from the policy without ROS (amf_ros/runtime/handover.py, the control loop's side of it, and
the teleop's): one publisher at a time, stamps that split the goal into who acted, resume from a fresh observation,
and the stops that end a goal or hand it back."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from amf_ros.runtime.control_loop import ControlLoop, ControlLoopConfig, Latest, TaskStatusValue
from amf_ros.runtime.handover import HUMAN, NOBODY, POLICY, Handover

ME, TELEOP, OTHER = "/amf/policy_server", "/amf/teleop", "/amf/teleop_twist"


class Wire:
    """What the arbiter publishes: announcements on ``control`` and its ArmStops, with a clock the test moves."""

    def __init__(self) -> None:
        self.t = 1_000
        self.announced: list[tuple[str, str, int]] = []
        self.stops: list[tuple[int, str]] = []

    def clock(self) -> int:
        self.t += 1
        return self.t

    def handover(self) -> Handover:
        return Handover(self.clock, lambda s, n, t: self.announced.append((s, n, t)),
                        lambda t, why: self.stops.append((t, why)), ME)


def test_a_press_during_a_goal_stops_the_policy_with_a_stop_then_grants_and_the_release_hands_back() -> None:
    w = Wire()
    h = w.handover()
    h.idle()
    assert w.announced[-1][:2] == (NOBODY, ME)
    assert h.request(TELEOP, HUMAN, 5) == ""  # no goal: only remembered ...
    assert h.request(TELEOP, NOBODY, 6) == ""  # ... and released again
    h.begin()
    assert w.announced[-1][:2] == (POLICY, ME) and h.policy_may_act()
    with h.turn() as mine:
        assert mine
        last_policy = w.clock()  # the policy's action, stamped on the same clock inside its turn
    assert h.request(TELEOP, HUMAN, w.clock()) == "granted"
    (stop_ns, why), (source, node, grant_ns) = w.stops[-1], w.announced[-1]
    assert (source, node) == (HUMAN, TELEOP) and stop_ns == grant_ns and "takes over" in why
    assert last_policy <= grant_ns  # the hand-over stop drops every policy action not applied yet
    with h.turn() as mine:
        assert not mine
    assert h.request(OTHER, HUMAN, w.clock()) == "pending"  # one person at a time
    release_ns = w.clock() + 50  # the teleop's ArmStop, stamped ahead of the arbiter's clock (another machine)
    assert h.on_stop(TELEOP, release_ns) == "released"
    # the other person's deadman is still held: straight to them, with a stop of its own
    assert w.announced[-2][:2] == (POLICY, ME) and w.announced[-2][2] >= release_ns
    assert w.announced[-1][:2] == (HUMAN, OTHER) and len(w.stops) == 2
    assert h.request(TELEOP, NOBODY, release_ns) == ""  # the same release arriving again: nothing
    assert h.on_stop(TELEOP, release_ns) == "ignored"  # its ArmStop after its release request
    assert h.on_stop(TELEOP, release_ns + 1000) == "end"  # a later stop from it is a stop
    assert h.request(OTHER, NOBODY, w.clock()) == "released"
    assert h.holder == POLICY and h.log.takeovers == 2 and h.log.resumes == 2
    assert h.on_stop("/amf/operator_console", w.clock()) == "end"  # anyone else's stop ends the goal
    h.end()
    assert w.announced[-1][:2] == (NOBODY, ME) and not h.policy_may_act()
    assert h.on_stop("/amf/operator_console", w.clock()) == ""


def test_the_policy_waits_until_its_clock_passes_the_release_stamp() -> None:
    w = Wire()
    h = w.handover()
    h.begin()
    h.request(TELEOP, HUMAN, w.clock())
    release_ns = w.t + 100  # stamped 100 ns ahead of the arbiter's clock
    h.request(TELEOP, NOBODY, release_ns)
    assert h.holder == POLICY and h.floor_ns == release_ns
    while w.t <= h.floor_ns:
        assert not h.policy_may_act()
        w.clock()
    assert h.policy_may_act()


def test_a_goal_started_while_a_person_drives_begins_with_the_person_and_no_stop() -> None:
    w = Wire()
    h = w.handover()
    h.request(TELEOP, HUMAN, w.clock())
    h.begin()
    assert w.announced == [(HUMAN, TELEOP, w.announced[0][2])] and w.stops == []
    assert not h.policy_may_act() and h.log.takeovers == 1


def test_unknown_request_sources_are_ignored() -> None:
    w = Wire()
    h = w.handover()
    h.begin()
    assert h.request(TELEOP, "policy", w.clock()) == "" and h.holder == POLICY


def test_policy_publishes_and_takeovers_from_threads_never_overlap() -> None:
    """A policy thread publishing as fast as it can inside its turn, a person taking over and releasing 50 times:
    every policy stamp lies outside every (grant, resume] interval, on one real clock."""
    stamps: list[int] = []
    changes: list[tuple[str, int]] = []
    h = Handover(time.monotonic_ns, lambda s, n, t: changes.append((s, t)), lambda t, why: None, ME)
    h.begin()
    done = threading.Event()

    def policy() -> None:
        while not done.is_set():
            with h.turn() as mine:
                if mine:
                    stamps.append(time.monotonic_ns())

    thread = threading.Thread(target=policy)
    thread.start()
    try:
        for _ in range(50):
            time.sleep(0.0005)
            h.request(TELEOP, HUMAN, time.monotonic_ns())
            time.sleep(0.0005)
            h.on_stop(TELEOP, time.monotonic_ns())
    finally:
        done.set()
        thread.join(5.0)
    grants = [t for s, t in changes if s == HUMAN]
    resumes = [t for s, t in changes if s == POLICY][1:]
    assert len(grants) == len(resumes) == 50 and len(stamps) > 50
    s = np.asarray(stamps)
    for g, r in zip(grants, resumes, strict=True):
        assert not np.any((s > g) & (s <= r)), f"a policy action stamped while a person held control ({g}, {r}]"


# -- the control loop's side ---------------------------------------------------------------------------------------
class Arm:
    """Applies every action (a new observation per action, tagged with its number and arrival); ``person``
    actions come from the test."""

    def __init__(self) -> None:
        self.obs, self.status = Latest(), Latest()
        self.applied: list[tuple[str, int]] = []  # (who, stamp ns)
        self.status.set(TaskStatusValue("reach", resets=1, steps=0, success=False, done=False))
        self._lock = threading.Lock()
        self.apply("start", 0)

    def idle(self, stop: threading.Event, period_s: float) -> None:
        """Re-publish the state while no action comes (as sim_bridge's idle_publish_period_s, a real arm always)."""
        while not stop.wait(period_s):
            with self._lock:
                n = len(self.applied)
            self.obs.set({"state": np.full(3, n, np.float32), "t": time.monotonic()})

    def apply(self, who: str, stamp: int) -> None:
        with self._lock:
            self.applied.append((who, stamp))
            n = len(self.applied)
        self.obs.set({"state": np.full(3, n, np.float32), "t": time.monotonic()})
        self.status.set(TaskStatusValue("reach", resets=1, steps=n - 1, success=False, done=False))


@pytest.mark.parametrize("horizon", [1, 3])
def test_the_loop_publishes_nothing_while_a_person_holds_control_and_resumes_from_a_fresh_observation(
        horizon: int) -> None:
    arm = Arm()
    changes: list[tuple[str, int]] = []
    h = Handover(time.monotonic_ns, lambda s, n, t: changes.append((s, t)), lambda t, why: None, ME)
    acted_on: list[float] = []  # arrival time of each observation the policy acted on

    def act(obs: dict) -> np.ndarray:
        acted_on.append(float(obs["t"]))
        return np.zeros((horizon, 7))

    cfg = ControlLoopConfig(period_s=0.02, max_steps=12, obs_timeout_s=1.0, status_timeout_s=1.0,
                            execution_horizon=horizon)
    from amf_ros.policies.chunk_actor import ChunkActor

    actor = ChunkActor(act, horizon=horizon)
    idle_stop = threading.Event()
    idle = threading.Thread(target=arm.idle, args=(idle_stop, 0.1), daemon=True)
    idle.start()
    loop = ControlLoop(actor, lambda a: arm.apply("policy", time.monotonic_ns()), arm.obs, arm.status, "reach", cfg,
                       threading.Event(), handover=h).start()
    deadline = time.monotonic() + 10.0
    while sum(w == "policy" for w, _ in arm.applied) < 4 and time.monotonic() < deadline:
        time.sleep(0.005)
    h.request(TELEOP, HUMAN, time.monotonic_ns())
    for _ in range(5):  # the person drives: 5 actions, one per period
        time.sleep(cfg.period_s)
        arm.apply("human", time.monotonic_ns())
    h.on_stop(TELEOP, time.monotonic_ns())
    resumed_at = h.resumed_at
    assert loop.join(10.0)
    idle_stop.set()
    r = loop.result
    assert r.ok and r.steps == 12 and r.takeovers == 1 and "1 takeover" in r.message
    grant = [t for s, t in changes if s == HUMAN][0]
    resume = [t for s, t in changes if s == POLICY][-1]
    who = [w for w, _ in arm.applied[1:]]
    assert who.count("human") == 5 and who.count("policy") == 12
    policy_stamps = [t for w, t in arm.applied if w == "policy"]
    human_stamps = [t for w, t in arm.applied if w == "human"]
    assert all(t <= grant or t > resume for t in policy_stamps)  # none while the person held control
    assert all(grant < t <= resume for t in human_stamps)
    # the person's segment is contiguous: no policy action between the person's first and last
    first, last = who.index("human"), len(who) - 1 - who[::-1].index("human")
    assert set(who[first:last + 1]) == {"human"}
    # the first action after the hand-back was computed from an observation that arrived after it
    after = [t for t in acted_on if t > resumed_at]
    assert after and min(acted_on[len(acted_on) - len(after):]) > resumed_at


def test_a_teleop_that_leaves_the_graph_while_holding_control_ends_the_goal_after_two_checks() -> None:
    """A crashed teleop node never sends its release: two graph checks without it end the goal (the caller stops
    the run); a node that was pressed but not holding is forgotten without ending anything."""
    w = Wire()
    h = w.handover()
    h.begin()
    assert h.request(TELEOP, HUMAN, w.clock()) == "granted"
    h.request(OTHER, HUMAN, w.clock())  # waits behind TELEOP
    assert h.check_alive({TELEOP, OTHER}) == ""
    assert h.check_alive({OTHER}) == ""  # one miss: discovery may lag
    assert h.check_alive({TELEOP, OTHER}) == ""  # back: the miss is forgiven
    assert h.check_alive({OTHER}) == "" and h.check_alive({OTHER}) == TELEOP  # two misses in a row
    assert h.holder == TELEOP  # the caller ends the goal; the arbiter does not hand control to anyone on its own
    h.end()
    h.begin()  # TELEOP is forgotten; OTHER still holds its deadman, so it starts in control
    assert h.holder == OTHER
    assert h.check_alive(set()) == "" and h.check_alive(set()) == OTHER
