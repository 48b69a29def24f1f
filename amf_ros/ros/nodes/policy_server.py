"""policy_server: runs the acting policy on the arm (action run_policy) and fine-tunes it (action fine_tune).

A thin adapter on amf_ros.runtime.policy_server.PolicyServer: subscriptions store the newest observation and
task status; each action's execute callback hands the goal to the runtime (control thread / worker process) and
waits for it, bounded; busy goals are rejected in the goal callback. Parameters: amf_ros/bringup/params/
policy_server.py. Threads: docs/ros-system.md ("Concurrency").
"""

from __future__ import annotations

import threading

import numpy as np
import rclpy
from rclpy._rclpy_pybind11 import RCLError
from rclpy.action import ActionServer, CancelResponse, GoalResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import Image

from amf_ros.action import FineTune, RunPolicy
from amf_ros.bringup.graph_lock import hold_node_lock
from amf_ros.bringup.lifetime import NoRespawnError
from amf_ros.bringup.params.policy_server import PolicyServerParams
from amf_ros.data import transitions
from amf_ros.data.ros_convert import image_to_rgb
from amf_ros.msg import ArmStatus, ArmStop, CheckpointInfo, ControlSource, EefDeltaAction, StateVector, TaskStatus
from amf_ros.policies.fine_tuning import FineTuneCancelledError
from amf_ros.ros import qos
from amf_ros.ros.arm_msgs import action_msg, arm_counts, stamp_ns, stop_msg
from amf_ros.ros.control_msgs import QOS as CONTROL_QOS
from amf_ros.ros.control_msgs import control_fields, control_msg
from amf_ros.ros.logs import log_fn
from amf_ros.ros.offload import Offload
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.ros.status import StatusLine
from amf_ros.runtime.control_loop import TaskStatusValue
from amf_ros.runtime.handover import Handover
from amf_ros.runtime.policy_server import PolicyServer
from amf_ros.runtime.readiness import CHECK_PERIOD_S, config_problem


def _finish(transition) -> None:
    """Set a goal's final state; at shutdown the context is already gone and the client will not hear it anyway."""
    try:
        transition()
    except RCLError:
        if rclpy.ok():
            raise


class PolicyServerNode(Node):
    """Messages <-> PolicyServer calls."""

    def __init__(self) -> None:
        super().__init__("policy_server")
        try:
            p = self.p = declare(self, PolicyServerParams)
        except ValueError as exc:  # e.g. an unknown backend: a restart cannot fix it
            raise NoRespawnError(str(exc)) from None
        problem = config_problem(p.tasks_file) if p.backend == "octo" else ""
        if problem:
            raise NoRespawnError(f"policy_server: {problem}")
        self._place = hold_node_lock(p.workspace, self.get_namespace(), self.get_name())  # one graph per namespace
        self.executor_kind = p.executor  # read by spin()
        self.offload = Offload(self, inline=p.executor.startswith("multi"))  # goals wait on a thread of their own
        self._goals = threading.Condition()  # counts the goals whose execute callback runs (close() waits for them)
        self._active_goals = 0
        self._shutting_down = False
        self.pub = self.create_publisher(EefDeltaAction, p.action_topic, qos.ACTIONS)
        self.stop_pub = self.create_publisher(ArmStop, p.stop_topic, qos.EVENTS)
        self.ckpt_pub = self.create_publisher(CheckpointInfo, p.checkpoint_topic, qos.LATCHED)
        self.outcome_pub = self.create_publisher(TaskStatus, p.outcomes_topic, qos.EVENTS)
        # latched "ready: ..." / "not ready: <reason and what to do>" (backend octo waits for Octo and its checkpoint)
        self.status = StatusLine(self)
        self.server = PolicyServer(p, self.publish_action, log=log_fn(self, "info"), warn=log_fn(self, "warn"))
        if self.server.octo is not None:
            self.get_logger().info(f"Octo warm-up (first trunk + head call): {self.server.octo.warm_up():.2f} s")
        octo = self.server.octo_backend
        inputs = MutuallyExclusiveCallbackGroup()  # cheap callbacks: store the newest value
        if not octo:
            self.create_subscription(StateVector, p.state_topic,
                                     lambda m: self.server.observe_state(m.values, stamp_ns(m.header.stamp)),
                                     qos.STREAM, callback_group=inputs)
        if p.image_topic:
            self.create_subscription(Image, p.image_topic, lambda m: self._image(m, self.server.observe_image),
                                     qos.LATEST, callback_group=inputs)
        if p.wrist_image_topic:  # Octo's wrist tokenizer, or a camera policy with a wrist camera
            self.create_subscription(Image, p.wrist_image_topic, lambda m: self._image(m, self.server.observe_wrist),
                                     qos.LATEST, callback_group=inputs)
        if p.task_status_topic:
            self.create_subscription(TaskStatus, p.task_status_topic, self._status, qos.LATCHED,
                                     callback_group=inputs)
        self.create_subscription(ArmStop, p.stop_topic, self._on_stop, qos.EVENTS, callback_group=inputs)
        if p.control_request_topic:  # a person's take-over (runtime/handover.py); requests and stops: one group
            self.control_pub = self.create_publisher(ControlSource, p.control_topic, CONTROL_QOS)
            self.server.handover = Handover(lambda: self.get_clock().now().nanoseconds, self._announce_control,
                                            self._handover_stop, self.get_fully_qualified_name())
            self.server.handover.idle()
            self.create_subscription(ControlSource, p.control_request_topic, self._on_control_request, CONTROL_QOS,
                                     callback_group=inputs)
            self.create_timer(1.0, self._check_teleops, callback_group=inputs)
        if p.arm_status_topic:
            self.create_subscription(ArmStatus, p.arm_status_topic, self._on_arm_status, qos.LATCHED,
                                     callback_group=inputs)
        if p.follow_checkpoint_topic:
            self._adopting = threading.Lock()
            self.create_subscription(CheckpointInfo, p.follow_checkpoint_topic, self._on_fleet_checkpoint,
                                     qos.LATCHED, callback_group=inputs)
        ActionServer(self, RunPolicy, "run_policy", self._counted(self.execute_run),
                     callback_group=ReentrantCallbackGroup(),
                     goal_callback=lambda _req: GoalResponse.ACCEPT if self.server.reserve_run()
                     else GoalResponse.REJECT, cancel_callback=lambda _g: CancelResponse.ACCEPT,
                     **qos.action_services())
        ActionServer(self, FineTune, "fine_tune", self._counted(self.execute_fine_tune),
                     callback_group=ReentrantCallbackGroup(),
                     goal_callback=lambda _req: GoalResponse.REJECT if self.server.fine_tuning
                     else GoalResponse.ACCEPT, cancel_callback=lambda _g: CancelResponse.ACCEPT,
                     **qos.action_services())
        self._ready_timer = None
        if self.server.readiness is not None and not self.server.readiness.ready:
            self.status.not_ready(self.server.not_ready())  # one line; every goal is answered with it
            self.server.readiness.on_change = self._readiness_changed
            self._ready_timer = self.create_timer(CHECK_PERIOD_S, self.server.readiness.check,
                                                  callback_group=MutuallyExclusiveCallbackGroup())
        else:
            self._ready()

    def _ready(self) -> None:
        """The backend is built: announce its checkpoint, say ready (log and status topic)."""
        self.announce()
        line = (f"ready: {self.p.backend} backend, checkpoint {self.server.runtime.checkpoint}, "
                f"control {self.p.control_rate_hz} Hz, dataset {self.p.dataset_dir}")
        self.status.ready(line)

    def _readiness_changed(self, reason: str) -> None:
        """From the readiness check (timer) or its build thread: log and publish the new state once."""
        if reason:
            self.status.not_ready(self.server.not_ready())
            return
        if self._ready_timer is not None:
            self._ready_timer.cancel()
        try:
            self.get_logger().info(f"Octo warm-up (first trunk + head call): {self.server.octo.warm_up():.2f} s")
        except Exception as exc:  # the first goal compiles instead; the policy itself loaded
            self.get_logger().warning(f"Octo warm-up failed: {type(exc).__name__}: {exc}")
        self._ready()

    def close(self) -> None:
        """Shutdown hook (amf_ros.ros.spin, called while the executor still spins): stop the control thread and the
        fine-tune worker, so that every active goal ends, aborted with ok=false and "policy_server is shutting
        down", and its result reaches the client; waits for that at most 3 s (the executor's threads are joined
        after this, so a result being sent is not cut off)."""
        self._shutting_down = True
        self.server.close()
        with self._goals:
            self._goals.wait_for(lambda: self._active_goals == 0, timeout=3.0)
        self._drain_results(2.0)

    def _drain_results(self, timeout_s: float) -> None:
        """Wait (bounded) until the results of the goals that just ended were sent. rclpy sends a result from an
        executor task created when the goal's execute step sets it, after this node's goal count dropped; the
        executor's shutdown would drop that task. A task created now runs after the current step (which sets the
        results); the task it creates runs after the send tasks that step created."""
        executor, sent = self.executor, threading.Event()
        if executor is None:
            return
        executor.create_task(lambda: executor.create_task(sent.set))
        sent.wait(timeout_s)

    def _counted(self, execute):
        """``execute`` (an action's execute coroutine), counted in ``_active_goals`` while it runs."""
        async def counted(goal_handle):
            with self._goals:
                self._active_goals += 1
            try:
                return await execute(goal_handle)
            finally:
                with self._goals:
                    self._active_goals -= 1
                    self._goals.notify_all()
        return counted

    def publish_action(self, action: np.ndarray) -> int:
        """Publish one action for the arm, stamped now and valid for ``action_valid_for_s``; returns the stamp, ns
        (the control loop acts next on an observation measured after it)."""
        now = self.get_clock().now()
        self.pub.publish(action_msg(action, now.to_msg(), self.p.action_valid_for_s))
        return int(now.nanoseconds)

    def publish_stop(self, reason: str) -> None:
        """Tell the arm that no action published so far may still be applied (a goal ended)."""
        self.stop_pub.publish(stop_msg(self.get_clock().now().to_msg(), self.get_fully_qualified_name(), reason))

    def _announce_control(self, source: str, node: str, stamp: int) -> None:
        self.control_pub.publish(control_msg(source, node, stamp))

    def _handover_stop(self, stamp: int, reason: str) -> None:
        msg = ArmStop(source=self.get_fully_qualified_name(), reason=reason)
        msg.header.stamp.sec, msg.header.stamp.nanosec = divmod(int(stamp), 1_000_000_000)
        self.stop_pub.publish(msg)

    def _on_control_request(self, msg: ControlSource) -> None:
        source, node, stamp = control_fields(msg)
        what = self.server.handover.request(node, source, stamp)
        if what in ("granted", "released"):
            self.get_logger().info(f"run_policy: {node} {'takes over' if what == 'granted' else 'released'}")

    def _check_teleops(self) -> None:
        """End a goal whose person in control left with their teleop node (crashed, killed): runtime/handover.py."""
        topic = self.resolve_topic_name(self.p.control_request_topic)
        alive = {f"{i.node_namespace.rstrip('/')}/{i.node_name}" for i in self.get_publishers_info_by_topic(topic)}
        holder = self.server.handover.check_alive(alive)
        if holder and self.server.stop_run(f"{holder}, which held control, left the ROS graph"):
            self.get_logger().warning(f"run_policy: {holder} held control and left the ROS graph; ending the goal")

    def _on_stop(self, msg: ArmStop) -> None:
        handover, mine = self.server.handover, msg.source == self.get_fully_qualified_name()
        if not mine and handover is not None and handover.on_stop(msg.source, stamp_ns(msg.header.stamp)) in (
                "released", "ignored"):
            return  # the release of the person holding control: the policy resumes (runtime/handover.py)
        if not mine:
            reason = f"stop from {msg.source or '?'}: {msg.reason[:200] or 'no reason'}"
            if self.server.stop_run(reason):
                self.get_logger().warning(f"run_policy: {reason}; ending the goal")

    def _on_arm_status(self, msg: ArmStatus) -> None:
        if self.server.observe_arm(arm_counts(msg)):
            self.get_logger().warning("run_policy: the arm's e-stop was engaged; ending the goal")

    def announce(self) -> None:
        """Publish the acting checkpoint on the latched checkpoint topic (nothing while not ready)."""
        if self.server.runtime is None:
            return
        alphas = transitions.alphas(self.server.runtime.policy)
        msg = CheckpointInfo(path=str(self.server.runtime.checkpoint.resolve()), round=self.server.runtime.round,
                             tasks=list(alphas), alphas=list(alphas.values()))
        msg.header.stamp = self.get_clock().now().to_msg()
        self.ckpt_pub.publish(msg)

    def _on_fleet_checkpoint(self, msg: CheckpointInfo) -> None:
        """A newer round from the fleet's trainer: load it on a thread of its own (seconds), then act with it."""
        if (self.server.runtime is None or int(msg.round) <= self.server.runtime.round
                or not self._adopting.acquire(blocking=False)):
            return

        def adopt() -> None:
            try:
                if self.server.runtime.adopt(msg.path):
                    self.announce()
                    self.get_logger().info(f"adopted round {msg.round} from {self.p.follow_checkpoint_topic}: "
                                           f"{msg.path}")
            except Exception as exc:
                self.get_logger().error(f"cannot adopt {msg.path!r}: {type(exc).__name__}: {exc}")
            finally:
                self._adopting.release()
        threading.Thread(target=adopt, name="adopt-checkpoint", daemon=True).start()

    def _image(self, msg: Image, store) -> None:
        try:
            store(image_to_rgb(msg), stamp_ns(msg.header.stamp))
        except ValueError as exc:  # unsupported encoding: say so, keep running on the last good frame
            self.get_logger().error(f"camera: {exc}", throttle_duration_sec=5.0)

    def _status(self, m: TaskStatus) -> None:
        self.server.observe_status(TaskStatusValue(m.task, int(m.resets), int(m.steps), bool(m.success), bool(m.done)),
                                   stamp_ns(m.header.stamp))

    async def execute_run(self, goal_handle) -> RunPolicy.Result:
        """Hand the goal to the control thread and await it (bounded: PolicyServer.run)."""
        req = goal_handle.request
        res = await self.offload(self.server.run, req.task, req.max_steps,
                                 lambda: goal_handle.is_cancel_requested,
                                 lambda s, t: goal_handle.publish_feedback(RunPolicy.Feedback(step=s, elapsed_s=t)))
        mean, median, worst = res.period_stats()
        if res.steps:
            self.publish_stop(f"run_policy {req.task[:64]} ended after {res.steps} steps")
        _finish(goal_handle.canceled if res.cancelled else goal_handle.succeed if res.ok else goal_handle.abort)
        self.get_logger().info(f"run_policy {req.task}: {res.message}")
        if res.ok and not res.cancelled:
            outcome = TaskStatus(task=req.task, steps=int(res.steps), success=bool(res.success), done=True)
            outcome.header.stamp = self.get_clock().now().to_msg()
            self.outcome_pub.publish(outcome)
        return RunPolicy.Result(ok=res.ok, message=res.message, success=res.success, steps=res.steps,
                                mean_period_s=mean, median_period_s=median, max_period_s=worst)

    async def execute_fine_tune(self, goal_handle) -> FineTune.Result:
        """Hand the goal to the worker process and await it (bounded: PolicyRuntime.fine_tune)."""
        req = goal_handle.request
        try:
            res = await self.offload(self.server.fine_tune, req.steps, list(req.tasks),
                                     lambda s, n, loss: goal_handle.publish_feedback(
                                         FineTune.Feedback(step=s, total_steps=n, loss=loss)),
                                     lambda: goal_handle.is_cancel_requested)
        except Exception as exc:  # reported to the client as ok=false; the node keeps running
            cancelled = isinstance(exc, FineTuneCancelledError) and not self._shutting_down
            message = str(exc)
            if self._shutting_down and "shutting down" not in message:  # the worker's own "cancelled after N steps"
                message = f"policy_server is shutting down; {message}"
            _finish(goal_handle.canceled if cancelled else goal_handle.abort)
            self.get_logger().warning(f"fine_tune failed: {message}")
            return FineTune.Result(ok=False, message=message, final_loss=float("nan"))
        self.announce()
        _finish(goal_handle.succeed)
        msg = f"round {res.round}: {len(res.losses)} steps in {res.wall_time_s:.1f} s, loss {res.final_loss:.4f}"
        if res.members:
            msg += f" (+ {len(res.members)} ensemble member(s) in {res.checkpoint.name}/members)"
        self.get_logger().info(f"fine_tune {msg} -> {res.checkpoint}")
        return FineTune.Result(ok=True, message=msg, checkpoint=str(res.checkpoint.resolve()), tasks=res.tasks,
                               alphas=res.alphas, final_loss=res.final_loss)


def main(args=None) -> None:
    """Run the node until Ctrl-C / SIGTERM (threads: inputs, two waiting action callbacks, action plumbing)."""
    spin(PolicyServerNode, args, num_threads=4)


if __name__ == "__main__":
    main()
