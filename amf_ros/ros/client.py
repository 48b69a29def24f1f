"""A blocking Python client of the AMF graph (services, actions, topics), for `amf run`, tests and benchmarks.

Why: the main job, the process-level tests and `amf bench ros-latency` all drive the same nodes the same way an
operator would; this wraps rclpy's async clients with timeouts in ONE place. It owns an rclpy node spun by a
background SingleThreadedExecutor (its callbacks only store what arrives, so one thread suffices, and rclpy
9.1.2's MultiThreadedExecutor would busy-loop the GIL away from the caller's threads: ros2/rclpy#1452), so its
blocking methods must be called from a plain thread, never from inside a ROS callback.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Iterator, TypeVar

from rclpy.action import ActionClient
from rclpy.action.client import ClientGoalHandle
from rclpy.client import Client
from rclpy.executors import ExternalShutdownException, ShutdownException
from rclpy.node import Node
from rclpy.task import Future
from std_msgs.msg import String
from std_srvs.srv import SetBool

from amf_ros.action import FineTune, RunPolicy
from amf_ros.bringup.graph import NAMESPACE
from amf_ros.msg import ArmStop, CheckpointInfo, EefDeltaAction, EpisodeInfo, RecorderStatus
from amf_ros.ros import qos
from amf_ros.ros.arm_msgs import stop_msg
from amf_ros.ros.spin import make_executor
from amf_ros.srv import EndEpisode, NextTask, ResetTask, StartEpisode, TaskSuccess

R = TypeVar("R")
"""The result message of an action (FineTune.Result, RunPolicy.Result)."""


class ROSCallError(RuntimeError):
    """A service/action did not answer in time, or answered ok=false when the caller required ok."""


def _sendable(*texts: str) -> None:
    """Refuse a string with a NUL before it is sent: rclpy's C conversion cuts a string at its first NUL, so
    ``"push\\x00x"`` would reach the node as ``"push"`` and be accepted as that task (no node can tell)."""
    for text in texts:
        if "\x00" in text:
            raise ValueError(f"{text[:40]!r} contains a NUL character; ROS 2 strings end at the first NUL, so it "
                             f"would be sent as {text.split(chr(0))[0][:40]!r}")


RESEND_AFTER_S = 1.0
"""A request of a client that has had no answer yet is sent again after this long, then after twice as long, ...:
rmw_fastrtps drops a response when the server has not yet discovered the client's response reader 100 ms after the
request arrived ("failed to send response (timeout): client will not receive response" in the server's log),
which a loaded machine hits on the first call of a fresh client (seen in CI: /fleet/next_task never answered)."""


def _wait(future: Future, timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while not future.done():
        if time.monotonic() > deadline:
            raise ROSCallError(f"{what}: no answer within {timeout:.0f} s")
        time.sleep(0.005)
    return future.result()


def call_resending(cli: Client, request: Any, timeout: float, resend: bool = True) -> Any:
    """The first answer to ``request`` on ``cli`` (ROSCallError after ``timeout`` s); with ``resend`` the request
    is sent again after :data:`RESEND_AFTER_S`, then after twice as long, ..., and an answer to any copy is taken
    (copies still unanswered are dropped). Only for a client that has had no answer yet, and only for requests a
    repeat cannot harm (queries, resets, a robot's assignment, which replaces its previous one)."""
    deadline = time.monotonic() + timeout
    futures = [cli.call_async(request)]
    gap = RESEND_AFTER_S
    resend_at = time.monotonic() + gap
    try:
        while not any(f.done() for f in futures):
            now = time.monotonic()
            if now > deadline:
                raise ROSCallError(f"{cli.srv_name}: no answer within {timeout:.0f} s"
                                   + (f" ({len(futures)} sends)" if len(futures) > 1 else ""))
            if resend and now >= resend_at:
                futures.append(cli.call_async(request))
                gap *= 2
                resend_at = now + gap
            time.sleep(0.005)
        return next(f for f in futures if f.done()).result()
    finally:
        for f in futures:
            if not f.done():
                cli.remove_pending_request(f)


@dataclass
class Observed:
    """Messages seen on the graph's topics (appended by subscription callbacks)."""

    episodes: list[EpisodeInfo] = field(default_factory=list)
    checkpoints: list[CheckpointInfo] = field(default_factory=list)
    actions: list[tuple[float, EefDeltaAction]] = field(default_factory=list)  # (monotonic receive time, action)
    status: RecorderStatus | None = None  # the latest one
    policy_status: str | None = None  # the latest policy_server ~/status line ("ready: ..." / "not ready: ...")


class PendingResult(Generic[R]):
    """An action goal sent without waiting (:meth:`AMFClient.send_fine_tune`, :meth:`AMFClient.send_run_policy`):
    :meth:`done` tells whether its result arrived, :meth:`AMFClient.wait_result` waits for it (type ``R``)."""

    def __init__(self, future: Future, what: str) -> None:
        self.future, self.what = future, what

    def done(self) -> bool:
        """True once the result (or a failure) has arrived."""
        return self.future.done()


class AMFClient:
    """Blocking calls into a running AMF graph (default names from docs/contracts.md).

    Args:
        name: node name of this client; record_actions: keep every ``action`` message (for rate checks).
        namespace: namespace of the graph's nodes (bring-up default ``amf``).
    """

    def __init__(self, name: str = "amf_client", record_actions: bool = False, namespace: str = NAMESPACE,
                 next_task_service: str = "next_task") -> None:
        self.node = Node(name, namespace=namespace)  # relative names below resolve under it (/amf/next_task)
        self.seen = Observed()
        self._fine_tune_handles: list[ClientGoalHandle] = []
        self._lock = threading.Lock()
        self._answered: set[str] = set()  # services that answered this client once (their response path works)
        n = self.node
        # a fleet robot asks /fleet/next_task
        self.next_task_cli = n.create_client(NextTask, next_task_service, qos_profile=qos.SERVICES)
        self.reset_cli = n.create_client(ResetTask, "sim/reset", qos_profile=qos.SERVICES)
        self.success_cli = n.create_client(TaskSuccess, "sim/success", qos_profile=qos.SERVICES)
        self.start_cli = n.create_client(StartEpisode, "recorder/start_episode", qos_profile=qos.SERVICES)
        self.end_cli = n.create_client(EndEpisode, "recorder/end_episode", qos_profile=qos.SERVICES)
        self.estop_cli = n.create_client(SetBool, "widowx/estop", qos_profile=qos.SERVICES)
        self.fine_tune_cli = ActionClient(n, FineTune, "fine_tune", **qos.action_services())
        self.run_cli = ActionClient(n, RunPolicy, "run_policy", **qos.action_services())
        n.create_subscription(EpisodeInfo, "episodes", lambda m: self._add(self.seen.episodes, m), qos.EVENTS)
        n.create_subscription(CheckpointInfo, "checkpoint", lambda m: self._add(self.seen.checkpoints, m),
                              qos.LATCHED)
        n.create_subscription(RecorderStatus, "recorder/status", self._on_status, qos.LATCHED)
        # created after the action clients: its latched message arriving means policy_server has discovered their
        # response readers (announced earlier, in order), so a goal's acceptance is not dropped (see RESEND_AFTER_S)
        n.create_subscription(String, "policy_server/status", self._on_policy_status, qos.LATCHED)
        self.stop_pub = n.create_publisher(ArmStop, "stop", qos.EVENTS)
        if record_actions:
            n.create_subscription(EefDeltaAction, "action",
                                  lambda m: self._add(self.seen.actions, (time.monotonic(), m)), qos.EVENTS)
        self.executor = make_executor("single")  # survives an entity destroyed mid-wait (ros/spin.py)
        self.executor.add_node(n)
        self._thread = threading.Thread(target=self._spin, name="amf_client", daemon=True)
        self._thread.start()

    def stop(self, reason: str = "operator", source: str = "operator") -> None:
        """Publish an ArmStop stamped now: every arm drops the actions sent so far and holds; a running run_policy
        goal or scripted demonstration ends."""
        self.stop_pub.publish(stop_msg(self.node.get_clock().now().to_msg(), source, reason))

    def _add(self, target: list[R], item: R) -> None:
        with self._lock:
            target.append(item)

    def _on_policy_status(self, msg: String) -> None:
        self.seen.policy_status = msg.data

    def _on_status(self, msg: RecorderStatus) -> None:
        self.seen.status = msg

    def _spin(self) -> None:
        """The executor's thread: ends quietly when the executor or the context is shut down."""
        try:
            self.executor.spin()
        except (ExternalShutdownException, ShutdownException):
            pass

    def close(self) -> None:
        """Stop spinning and destroy the node (rclpy itself stays initialised)."""
        self.executor.shutdown()
        self.node.destroy_node()
        self._thread.join(timeout=5)

    # -- waiting -------------------------------------------------------------------------------------------
    def wait_ready(self, timeout: float = 60.0, sim: bool = True, recorder: bool = True) -> None:
        """Wait until every service/action server of the graph is discoverable and, with ``recorder``, until the
        recorder's status says a StartEpisode would be accepted (it has heard the arm's topics: servers appear
        before DDS has matched every topic, and a StartEpisode sent in between is refused)."""
        deadline = time.monotonic() + timeout
        clients = [self.next_task_cli] + ([self.reset_cli, self.success_cli] if sim else []) + \
            ([self.start_cli, self.end_cli] if recorder else [])
        for cli in clients:
            if not cli.wait_for_service(timeout_sec=max(0.1, deadline - time.monotonic())):
                raise ROSCallError(f"service {cli.srv_name} did not appear within {timeout:.0f} s")
        for acli, name in ((self.fine_tune_cli, "fine_tune"), (self.run_cli, "run_policy")):
            if not acli.wait_for_server(timeout_sec=max(0.1, deadline - time.monotonic())):
                raise ROSCallError(f"action {name} did not appear within {timeout:.0f} s")
        self.wait_for(lambda: self.seen.policy_status is not None, max(0.1, deadline - time.monotonic()),
                      "policy_server/status (the policy server's latched status)")
        if recorder:
            try:
                self.wait_for(lambda: self.seen.status is not None and self.seen.status.ready,
                              max(0.1, deadline - time.monotonic()), "demo_recorder to be ready")
            except ROSCallError as exc:
                status = self.seen.status
                raise ROSCallError(f"{exc}: {status.not_ready_reason if status else 'no recorder/status'}") from None

    def wait_for(self, predicate: Callable[[], bool], timeout: float, what: str) -> None:
        """Poll ``predicate`` until true (ROSCallError naming ``what`` after ``timeout`` s)."""
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise ROSCallError(f"timed out after {timeout:.0f} s waiting for {what}")
            time.sleep(0.02)

    # -- services ------------------------------------------------------------------------------------------
    def _call(self, cli: Client, request: Any, timeout: float, require_ok: bool, resend: bool = True) -> Any:
        """The response to ``request``; with ``require_ok`` (every amf_ros service has ``ok``) a refusal raises.

        ``resend`` (services where a repeat does no harm: queries, resets, assignments that replace the previous
        one): until ``cli`` has had its first answer, the request is sent again after :data:`RESEND_AFTER_S`,
        doubling, and the first answer to any copy is taken."""
        if not cli.wait_for_service(timeout_sec=timeout):
            raise ROSCallError(f"service {cli.srv_name} is not available")
        resp = call_resending(cli, request, timeout, resend and cli.srv_name not in self._answered)
        self._answered.add(cli.srv_name)
        if require_ok and not resp.ok:
            raise ROSCallError(f"{cli.srv_name} refused: {resp.message}")
        return resp

    def next_task(self, candidates: list[str] | None = None, batch_size: int = 1, timeout: float = 120.0,
                  require_ok: bool = True, robot: str = "") -> NextTask.Response:
        """/next_task; ``robot``: the asking robot of a fleet (its assignment conditions the others' requests)."""
        _sendable(*(candidates or []), robot)
        return self._call(self.next_task_cli, NextTask.Request(candidate_tasks=list(candidates or []),
                                                               batch_size=batch_size, robot=robot),
                          timeout, require_ok)

    def reset(self, task: str, seed: int = -1, timeout: float = 60.0) -> ResetTask.Response:
        """/amf/sim/reset: start ``task`` in the simulator (``seed`` -1 = the next one); raises unless ok."""
        _sendable(task)
        return self._call(self.reset_cli, ResetTask.Request(task=task, seed=seed), timeout, True)

    def success(self, timeout: float = 30.0) -> TaskSuccess.Response:
        """/amf/sim/success: whether the simulated task is solved now; raises unless ok."""
        return self._call(self.success_cli, TaskSuccess.Request(), timeout, True)

    def estop(self, engage: bool, timeout: float = 30.0) -> SetBool.Response:
        """Engage (true) or release (false) the WidowX's emergency stop (widowx_driver's, or the embedded WidowX's
        in sim_bridge); returns the SetBool response (check .success, .message)."""
        resp = self._call(self.estop_cli, SetBool.Request(data=bool(engage)), timeout, False)
        if not resp.success:
            raise ROSCallError(f"{self.estop_cli.srv_name} refused: {resp.message}")
        return resp

    def start_episode(self, task: str, instruction: str = "", timeout: float = 30.0,
                      require_ok: bool = True) -> StartEpisode.Response:
        """/amf/recorder/start_episode (``episode_id`` of the response names the take)."""
        _sendable(task, instruction)
        # never resent (a second start would be refused as "already recording"): the recorder's latched status,
        # which wait_ready(recorder=True) waits for, reached this client after the recorder had discovered this
        # client's response readers (announced before that subscription, in order), so the answer is not dropped
        return self._call(self.start_cli, StartEpisode.Request(task=task, instruction=instruction), timeout,
                          require_ok, resend=False)

    def end_episode(self, episode_id: str, success: bool = True, discard: bool = False, timeout: float = 30.0,
                    require_ok: bool = True) -> EndEpisode.Response:
        """/amf/recorder/end_episode: commit (or ``discard``) the take."""
        return self._call(self.end_cli, EndEpisode.Request(episode_id=episode_id, success=success,
                                                           discard=discard), timeout, require_ok, resend=False)

    def wait_episode(self, episode_id: str, timeout: float) -> EpisodeInfo:
        """The EpisodeInfo announced for ``episode_id`` (the recorder commits it when the operator ends it)."""
        found: list[EpisodeInfo] = []

        def seen() -> bool:
            with self._lock:
                found[:] = [e for e in self.seen.episodes if e.episode_id == episode_id][:1]
            return bool(found)
        self.wait_for(seen, timeout, f"episode {episode_id} on /amf/episodes")
        return found[0]

    # -- actions -------------------------------------------------------------------------------------------
    def _action(self, cli: ActionClient, goal: Any, timeout: float, what: str,
                feedback: Callable[[Any], None] | None = None) -> Any:
        """Send ``goal`` and wait for its result message (``feedback`` gets each feedback message)."""
        cb = (lambda fb: feedback(fb.feedback)) if feedback else None
        handle = self._send_goal(cli, goal, cb, what, min(timeout, 30.0))
        return _wait(handle.get_result_async(), timeout, f"{what} result").result

    def _send_goal(self, cli: ActionClient, goal: Any, cb: Callable[[Any], None] | None, what: str,
                   timeout: float = 30.0) -> ClientGoalHandle:
        """Send ``goal`` once the policy server can answer this client, and wait for its acceptance.

        A goal is never resent (a second copy would run a second goal), so before the first one the latched
        policy_server/status must have arrived: its subscription was created after the action clients, and the
        server's having matched it means it has discovered their response readers too (see RESEND_AFTER_S)."""
        if not cli.wait_for_server(timeout_sec=timeout):
            raise ROSCallError(f"action {what} is not available")
        self.wait_for(lambda: self.seen.policy_status is not None, timeout,
                      f"policy_server/status before sending a {what} goal")
        handle = _wait(cli.send_goal_async(goal, feedback_callback=cb), 30.0, f"{what} goal")
        if not handle.accepted:
            raise ROSCallError(f"{what}: goal rejected")
        return handle

    def fine_tune(self, steps: int = 0, tasks: list[str] | None = None, timeout: float = 600.0,
                  feedback: Callable[[FineTune.Feedback], None] | None = None) -> FineTune.Result:
        """Run /amf/fine_tune to completion; returns FineTune.Result (check .ok)."""
        _sendable(*(tasks or []))
        return self._action(self.fine_tune_cli, FineTune.Goal(steps=steps, tasks=list(tasks or [])), timeout,
                            "fine_tune", feedback)

    def send_fine_tune(self, steps: int = 0, feedback: Callable[[FineTune.Feedback], None] | None = None
                       ) -> PendingResult[FineTune.Result]:
        """Start a fine-tune without waiting (e.g. as background load); returns its pending result.

        Cancel it with :meth:`cancel_fine_tunes`, wait for it with :meth:`wait_result`.
        """
        cb = (lambda fb: feedback(fb.feedback)) if feedback else None
        handle = self._send_goal(self.fine_tune_cli, FineTune.Goal(steps=steps), cb, "/amf/fine_tune")
        self._fine_tune_handles.append(handle)
        return PendingResult(handle.get_result_async(), "/amf/fine_tune")

    def cancel_fine_tunes(self, timeout: float = 30.0) -> None:
        """Request cancellation of every fine-tune started with :meth:`send_fine_tune`."""
        for handle in self._fine_tune_handles:
            _wait(handle.cancel_goal_async(), timeout, "/amf/fine_tune cancel")
        self._fine_tune_handles.clear()

    @staticmethod
    def wait_result(pending: PendingResult[R], timeout: float) -> R:
        """The action result of a goal from :meth:`send_fine_tune` or :meth:`send_run_policy`."""
        return _wait(pending.future, timeout, f"{pending.what} result").result

    def send_run_policy(self, task: str, max_steps: int = 0,
                        feedback: Callable[[RunPolicy.Feedback], None] | None = None
                        ) -> PendingResult[RunPolicy.Result]:
        """Start a run_policy goal without waiting; returns its pending result (:meth:`wait_result`)."""
        _sendable(task)
        cb = (lambda fb: feedback(fb.feedback)) if feedback else None
        handle = self._send_goal(self.run_cli, RunPolicy.Goal(task=task, max_steps=max_steps), cb, "/amf/run_policy")
        return PendingResult(handle.get_result_async(), "/amf/run_policy")

    def run_policy(self, task: str, max_steps: int = 0, timeout: float = 300.0) -> RunPolicy.Result:
        """Run /amf/run_policy to completion; returns RunPolicy.Result (check .ok, .success)."""
        _sendable(task)
        return self._action(self.run_cli, RunPolicy.Goal(task=task, max_steps=max_steps), timeout,
                            "run_policy")


def _init_rclpy() -> None:
    """rclpy for a client program, without rclpy's signal handlers: they shut the context down on SIGINT/SIGTERM, so
    the spin thread died (ExternalShutdownException) while the main thread went on waiting for answers that could no
    longer come (session 35: `amf run` outlived SIGINT and SIGTERM, its nodes with it). Instead SIGINT stays Python's
    KeyboardInterrupt in the main thread and SIGTERM raises it too (:func:`_interrupt_on_sigterm`), so the program's
    own clean-up runs (results so far written, nodes stopped), and the context goes last."""
    import rclpy
    from rclpy.signals import SignalHandlerOptions

    rclpy.init(signal_handler_options=SignalHandlerOptions.NO)
    _interrupt_on_sigterm()


def _interrupt_on_sigterm() -> None:
    """SIGTERM (a supervisor's stop, `kill`) ends a client program like Ctrl-C: KeyboardInterrupt in the main thread.
    Only from the main thread, and only where SIGTERM still has its default action (a program's own handler stays)."""
    import signal

    if threading.current_thread() is not threading.main_thread():
        return
    if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
        signal.signal(signal.SIGTERM, _raise_interrupt)


def _raise_interrupt(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


@contextmanager
def rclpy_session() -> Iterator[None]:
    """rclpy initialised for this process until the block ends (a program with several clients: `amf run
    --robots`); Ctrl-C and SIGTERM raise KeyboardInterrupt in the main thread (:func:`_init_rclpy`)."""
    import rclpy

    _init_rclpy()
    try:
        yield
    finally:
        rclpy.try_shutdown()


@contextmanager
def session(name: str, **kwargs: Any) -> Iterator[AMFClient]:
    """rclpy initialised for this process and an :class:`AMFClient` (``AMFClient(name, **kwargs)``); both are shut
    down on exit. For programs whose only ROS use is this client (`amf run`, benchmarks); Ctrl-C and SIGTERM raise
    KeyboardInterrupt in the main thread (:func:`_init_rclpy`)."""
    import rclpy

    _init_rclpy()
    client = None
    try:
        client = AMFClient(name, **kwargs)
        yield client
    finally:
        if client is not None:
            client.close()
        rclpy.try_shutdown()
