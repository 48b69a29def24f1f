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

What an arm did with the actions it received (applied, refused by reason) and its e-stop are counted the same way on
every arm (:class:`ActionCounts`, published as amf_ros/ArmStatus), so that policy_server can say what became of a
goal's actions and see the e-stop.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

NS = 1_000_000_000

# Why an arm refused an action (the keys of ActionCounts.refused and amf_ros/ArmStatus.refused_reasons).
UNSTAMPED = "unstamped"
BEFORE_STOP = "before a stop"
STALE = "stale"
FUTURE = "stamped in the future"
ESTOP = "e-stop"
INVALID = "invalid"
EPISODE_OVER = "episode over"
NO_JOINT_STATE = "no joint state"
NO_IK = "no IK solution"
STEP_FAILED = "step failed"


@dataclass
class ActionCounts:
    """What an arm did with the actions it received since it started, and its e-stop (amf_ros/ArmStatus)."""

    applied: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    """Reason (the constants above) -> actions refused for it."""
    estop: bool = False
    """The e-stop is engaged now."""
    estop_engagements: int = 0
    """Times the e-stop was engaged (a reader that missed a short engage-release sees it here)."""

    def refuse(self, reason: str) -> None:
        """Count one refused action."""
        self.refused[reason] = self.refused.get(reason, 0) + 1

    def set_estop(self, engaged: bool) -> None:
        """The e-stop was engaged (counted when it was not) or released."""
        if engaged and not self.estop:
            self.estop_engagements += 1
        self.estop = bool(engaged)

    def copy(self) -> ActionCounts:
        """An independent snapshot."""
        return replace(self, refused=dict(self.refused))

    def since(self, before: ActionCounts) -> tuple[int, dict[str, int]]:
        """(applied, refused by reason) since the snapshot ``before`` (an arm restarted meanwhile: counted from 0)."""
        restarted = self.applied < before.applied or any(self.refused.get(k, 0) < n for k, n in before.refused.items())
        base = ActionCounts() if restarted else before
        refused = {k: n - base.refused.get(k, 0) for k, n in sorted(self.refused.items())}
        return self.applied - base.applied, {k: n for k, n in refused.items() if n > 0}

    def summary(self, before: ActionCounts, sent: int) -> str:
        """One clause on what became of ``sent`` actions published since ``before``, e.g. "the arm applied 38,
        refused 20 (e-stop: 19, stale: 1)"; actions the arm has not reported (superseded in its depth-1 queue, still
        in flight) are named too."""
        applied, refused = self.since(before)
        n_refused = sum(refused.values())
        text = f"the arm applied {applied}, refused {n_refused}"
        if refused:
            text += " (" + ", ".join(f"{k}: {n}" for k, n in refused.items()) + ")"
        unseen = sent - applied - n_refused
        if unseen > 0:
            text += f", {unseen} not reported by the arm (superseded in its queue or in flight)"
        return text


@dataclass
class ActionGate:
    """Stamp, horizon and stop bookkeeping of one arm. Call :meth:`refusal` from one thread at a time; :meth:`stop`
    may come from another (it only raises ``stop_ns``, one attribute store, which a refusal reads once).

    Args:
        max_age_s: the arm's own cap on an action's age, s (0 = only the action's ``valid_for``).
    """

    max_age_s: float = 0.0
    stop_ns: int = 0
    """Actions stamped at or before this (node clock, ns) are dropped."""
    applied: int = 0
    dropped: int = 0
    last_drop: str = ""
    """Why the last dropped action was dropped (UNSTAMPED, BEFORE_STOP, STALE, FUTURE)."""

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
        kind, why = self._why(int(stamp_ns), int(valid_for_ns), int(now_ns))
        if why:
            self.dropped += 1
            self.last_drop = kind
        else:
            self.applied += 1
        return why

    def _why(self, stamp_ns: int, valid_for_ns: int, now_ns: int) -> tuple[str, str]:
        if stamp_ns <= 0:
            return UNSTAMPED, ("unstamped action (header.stamp 0) dropped; stamp actions with the time they were "
                               "computed")
        if stamp_ns <= self.stop_ns:
            return BEFORE_STOP, (f"action stamped {(self.stop_ns - stamp_ns) / 1e6:.0f} ms before the last stop "
                                 "dropped (its goal ended or an operator stopped the arm)")
        horizon = self.horizon_ns(valid_for_ns)
        if horizon and now_ns - stamp_ns > horizon:
            return STALE, (f"stale action dropped: {(now_ns - stamp_ns) / 1e6:.0f} ms old, valid for "
                           f"{horizon / 1e6:.0f} ms")
        if horizon and stamp_ns - now_ns > horizon:
            return FUTURE, (f"action stamped {(stamp_ns - now_ns) / 1e6:.0f} ms in the future dropped "
                            "(are the clocks of the two machines synchronised?)")
        return "", ""

    def stop(self, stamp_ns: int, now_ns: int) -> int:
        """Drop every action stamped up to ``stamp_ns`` (0 = ``now_ns``) from now on; returns the stop time used."""
        at = int(stamp_ns) if stamp_ns > 0 else int(now_ns)
        self.stop_ns = max(self.stop_ns, at)
        return at
