"""Who commands the arm during a run_policy goal: the policy, or a person who took over (no rclpy import).

Intervention as in HG-DAgger (Kelly et al., 2019): during a goal the operator presses a teleop deadman, the
policy's actions stop reaching the arm, the operator's are applied and recorded; on release the policy resumes from
the current state. policy_server's control loop is the ONE arbiter (:class:`Handover`); a teleop node asks
(amf_ros/msg/ControlSource on ``control/request``) and drives only once the arbiter has answered ``human`` with its
name on ``control``.

Why this is safe (what the tests check), with one clock (policy_server's node clock; across machines, the clock
synchronisation every stamped action already needs):

- Exactly one publisher at a time. A policy action is published only inside :meth:`Handover.turn`, under the
  arbiter's lock, while the policy holds control; the hand-over to a person takes the same lock, so it comes after
  the policy's last publish, and it is stamped ``S`` from the clock read after it: every policy action of the goal
  published before it is stamped at or before ``S``. The teleop publishes its first action after it received the
  grant, stamped after ``S``.
- The grant first publishes an ArmStop stamped ``S``: the arm drops every policy action stamped at or before ``S``
  that it has not applied yet (amf_ros/robots/action_gate.py), so no stale policy action follows a human one.
- On release the teleop publishes its ArmStop (stamped ``R``, after its last action) and a release request stamped
  ``R``; the teleop publishes nothing after that. The arbiter hands control back at ``P = max(now, R)`` and the
  policy publishes only once its clock is past ``P``, computed from an observation that arrived after the release.
  Whichever of the release request and that ArmStop arrives first hands control back; the other is then ignored
  (same node, stamped at or before ``R``). Any other ArmStop (the console's Stop, ``amf stop``, the teleop's
  silence stop while it is not holding) ends the goal, as before; the arm's e-stop ends it in every mode.
- Labels: control changes are announced with their stamps, so the holder at an action's stamp says who sent it
  (demo_recorder's per-step ``actor`` column, :func:`amf_ros.data.recorder.actor_at`).

Outside a goal nobody arbitrates: a deadman drives at once (a plain demonstration) and its requests are only
remembered, so that a goal started while a person drives begins with the person in control.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

POLICY = "policy"
HUMAN = "human"
NOBODY = ""
SOURCES = (POLICY, HUMAN, NOBODY)
"""ControlSource.source values: the policy acts, a person acts, no goal runs (control) / deadman released
(control/request)."""


@dataclass
class HandoverLog:
    """What happened to control during one goal (appended to run_policy's result message)."""

    takeovers: int = 0
    resumes: int = 0
    changes: list[tuple[int, str, str]] = field(default_factory=list)
    """``(stamp_ns, source, node)`` of every announcement."""

    def summary(self) -> str:
        """"" without takeovers, else e.g. "2 takeovers by a person, 2 resumes"."""
        if not self.takeovers:
            return ""
        return f"{self.takeovers} takeover(s) by a person, {self.resumes} resume(s) of the policy"


class Handover:
    """The arbiter of control (see the module docstring). Thread-safe: requests and stops arrive on subscription
    callbacks, the control loop calls :meth:`begin`, :meth:`turn`, :meth:`wait_turn` and :meth:`end`.

    Args:
        clock: the node clock now, ns (the clock that stamps the policy's actions).
        announce: publish ControlSource ``(source, node, stamp_ns)`` on ``control`` (latched).
        stop: publish an ArmStop ``(stamp_ns, reason)`` (policy_server's own: the arm drops older actions).
        me: policy_server's fully qualified name (the ``node`` of a ``policy`` announcement).
    """

    def __init__(self, clock: Callable[[], int], announce: Callable[[str, str, int], None],
                 stop: Callable[[int, str], None], me: str = "policy_server") -> None:
        self._clock, self._announce, self._stop, self.me = clock, announce, stop, me
        self._cond = threading.Condition(threading.RLock())
        self._requests: dict[str, tuple[str, int]] = {}  # teleop node -> its newest (source, stamp)
        self._released: dict[str, int] = {}  # teleop node -> stamp of its newest release
        self._missing: set[str] = set()  # teleop nodes not in the graph at the last check_alive
        self.goal = False
        self.holder = NOBODY
        """NOBODY (no goal), POLICY, or the teleop node that holds control."""
        self.floor_ns = 0
        """The policy publishes only once the clock is past this (the stamp of its latest resume)."""
        self.generation = 0
        """Counts hand-backs to the policy (the loop resumes from a fresh observation after each)."""
        self.resumed_at = -1.0
        """Monotonic time of the latest hand-back: the policy acts on observations that arrived after it."""
        self.log = HandoverLog()

    # -- the control loop ------------------------------------------------------------------------------------------
    def begin(self) -> None:
        """A goal starts: the policy acts, unless a person holds a deadman now (then that person does)."""
        with self._cond:
            self.goal, self.log = True, HandoverLog()
            pressed = self._pressed()
            if pressed:  # the policy has published nothing yet: no stop needed, and no "policy" announced first
                self._set(HUMAN, pressed, max(self._clock(), self.floor_ns + 1))
                self.log.takeovers += 1
            else:
                self._set(POLICY, self.me, self._clock())

    def idle(self) -> None:
        """Announce that no goal runs (at start: teleop nodes learn the arbiter's name from it)."""
        with self._cond:
            if not self.goal:
                self._announce(NOBODY, self.me, self._clock())

    def end(self) -> None:
        """The goal ended (any reason): nobody arbitrates; a held deadman drives on only after a new press."""
        with self._cond:
            if self.goal:
                self.goal = False
                self._set(NOBODY, self.me, self._clock())
            self._cond.notify_all()

    @contextmanager
    def turn(self) -> Iterator[bool]:
        """``with handover.turn() as mine: if mine: publish(action)``: the lock is held across the publish, so no
        hand-over happens in between; ``mine`` is False while a person holds control or before the clock passed
        the latest resume."""
        with self._cond:
            yield self.policy_may_act()

    def policy_may_act(self) -> bool:
        """The policy holds control and the clock is past its latest resume."""
        with self._cond:
            return self.holder == POLICY and self._clock() > self.floor_ns

    def wait_turn(self, timeout_s: float) -> bool:
        """Wait (bounded) until the policy holds control; True if it does."""
        with self._cond:
            return self._cond.wait_for(lambda: self.holder == POLICY or not self.goal, timeout=max(0.0, timeout_s)) \
                and self.holder == POLICY

    # -- teleop nodes ----------------------------------------------------------------------------------------------
    def request(self, node: str, source: str, stamp_ns: int) -> str:
        """A teleop node's ControlSource on ``control/request``: ``human`` = its deadman is pressed, ``""`` = released
        (stamped like its ArmStop). Returns what it did: "granted", "released", "pending" or "" (nothing)."""
        if source not in (HUMAN, NOBODY):
            return ""
        with self._cond:
            self._requests[node] = (source, int(stamp_ns))
            if source == NOBODY:
                self._released[node] = max(self._released.get(node, 0), int(stamp_ns))
                return self._give_back(node, int(stamp_ns)) if self.goal and self.holder == node else ""
            if not self.goal:
                return ""
            return "granted" if self._grant_pending() == node else "pending"

    def on_stop(self, source: str, stamp_ns: int) -> str:
        """An ArmStop from ``source`` (not policy_server itself). Returns "end" when it ends the goal, "released" when
        it is the release of the person holding control (the policy resumes), "ignored" when it is the ArmStop of a
        release already handled (same node, stamped at or before it), "" when no goal runs."""
        with self._cond:
            if not self.goal:
                return ""
            if source and source == self.holder:
                self._released[source] = max(self._released.get(source, 0), int(stamp_ns))
                self._requests[source] = (NOBODY, int(stamp_ns))
                return self._give_back(source, int(stamp_ns))
            if source and 0 < int(stamp_ns) <= self._released.get(source, 0):
                return "ignored"
            return "end"

    def check_alive(self, alive: set[str]) -> str:
        """Called about once a second with the teleop nodes now in the ROS graph (publishers of ``control/request``).
        A node missing from two checks in a row is forgotten (its held deadman no longer counts); if it held control
        during a goal, returns its name: the caller ends the goal (a person's hands left with their node: neither
        a silent wait until the goal's time bound nor a policy resuming on its own). "" otherwise."""
        with self._cond:
            gone = {n for n in self._requests if n not in alive}
            vanished = gone & self._missing
            self._missing = gone - vanished
            for node in vanished:
                del self._requests[node]
            return self.holder if self.goal and self.holder in vanished else ""

    # -- internals (lock held) -------------------------------------------------------------------------------------
    def _set(self, source: str, node: str, stamp_ns: int) -> None:
        self.holder = node if source == HUMAN else source
        self.log.changes.append((stamp_ns, source, node))
        self._announce(source, node, stamp_ns)
        self._cond.notify_all()

    def _grant_pending(self) -> str:
        """Hand control to the longest-waiting person whose deadman is held, if the policy holds it; returns the node
        granted ("" if none)."""
        node = self._pressed() if self.holder == POLICY else ""
        if not node:
            return ""
        now = max(self._clock(), self.floor_ns + 1)
        self._stop(now, f"hand-over: {node} takes over from the policy")
        self._set(HUMAN, node, now)
        self.log.takeovers += 1
        return node

    def _pressed(self) -> str:
        """The teleop node whose deadman has been held longest ("" if none)."""
        pressed = sorted((stamp, node) for node, (source, stamp) in self._requests.items() if source == HUMAN)
        return pressed[0][1] if pressed else ""

    def _give_back(self, node: str, stamp_ns: int) -> str:
        now = max(self._clock(), stamp_ns)
        self.floor_ns = now
        self.resumed_at = time.monotonic()
        self.generation += 1
        self._set(POLICY, self.me, now)
        self.log.resumes += 1
        self._grant_pending()  # another person holds a deadman: straight to them
        return "released"
