"""What sim_bridge does, without ROS: host a simulator, step it once per action, reset it, keep the task status,
and decide when the current observation is (re-)published.

Stepping semantics (what a publisher of actions can rely on; the node amf_ros/ros/nodes/sim_bridge.py only maps
messages to these calls):
- :meth:`SimBridge.step` applies ONE 7-D EefDeltaAction vector (the backend converts it to its native action),
  then emits the resulting :class:`Frame` at once. The simulator never advances on its own.
- An action with NaN/inf or of the wrong length, or one arriving after the episode is over (solved, or the task's
  max_steps reached), is refused (a message is returned) and does not step the simulator. Actions refused within
  :data:`LATE_ACTION_S` of the episode's end were in flight when it ended (a policy computed them before it saw the
  end): expected, not an error (:meth:`SimBridge.late_refusals`; the node logs the first at info).
- :meth:`SimBridge.reset` starts a new episode (``seed < 0`` = the next seed of ``seed, seed+1, ...``) and emits
  its first frame before returning.
- :meth:`SimBridge.idle` re-emits the current frame when nothing was emitted for ``idle_publish_period_s``, as a
  real arm keeps publishing its joint states.
Every emitted frame carries the :class:`TaskState` of the same instant (task, resets, steps, success since the
reset, done) and the stamp of when its state was taken, read before its cameras render (``stamp_clock``); the node
publishes image, wrist image (if any), state and TaskStatus with that stamp, in that order. Stamped at publishing
instead, a re-publish whose rendering (100-200 ms with two cameras) an action waited behind went out stamped after
that action while showing the state before it, and the policy took it for the action's result (the control loop
acts only on observations stamped after its previous action: amf_ros/runtime/control_loop.py).
What the arm did with every action (applied, refused by reason) and its e-stop are counted in an
:class:`~amf_ros.robots.action_gate.ActionCounts`, handed to ``arm_status`` whenever it changes (the node publishes
amf_ros/ArmStatus). All simulator access holds one lock, so a reset never interleaves with a step whatever thread
calls.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from amf_ros.data.tasks import task_key_problem
from amf_ros.envs.suites import SimBackend
from amf_ros.robots.action_gate import EPISODE_OVER, ESTOP, INVALID, STEP_FAILED, ActionCounts

LATE_ACTION_S = 2.0
"""An action refused this soon (s) after its episode ended was in flight at the end (its sender had not yet seen the
done status): expected. Later ones mean the sender ignores the end: an error. Generous on a loaded machine: an action
older than its ``valid_for`` (0.5 s from policy_server) is dropped by the arm's gate before it gets here."""


@dataclass(frozen=True)
class TaskState:
    """What the arm is doing (the fields of amf_ros/TaskStatus).

    Attributes:
        task: task key the arm was last reset to.
        resets: resets since the bridge was built (the reset at construction counts: the first frame has 1).
        steps: actions applied since the last reset.
        success: solved at any step since the last reset.
        done: episode over (solved or the task's max_steps reached): further actions are refused.
    """

    task: str
    resets: int
    steps: int
    success: bool
    done: bool


@dataclass(frozen=True)
class Frame:
    """One observation to publish: ``state`` (D,) float64, ``image`` (H, W, 3) uint8 or None, the status, and
    ``wrist_image`` (H, W, 3) uint8 from the second camera (None when there is none, see
    :attr:`RenderSpec.wrist_camera`).

    ``stamp_ns`` is when its state was taken (ns of the ``stamp_clock``; 0 without one). ``render_error`` is non-empty
    when rendering was asked for and failed (the state still goes out); after the first failure of either camera both
    stay off and every later frame repeats that error (see ``SimBridge._frame``)."""

    state: np.ndarray
    image: np.ndarray | None
    status: TaskState
    render_error: str = ""
    wrist_image: np.ndarray | None = None
    stamp_ns: int = 0


@dataclass(frozen=True)
class RenderSpec:
    """Camera image rendered with every frame, and optionally a second camera's (``wrist_camera``, e.g. ``wrist``
    on the embedded WidowX; "" = none) of the same size."""

    width: int = 128
    height: int = 128
    camera: str = "corner"
    wrist_camera: str = ""


class SimBridge:
    """A simulated arm: reset / step / status / idle re-publish decisions (see the module docstring).

    Args:
        sim: the simulator (:meth:`amf_ros.envs.suites.Suite.backend`).
        emit: called with every :class:`Frame` to publish (inside the lock, in order).
        initial_task: task reset to at construction ("" = the first task of the backend).
        seed: first scene seed of the sequence used by ``reset(task, seed < 0)``.
        render: camera to render with every frame (None = no image).
        idle_publish_period_s: re-emit the current frame after this long without one (0 = never).
        clock: monotonic clock in seconds (tests pass a fake).
        arm_status: called (inside the lock) with a snapshot of :attr:`counts` whenever it changes.
        stamp_clock: the ROS clock, ns, read when a frame's state is taken (None: frames carry no stamp).
    Raises:
        ValueError: ``initial_task`` is not a task of the backend, or ``seed < 0``.
    """

    def __init__(self, sim: SimBackend, emit: Callable[[Frame], None], initial_task: str = "", seed: int = 0,
                 render: RenderSpec | None = None, idle_publish_period_s: float = 0.5,
                 clock: Callable[[], float] = time.monotonic,
                 arm_status: Callable[[ActionCounts], None] | None = None,
                 stamp_clock: Callable[[], int] | None = None) -> None:
        if seed < 0:
            raise ValueError(f"seed must be >= 0, got {seed=}")
        if idle_publish_period_s < 0:
            raise ValueError(f"idle_publish_period_s must be >= 0, got {idle_publish_period_s=}")
        self.sim = sim
        self._emit = emit
        self._render = render
        self._render_error = ""  # the first render failure: the camera is off from then on
        self._idle_s = float(idle_publish_period_s)
        self._clock = clock
        self._stamp_clock = stamp_clock
        self._lock = threading.Lock()
        self._next_seed = int(seed)
        self._resets = 0
        self._steps = 0
        self._success = False
        self._done = False
        self._ended_at = 0.0  # clock() when the episode ended (done)
        self._late = 0  # actions refused in a row within LATE_ACTION_S of the episode's end (0: the last was not)
        self._obs: np.ndarray | None = None
        self._last_emit = clock()
        self._arm_status = arm_status
        self.counts = ActionCounts()
        """Actions applied and refused by reason since the start, and the e-stop (amf_ros/ArmStatus)."""
        self.counts.set_estop(bool(getattr(sim, "estopped", False)))
        self.state_names = [str(n) for n in getattr(sim, "state_names", [])]
        task = initial_task or self.task_keys[0]
        try:
            self.reset(task, -1)
        except ValueError as exc:
            raise ValueError(f"initial_task: {exc}") from exc

    @property
    def task_keys(self) -> list[str]:
        """Task keys of the backend."""
        return list(self.sim.task_keys)

    def instruction(self, task: str) -> str:
        """Instruction of ``task``."""
        return str(self.sim.instruction(task))

    def status(self) -> TaskState:
        """The current task status."""
        with self._lock:
            return self._state()

    def reset(self, task: str, seed: int = -1) -> int:
        """Reset to ``task`` with scene ``seed`` (< 0: next seed of the sequence) and emit the first frame.

        Returns:
            the seed used.
        Raises:
            ValueError: unknown task (the simulator is left as it was). Backend errors propagate.
        """
        with self._lock:
            if task not in self.sim.task_keys:  # quoted bounded: a request's task may be any size (issue 33)
                raise ValueError(f"{task_key_problem(task) or f'unknown task {task!r}'}; this simulator has "
                                 f"{list(self.sim.task_keys)}")
            if seed < 0:
                seed, self._next_seed = self._next_seed, self._next_seed + 1
            self._obs = np.asarray(self.sim.reset(task, int(seed)), dtype=np.float64)
            self._resets += 1
            self._steps, self._success, self._done = 0, False, False
            self._publish()
            return int(seed)

    def step(self, a7: Any, applied: Callable[[], None] | None = None,
             admit: Callable[[], tuple[str, str]] | None = None) -> str:
        """Apply one 7-D action and emit the resulting frame; ``applied`` is called once the simulator stepped,
        before the frame goes out (the node echoes the action there, ahead of the observation it led to).

        ``admit`` (the node's action gate) is asked first, with the lock held, so an action is judged on its age and
        on the stops when it would run, whichever thread calls; it returns (reason, message) of a drop, counted
        under ``reason`` like a refusal, or ("", "") to go on.

        Returns:
            "" when the simulator stepped, else why the action was refused or dropped (nothing stepped, nothing
            emitted).
        """
        a = np.asarray(a7, dtype=np.float64).reshape(-1)
        with self._lock:
            reason, message = admit() if admit is not None else ("", "")
            if message:
                self.counts.refuse(reason)
                self._arm_changed()
                return message
            if a.shape != (7,) or not np.all(np.isfinite(a)):
                return self._refused(INVALID, f"refused action: not 7 finite values, got {a.tolist()}")
            if self._done:
                late = self._late + 1 if self._clock() - self._ended_at <= LATE_ACTION_S else 0
                message = self._refused(EPISODE_OVER, f"refused action: the episode of {self.sim.task!r} is over "
                                                      f"after {self._steps} steps (reset first)")
                self._late = late
                return message
            held = self.sim.refusal() if hasattr(self.sim, "refusal") else ""
            if held:  # the embedded WidowX's e-stop (its only refusal)
                return self._refused(ESTOP, f"refused action: {held}")
            try:
                obs, success, done = self.sim.step_eef7(a)
            except Exception as exc:
                return self._refused(STEP_FAILED, f"refused action: step failed: {type(exc).__name__}: {exc}")
            self._obs = np.asarray(obs, dtype=np.float64)
            self._steps += 1
            self._success = self._success or bool(success)
            self._done = bool(done)
            if self._done:
                self._ended_at = self._clock()
            if applied is not None:
                applied()
            self._publish()
            self.counts.applied += 1
            self._arm_changed()
            return ""

    def arm_counts(self) -> ActionCounts:
        """A snapshot of :attr:`counts` (the node publishes it at start)."""
        with self._lock:
            return self.counts.copy()

    def late_refusals(self) -> int:
        """How many actions in a row, up to the last one refused, arrived within :data:`LATE_ACTION_S` after their
        episode ended (in flight at its end: expected); 0 when the last refusal was anything else (an error)."""
        with self._lock:
            return self._late

    def _refused(self, reason: str, message: str) -> str:
        """Count a refused action (lock held); returns ``message``."""
        self._late = 0
        self.counts.refuse(reason)
        self._arm_changed()
        return message

    def _arm_changed(self) -> None:
        if self._arm_status is not None:
            self._arm_status(self.counts.copy())

    @property
    def has_estop(self) -> bool:
        """The simulated arm has an emergency stop (the embedded WidowX: widowx_driver's)."""
        return hasattr(self.sim, "estop")

    def estop(self, engage: bool) -> str:
        """Engage or release the simulated arm's emergency stop; returns the driver's message. While engaged every
        action is refused (nothing steps, nothing is echoed) and the arm holds where it was."""
        if not self.has_estop:
            raise ValueError(f"the {type(self.sim).__name__} simulator has no emergency stop")
        with self._lock:
            message = str(self.sim.estop(bool(engage)))
            self.counts.set_estop(bool(getattr(self.sim, "estopped", engage)))
            self._arm_changed()
            return message

    def idle(self) -> bool:
        """Re-emit the current frame if nothing was emitted for ``idle_publish_period_s``; True if it did."""
        with self._lock:
            if self._idle_s <= 0 or self._clock() - self._last_emit < self._idle_s:
                return False
            self._publish()
            return True

    def _state(self) -> TaskState:
        return TaskState(task=str(self.sim.task), resets=self._resets, steps=self._steps, success=self._success,
                         done=self._done)

    def _publish(self) -> None:
        """Emit the current observation (lock held)."""
        self._emit(self._frame())
        self._last_emit = self._clock()

    def _frame(self) -> Frame:
        """The current observation, its cameras rendered (lock held).

        A render that failed once is not tried again: the failure is an OpenGL context that could not be made (no
        display, no OSMesa), and MuJoCo's second try from another thread never returned, holding this lock, so
        that the node ignored SIGINT and SIGTERM (found under `ros2 launch` without MUJOCO_GL). A failure of either
        camera turns both off (the frame carries neither image)."""
        stamp = int(self._stamp_clock()) if self._stamp_clock is not None else 0  # the state is taken now
        image = wrist = None
        spec = self._render
        if spec is not None and not self._render_error:
            camera = spec.camera
            try:
                primary = np.ascontiguousarray(self.sim.render(spec.width, spec.height, camera), dtype=np.uint8)
                if spec.wrist_camera:
                    camera = spec.wrist_camera
                    wrist = np.ascontiguousarray(self.sim.render(spec.width, spec.height, camera), dtype=np.uint8)
                image = primary
            except Exception as exc:  # wrist is still None: its render is the last that can raise
                self._render_error = (f"render failed, camera off until restart: camera {camera!r}: "
                                      f"{type(exc).__name__}: {exc}")
        return Frame(state=self._obs.copy(), image=image, status=self._state(), render_error=self._render_error,
                     wrist_image=wrist, stamp_ns=stamp)
