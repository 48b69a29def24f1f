"""Which stamped actions an arm may apply: the one rule every arm (sim_bridge, widowx_driver) shares.

Why: an action is a command for the instant it was computed. One that reaches the arm late (a paused simulator, a
stalled network, a queue) or after its goal ended moves the arm where nobody asked it to go. So every
EefDeltaAction carries its stamp and a validity horizon (``valid_for``), and an arm applies it only if

- it is stamped (stamp 0 is refused: the recorder refuses it too, so the arm and the recording agree);
- it is no older than its horizon: the smaller of the action's ``valid_for`` and the arm's own cap
  (either may be 0 = none; both 0 = no age check);
- it is not stamped further in the future than that horizon (clocks of two machines disagreeing);
- it is stamped after the newest stop (amf_ros/ArmStop): policy_server publishes one when a goal ends, an operator
  when the arm must hold. A stop stamped 0 means "now" (the time the arm receives it).

Comparing stamps with the arm's clock needs synchronised clocks across machines (chrony/NTP, as every ROS system
with stamped data does); an arm's cap of 0 and ``valid_for`` 0 turn the age check off.
"""

from __future__ import annotations

from dataclasses import dataclass

NS = 1_000_000_000


@dataclass
class ActionGate:
    """Stamp, horizon and stop bookkeeping of one arm (not thread-safe: call it from one callback group).

    Args:
        max_age_s: the arm's own cap on an action's age, s (0 = only the action's ``valid_for``).
    """

    max_age_s: float = 0.0
    stop_ns: int = 0
    """Actions stamped at or before this (node clock, ns) are dropped."""
    applied: int = 0
    dropped: int = 0

    def __post_init__(self) -> None:
        if not self.max_age_s >= 0:
            raise ValueError(f"max_age_s must be >= 0, got {self.max_age_s=}")

    def horizon_ns(self, valid_for_ns: int) -> int:
        """The validity horizon of an action (0 = none): the smaller of its own and the arm's cap."""
        limits = [int(v) for v in (valid_for_ns, round(self.max_age_s * NS)) if v > 0]
        return min(limits) if limits else 0

    def refusal(self, stamp_ns: int, valid_for_ns: int, now_ns: int) -> str:
        """Why an action stamped ``stamp_ns`` with ``valid_for_ns`` must not be applied at ``now_ns`` ("" = apply
        it). Counts applied and dropped actions."""
        why = self._why(int(stamp_ns), int(valid_for_ns), int(now_ns))
        if why:
            self.dropped += 1
        else:
            self.applied += 1
        return why

    def _why(self, stamp_ns: int, valid_for_ns: int, now_ns: int) -> str:
        if stamp_ns <= 0:
            return "unstamped action (header.stamp 0) dropped; stamp actions with the time they were computed"
        if stamp_ns <= self.stop_ns:
            return (f"action stamped {(self.stop_ns - stamp_ns) / 1e6:.0f} ms before the last stop dropped "
                    "(its goal ended or an operator stopped the arm)")
        horizon = self.horizon_ns(valid_for_ns)
        if horizon and now_ns - stamp_ns > horizon:
            return (f"stale action dropped: {(now_ns - stamp_ns) / 1e6:.0f} ms old, valid for "
                    f"{horizon / 1e6:.0f} ms")
        if horizon and stamp_ns - now_ns > horizon:
            return (f"action stamped {(stamp_ns - now_ns) / 1e6:.0f} ms in the future dropped "
                    "(are the clocks of the two machines synchronised?)")
        return ""

    def stop(self, stamp_ns: int, now_ns: int) -> int:
        """Drop every action stamped up to ``stamp_ns`` (0 = ``now_ns``) from now on; returns the stop time used."""
        at = int(stamp_ns) if stamp_ns > 0 else int(now_ns)
        self.stop_ns = max(self.stop_ns, at)
        return at
