"""What operator_console does, without ROS: turn a browser's buttons into service calls and goals, and keep the page's
model current.

The node (amf_ros/ros/nodes/operator_console.py) feeds ROS messages into the ``on_*`` methods and carries out what
:class:`ConsoleOutputs` asks (bounded service calls, action goals, an ArmStop), always asynchronously: every output
gets a ``done(result, why)`` callback, ``result`` a dict of the response's fields or None with ``why`` saying what
went wrong (no server, timeout). Nothing here waits.

Rules an operator relies on:
- One episode at a time, as the recorder has it: Start while the recorder is recording is refused here with the
  episode it is recording (a second browser cannot start over the first one's demonstration), and again by the
  recorder itself should its status be late. Save / Discard name the episode being recorded, so a late click
  cannot end a newer one.
- One fine-tune and one evaluation from this console at a time; Stop all publishes an ArmStop (the arm holds, the
  teleop drops its take) and cancels both.
- Evaluate never runs while a demonstration is being recorded (the policy would fight the operator), except where a
  teleop node reports its state (a person's device; the bring-up then runs no scripted_teleop): there the goal is
  recorded into the episode and the person takes over by holding the deadman (an intervention episode, per-step
  ``actor``; docs/console.md "Take over from the policy"), and the scene is not reset (that would end the episode).
  Otherwise, on the embedded simulation it resets the scene to the task first, on a real arm the operator sets it.
- Who commands the arm during a goal (policy_server's ``control`` topic, :meth:`OperatorConsole.on_control`) is
  shown in the Drive panel.
- ``auto_ask``: the decision is asked again after every saved episode and every new checkpoint, so the "why" panel
  always shows the scores for the data and policy that exist now (one call per event, never per browser).
- Driving (the Drive panel): a browser's input state becomes the input the node republishes as sensor_msgs/Joy on
  ``teleop/console_joy`` (:class:`~amf_ros.console.drive.DriveSession`: one browser drives at a time; nothing is
  republished once it has been silent for ``drive_silence_s``; a closed page is released at once). The page never
  reaches the arm's action topic: the teleop node does, with its deadman and bounds; its latched ``teleop/state``
  is shown beside the keys.
"""

from __future__ import annotations

import json
import math
import threading
from typing import Any, Callable, Mapping, Protocol

from amf_ros.console.drive import DriveInput, DriveSession
from amf_ros.console.model import ConsoleModel, answer_level
from amf_ros.console.protocol import Command

Done = Callable[[Mapping[str, Any] | None, str], None]
Reply = Callable[[bool, str], None]
TELEOP_STATE_MAX_FIELDS = 24
"""Bound on the fields of the teleop node's state shown on the page (each value cut to 200 characters)."""


class ConsoleOutputs(Protocol):
    """What the console asks of the ROS graph (implemented by the node); every call returns at once."""

    def next_task(self, done: Done) -> None:
        """Ask task_selector for the next task (/next_task, batch 1); ``done`` gets the decision's fields."""

    def start_episode(self, task: str, instruction: str, done: Done) -> None:
        """Ask the recorder to start recording an episode of ``task``."""

    def rerecord(self, task: str, done: Done) -> None:
        """Ask the recorder to discard the episode being recorded and start one of ``task`` in its place."""

    def end_episode(self, episode_id: str, success: bool, discard: bool, done: Done) -> None:
        """Ask the recorder to save (with the verdict ``success``) or discard the episode ``episode_id``."""

    def fine_tune(self, feedback: Callable[[int, int, float], None], done: Done) -> None:
        """Send a fine_tune goal; ``feedback(step, total, loss)`` reports progress."""

    def run_policy(self, task: str, feedback: Callable[[int], None], done: Done) -> None:
        """Send a run_policy goal (the evaluation of ``task``); ``feedback(step)`` reports progress."""

    def cancel(self, goal: str, done: Done) -> None:
        """Cancel this console's ``goal`` ("fine_tune" or "evaluate")."""

    def stop_arm(self, reason: str) -> None:
        """Publish an ArmStop: the arm holds and the teleop drops its take."""

    def reset_sim(self, task: str, done: Done) -> None:
        """Reset the embedded simulation to a new scene of ``task``."""


class OperatorConsole:
    """Commands in, service calls out, the model kept current (module docstring).

    Args:
        model: what the page shows.
        outputs: the ROS side.
        auto_ask: ask next_task again after each saved episode and each new checkpoint.
        drive: the Drive session (who drives, the input to republish); a default one when None.
    """

    def __init__(self, model: ConsoleModel, outputs: ConsoleOutputs, auto_ask: bool = True,
                 drive: DriveSession | None = None) -> None:
        self.model, self.out, self.auto_ask = model, outputs, auto_ask
        self.drive = drive if drive is not None else DriveSession()
        self._driving = False
        self._lock = threading.Lock()
        self._recording: tuple[bool, str, str] = (False, "", "")  # recording, episode_id, task
        self._last_task = ""
        self._fine_tuning = False
        self._evaluating = ""
        self._asking = False
        self._ask_again = False
        self._checkpoint = ""
        self._sim = False

    # -- inputs from ROS ---------------------------------------------------------------------------------------
    def on_recorder_status(self, status: Mapping[str, Any]) -> None:
        """A RecorderStatus as a dict: remembered (to refuse a second Start) and shown on the page."""
        with self._lock:
            self._recording = (bool(status.get("recording")), str(status.get("episode_id", "")),
                               str(status.get("task", "")))
        self.model.on_recorder_status(status)

    def on_episode(self, info: Mapping[str, Any]) -> None:
        """A saved episode (EpisodeInfo): listed on the page; the decision is refreshed."""
        self.model.on_episode(info)
        self.model.log("info", f"saved {info.get('episode_id', '?')} ({info.get('task', '?')}, "
                               f"{info.get('num_steps', 0)} steps, {'success' if info.get('success') else 'failure'})")
        if self.auto_ask:
            self.ask()

    def on_checkpoint(self, path: str, round_: int, tasks: list[str], alphas: list[float]) -> None:
        """A (re-)announced checkpoint: shown, ends a fine-tune started elsewhere, and refreshes the decision."""
        with self._lock:
            new = path != self._checkpoint
            self._checkpoint = path
        self.model.on_checkpoint(path, round_, tasks, alphas)
        with self._lock:
            own = self._fine_tuning
        ft = self.model.section("policy").get("fine_tune") or {}
        if new and ft.get("running") and not own:  # a fine-tune started elsewhere (amf run, the CLI) ended
            self.model.on_fine_tune(False, ft.get("step", 0), ft.get("total", 0), message=f"new checkpoint {path}")
        if new and self.auto_ask:
            self.ask()

    def on_sim(self, available: bool, **status: Any) -> None:
        """Whether sim_bridge answers (Evaluate then resets the scene first), with its status for the page."""
        with self._lock:
            self._sim = available
        self.model.on_sim(available, **status)

    # -- the decision ------------------------------------------------------------------------------------------
    def ask(self, reply: Reply | None = None) -> None:
        """next_task; concurrent asks are folded into one more call after the current one returns."""
        with self._lock:
            if self._asking:
                self._ask_again = True
                if reply is not None:
                    reply(True, "already asking; the page updates when the answer arrives")
                return
            self._asking = True

        def done(res: Mapping[str, Any] | None, why: str) -> None:
            with self._lock:
                self._asking, again = False, self._ask_again
                self._ask_again = False
            if res is not None:
                self.model.on_decision(res)
            ok = res is not None and bool(res.get("ok"))
            text = (f"next task: {res.get('task')} ({res.get('selector')}, {res.get('compute_time', 0):.2f} s)"
                    if ok and res is not None else f"next_task failed: {why or (res or {}).get('message', '')}")
            self._report(reply, "ask", ok, text)
            if again:
                self.ask()
        self.out.next_task(done)

    # -- commands from browsers ---------------------------------------------------------------------------------
    def handle(self, cmd: Command, reply: Reply) -> None:
        """Carry out one validated browser command; ``reply(ok, text)`` exactly once, possibly later."""
        getattr(self, f"_op_{cmd.op}")(cmd, reply)

    def _op_ask(self, cmd: Command, reply: Reply) -> None:
        self.ask(reply)

    def _op_start(self, cmd: Command, reply: Reply) -> None:
        task = cmd.task or self._decided_task()
        if not task:
            return self._report(reply, "start", False, "no task: press Ask first or pick a task")
        recording, episode, current = self._state()
        if recording:
            return self._report(reply, "start", False, f"already recording {episode} ({current}): save, discard or "
                                                       "re-record it first")
        with self._lock:
            self._last_task = task

        def done(res: Mapping[str, Any] | None, why: str) -> None:
            ok = res is not None and bool(res.get("ok"))
            self._report(reply, "start", ok, f"recording {res.get('episode_id')} ({task})" if ok and res else
                         f"start {task} refused: {why or (res or {}).get('message', '')}")
        self.out.start_episode(task, self.model.tasks.get(task, ""), done)

    def _op_rerecord(self, cmd: Command, reply: Reply) -> None:
        recording, episode, current = self._state()
        if not recording:
            with self._lock:
                task = self._last_task
            if not task:
                return self._report(reply, "rerecord", False, "nothing to re-record: no episode started here")
            return self._op_start(Command("start", task), reply)

        def done(res: Mapping[str, Any] | None, why: str) -> None:
            ok = res is not None and bool(res.get("ok"))
            self._report(reply, "rerecord", ok, (res or {}).get("message", "") if ok else
                         f"re-record refused: {why or (res or {}).get('message', '')}")
        self.out.rerecord("", done)

    def _end(self, op: str, success: bool, discard: bool, reply: Reply) -> None:
        recording, episode, task = self._state()
        if not recording:
            return self._report(reply, op, False, "not recording: nothing to save or discard")

        def done(res: Mapping[str, Any] | None, why: str) -> None:
            ok = res is not None and bool(res.get("ok"))
            what = "discarded" if discard else f"saved as {'success' if success else 'failure'}"
            self._report(reply, op, ok, f"{episode} ({task}) {what}, {res.get('num_steps', 0)} steps" if ok and res
                         else f"ending {episode} failed: {why or (res or {}).get('message', '')}")
        self.out.end_episode(episode, success, discard, done)

    def _op_save_success(self, cmd: Command, reply: Reply) -> None:
        self._end("save_success", True, False, reply)

    def _op_save_failure(self, cmd: Command, reply: Reply) -> None:
        self._end("save_failure", False, False, reply)

    def _op_discard(self, cmd: Command, reply: Reply) -> None:
        self._end("discard", False, True, reply)

    def _op_fine_tune(self, cmd: Command, reply: Reply) -> None:
        with self._lock:
            if self._fine_tuning:
                return self._report(reply, "fine_tune", False, "a fine-tune is already running; cancel it first")
            self._fine_tuning = True
        self.model.on_fine_tune(True, message="starting")

        def feedback(step: int, total: int, loss: float) -> None:
            self.model.on_fine_tune(True, step, total, loss)

        def done(res: Mapping[str, Any] | None, why: str) -> None:
            with self._lock:
                self._fine_tuning = False
            ok = res is not None and bool(res.get("ok"))
            text = (f"fine-tuned: {res.get('checkpoint')} (final loss {res.get('final_loss', float('nan')):.4f})"
                    if ok and res else f"fine-tune failed: {why or (res or {}).get('message', '')}")
            self.model.on_fine_tune(False, message=text)
            self._report(reply, "fine_tune", ok, text)
        self.out.fine_tune(feedback, done)

    def _op_cancel_fine_tune(self, cmd: Command, reply: Reply) -> None:
        self._cancel("fine_tune", reply)

    def _op_evaluate(self, cmd: Command, reply: Reply) -> None:
        task = cmd.task or self._decided_task()
        if not task:
            return self._report(reply, "evaluate", False, "no task: pick the task to evaluate")
        recording, episode, _ = self._state()
        person = self.model.section("drive").get("teleop") is not None  # a teleop node: a person can take over
        if recording and not person:
            return self._report(reply, "evaluate", False, f"recording {episode}: the policy must not drive the arm "
                                                          "during a demonstration (with a teleop node, teleop:=..., "
                                                          "the goal is recorded and a person can take over)")
        with self._lock:
            if self._evaluating:
                return self._report(reply, "evaluate", False, f"already evaluating {self._evaluating}")
            self._evaluating = task
            sim = self._sim and not recording  # a reset would end the episode being recorded
        self.model.on_evaluation(True, task, message="resetting the scene" if sim else "running")

        def run(res: Mapping[str, Any] | None = None, why: str = "") -> None:
            if sim and (res is None or not res.get("ok")):
                return finish(None, f"scene reset failed: {why or (res or {}).get('message', '')}")
            self.out.run_policy(task, lambda step: self.model.on_evaluation(True, task, step), finish)

        def finish(res: Mapping[str, Any] | None, why: str) -> None:
            with self._lock:
                self._evaluating = ""
            ok = res is not None and bool(res.get("ok"))
            success = bool(res.get("success")) if ok and res else None
            text = (f"{task}: {'success' if success else 'failure'} in {res.get('steps')} steps" if ok and res
                    else f"evaluation of {task} failed: {why or (res or {}).get('message', '')}")
            self.model.on_evaluation(False, task, int((res or {}).get("steps", 0) or 0), success, text)
            self._report(reply, "evaluate", ok, text)
        if sim:
            self.out.reset_sim(task, run)
        else:
            run()

    def _op_cancel_evaluate(self, cmd: Command, reply: Reply) -> None:
        self._cancel("evaluate", reply)

    def _op_stop_all(self, cmd: Command, reply: Reply) -> None:
        self.out.stop_arm("operator console: Stop all")
        with self._lock:
            goals = [g for g, on in (("fine_tune", self._fine_tuning), ("evaluate", bool(self._evaluating))) if on]
        for goal in goals:
            self.out.cancel(goal, lambda res, why: None)
        self._report(reply, "stop_all", True, "ArmStop published" + (f"; cancelling {', '.join(goals)}" if goals
                                                                      else ""), level="warn")

    def _op_reset_sim(self, cmd: Command, reply: Reply) -> None:
        with self._lock:
            sim = self._sim
        if not sim:
            return self._report(reply, "reset_sim", False, "no simulator in this graph (sim/reset is not offered)")
        task = cmd.task or self._decided_task()
        if not task:
            return self._report(reply, "reset_sim", False, "no task: pick one")

        def done(res: Mapping[str, Any] | None, why: str) -> None:
            ok = res is not None and bool(res.get("ok"))
            self._report(reply, "reset_sim", ok, f"scene of {task} reset" if ok else
                         f"reset failed: {why or (res or {}).get('message', '')}")
        self.out.reset_sim(task, done)

    # -- driving -----------------------------------------------------------------------------------------------
    def drive_input(self, client: str, inp: DriveInput) -> tuple[bool, str]:
        """A browser's Drive input (called on the web server's thread; nothing waits). Returns ``(publish_now,
        refusal)``: ``publish_now`` when the input changed (the node publishes it at once rather than at its next
        tick), ``refusal`` "" or why it was refused (another browser drives)."""
        changed, why = self.drive.put(client, inp)
        if not why:
            with self._lock:
                self._driving = True
            if changed:
                self.model.on_drive(self.drive.status())
        return changed, why

    def drive_release(self, client: str) -> bool:
        """Browser ``client`` closed: if it was driving, everything is released at once (True: publish now)."""
        released = self.drive.release(client)
        if released:
            self.model.on_drive(self.drive.status())
            self.model.log("warn", f"drive: browser {client} closed while driving: released")
        return released

    def drive_publish(self, tick: bool) -> list[DriveInput]:
        """The inputs to publish now, in order: every change not published yet; on a republish ``tick`` (the node's
        timer at ``drive_rate_hz``) at least the newest input while it is fresh. Empty once the driving browser has
        been silent for the session's ``silence_s`` (publish nothing; the page shows that nobody drives)."""
        out = self.drive.drain()
        if out or not tick:
            return out
        inp = self.drive.latest()
        if inp is None:
            with self._lock:
                ended, self._driving = self._driving, False
            if ended:
                self.model.on_drive(self.drive.status())
            return []
        return [inp]

    def on_control(self, source: str, node: str, stamp_ns: int) -> None:
        """policy_server's ControlSource on ``control``: who commands the arm during a run_policy goal ("policy", or
        "human" and the teleop node that took over; "" = no goal), shown at the top of the Drive panel."""
        shown = source if source in ("policy", "human") else "none"
        self.model.on_drive(control={"source": shown, "node": str(node)[:200], "stamp_ns": int(stamp_ns)})

    def on_teleop_state(self, text: str) -> None:
        """The teleop node's latched state (a JSON object: input, deadman held, speed, last input age, ...), shown
        in the Drive panel as it says it; anything else is shown as text with what was wrong."""
        try:
            doc = json.loads(text)
        except ValueError as exc:
            doc, error = None, f"not JSON ({exc})"
        else:
            error = "" if isinstance(doc, dict) else f"expected a JSON object, got {type(doc).__name__}"
        if not isinstance(doc, dict):
            self.model.on_drive(teleop={"state": str(text)[:200]}, teleop_error=f"teleop/state: {error}")
            return
        state = {str(k)[:60]: _shown(v) for k, v in list(doc.items())[:TELEOP_STATE_MAX_FIELDS]}
        self.model.on_drive(teleop=state, teleop_error="")

    # -- helpers -----------------------------------------------------------------------------------------------
    def _cancel(self, goal: str, reply: Reply) -> None:
        with self._lock:
            running = self._fine_tuning if goal == "fine_tune" else bool(self._evaluating)
        if not running:
            return self._report(reply, f"cancel_{goal}", False, f"no {goal.replace('_', '-')} started here is running")

        def done(res: Mapping[str, Any] | None, why: str) -> None:
            self._report(reply, f"cancel_{goal}", res is not None, "cancel requested" if res is not None else why)
        self.out.cancel(goal, done)

    def _state(self) -> tuple[bool, str, str]:
        with self._lock:
            return self._recording

    def _decided_task(self) -> str:
        decision = self.model.section("selector").get("decision") or {}
        return str(decision.get("task", "")) if decision.get("ok") else ""

    def _report(self, reply: Reply | None, op: str, ok: bool, text: str, level: str = "") -> None:
        self.model.log(level or answer_level(ok, text), f"{op}: {text}")  # an expected refusal is no error
        if reply is not None:
            reply(ok, text)


def _shown(value: Any) -> Any:
    """A teleop state value as the page shows it: numbers and booleans as they are (NaN/inf as None), anything else
    as text of at most 200 characters."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, (bool, int)) or value is None:
        return value
    return (value if isinstance(value, str) else json.dumps(value))[:200]
