"""The one rule every arm applies to a stamped action (amf_ros/robots/action_gate.py)."""

import pytest

from amf_ros.robots.action_gate import NS, ActionGate

MS = 1_000_000


def test_horizon_is_the_smaller_of_the_actions_and_the_arms():
    assert ActionGate(1.0).horizon_ns(300 * MS) == 300 * MS
    assert ActionGate(0.2).horizon_ns(300 * MS) == 200 * MS
    assert ActionGate(0.0).horizon_ns(300 * MS) == 300 * MS
    assert ActionGate(0.5).horizon_ns(0) == 500 * MS
    assert ActionGate(0.0).horizon_ns(0) == 0
    with pytest.raises(ValueError, match="max_age_s"):
        ActionGate(-1.0)


def test_fresh_actions_pass_stale_unstamped_and_future_ones_are_dropped_and_counted():
    gate, now = ActionGate(1.0), 100 * NS
    assert gate.refusal(now - 299 * MS, 300 * MS, now) == ""
    assert "stale action dropped: 301 ms old, valid for 300 ms" in gate.refusal(now - 301 * MS, 300 * MS, now)
    assert "unstamped" in gate.refusal(0, 300 * MS, now)
    assert "future" in gate.refusal(now + 2 * NS, 300 * MS, now)
    assert gate.refusal(now - 50 * NS, 0, now).startswith("stale")  # the arm's cap applies to unbounded actions
    assert (gate.applied, gate.dropped) == (1, 4)
    assert ActionGate(0.0).refusal(1, 0, now) == ""  # both 0: no age check (still needs a stamp)


def test_a_stop_drops_what_was_stamped_up_to_it_and_zero_means_now():
    gate, now = ActionGate(1.0), 100 * NS
    assert gate.stop(now - 10 * MS, now) == now - 10 * MS
    assert "before the last stop" in gate.refusal(now - 10 * MS, 300 * MS, now)
    assert gate.refusal(now - 9 * MS, 300 * MS, now) == ""
    assert gate.stop(0, now) == now  # an operator's `ros2 topic pub` without a stamp: now
    assert gate.stop(now - NS, now) == now - NS and gate.stop_ns == now  # an older stop never moves it back
    assert "before the last stop" in gate.refusal(now, 300 * MS, now + MS)
