"""demo_recorder: teleop/camera/state topics in, crash-safe episodes out (a thin adapter on amf_ros.runtime).

Services ``start_service`` (StartEpisode), ``end_service`` (EndEpisode, success/discard) and ``rerecord_service``
(StartEpisode type: discard the episode in progress and start again), a latched
RecorderStatus, and an EpisodeInfo announcement per committed episode. Every message goes, with its own
``header.stamp``, to :class:`amf_ros.runtime.demo_recorder.DemoRecorder` (checks, synchroniser, store; bad input
is refused with a log line and ``last_error`` in the status). Messages and the status timer run in one callback
group, the services in another: EndEpisode blocks its executor thread while it waits (bounded by
``end_timeout_s``) for messages in flight, which the message callbacks keep taking on another thread. The
partial-episode sweep (every ``recover_sweep_period_s``) has a third group, so that a recovery's file I/O never
delays a message callback. The arm's latched ArmStatus (``arm_status_topic``) feeds the e-stop rule: no episode starts
while it is engaged, and one during which it engaged is discarded at EndEpisode (DemoRecorder.observe_arm).
policy_server's ControlSource (``control_topic``) labels each step with who acted (DemoRecorder.observe_control).
"""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from typing import Any

from geometry_msgs.msg import TwistStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from sensor_msgs.msg import Image, JointState

from amf_ros.bringup.graph_lock import hold_node_lock
from amf_ros.bringup.params.demo_recorder import DemoRecorderParams
from amf_ros.msg import ArmStatus, ControlSource, EefDeltaAction, EpisodeInfo, RecorderStatus, StateVector
from amf_ros.ros import qos
from amf_ros.ros.control_msgs import QOS as CONTROL_QOS
from amf_ros.ros.control_msgs import control_fields
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.runtime.demo_recorder import DemoRecorder
from amf_ros.srv import EndEpisode, StartEpisode

# Message type of each action_type / state_type parameter value (converters: amf_ros.runtime.recorder_inputs).
ACTION_MSGS = {"eef_delta": EefDeltaAction, "twist_stamped": TwistStamped}
STATE_MSGS = {"state_vector": StateVector, "joint_state": JointState, "widowx_proprio": JointState}


class DemoRecorderNode(Node):
    """See the module docstring; parameters in amf_ros/bringup/params/demo_recorder.py."""

    def __init__(self) -> None:
        super().__init__("demo_recorder")
        p = declare(self, DemoRecorderParams)
        self._place = hold_node_lock(p.workspace, self.get_namespace(), self.get_name())  # one graph per namespace
        full = self.resolve_topic_name  # fully qualified names in status, start messages and episode metadata
        p = self.p = replace(p, action_topic=full(p.action_topic), state_topic=p.state_topic and full(p.state_topic),
                             image_topics=tuple(full(t) for t in p.image_topics))
        self.rt = DemoRecorder(p)
        for line in self.rt.partial_report:
            self.get_logger().warning(line)
        messages, services = MutuallyExclusiveCallbackGroup(), MutuallyExclusiveCallbackGroup()
        self._status_pub = self.create_publisher(RecorderStatus, p.status_topic, qos.LATCHED)
        self._episodes_pub = self.create_publisher(EpisodeInfo, p.episodes_topic, qos.EVENTS)
        types = {p.action_topic: ACTION_MSGS[p.action_type], **{t: Image for t in p.image_topics}}
        if p.state_topic:
            types[p.state_topic] = STATE_MSGS[p.state_type]
        if p.control_topic:  # first: of messages ready in one wake-up, rclpy takes subscriptions in creation order
            self.create_subscription(ControlSource, p.control_topic, self._on_control, CONTROL_QOS,
                                     callback_group=messages)
        for topic, msg_type in types.items():
            profile = qos.images(p.image_queue_depth) if msg_type is Image else qos.STREAM
            self.create_subscription(msg_type, topic, partial(self._on_msg, topic), profile,
                                     callback_group=messages)
        self.create_service(StartEpisode, p.start_service, self._on_start, qos_profile=qos.SERVICES,
                            callback_group=services)
        self.create_service(EndEpisode, p.end_service, self._on_end, qos_profile=qos.SERVICES,
                            callback_group=services)
        self.create_service(StartEpisode, p.rerecord_service, self._on_rerecord, qos_profile=qos.SERVICES,
                            callback_group=services)
        if p.arm_status_topic:
            self.create_subscription(ArmStatus, p.arm_status_topic, self._on_arm_status, qos.LATCHED,
                                     callback_group=messages)
        self.create_timer(p.status_period_s, self._publish_status, callback_group=messages)
        if p.recover_sweep_period_s > 0:
            self.create_timer(p.recover_sweep_period_s, self._sweep, callback_group=MutuallyExclusiveCallbackGroup())
        self._publish_status()
        self.get_logger().info(f"recording {self.rt.topics} into {self.rt.store.root} "
                               f"({len(self.rt.store)} episodes)")

    def _on_msg(self, topic: str, msg: Any) -> None:
        line = self.rt.feed(topic, msg)
        if line is not None:
            self.get_logger().error(line)
            self._publish_status()
        events = self.rt.rate_events()
        for level, text in events:
            if level == "warn":
                self.get_logger().warning(text)
            else:
                self.get_logger().info(text)
        if events:
            self._publish_status()

    def _on_control(self, msg: ControlSource) -> None:
        source, _node, stamp = control_fields(msg)
        self.rt.observe_control(source, stamp)

    def _on_arm_status(self, msg: ArmStatus) -> None:
        line = self.rt.observe_arm(bool(msg.estop), int(msg.estop_engagements))
        if line is not None:
            self.get_logger().warning(line)
            self._publish_status()

    def _on_start(self, req: StartEpisode.Request, res: StartEpisode.Response) -> StartEpisode.Response:
        return self._start_like(self.rt.start, "StartEpisode", req, res)

    def _on_rerecord(self, req: StartEpisode.Request, res: StartEpisode.Response) -> StartEpisode.Response:
        return self._start_like(self.rt.rerecord, "re-record", req, res)

    def _start_like(self, op: Any, label: str, req: StartEpisode.Request,
                    res: StartEpisode.Response) -> StartEpisode.Response:
        """Both StartEpisode-typed services: the runtime call with the node clock and the action publishers."""
        out = op(req.task, req.instruction, req.note, self.get_clock().now().nanoseconds,
                 self.count_publishers(self.p.action_topic))
        res.ok, res.message, res.episode_id = out.ok, out.message, out.episode_id
        self._log(out.ok, f"{label}: {out.message}")
        return res

    def _on_end(self, req: EndEpisode.Request, res: EndEpisode.Response) -> EndEpisode.Response:
        """Blocks this (service) thread for at most end_timeout_s + the commit: DemoRecorder.end."""
        out = self.rt.end(req.episode_id, req.success, req.discard, self.get_clock().now().nanoseconds)
        res.ok, res.message, res.num_steps, res.path = out.ok, out.message, out.num_steps, out.path
        if not out.settled:
            self.get_logger().warning(f"EndEpisode: topics not settled after {out.waited_s:.2f} s (end_timeout_s); "
                                   "committed what had arrived")
        if out.announce is not None:
            info = EpisodeInfo(**out.announce)
            info.header.stamp = self.get_clock().now().to_msg()
            self._episodes_pub.publish(info)
        self._log(out.ok, f"EndEpisode: {out.message}")
        return res

    def _sweep(self) -> None:
        """Apply on_partial to partial episodes that appeared since the start (DemoRecorder.sweep_partial)."""
        try:
            lines = self.rt.sweep_partial()
        except Exception as exc:
            self.get_logger().error(f"partial-episode sweep failed: {type(exc).__name__}: {exc}")
            return
        for line in lines:
            self.get_logger().warning(line)
        if lines:
            self._publish_status()

    def _log(self, ok: bool, text: str) -> None:
        """Log a service outcome (rclpy wants one severity per call site) and publish the new status."""
        if ok:
            self.get_logger().info(text)
        else:
            self.get_logger().error(text)
        self._publish_status()

    def _publish_status(self) -> None:
        s = self.rt.status(self.count_publishers(self.p.action_topic))
        msg = RecorderStatus(recording=s.recording, episode_id=s.episode_id, num_steps=s.num_steps,
                             control_rate_hz=s.control_rate_hz, topics=s.topics,
                             episodes_in_store=s.episodes_in_store, topic_age_s=s.topic_age_s,
                             last_error=s.last_error, task=s.task, instruction=s.instruction,
                             ready=not s.not_ready_reason, not_ready_reason=s.not_ready_reason,
                             topic_rate_hz=s.topic_rate_hz, topic_nominal_hz=s.topic_nominal_hz,
                             topic_dropped=s.topic_dropped, topic_duplicated=s.topic_duplicated,
                             rate_warnings=s.rate_warnings)
        msg.header.stamp = self.get_clock().now().to_msg()
        self._status_pub.publish(msg)

    def close(self) -> None:
        """Called by spin() at shutdown: a waiting EndEpisode stops waiting (DemoRecorder.close)."""
        self.rt.close()


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/demo_recorder``."""
    spin(DemoRecorderNode, args)


if __name__ == "__main__":
    main()
