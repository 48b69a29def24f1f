"""sim_bridge: a simulated arm behind the topics a real robot uses (logic: amf_ros/runtime/sim_bridge.py).

Every EefDeltaAction on ``action_topic`` is one simulator step; each observation is published at once, stamped with the
node clock's time when its state was taken (before its cameras render): the rendered image on ``image_topic`` (``render:
true``), then the second camera's on ``wrist_image_topic`` (``render: true`` and ``wrist_camera_name`` set), then the
state on ``state_topic``, then amf_ros/TaskStatus on ``status_topic`` (latched), all with the same header.stamp. While
no action arrives the state and status are re-published every ``idle_publish_period_s``. ``reset_service`` starts a new
episode (publishing its first observation before answering); an action is applied only if it is stamped, within its
validity horizon and newer than the last ArmStop on ``stop_topic`` (amf_ros/robots/action_gate.py: otherwise it is
dropped, the simulator does not step and the drop is logged). Every action the simulator stepped on is echoed unchanged
on ``applied_action_topic`` just before the observation it led to: demo_recorder records that topic, so a dropped
command never enters a demonstration. A simulated arm with an emergency stop (backend widowx) offers widowx_driver's
``estop_service`` (std_srvs/SetBool); while engaged every action is refused. amf_ros/ArmStatus on ``arm_status_topic``
(latched; at start, on every e-stop change and after every action) counts the actions applied and refused by reason and
says whether the e-stop is engaged. ``success_service`` still answers the current task, success since the reset and
steps, but readers should take the latched status instead of calling it per tick.
"""

from __future__ import annotations

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.time import Time
from sensor_msgs.msg import Image
from std_srvs.srv import SetBool

from amf_ros.bringup.params.sim_bridge import SimBridgeParams
from amf_ros.envs.gl_backend import default_headless_gl
from amf_ros.envs.suites import get_suite
from amf_ros.msg import ArmStatus, ArmStop, EefDeltaAction, StateVector, TaskStatus
from amf_ros.robots.action_gate import ActionCounts, ActionGate
from amf_ros.ros import qos
from amf_ros.ros.arm_msgs import action_fields, arm_status_msg, stamp_ns
from amf_ros.ros.params import declare
from amf_ros.ros.spin import StartupError, spin
from amf_ros.runtime.sim_bridge import Frame, RenderSpec
from amf_ros.runtime.sim_bridge import SimBridge as SimRuntime
from amf_ros.srv import ResetTask, TaskSuccess


def camera_frame_id(frame_id: str, camera: str) -> str:
    """header.frame_id of a camera's images: ``<frame_id>/<camera>`` (each image in the frame of the camera that took
    it, as ROS expects of sensor data; the state and status keep ``frame_id``)."""
    return f"{frame_id}/{camera}" if camera else frame_id


class SimBridge(Node):
    """Hosts the simulator; see the module docstring and amf_ros.runtime.sim_bridge for the semantics."""

    executor_kind = "single"
    """Every callback is short and in one mutually exclusive group, so a pool gains nothing; under a
    PooledExecutor an action that arrived while another callback of the group ran waited for the executor's next
    wake-up: received-to-callback p99 135 ms, max 365 ms over 977 actions of a camera `amf run` (single: p99 2 ms,
    max 5 ms), and past the action's 0.5 s validity the arm refused it (docs/ros-system.md, Executors)."""

    def __init__(self) -> None:
        super().__init__("sim_bridge")
        self.p = p = declare(self, SimBridgeParams)
        group = MutuallyExclusiveCallbackGroup()  # one callback at a time (the runtime also locks)
        self._state_pub = self.create_publisher(StateVector, p.state_topic, qos.STREAM)
        self._status_pub = self.create_publisher(TaskStatus, p.status_topic, qos.LATCHED)
        self._image_pub = self.create_publisher(Image, p.image_topic, qos.images(10)) if p.render else None
        self._wrist_pub = (self.create_publisher(Image, p.wrist_image_topic, qos.images(10))
                           if p.render and p.wrist_camera_name else None)
        self._applied_pub = (self.create_publisher(EefDeltaAction, p.applied_action_topic, qos.STREAM)
                             if p.applied_action_topic else None)
        self._arm_pub = (self.create_publisher(ArmStatus, p.arm_status_topic, qos.LATCHED)
                         if p.arm_status_topic else None)
        render = (RenderSpec(p.image_width, p.image_height, p.camera_name, wrist_camera=p.wrist_camera_name)
                  if p.render else None)
        try:  # builds the simulator and resets it to the first task: SIMPLER creates its renderer here
            backend = get_suite(p.backend).backend(p.tasks_file)
            self._names = [str(n) for n in getattr(backend, "state_names", [])]
            self.sim = SimRuntime(backend, self._publish, initial_task=p.initial_task,
                                  seed=p.seed, render=render, idle_publish_period_s=p.idle_publish_period_s,
                                  arm_status=self._publish_arm,
                                  stamp_clock=lambda: self.get_clock().now().nanoseconds)
        except (ImportError, RuntimeError) as exc:  # no simpler_env, no Vulkan GPU: say so in one line
            raise StartupError(f"sim_bridge: backend {p.backend!r} cannot start: {exc}") from exc
        self.gate = ActionGate(p.max_action_age_s)
        self.create_subscription(EefDeltaAction, p.action_topic, self._on_action, qos.ACTIONS, callback_group=group)
        self.create_subscription(ArmStop, p.stop_topic, self._on_stop, qos.EVENTS, callback_group=group)
        self.create_service(ResetTask, p.reset_service, self._on_reset, qos_profile=qos.SERVICES,
                            callback_group=group)
        self.create_service(TaskSuccess, p.success_service, self._on_success, qos_profile=qos.SERVICES,
                            callback_group=group)
        if p.estop_service and self.sim.has_estop:
            self.create_service(SetBool, p.estop_service, self._on_estop, qos_profile=qos.SERVICES,
                                callback_group=group)
        if p.idle_publish_period_s > 0:
            self.create_timer(p.idle_publish_period_s / 2, self.sim.idle, callback_group=group)
        self._publish_arm(self.sim.arm_counts())
        self.get_logger().info(f"backend {p.backend}, tasks {self.sim.task_keys}, on {self.sim.status().task!r}")

    def _publish_arm(self, counts: ActionCounts) -> None:
        """The arm's latched ArmStatus (e-stop, actions applied and refused by reason)."""
        if self._arm_pub is not None:
            self._arm_pub.publish(arm_status_msg(counts, self.get_clock().now().to_msg()))

    def _publish(self, frame: Frame) -> None:
        """Image, wrist image, state, then status of one observation, with one stamp: when its state was taken."""
        stamp = Time(nanoseconds=frame.stamp_ns).to_msg()  # the runtime reads this node's clock (stamp_clock)
        if frame.render_error:
            self.get_logger().error(frame.render_error, throttle_duration_sec=5.0)
        for pub, rgb, camera in ((self._image_pub, frame.image, self.p.camera_name),
                                 (self._wrist_pub, frame.wrist_image, self.p.wrist_camera_name)):
            if pub is not None and rgb is not None:
                img = Image(height=int(rgb.shape[0]), width=int(rgb.shape[1]), encoding="rgb8", is_bigendian=0,
                            step=int(rgb.shape[1]) * 3, data=rgb.tobytes())
                img.header.stamp, img.header.frame_id = stamp, camera_frame_id(self.p.frame_id, camera)
                pub.publish(img)
        state = StateVector(names=self._names, values=[float(v) for v in frame.state])
        state.header.stamp, state.header.frame_id = stamp, self.p.frame_id
        self._state_pub.publish(state)
        s = frame.status
        status = TaskStatus(task=s.task, resets=s.resets, steps=s.steps, success=s.success, done=s.done)
        status.header.stamp, status.header.frame_id = stamp, self.p.frame_id
        self._status_pub.publish(status)

    def _on_action(self, msg: EefDeltaAction) -> None:
        a7, stamp, valid_for = action_fields(msg)
        dropped: list[str] = []

        def admit() -> tuple[str, str]:  # the action gate, judged when the action would run (runtime lock held)
            why = self.gate.refusal(stamp, valid_for, self.get_clock().now().nanoseconds)
            if why:
                dropped.append(why)
                return self.gate.last_drop, why
            return "", ""

        echo = (lambda: self._applied_pub.publish(msg)) if self._applied_pub is not None else None
        refused = self.sim.step(np.array(a7, dtype=np.float64), applied=echo, admit=admit)
        if dropped:
            self.get_logger().warning(f"{dropped[0]} ({self.gate.dropped} dropped so far)", throttle_duration_sec=2.0)
            return
        late = self.sim.late_refusals() if refused else 0
        if late == 1:  # sent before its sender saw the episode end (the last action of a solved rollout): expected
            self.get_logger().info(f"{refused} (on {self.p.action_topic}; in flight when the episode ended, not "
                                   "applied)")
        elif refused and not late:
            self.get_logger().error(f"{refused} (on {self.p.action_topic})", throttle_duration_sec=2.0)

    def _on_stop(self, msg: ArmStop) -> None:
        at = self.gate.stop(stamp_ns(msg.header.stamp), self.get_clock().now().nanoseconds)
        self.get_logger().info(f"stop from {msg.source or '?'} ({msg.reason[:200] or 'no reason'}): actions stamped "
                               f"up to {at / 1e9:.3f} are dropped")

    def _on_reset(self, request: ResetTask.Request, response: ResetTask.Response) -> ResetTask.Response:
        try:
            seed = self.sim.reset(request.task, int(request.seed))
            response.ok, response.message = True, f"reset to {request.task!r}, seed {seed}"
            response.instruction = self.sim.instruction(request.task)
            self.get_logger().info(response.message)
        except Exception as exc:
            response.ok = False
            response.message = str(exc) if isinstance(exc, ValueError) else (
                f"reset to {request.task!r} failed: {type(exc).__name__}: {exc}")
            self.get_logger().error(response.message)
        return response

    def _on_estop(self, request: SetBool.Request, response: SetBool.Response) -> SetBool.Response:
        try:
            response.message, response.success = self.sim.estop(bool(request.data)), True
        except Exception as exc:
            response.message, response.success = f"e-stop failed: {type(exc).__name__}: {exc}", False
        if request.data:
            self.get_logger().warning(response.message)
        else:
            self.get_logger().info(response.message)
        return response

    def _on_success(self, request: TaskSuccess.Request, response: TaskSuccess.Response) -> TaskSuccess.Response:
        s = self.sim.status()
        response.ok, response.message = True, ""
        response.task, response.success, response.steps = s.task, s.success, s.steps
        return response


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/sim_bridge``."""
    default_headless_gl()  # before mujoco is imported: it reads MUJOCO_GL once
    spin(SimBridge, args)


if __name__ == "__main__":
    main()
