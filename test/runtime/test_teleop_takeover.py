"""The teleop's side of a take-over (amf_ros/runtime/teleop.py with amf_ros/runtime/handover.py), without ROS: a press
during a goal waits for the grant, actions are stamped after it, the release hands back, and every way a goal can
start or end around a person stops that person's actions safely."""

from __future__ import annotations

import numpy as np
from teleop_doubles import ManualClock as Clock
from teleop_doubles import TakeoverOut as Out

from amf_ros.runtime.handover import Handover
from amf_ros.runtime.teleop import Controls, JoyMapping, Teleop, TeleopConfig

ME, ARBITER = "/amf/teleop", "/amf/policy_server"
MAPPING = JoyMapping.from_dict({"axes": {"x": [{"axis": 0}]}, "buttons": {"deadman": [0]}}, "test")
HELD = Controls(motion=(1.0, 0, 0, 0, 0, 0), deadman=True)
FREE = Controls()


def _teleop() -> tuple[Teleop, Out, Clock]:
    clock, out = Clock(), Out()
    tele = Teleop(TeleopConfig(), MAPPING, out, clock, "joy", node_name=ME)
    tele.on_controls(FREE)  # armed: a press counts only after a release was seen
    return tele, out, clock


def test_outside_a_goal_a_press_drives_at_once_and_still_tells_policy_server() -> None:
    tele, out, clock = _teleop()
    tele.on_control("", ARBITER, clock())
    tele.on_controls(HELD)
    assert tele.tick() is not None
    assert out.kinds("request") == [("human", clock())]
    clock.advance(0.5)
    tele.on_controls(FREE)
    (reason, stop_ns), = out.kinds("stop")
    assert reason == "deadman released" and out.kinds("request")[-1] == ("", stop_ns)


def test_during_a_goal_a_press_waits_for_the_grant_and_stamps_every_action_after_it() -> None:
    tele, out, clock = _teleop()
    tele.on_control("policy", ARBITER, clock())
    tele.on_controls(HELD)
    for _ in range(3):  # no grant yet: nothing, however long the deadman is held
        clock.advance()
        tele.on_controls(HELD)
        assert tele.tick() is None
    assert out.kinds("action") == [] and out.state["waiting"] and out.state["in_control"] == "policy"
    grant_ns = clock() + 5_000_000  # policy_server's clock runs 5 ms ahead
    tele.on_foreign_stop(ARBITER, "hand-over", grant_ns)  # the hand-over's stop, before the grant: no effect
    tele.on_control("human", ME, grant_ns)
    assert out.state["in_control"] == "human" and out.state["takeovers"] == 1
    sent = []
    for _ in range(3):
        tele.on_controls(HELD)
        sent.append(tele.tick())
        clock.advance()
    assert all(a is not None for a in sent)
    stamps = [t for _, t in out.kinds("action")]
    assert len(stamps) == 3 and min(stamps) > grant_ns and np.all(np.diff(stamps) > 0)
    tele.on_foreign_stop(ARBITER, "hand-over", grant_ns)  # the same stop arriving after the grant: ignored too
    tele.on_controls(HELD)
    assert tele.tick() is not None
    tele.on_controls(FREE)
    (reason, stop_ns), = out.kinds("stop")
    assert stop_ns >= max(t for _, t in out.kinds("action"))  # the stop drops every action of the person
    assert out.kinds("request")[-1] == ("", stop_ns)  # the release, stamped as its stop
    n = len(out.kinds("action"))
    clock.advance(2)
    assert tele.tick() is None and len(out.kinds("action")) == n  # nothing after the release


def test_releasing_before_the_grant_sends_the_release_and_a_late_grant_drives_nothing() -> None:
    tele, out, clock = _teleop()
    tele.on_control("policy", ARBITER, clock())
    tele.on_controls(HELD)
    clock.advance(0.2)
    tele.on_controls(FREE)
    assert [v for v, _ in out.kinds("request")] == ["human", ""] and out.kinds("stop") == []
    tele.on_control("human", ME, clock())
    clock.advance()
    assert tele.tick() is None and out.kinds("action") == []


def test_a_goal_ending_while_the_person_holds_control_stops_the_person() -> None:
    tele, out, clock = _teleop()
    tele.on_control("policy", ARBITER, clock())
    tele.on_controls(HELD)
    tele.on_control("human", ME, clock())
    assert tele.tick() is not None
    clock.advance()
    tele.on_control("", ARBITER, clock())
    (reason, _), = out.kinds("stop")
    assert "goal ended" in reason
    clock.advance()
    tele.on_controls(HELD)
    assert tele.tick() is None  # the deadman must be released and pressed again


def test_a_goal_starting_while_the_person_drives_ungranted_stops_the_person() -> None:
    tele, out, clock = _teleop()
    tele.on_control("", ARBITER, clock())
    tele.on_controls(HELD)
    assert tele.tick() is not None
    tele.on_control("policy", ARBITER, clock())  # policy_server did not know of the press: the goal acts
    (reason, _), = out.kinds("stop")
    assert "control passed" in reason
    clock.advance()
    tele.on_controls(HELD)
    assert tele.tick() is None


def test_a_goal_started_while_the_person_drives_and_granted_keeps_the_person_driving() -> None:
    tele, out, clock = _teleop()
    tele.on_control("", ARBITER, clock())
    tele.on_controls(HELD)
    assert tele.tick() is not None
    tele.on_control("human", ME, clock())  # Handover.begin: the person holds control from the start
    clock.advance()
    tele.on_controls(HELD)
    assert tele.tick() is not None and out.kinds("stop") == []


def test_a_stop_from_anyone_else_while_waiting_cancels_the_request() -> None:
    tele, out, clock = _teleop()
    tele.on_control("policy", ARBITER, clock())
    tele.on_controls(HELD)
    tele.on_foreign_stop("/amf/operator_console", "Stop pressed", clock())
    assert out.kinds("request")[-1][0] == "" and not out.state["waiting"]
    tele.on_control("human", ME, clock())
    clock.advance()
    tele.on_controls(HELD)
    assert tele.tick() is None


def test_teleop_and_arbiter_together_give_one_sender_at_a_time() -> None:
    """The two sides wired directly (what DDS carries between them): the policy's turns, the grant, the person's
    actions and the hand-back, with every stamp on one clock."""
    clock = Clock()
    log: list[tuple[str, int]] = []  # (who, stamp) of every action and stop, in publish order
    tele_out = Out()
    tele = Teleop(TeleopConfig(), MAPPING, tele_out, clock, "joy", node_name=ME)
    h = Handover(clock, lambda s, n, t: tele.on_control(s, n, t), lambda t, why: log.append(("stop", t)), ARBITER)
    tele_out.send_request = lambda source, stamp: h.request(ME, source, stamp)
    tele_out.send_stop = lambda stamp, reason: (log.append(("stop", stamp)), h.on_stop(ME, stamp))
    tele_out.send_action = lambda a7, stamp: log.append(("human", stamp))
    tele.on_controls(FREE)
    h.begin()

    def policy_tick() -> None:
        with h.turn() as mine:
            if mine:
                log.append(("policy", clock()))

    for step in range(30):
        clock.advance()
        if step == 10:
            tele.on_controls(HELD)
        if step == 20:
            tele.on_controls(FREE)
        if 10 <= step < 20:
            tele.on_controls(HELD)
        tele.tick()
        policy_tick()
    who = [w for w, _ in log if w != "stop"]
    assert who[:10] == ["policy"] * 10 and who.count("human") == 10 and who[-9:] == ["policy"] * 9
    first, last = who.index("human"), len(who) - 1 - who[::-1].index("human")
    assert set(who[first:last + 1]) == {"human"}
    stops = [t for w, t in log if w == "stop"]
    grant_stop, release_stop = stops
    assert all(t <= grant_stop for w, t in log if w == "policy" and t <= release_stop)
    assert all(grant_stop < t <= release_stop for w, t in log if w == "human")
