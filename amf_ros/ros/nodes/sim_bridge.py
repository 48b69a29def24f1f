"""sim_bridge: a simulated arm behind the topics a real robot uses.

Stepping semantics (what a publisher of actions can rely on):
- Every EefDeltaAction on ``action_topic`` is ONE environment step, applied in arrival order (reliable QoS,
  depth 100): the 7-D action is converted to the simulator's native action (Metaworld: ``eef7_to_native``),
  the environment steps once, and the resulting observation is published at once, stamped with the node clock
  at that moment: with ``render: true`` the rendered image on ``image_topic`` first, then the state on
  ``state_topic`` with the same stamp.
  The simulator does not advance on its own: without actions the arm stands still.
- An action with NaN/inf, or one arriving after the episode is over (task solved or the task's max_steps
  reached), is refused with a log line and does not step the simulator; ``/amf/sim/reset`` starts a new
  episode (``seed < 0`` = next seed of the sequence ``seed, seed+1, ...``) and publishes its first observation
  before answering.
- While no action arrives for ``idle_publish_period_s``, the current state is re-published with the current
  time as stamp, as a real arm keeps publishing joint states (so an observation newer than any given time
  always arrives within that period).
- ``/amf/sim/success`` reports the current task, whether it is solved now or was at any step since the
  reset, and the number of steps since the reset.
All simulator access is in one mutually exclusive callback group, so a reset never interleaves with a step.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from amf_ros.paths import resolve_config
from amf_ros.msg import EefDeltaAction, StateVector
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.srv import ResetTask, TaskSuccess


def make_backend(name: str, tasks_file: str) -> Any:
    """The simulator: an object with ``task_keys``, ``instruction(task)``, ``reset(task, seed) -> obs``,
    ``step_eef7(a7) -> (obs, success, done)``, ``render(width, height, camera) -> (H, W, 3) uint8``."""
    if name == "metaworld":
        from amf_ros.envs.metaworld_suite import MetaworldSuite, load_tasks

        return MetaworldSuite(load_tasks(resolve_config(tasks_file) if tasks_file else None))
    if name == "simpler":
        from amf_ros.envs import simpler

        return simpler.make_suite(str(resolve_config(tasks_file)) if tasks_file else None)
    raise ValueError(f"unknown sim_bridge backend, got {name=}; choose 'metaworld' or 'simpler'")


class SimBridge(Node):
    """Hosts the simulator; see the module docstring for the stepping semantics."""

    def __init__(self) -> None:
        super().__init__("sim_bridge")
        self.p = declare(self, "sim_bridge")
        self.sim = make_backend(self.p.backend, self.p.tasks_file)
        self._next_seed = int(self.p.seed)
        self._steps = 0
        self._ever_success = False
        self._done = False
        self._obs: np.ndarray | None = None
        self._last_activity = time.monotonic()
        self._names = [str(n) for n in getattr(self.sim, "state_names", [])]
        group = MutuallyExclusiveCallbackGroup()  # every callback that touches the simulator
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self._state_pub = self.create_publisher(StateVector, self.p.state_topic, reliable)
        self._image_pub = (self.create_publisher(Image, self.p.image_topic, QoSProfile(
            depth=10, reliability=ReliabilityPolicy.RELIABLE)) if self.p.render else None)
        self.create_subscription(EefDeltaAction, self.p.action_topic, self._on_action, reliable,
                                 callback_group=group)
        self.create_service(ResetTask, self.p.reset_service, self._on_reset, callback_group=group)
        self.create_service(TaskSuccess, self.p.success_service, self._on_success, callback_group=group)
        if self.p.idle_publish_period_s > 0:
            self.create_timer(self.p.idle_publish_period_s / 2, self._on_idle, callback_group=group)
        task = self.p.initial_task or self.sim.task_keys[0]
        message = self._reset(task, -1)
        if message:
            raise ValueError(f"sim_bridge: initial_task: {message}")
        self.get_logger().info(f"backend {self.p.backend}, tasks {self.sim.task_keys}, reset to {task!r}")

    def _reset(self, task: str, seed: int) -> str:
        """Reset to ``task``; returns an error message ("" on success)."""
        if task not in self.sim.task_keys:
            return f"unknown task {task!r}; this simulator has {self.sim.task_keys}"
        if seed < 0:
            seed, self._next_seed = self._next_seed, self._next_seed + 1
        self._obs = np.asarray(self.sim.reset(task, int(seed)), dtype=np.float64)
        self._steps, self._ever_success, self._done = 0, False, False
        self._publish()
        self.get_logger().info(f"reset to task {task!r}, seed {seed}")
        return ""

    def _publish(self) -> None:
        """Publish the current observation stamped now: the rendered image first (when rendering), then the state,
        so that a node reacting to the state finds the image of the same instant already sent."""
        stamp = self.get_clock().now().to_msg()
        if self._image_pub is not None:
            try:
                rgb = self.sim.render(self.p.image_width, self.p.image_height, self.p.camera_name)
            except Exception as exc:  # noqa: BLE001 - no camera image this step; the state still goes out
                self.get_logger().error(f"render failed: {type(exc).__name__}: {exc}", throttle_duration_sec=5.0)
            else:
                img = Image(height=int(rgb.shape[0]), width=int(rgb.shape[1]), encoding="rgb8", is_bigendian=0,
                            step=int(rgb.shape[1]) * 3, data=np.ascontiguousarray(rgb, dtype=np.uint8).tobytes())
                img.header.stamp, img.header.frame_id = stamp, self.p.frame_id
                self._image_pub.publish(img)
        msg = StateVector(names=self._names, values=[float(v) for v in self._obs])
        msg.header.stamp, msg.header.frame_id = stamp, self.p.frame_id
        self._state_pub.publish(msg)
        self._last_activity = time.monotonic()

    def _on_action(self, msg: EefDeltaAction) -> None:
        a7 = np.array([*msg.translation, *msg.rotation, msg.gripper], dtype=np.float64)
        if a7.shape != (7,) or not np.all(np.isfinite(a7)):
            self.get_logger().error(f"refused action on {self.p.action_topic}: not 7 finite values, got "
                                    f"{a7.tolist()}")
            return
        if self._done:
            self.get_logger().warn(f"episode of {self.sim.task!r} is over after {self._steps} steps; action "
                                   f"ignored (call {self.p.reset_service})", throttle_duration_sec=2.0)
            return
        try:
            obs, success, done = self.sim.step_eef7(a7)
        except Exception as exc:  # noqa: BLE001 - a simulator error must not take the arm's topics down
            self.get_logger().error(f"step failed: {type(exc).__name__}: {exc}")
            return
        self._obs = np.asarray(obs, dtype=np.float64)
        self._steps += 1
        self._ever_success = self._ever_success or bool(success)
        self._done = bool(done)
        self._publish()

    def _on_reset(self, request: ResetTask.Request, response: ResetTask.Response) -> ResetTask.Response:
        try:
            message = self._reset(request.task, int(request.seed))
        except Exception as exc:  # noqa: BLE001 - reported to the caller; the node keeps serving
            message = f"reset to {request.task!r} failed: {type(exc).__name__}: {exc}"
            self.get_logger().error(message)
        response.ok, response.message = not message, message or f"reset to {request.task!r}"
        if response.ok:
            response.instruction = self.sim.instruction(request.task)
        return response

    def _on_success(self, request: TaskSuccess.Request, response: TaskSuccess.Response) -> TaskSuccess.Response:
        response.ok, response.message = True, ""
        response.task, response.success, response.steps = str(self.sim.task), self._ever_success, self._steps
        return response

    def _on_idle(self) -> None:
        if time.monotonic() - self._last_activity >= self.p.idle_publish_period_s:
            self._publish()


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/sim_bridge``."""
    spin(SimBridge, args)


if __name__ == "__main__":
    main()
