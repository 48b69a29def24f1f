"""operator_console: a web page beside the robot that says which task to demonstrate next and why, and runs the round
(logic: amf_ros/runtime/operator_console.py; page and server: amf_ros/console/; docs/console.md).

ROS side only: subscriptions feed the console's model (recorder status, saved episodes, checkpoints, the simulator's
status, the camera, the teleop node's state), a raw (never deserialised) subscription per recorder input topic times
its arrivals for the stale/slow warnings, and browser commands become bounded service calls and action goals. A
command arrives on the web server's thread and is handed to the executor through a guard condition, so every rclpy
call happens on the executor; no callback waits on anything. The Drive panel's input becomes sensor_msgs/Joy on
``drive_topic``: published on the executor at once when it changes (a guard condition) and every 1/``drive_rate_hz``
while fresh by a timer that runs only while someone drives.
"""

from __future__ import annotations

import json
import os
import queue
from pathlib import Path
from typing import Any, Callable

from rcl_interfaces.msg import ParameterType
from rcl_interfaces.srv import GetParameters
from rclpy.action import ActionClient
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import Image, Joy
from std_msgs.msg import String

from amf_ros._optional import load_object
from amf_ros.action import FineTune, RunPolicy
from amf_ros.bringup import graph_lock
from amf_ros.bringup.params.operator_console import OperatorConsoleParams
from amf_ros.console.camera import FrameSlot
from amf_ros.console.drive import DriveInput, DriveSession
from amf_ros.console.model import ConsoleModel
from amf_ros.console.protocol import Command
from amf_ros.console.server import ConsoleServer
from amf_ros.data.ros_convert import image_to_rgb, stamp_ns
from amf_ros.msg import ArmStop, CheckpointInfo, ControlSource, EpisodeInfo, RecorderStatus, TaskDecision, TaskStatus
from amf_ros.ros import qos
from amf_ros.ros.calls import GoalCall, call_bounded, send_goal_bounded
from amf_ros.ros.control_msgs import QOS as CONTROL_QOS
from amf_ros.ros.control_msgs import control_fields
from amf_ros.ros.logs import log_at
from amf_ros.ros.params import declare
from amf_ros.ros.spin import StartupError, spin
from amf_ros.runtime.operator_console import Done, OperatorConsole
from amf_ros.srv import EndEpisode, NextTask, ResetTask, StartEpisode


def fields(msg: Any) -> dict[str, Any]:
    """A message's fields as a dict (arrays stay arrays; the model makes them JSON)."""
    return {name: getattr(msg, name) for name in msg.get_fields_and_field_types()}


def message_class(type_name: str) -> Any:
    """``pkg/msg/Name`` -> the Python message class (no rosidl_runtime_py in the wheels)."""
    pkg, kind, name = type_name.split("/")
    return load_object(f"{pkg}.{kind}:{name}", "message type")


class OperatorConsoleNode(Node):
    """See the module docstring."""

    executor_kind = "single"  # light callbacks only; the web server runs on its own thread

    def __init__(self) -> None:
        super().__init__("operator_console")
        self.p = p = declare(self, OperatorConsoleParams)
        tasks: dict[str, str] = {}
        if p.tasks_file:
            from amf_ros.data.task_set import load_task_set

            tasks = load_task_set(p.tasks_file).instructions
        self.model = ConsoleModel(tasks, {t: p.target_demos for t in tasks} if p.target_demos else None,
                                  stale_after_s=p.stale_after_s, min_rate_fraction=p.min_rate_fraction)
        self.console = OperatorConsole(self.model, self, auto_ask=p.auto_ask,
                                       drive=DriveSession(silence_s=p.drive_silence_s))
        self.frames = FrameSlot()
        self._goals: dict[str, GoalCall] = {}
        self._inbox: queue.SimpleQueue[tuple[Command, Callable[[bool, str], None]]] = queue.SimpleQueue()
        self._group = group = MutuallyExclusiveCallbackGroup()
        self.create_subscription(RecorderStatus, p.status_topic, self._on_recorder, qos.LATCHED, callback_group=group)
        self.create_subscription(EpisodeInfo, p.episodes_topic, lambda m: self.console.on_episode(fields(m)),
                                 qos.EVENTS, callback_group=group)
        self.create_subscription(CheckpointInfo, p.checkpoint_topic, self._on_checkpoint, qos.LATCHED,
                                 callback_group=group)
        self.create_subscription(TaskStatus, p.sim_status_topic, self._on_sim_status, qos.LATCHED,
                                 callback_group=group)
        self.create_subscription(TaskDecision, p.decision_topic,  # anyone's decision, without asking
                                 lambda m: self.model.on_decision({**fields(m), "ok": True}), qos.LATCHED,
                                 callback_group=group)
        self.create_subscription(TaskStatus, p.outcomes_topic, self._on_outcome, qos.EVENTS, callback_group=group)
        # progress of every fine-tune, also one started by `amf run` or the CLI: the action's own feedback topic
        self.create_subscription(FineTune.Impl.FeedbackMessage, f"{p.fine_tune_action}/_action/feedback",
                                 self._on_fine_tune_feedback, qos.EVENTS, callback_group=group)
        for topic in p.image_topics:
            self.create_subscription(Image, topic, lambda m, t=topic: self.frames.put(t, m), qos.LATEST,
                                     callback_group=group)
        self._next = self.create_client(NextTask, p.next_task_service, qos_profile=qos.SERVICES,
                                       callback_group=group)
        self._start = self.create_client(StartEpisode, p.start_service, qos_profile=qos.SERVICES,
                                         callback_group=group)
        self._end = self.create_client(EndEpisode, p.end_service, qos_profile=qos.SERVICES,
                                       callback_group=group)
        self._rerecord = self.create_client(StartEpisode, p.rerecord_service, qos_profile=qos.SERVICES,
                                            callback_group=group)
        self._reset = self.create_client(ResetTask, p.sim_reset_service, qos_profile=qos.SERVICES,
                                         callback_group=group)
        self._fine_tune = ActionClient(self, FineTune, p.fine_tune_action, callback_group=group,
                                        **qos.action_services())
        self._run = ActionClient(self, RunPolicy, p.run_policy_action, callback_group=group,
                                  **qos.action_services())
        self._stop_pub = self.create_publisher(ArmStop, p.stop_topic, qos.EVENTS)
        # Drive: the page's input as Joy for the teleop node (never the arm's action topic)
        self._joy_pub = self.create_publisher(Joy, p.drive_topic, qos.EVENTS)
        self.create_subscription(String, p.teleop_state_topic, lambda m: self.console.on_teleop_state(m.data),
                                 qos.LATCHED, callback_group=group)
        # who commands the arm during a run_policy goal (policy_server's take-over arbiter, runtime/handover.py)
        self.create_subscription(ControlSource, p.control_topic,
                                 lambda m: self.console.on_control(*control_fields(m)), CONTROL_QOS,
                                 callback_group=group)
        self._drive_wake = self.create_guard_condition(self._drive_now, callback_group=group)
        self._drive_timer = self.create_timer(1.0 / p.drive_rate_hz, self._drive_tick, callback_group=group)
        self._drive_timer.cancel()  # runs only while someone drives
        self._drive_idle = True
        self.model.on_drive(topic=self.resolve_topic_name(p.drive_topic))
        self._watched: set[str] = set()
        self._streams_pending: list[str] = []
        self._sim_available: bool | None = None
        self._ask_when_ready = p.auto_ask  # the first decision as soon as task_selector answers
        self.model.idle_quiet = {self.resolve_topic_name(t) for t in p.idle_quiet_topics}
        self.model.watch_nodes = [n for n in p.watch_nodes if n != self.get_name()]
        for node in self.model.watch_nodes:  # "ready: ..." / "not ready: <reason>" (policy_server, task_selector)
            self.create_subscription(String, f"{node}/status", lambda m, n=node: self.model.on_node_status(n, m.data),
                                     qos.LATCHED, callback_group=group)
        self._image_topics = [self.resolve_topic_name(t) for t in p.image_topics]
        self._supervisor_file = graph_lock.graph_dir(p.status_workspace, self.get_namespace()) / graph_lock.STATUS_FILE
        self._recorder_rule_asked = False
        self._wake = self.create_guard_condition(self._drain_inbox, callback_group=group)
        self.create_timer(1.0, self._graph_checks, callback_group=group)
        self.server = ConsoleServer(self.model, self._from_browser, host=p.host, port=p.port, token=p.token,
                                    frames=self.frames if p.image_topics else None, to_rgb=image_to_rgb,
                                    display_rate_hz=p.display_rate_hz, push_period_s=p.push_period_s, log=self.log,
                                    allowed_hosts=p.allowed_hosts, drive_display_rate_hz=p.drive_display_rate_hz,
                                    on_drive=self._from_browser_drive, on_drive_release=self._drive_released,
                                    frame_stamp=lambda m: stamp_ns(m) * 1e-9)
        try:
            self.server.start()
        except (OSError, ValueError) as exc:
            raise StartupError(f"operator_console: cannot serve on {p.host}:{p.port}: {exc}") from None
        self.get_logger().info(f"operator console at {self.server.url}")

    # -- browser -> executor -----------------------------------------------------------------------------------
    def _from_browser(self, cmd: Command, reply: Callable[[bool, str], None]) -> None:
        """Called on the web server's thread: queue the command, wake the executor (nothing rclpy here)."""
        self._inbox.put((cmd, reply))
        self._wake.trigger()

    def _drain_inbox(self) -> None:
        while True:
            try:
                cmd, reply = self._inbox.get_nowait()
            except queue.Empty:
                return
            try:
                self.console.handle(cmd, reply)
            except Exception as exc:
                self.get_logger().error(f"{cmd.op}: {type(exc).__name__}: {exc}")
                reply(False, f"{cmd.op} failed: {type(exc).__name__}: {exc}")

    # -- Drive: browser -> Joy ---------------------------------------------------------------------------------
    def _from_browser_drive(self, client: str, inp: DriveInput) -> str:
        """Called on the web server's thread: hand the input to the session; wake the executor to publish it now
        if it changed or nobody was driving (nothing rclpy here but the guard condition)."""
        now, why = self.console.drive_input(client, inp)
        if not why and (now or self._drive_idle):
            self._drive_wake.trigger()
        return why

    def _drive_released(self, client: str) -> None:
        if self.console.drive_release(client):
            self._drive_wake.trigger()

    def _drive_now(self) -> None:
        """On the executor: publish every change at once, in order, and run the republish timer."""
        if self._drive_idle:
            self._drive_idle = False
            self._drive_timer.reset()
        self._publish_joy(self.console.drive_publish(tick=False))

    def _drive_tick(self) -> None:
        inputs = self.console.drive_publish(tick=True)
        if not inputs:  # the driving page went silent: publish nothing (the teleop node's silence rule stops the arm)
            self._drive_timer.cancel()
            self._drive_idle = True
        self._publish_joy(inputs)

    def _publish_joy(self, inputs: list[DriveInput]) -> None:
        for inp in inputs:
            msg = Joy()
            msg.header.stamp = self.get_clock().now().to_msg()
            msg.axes, msg.buttons = inp.joy()
            self._joy_pub.publish(msg)

    # -- ROS inputs --------------------------------------------------------------------------------------------
    def _on_recorder(self, msg: RecorderStatus) -> None:
        self.console.on_recorder_status(fields(msg))
        self._streams_pending = [t for t in msg.topics if t not in self._watched]

    def _on_checkpoint(self, msg: CheckpointInfo) -> None:
        self.console.on_checkpoint(msg.path, int(msg.round), list(msg.tasks), [float(a) for a in msg.alphas])

    def _on_sim_status(self, msg: TaskStatus) -> None:
        self.console.on_sim(bool(self._sim_available), task=msg.task, resets=int(msg.resets), steps=int(msg.steps),
                            success=bool(msg.success), done=bool(msg.done))

    def _on_outcome(self, msg: TaskStatus) -> None:
        self.model.on_outcome(msg.task, bool(msg.success), int(msg.steps))

    def _on_fine_tune_feedback(self, msg: Any) -> None:
        fb = msg.feedback
        self.model.on_fine_tune(True, int(fb.step), int(fb.total_steps), float(fb.loss))

    def _graph_checks(self) -> None:
        """Once a second, never per browser: is the simulator there; subscribe to new recorder input topics; which
        watched nodes are up (the ROS graph, `amf up`'s status file); is any camera published."""
        ns = self.get_namespace()
        names = {name for name, node_ns in self.get_node_names_and_namespaces() if node_ns == ns}
        self.model.on_graph(names, read_supervisor(self._supervisor_file))
        self.model.on_camera_sources(self._image_topics, {t: self.count_publishers(t) for t in self._image_topics})
        if not self._recorder_rule_asked and self.model.section("recorder") is not None:
            self._ask_recorder_rule()
        if self._ask_when_ready and self._next.service_is_ready():
            self._ask_when_ready = False
            self.console.ask()
        available = self._reset.service_is_ready()
        if available != self._sim_available:
            self._sim_available = available
            self.console.on_sim(available)
        if self._streams_pending:
            types = dict(self.get_topic_names_and_types())
            for topic in list(self._streams_pending):
                if topic in self._watched or not types.get(topic):
                    continue
                try:
                    cls = message_class(types[topic][0])
                except (ImportError, AttributeError, ValueError) as exc:
                    self.get_logger().warning(f"cannot watch {topic} ({types[topic][0]}): {exc}")
                    self._watched.add(topic)
                    continue
                # best effort: compatible with any publisher, and never asks a publisher to resend to the console
                self.create_subscription(cls, topic, lambda _m, t=topic: self.model.monitor.arrived(t), qos.LATEST,
                                         raw=True, callback_group=self._group)
                self._watched.add(topic)
                self.model.monitor.watch(topic)

    def _ask_recorder_rule(self) -> None:
        """Read the recorder's own min_rate_fraction once (asynchronous, bounded): the console never warns about a
        stream rate the recorder is configured not to warn about (0 in the simulators' configs)."""
        infos = self.get_publishers_info_by_topic(self.resolve_topic_name(self.p.status_topic))
        if not infos:
            return
        self._recorder_rule_asked = True
        ns = infos[0].node_namespace.rstrip("/")
        client = self.create_client(GetParameters, f"{ns}/{infos[0].node_name}/get_parameters",
                                    qos_profile=qos.SERVICES, callback_group=self._group)

        def done(res: Any, why: str) -> None:
            value = res.values[0] if res is not None and len(res.values) == 1 else None
            if value is not None and value.type == ParameterType.PARAMETER_DOUBLE:
                self.model.recorder_min_rate_fraction = float(value.double_value)
            else:
                self.get_logger().info(f"recorder's min_rate_fraction not read ({why or 'no such parameter'}): "
                                       f"stream rates are judged by this console's min_rate_fraction alone")

        call_bounded(self, client, GetParameters.Request(names=["min_rate_fraction"]), self.p.call_timeout_s, done)

    # -- ConsoleOutputs ----------------------------------------------------------------------------------------
    def _call(self, client: Any, request: Any, done: Done, timeout_s: float | None = None) -> None:
        call_bounded(self, client, request, timeout_s or self.p.call_timeout_s,
                     lambda res, why: done(fields(res) if res is not None else None, why))

    def next_task(self, done: Done) -> None:
        """/next_task (batch 1); refused at once while task_selector is down, asked again once it is up (auto_ask)."""
        if not self._next.service_is_ready():
            self._ask_when_ready = self.p.auto_ask  # asked again once task_selector is up
            done(None, f"{self._next.srv_name} is not available (is task_selector running?)")
            return
        self._ask_when_ready = False
        self._call(self._next, NextTask.Request(batch_size=1), done, self.p.next_task_timeout_s)

    def start_episode(self, task: str, instruction: str, done: Done) -> None:
        """StartEpisode on the recorder, noted as started from the operator console."""
        self._call(self._start, StartEpisode.Request(task=task, instruction=instruction, note="operator console"),
                   done)

    def rerecord(self, task: str, done: Done) -> None:
        """The recorder's re-record service: discard the episode being recorded and start ``task`` anew."""
        self._call(self._rerecord, StartEpisode.Request(task=task, note="operator console: re-record"), done)

    def end_episode(self, episode_id: str, success: bool, discard: bool, done: Done) -> None:
        """EndEpisode on the recorder: save ``episode_id`` with the verdict ``success``, or discard it."""
        self._call(self._end, EndEpisode.Request(episode_id=episode_id, success=success, discard=discard), done)

    def reset_sim(self, task: str, done: Done) -> None:
        """sim_bridge's reset to a new scene (seed -1 = the simulator's next seed) of ``task``."""
        self._call(self._reset, ResetTask.Request(task=task, seed=-1), done)

    def fine_tune(self, feedback: Callable[[int, int, float], None], done: Done) -> None:
        """A fine_tune goal with the node's default steps; its progress arrives on the fine-tune topic instead."""
        self._goals["fine_tune"] = send_goal_bounded(
            self, self._fine_tune, FineTune.Goal(steps=0), self.p.fine_tune_timeout_s,
            lambda res, why: done(fields(res) if res is not None else None, why))  # progress: _on_fine_tune_feedback

    def run_policy(self, task: str, feedback: Callable[[int], None], done: Done) -> None:
        """A run_policy goal on ``task`` with the node's step limit (max_steps 0); ``feedback`` gets the step count."""
        self._goals["evaluate"] = send_goal_bounded(
            self, self._run, RunPolicy.Goal(task=task, max_steps=0), self.p.evaluate_timeout_s,
            lambda res, why: done(fields(res) if res is not None else None, why),
            lambda fb: feedback(int(fb.step)))

    def cancel(self, goal: str, done: Done) -> None:
        """Cancel the last ``goal`` ("fine_tune" or "evaluate") this console sent."""
        call = self._goals.get(goal)
        if call is None:
            done(None, f"no {goal} goal sent")
            return
        call.cancel(lambda res, why: done({"ok": res is not None} if res is not None else None, why))

    def stop_arm(self, reason: str) -> None:
        """Publish an ArmStop from this node, stamped now."""
        msg = ArmStop(source=self.get_fully_qualified_name(), reason=reason)
        msg.header.stamp = self.get_clock().now().to_msg()
        self._stop_pub.publish(msg)

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def log(self, level: str, text: str) -> None:
        """Write one of the runtime's outcome lines to the node's ROS log at its level."""
        log_at(self, level, text)  # one rclpy call site per severity (amf_ros/ros/logs.py)

    def close(self) -> None:
        """Called by spin() at shutdown: close every browser connection and the listener (bounded)."""
        self.server.stop(timeout_s=3.0)


SUPERVISOR_MAX_BYTES = 1 << 20
"""Bound on reading `amf up`'s status.json (a few hundred bytes per node)."""


def read_supervisor(path: Path) -> dict[str, Any] | None:
    """``nodes`` of `amf up`'s status file, or None if absent, unreadable, or its supervisor is gone (a file left
    by an earlier run says nothing about this one)."""
    try:
        with open(path, "rb") as f:
            data = json.loads(f.read(SUPERVISOR_MAX_BYTES))
        os.kill(int(data["supervisor_pid"]), 0)
        return dict(data["nodes"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/operator_console``."""
    spin(OperatorConsoleNode, args)


if __name__ == "__main__":
    main()
