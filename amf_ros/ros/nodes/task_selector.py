"""task_selector: answers /amf/next_task (which task should a human demonstrate next?).

Keeps its own copy of the policy (paper: a separate copy for selection), loaded from the newest checkpoint and
reloaded on /amf/checkpoint; reads the episode store; runs the configured selector (``progress``: on the history of
policy_server's run_policy outcomes, grouped by the announced checkpoints). The logic lives in
amf_ros.runtime.task_selector; this node maps messages to calls. Parameters: amf_ros/bringup/params/task_selector.py.
"""

from __future__ import annotations

import time
from functools import partial

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from std_msgs.msg import Header

from amf_ros.bringup.graph_lock import hold_node_lock
from amf_ros.bringup.lifetime import NoRespawnError
from amf_ros.bringup.params.task_selector import TaskSelectorParams
from amf_ros.data.replay import ReplaySettingsError, replay_cache
from amf_ros.msg import CheckpointInfo, EpisodeInfo, TaskDecision, TaskStatus
from amf_ros.ros import qos
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.ros.status import StatusLine
from amf_ros.runtime.log_lines import ErrorThrottle, bounded
from amf_ros.runtime.readiness import CHECK_PERIOD_S, config_problem
from amf_ros.runtime.task_selector import TaskSelectorRuntime
from amf_ros.srv import NextTask
from amf_ros.threads import limit_threads


class TaskSelectorNode(Node):
    """Service /amf/next_task in its own callback group; checkpoint reloads (seconds) in another, so that the
    service keeps answering with the previous policy copy while a new one loads (MultiThreadedExecutor)."""

    def __init__(self) -> None:
        super().__init__("task_selector")
        try:
            self.p = declare(self, TaskSelectorParams)
        except ValueError as exc:  # e.g. an unknown backend or selector: a restart cannot fix it
            raise NoRespawnError(str(exc)) from None
        problem = config_problem(self.p.tasks_file, self.p.tasks)
        if problem:
            raise NoRespawnError(f"task_selector: {problem}")
        try:  # the replay settings, said at once (a restart finds the same parameters)
            if self.p.backend == "octo":  # which states the others replay depends on the checkpoint: checked below
                replay_cache(self.p.replay_dir, self.p.replay_fraction, self.p.action_space, state_key=None)
        except ValueError as exc:
            raise NoRespawnError(f"task_selector: {exc}") from None
        self._place = hold_node_lock(self.p.workspace, self.get_namespace(), self.get_name())  # one graph per ns
        limit_threads(self.p.torch_threads)  # 0 = torch's default
        try:
            self.runtime = TaskSelectorRuntime(self.p)
        except ReplaySettingsError as exc:  # e.g. a replay of another policy's states
            raise NoRespawnError(f"task_selector: {exc}") from None
        self._refusals = ErrorThrottle(1.0)  # a fuzzing client gets every answer, the log one line per second
        for note in self.runtime.notes:
            self.get_logger().warning(note)
        self.create_service(NextTask, "next_task", self.on_next_task, qos_profile=qos.SERVICES,
                            callback_group=MutuallyExclusiveCallbackGroup())
        self.decision_pub = self.create_publisher(TaskDecision, self.p.decision_topic, qos.LATCHED)
        reloads = MutuallyExclusiveCallbackGroup()  # checkpoint loads and readiness checks (seconds)
        # the history of selector progress: announcements are stamped and counted before the (seconds-long) reload
        self.create_subscription(CheckpointInfo, self.p.checkpoint_topic, self.on_checkpoint, qos.LATCHED,
                                 callback_group=reloads)
        if self.p.selector == "progress":
            self.create_subscription(TaskStatus, self.p.outcomes_topic, self.on_outcome, qos.EVENTS,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        # latched "ready: ..." / "not ready: <reason and what to do>" (backend octo waits for its checkpoint)
        self.status = StatusLine(self)
        readiness, self._ready_timer = self.runtime.readiness, None
        if readiness is not None and not readiness.ready:
            readiness.on_change = self._readiness_changed
            self._ready_timer = self.create_timer(CHECK_PERIOD_S, readiness.check, callback_group=reloads)
        for topic in self.p.episode_topics:  # fleet: a saved episode ends its robot's assignment
            robot = self.resolve_topic_name(topic).rstrip("/").split("/")[-2] if topic.count("/") else ""
            self.create_subscription(EpisodeInfo, topic, partial(self.on_episode, robot), qos.EVENTS,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        if self._ready_timer is not None:
            line = (f"{self.runtime.not_ready()}; next_task answers meanwhile where no policy is needed (warm start, "
                    "uniform, round_robin, progress)")
            self.status.not_ready(line)  # one line; every refused request says it again
        else:
            self._ready()

    def _ready(self) -> None:
        """Say ready (log and status topic)."""
        line = (f"ready: selector={self.p.selector} tasks={list(self.runtime.instructions)} "
                f"checkpoint={self.runtime.checkpoint or '(none)'}")
        self.status.ready(line)

    def _readiness_changed(self, reason: str) -> None:
        """From the readiness check or its build thread: log and publish the new state once."""
        if reason:
            self.status.not_ready(self.runtime.not_ready())
            return
        if self._ready_timer is not None:
            self._ready_timer.cancel()
        self._ready()

    def on_checkpoint(self, msg: CheckpointInfo) -> None:
        """Reload the policy copy (in this callback group, so next_task keeps answering with the old copy)."""
        if self.p.selector == "progress":
            self.runtime.on_announcement(int(msg.round), _seconds(msg.header.stamp))
        try:
            reloaded, note = self.runtime.on_checkpoint(msg.path)
        except Exception as exc:
            self.get_logger().error(f"cannot load announced checkpoint {msg.path!r}: {exc}")
            return
        if reloaded:
            self.get_logger().info(f"{note} (round {msg.round})")
        elif msg.path != self.runtime.checkpoint:
            self.get_logger().info(note)

    def on_outcome(self, msg: TaskStatus) -> None:
        """A finished run_policy goal: one evaluation episode in selector progress's history."""
        self.runtime.on_outcome(msg.task, bool(msg.success), _seconds(msg.header.stamp))

    def on_episode(self, robot: str, msg: EpisodeInfo) -> None:
        """A saved episode of ``robot``: its assignment is done; log the assignments that expired unrecorded."""
        if self.runtime.on_episode(robot, msg.task):
            self.get_logger().info(f"{robot}: assignment {msg.task} done ({msg.episode_id})")
        for r, t in self.runtime.assignments.expired:
            self.get_logger().warning(f"{r}: assignment {t} expired after {self.p.assignment_timeout_s:g} s unrecorded")
        self.runtime.assignments.expired.clear()

    def on_next_task(self, request: NextTask.Request, response: NextTask.Response) -> NextTask.Response:
        """The /next_task service: the runtime's decision (announced on the decision topic too), or ok=false, why."""
        try:
            d = self.runtime.next_task(list(request.candidate_tasks), int(request.batch_size), str(request.robot))
        except Exception as exc:
            response.ok, response.message = False, bounded(str(exc), 2000)
            response.selector = self.p.selector
            line = self._refusals.line(("next_task", "refused"), f"next_task refused: {bounded(str(exc))}")
            if line is not None:
                self.get_logger().warning(line)
            return response
        response.ok, response.message = True, d.message
        response.task, response.instruction, response.selected_tasks = d.task, d.instruction, d.selected_tasks
        response.tasks, response.scores, response.demo_counts = d.tasks, d.scores, d.demo_counts
        response.warm_start, response.selector, response.compute_time = d.warm_start, d.selector, d.compute_time
        response.effective_sample_size = d.effective_sample_size
        response.robot = d.robot
        response.pending_robots, response.pending_tasks = [r for r, _ in d.pending], [t for _, t in d.pending]
        self.decision_pub.publish(decision_msg(response, self.get_clock().now().to_msg()))
        self.get_logger().info(f"next_task -> {d.task} ({d.compute_time * 1e3:.1f} ms): {d.message}")
        return response


def _seconds(stamp: object) -> float:
    """A header stamp in seconds; an unstamped message (0) gets the arrival time."""
    t = int(stamp.sec) + 1e-9 * int(stamp.nanosec)
    return t if t > 0 else time.time()


def decision_msg(response: NextTask.Response, stamp: object) -> TaskDecision:
    """The latched announcement of one answer (the same fields as the response)."""
    msg = TaskDecision(header=Header(stamp=stamp))
    for name in ("task", "instruction", "selected_tasks", "tasks", "scores", "demo_counts", "effective_sample_size",
                 "warm_start", "selector", "compute_time", "message", "robot", "pending_robots", "pending_tasks"):
        setattr(msg, name, getattr(response, name))
    return msg


def main(args=None) -> None:
    """Run the node until Ctrl-C / SIGTERM."""
    spin(TaskSelectorNode, args, num_threads=2)


if __name__ == "__main__":
    main()
