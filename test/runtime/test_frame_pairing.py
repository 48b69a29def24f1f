"""A camera policy's observation pairs each frame with the state of its time (amf_ros/runtime/frame_pairing.py)."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.runtime.frame_pairing import FramePairing

MS = 1_000_000


def _pairing(tolerance_ms: float = 50.0, clock=None) -> tuple[FramePairing, list[dict]]:
    """A pairing whose output dicts also carry the stamp it emitted them with (under "stamp")."""
    out: list[dict] = []
    kw = {} if clock is None else {"clock_ns": clock}
    return FramePairing(round(tolerance_ms * MS), lambda obs, stamp: out.append({**obs, "stamp": stamp}), **kw), out


def _frame(v: int) -> np.ndarray:
    return np.full((4, 4, 3), v, np.uint8)


@pytest.mark.parametrize("frame_first", [True, False])
def test_a_step_s_frame_and_state_pair_in_either_order(frame_first: bool) -> None:
    pair, out = _pairing()
    pair.on_state([0.0], 1000 * MS)
    pair.on_frame(_frame(0), 1000 * MS)  # step 0: paired
    first, second = (lambda: pair.on_frame(_frame(1), 1200 * MS)), (lambda: pair.on_state([1.0], 1200 * MS))
    (first if frame_first else second)()
    # a frame waiting for its state is not paired with the previous step's state (200 ms away)
    assert len(out) == 1
    (second if frame_first else first)()
    assert len(out) == 2 and out[1]["state"][0] == 1.0 and out[1]["image"][0, 0, 0] == 1
    assert [o["stamp"] for o in out] == [1000 * MS, 1200 * MS], "a pair goes on with its frame's stamp"
    assert pair.paired == 2 and pair.unpaired == 0


def test_each_frame_is_acted_on_once_and_a_state_alone_is_not_an_observation() -> None:
    pair, out = _pairing()
    pair.on_frame(_frame(3), 1000 * MS)
    pair.on_state([1.0], 1000 * MS)
    pair.on_state([2.0], 1001 * MS)  # a newer state within the tolerance: the frame was already paired
    pair.on_state([3.0], 1200 * MS)
    assert [o["state"][0] for o in out] == [1.0]


def test_the_nearest_buffered_state_is_chosen_among_a_faster_stream() -> None:
    pair, out = _pairing(tolerance_ms=20.0)
    for k in range(10):  # joint states at 100 Hz
        pair.on_state([float(k)], (1000 + 10 * k) * MS)
    pair.on_frame(_frame(9), 1043 * MS)  # nearest: 1040 ms (k = 4)
    assert len(out) == 1 and out[0]["state"][0] == 4.0


def test_a_frame_without_a_state_within_the_tolerance_is_dropped_when_a_newer_frame_comes() -> None:
    pair, out = _pairing(tolerance_ms=10.0)
    pair.on_state([0.0], 1000 * MS)
    pair.on_frame(_frame(1), 1100 * MS)  # no state near 1100 ms
    pair.on_frame(_frame(2), 1200 * MS)
    assert out == [] and pair.unpaired == 1
    pair.on_state([2.0], 1195 * MS)
    assert len(out) == 1 and out[0]["image"][0, 0, 0] == 2


def test_unstamped_inputs_are_stamped_at_arrival() -> None:
    now = [5000 * MS]
    pair, out = _pairing(tolerance_ms=5.0, clock=lambda: now[0])
    pair.on_state([7.0])
    now[0] += 2 * MS
    pair.on_frame(_frame(1))
    assert len(out) == 1 and out[0]["state"][0] == 7.0
    assert out[0]["stamp"] == 0, "an arrival time is no ROS stamp: the pair goes on unstamped"
    now[0] += 100 * MS
    pair.on_frame(_frame(2))  # the only state is 102 ms old
    assert len(out) == 1


def test_a_negative_tolerance_is_refused() -> None:
    with pytest.raises(ValueError, match="tolerance_ns"):
        FramePairing(-1, lambda obs, stamp: None)


@pytest.mark.parametrize("order", ["frame state wrist", "wrist frame state", "state wrist frame"])
def test_a_wrist_camera_s_frame_of_the_same_instant_completes_the_observation(order: str) -> None:
    """A camera policy with a wrist camera acts on (frame, state, wrist frame) of one instant, in any arrival order,
    and never on the previous step's wrist frame."""
    out: list[dict] = []
    pair = FramePairing(round(50 * MS), lambda obs, stamp: out.append(obs), wrist=True)
    pair.on_state([0.0], 1000 * MS)
    pair.on_wrist(_frame(100), 1000 * MS)
    pair.on_frame(_frame(0), 1000 * MS)
    assert len(out) == 1 and out[0]["wrist"][0, 0, 0] == 100
    calls = {"frame": lambda: pair.on_frame(_frame(1), 1200 * MS), "state": lambda: pair.on_state([1.0], 1200 * MS),
             "wrist": lambda: pair.on_wrist(_frame(101), 1200 * MS)}
    names = order.split()
    for name in names[:-1]:
        calls[name]()
    assert len(out) == 1  # an input of step 1 is still missing: the step-0 wrist frame (200 ms away) does not do
    calls[names[-1]]()
    assert len(out) == 2 and out[1]["image"][0, 0, 0] == 1 and out[1]["wrist"][0, 0, 0] == 101
    assert out[1]["state"][0] == 1.0


def test_a_pairing_without_a_wrist_camera_ignores_wrist_frames() -> None:
    pair, out = _pairing()
    pair.on_wrist(_frame(7), 1000 * MS)
    pair.on_state([0.0], 1000 * MS)
    pair.on_frame(_frame(0), 1000 * MS)
    assert len(out) == 1 and "wrist" not in out[0]
