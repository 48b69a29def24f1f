"""scripted_teleop: the simulated human operator of the embedded simulation (logic: amf_ros/runtime/scripted_teleop.py).

When the recorder's latched status (``status_topic``) shows a new episode for task T, it makes sure the simulator is
on a fresh scene of T (calling ``reset_service`` asynchronously only when the simulator's latched TaskStatus on
``task_status_topic`` shows another task or a used scene), drives the arm with T's scripted expert (``experts``:
Metaworld or the embedded WidowX) on ``action_topic`` as a teleop device would, and ends the episode (EndEpisode,
success from the TaskStatus) when the status says solved or done, or after ``max_steps`` actions. No service is
called per control tick, and every call is bounded by ``call_timeout_s``. An ArmStop from another node on
``stop_topic`` ends the demonstration (discarded).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from builtin_interfaces.msg import Time
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node

from amf_ros.bringup.params.scripted_teleop import ScriptedTeleopParams
from amf_ros.envs.suites import get_suite
from amf_ros.msg import ArmStop, EefDeltaAction, RecorderStatus, StateVector, TaskStatus
from amf_ros.ros import qos
from amf_ros.ros.arm_msgs import action_msg, stamp_ns
from amf_ros.ros.calls import call_bounded
from amf_ros.ros.logs import log_at
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.runtime.scripted_teleop import ScriptedTeleop as TeleopRuntime
from amf_ros.runtime.scripted_teleop import SimStatus
from amf_ros.srv import EndEpisode, ResetTask


class ScriptedTeleop(Node):
    """Drives the simulator with the scripted expert while the recorder records; see the module docstring."""

    executor_kind = "single"
    """Its inputs and the control tick share one mutually exclusive group and its service calls are asynchronous
    (ros/calls.py), so a pool adds nothing but a late tick (sim_bridge's executor_kind has the measurement)."""

    def __init__(self) -> None:
        super().__init__("scripted_teleop")
        self.p = p = declare(self, ScriptedTeleopParams)
        # built now, never inside a callback
        experts = get_suite(p.experts, training=True).scripted_experts(p.tasks_file, p.noise_std, p.seed)
        self.teleop = TeleopRuntime(experts, self, lambda: self.get_clock().now().nanoseconds,
                                    control_rate_hz=p.control_rate_hz, max_steps=p.max_steps,
                                    start_timeout_s=p.start_timeout_s, end_episode=p.end_episode)
        subs, calls = MutuallyExclusiveCallbackGroup(), ReentrantCallbackGroup()
        self.create_subscription(RecorderStatus, p.status_topic, self._on_recorder, qos.LATCHED, callback_group=subs)
        self.create_subscription(TaskStatus, p.task_status_topic, self._on_task_status, qos.LATCHED,
                                 callback_group=subs)
        self.create_subscription(StateVector, p.state_topic, self._on_state, qos.STREAM, callback_group=subs)
        self.create_subscription(ArmStop, p.stop_topic, self._on_stop, qos.EVENTS, callback_group=subs)
        self._action_pub = self.create_publisher(EefDeltaAction, p.action_topic, qos.ACTIONS)
        self._end = self.create_client(EndEpisode, p.end_episode_service, qos_profile=qos.SERVICES,
                                       callback_group=calls)
        self._reset = self.create_client(ResetTask, p.reset_service, qos_profile=qos.SERVICES, callback_group=calls)
        self.create_timer(1.0 / p.control_rate_hz, self.teleop.tick, callback_group=subs)
        self.get_logger().info(f"ready: experts for {sorted(experts)}")

    def _on_recorder(self, msg: RecorderStatus) -> None:
        self.teleop.on_recorder_status(msg.recording, msg.episode_id, msg.task, stamp_ns(msg.header.stamp))

    def _on_task_status(self, msg: TaskStatus) -> None:
        self.teleop.on_sim_status(SimStatus(stamp_ns(msg.header.stamp), msg.task, int(msg.resets), int(msg.steps),
                                            bool(msg.success), bool(msg.done)))

    def _on_state(self, msg: StateVector) -> None:
        self.teleop.on_state(stamp_ns(msg.header.stamp), np.asarray(msg.values, dtype=np.float64))

    def _on_stop(self, msg: ArmStop) -> None:
        if msg.source != self.get_fully_qualified_name():
            self.teleop.stop(f"stop from {msg.source or '?'}: {msg.reason[:200] or 'no reason'}")

    # ---- TeleopOutputs ------------------------------------------------------------------------------------------
    def send_action(self, a7: np.ndarray, stamp_ns: int) -> None:
        """Publish one 7-D action stamped ``stamp_ns`` and valid for ``action_valid_for_s``."""
        stamp = Time(sec=int(stamp_ns) // 1_000_000_000, nanosec=int(stamp_ns) % 1_000_000_000)
        self._action_pub.publish(action_msg(a7, stamp, self.p.action_valid_for_s))

    def end_episode(self, episode_id: str, success: bool, discard: bool) -> None:
        """EndEpisode on the recorder, bounded and asynchronous; the answer is only logged."""
        def done(res: Any, why: str) -> None:
            if res is not None and res.ok:
                self.get_logger().info(f"episode {episode_id} ended: {res.num_steps} steps, {res.path or 'discarded'}")
            else:
                self.get_logger().error(f"EndEpisode({episode_id}) failed: {why or res.message}")
        call_bounded(self, self._end, EndEpisode.Request(episode_id=episode_id, success=success, discard=discard),
                     self.p.call_timeout_s, done)

    def reset_sim(self, episode_id: str, task: str) -> None:
        """sim_bridge's reset (seed -1), bounded and asynchronous; the answer goes to the runtime."""
        if not self._reset.service_is_ready():
            self.get_logger().warning(f"{self.p.reset_service} not available yet; asking anyway")

        def done(res: Any, why: str) -> None:
            self.teleop.on_reset_reply(episode_id, res is not None and res.ok, why or res.message)
        call_bounded(self, self._reset, ResetTask.Request(task=task, seed=-1), self.p.call_timeout_s, done)

    def log(self, level: str, text: str) -> None:
        """Write one of the runtime's lines to the node's ROS log at its level."""
        log_at(self, level, text)  # one rclpy call site per severity (amf_ros/ros/logs.py)


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/scripted_teleop``."""
    spin(ScriptedTeleop, args)


if __name__ == "__main__":
    main()
