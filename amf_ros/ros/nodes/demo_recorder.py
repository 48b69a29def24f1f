"""demo_recorder: teleop/camera/state topics in, crash-safe episodes out (a thin adapter on amf_ros.data).

Services ``start_service`` (StartEpisode) and ``end_service`` (EndEpisode, success/discard), a latched
RecorderStatus, and an EpisodeInfo announcement per committed episode. Every message goes, with its own
``header.stamp``, into :class:`amf_ros.data.recorder.EpisodeRecorder`, whose StreamSynchronizer is the one the
bag importer uses: each action is stored with the newest observation stamped at or before it.
Bad input never reaches the store: an image with an unsupported encoding, a state or action with NaN/inf
is refused with a log line and ``last_error`` in the status; the episode goes on with the other messages.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from geometry_msgs.msg import TwistStamped
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.task import Future
from sensor_msgs.msg import Image, JointState

from amf_ros.data import ros_convert
from amf_ros.data.recorder import EpisodeRecorder
from amf_ros.data.store import EpisodeStore, StoreConfig
from amf_ros.data.sync import SyncConfig
from amf_ros.msg import EefDeltaAction, EpisodeInfo, RecorderStatus, StateVector
from amf_ros.runtime import recorder_inputs as inputs
from amf_ros.runtime import demo_recorder as rules
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.srv import EndEpisode, StartEpisode


# Message type of each action_type / state_type parameter value (converters: amf_ros.runtime.recorder_inputs).
ACTION_MSGS = {"eef_delta": EefDeltaAction, "twist_stamped": TwistStamped}
STATE_MSGS = {"state_vector": StateVector, "joint_state": JointState, "widowx_proprio": JointState}


class DemoRecorder(Node):
    """See the module docstring; parameters in amf_ros/bringup/params/demo_recorder.py."""

    def __init__(self) -> None:
        super().__init__("demo_recorder")
        p = self.p = declare(self, "demo_recorder")
        self.instructions: dict[str, str] = {}
        if p.tasks_file:
            from amf_ros.data.tasks import read_instructions

            self.instructions = read_instructions(p.tasks_file)
        topics = rules.stream_topics(p.action_topic, p.state_topic, p.image_topics, p.image_keys)
        self.store = EpisodeStore(p.dataset_dir, StoreConfig(image_codec=p.image_codec,
                                  jpeg_quality=p.jpeg_quality, chunk_steps=p.chunk_steps))
        for line in rules.handle_partial(self.store, p.on_partial, p.recover_min_age_s):
            self.get_logger().warn(line)
        sync = SyncConfig(rate_hz=p.control_rate_hz, mode=p.sync_mode, aggregate=p.aggregate,
                          max_obs_age_s=p.max_obs_age_s, max_delay_s=p.max_delay_s)
        self.rec = EpisodeRecorder(self.store, topics, sync, robot=p.robot)
        self.received: dict[str, float] = {t: -1.0 for t in topics}  # topic -> monotonic receive time
        self.last_error = ""
        self._throttle = rules.ErrorThrottle(period_s=1.0)
        self.episodes_in_store = len(self.store)
        self._episode_meta = ("", "")  # (task, instruction) of the current episode

        # Messages and the status timer in one group; the services in another, so that EndEpisode can wait
        # (as a coroutine) for messages still in flight while they are taken; self._lock guards self.rec.
        group, services, self._wakeups = (MutuallyExclusiveCallbackGroup(), MutuallyExclusiveCallbackGroup(),
                                          ReentrantCallbackGroup())
        self._lock = threading.RLock()
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        self._status_pub = self.create_publisher(RecorderStatus, p.status_topic, latched)
        self._episodes_pub = self.create_publisher(EpisodeInfo, p.episodes_topic,
                                                   QoSProfile(depth=50, reliability=ReliabilityPolicy.RELIABLE))

        def sub(msg_type: Any, topic: str, convert: Callable[[Any], Any], depth: int) -> None:
            qos = QoSProfile(depth=depth, reliability=ReliabilityPolicy.RELIABLE)
            self.create_subscription(msg_type, topic, lambda m: self._on_msg(topic, m, convert), qos,
                                     callback_group=group)

        action_convert = inputs.ACTION_CONVERTERS[p.action_type](1.0 / p.control_rate_hz, p.twist_gripper)
        sub(ACTION_MSGS[p.action_type], p.action_topic, action_convert, 100)
        if p.state_topic:
            sub(STATE_MSGS[p.state_type], p.state_topic, inputs.STATE_CONVERTERS[p.state_type], 100)
        for topic in p.image_topics:
            sub(Image, topic, inputs.image, p.image_queue_depth)
        self.create_service(StartEpisode, p.start_service, self._on_start, callback_group=services)
        self.create_service(EndEpisode, p.end_service, self._on_end, callback_group=services)
        self.create_timer(p.status_period_s, self._publish_status, callback_group=group)
        self._publish_status()
        self.get_logger().info(f"recording {topics} into {self.store.root} ({len(self.store)} episodes)")

    def _on_msg(self, topic: str, msg: Any, convert: Callable[[Any], Any]) -> None:
        with self._lock:
            self._take(topic, msg, convert)

    def _take(self, topic: str, msg: Any, convert: Callable[[Any], Any]) -> None:
        self.received[topic] = time.monotonic()
        try:
            stamp = ros_convert.stamp_ns(msg)
            if stamp <= 0:
                raise ValueError("header.stamp is zero: the publisher must stamp its messages (the recorder "
                                 "pairs streams by their own stamps)")
            self.rec.feed(topic, stamp, convert(msg))
        except ValueError as exc:
            self._error(f"topic {topic}: {exc}; message refused", (topic, str(exc).split(":")[0]))
        except Exception as exc:  # noqa: BLE001 - e.g. StoreWriteError (disk full): report, keep the node alive
            self._error(f"topic {topic}: recording failed: {type(exc).__name__}: {exc}", (topic, type(exc).__name__))

    def _error(self, text: str, kind: tuple[str, str]) -> None:
        """Log a refused message (throttled per topic and kind of problem) and keep it as the last error."""
        self.last_error = text
        line = self._throttle.line(kind, text)
        if line is not None:
            self.get_logger().error(line)
            self._publish_status()

    def _report(self, ok: bool, text: str) -> None:
        """Log a service outcome (rclpy wants one severity per call site) and keep the last error."""
        if ok:
            self.get_logger().info(text)
        else:
            self.get_logger().error(text)
        self.last_error = "" if ok else text

    def _on_start(self, req: StartEpisode.Request, res: StartEpisode.Response) -> StartEpisode.Response:
        with self._lock:
            return self._start(req, res)

    def _start(self, req: StartEpisode.Request, res: StartEpisode.Response) -> StartEpisode.Response:
        res.ok, instruction = False, req.instruction or self.instructions.get(req.task, "")
        stale = rules.start_problem(self.received, time.monotonic(), self.p.topic_timeout_s,
                                    self.p.action_topic, self.count_publishers(self.p.action_topic))
        if self.rec.recording:
            res.message = f"already recording episode {self.rec.episode_id}; end it first"
        elif not req.task or (self.instructions and req.task not in self.instructions):
            res.message = f"unknown task {req.task!r}; known: {sorted(self.instructions)}"
        elif not instruction:
            res.message = f"no instruction for task {req.task!r} (set tasks_file or pass one)"
        elif stale:
            res.message = stale
        else:
            try:
                res.episode_id = self.rec.start(req.task, instruction, start_ns=self.get_clock().now().nanoseconds,
                                                operator_note=req.note)
                res.ok, res.message = True, f"recording {req.task!r}"
                self._episode_meta = (req.task, instruction)
            except (ValueError, OSError) as exc:  # e.g. the dataset directory is not writable
                res.message = f"cannot start an episode: {type(exc).__name__}: {exc}"
        self._report(res.ok, f"StartEpisode: {res.message}")
        self._publish_status()
        return res

    async def _on_end(self, req: EndEpisode.Request, res: EndEpisode.Response) -> EndEpisode.Response:
        with self._lock:
            current = self.rec.episode_id
        if current and req.episode_id == current:
            await self._settle()
        with self._lock:
            return self._end(req, res)

    async def _settle(self) -> None:
        """Wait (without blocking the executor) until messages sent before the EndEpisode request are in.

        A topic is settled once its newest message is stamped after the request, or nothing arrived on it for
        ``end_quiet_s`` since the request (the simulator and the scripted operator stop publishing; messages
        already queued are taken meanwhile); at most ``end_timeout_s``.
        """
        t_end, start = self.get_clock().now().nanoseconds, time.monotonic()
        while time.monotonic() - start < self.p.end_timeout_s:
            with self._lock:
                done = rules.settled(self.rec.last_stamp, self.received, t_end, start, time.monotonic(),
                                     self.p.end_quiet_s)
            if done:
                return
            wake = Future()
            timer = self.create_timer(0.02, lambda: wake.done() or wake.set_result(True),
                                      callback_group=self._wakeups)
            await wake
            self.destroy_timer(timer)

    def _end(self, req: EndEpisode.Request, res: EndEpisode.Response) -> EndEpisode.Response:
        res.ok = False
        if not self.rec.recording:
            res.message = f"not recording (EndEpisode for {req.episode_id!r})"
        elif req.episode_id != self.rec.episode_id:
            res.message = f"episode id {req.episode_id!r} is not the current episode {self.rec.episode_id!r}"
        else:
            episode_id = self.rec.episode_id
            try:
                path = self.rec.end(success=req.success, discard=req.discard)
            except Exception as exc:  # noqa: BLE001 - ValueError (no steps), StoreWriteError (disk), anything else
                res.message = f"episode {episode_id} not saved: {type(exc).__name__}: {exc}"
            else:
                res.ok = True
                res.num_steps = 0 if path is None else self.store.meta(episode_id).num_steps
                res.path = "" if path is None else str(path)
                res.message = "discarded" if path is None else f"saved {res.num_steps} steps"
                if path is not None:
                    self.episodes_in_store += 1
                    info = EpisodeInfo(episode_id=episode_id, task=self._episode_meta[0],
                                       instruction=self._episode_meta[1], path=res.path,
                                       num_steps=res.num_steps, success=req.success)
                    info.header.stamp = self.get_clock().now().to_msg()
                    self._episodes_pub.publish(info)
        self._report(res.ok, f"EndEpisode: {res.message}")
        self._publish_status()
        return res

    def _publish_status(self) -> None:
        with self._lock:
            self._status()

    def _status(self) -> None:
        now = time.monotonic()
        msg = RecorderStatus(recording=self.rec.recording, episode_id=self.rec.episode_id,
                             num_steps=self.rec.num_steps, control_rate_hz=float(self.p.control_rate_hz),
                             topics=list(self.received), episodes_in_store=self.episodes_in_store,
                             topic_age_s=[now - r if r >= 0 else -1.0 for r in self.received.values()],
                             last_error=self.last_error)
        if self.rec.recording:
            msg.task, msg.instruction = self._episode_meta
        msg.header.stamp = self.get_clock().now().to_msg()
        self._status_pub.publish(msg)


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/demo_recorder``."""
    spin(DemoRecorder, args)


if __name__ == "__main__":
    main()
