"""policy_server: runs the acting policy on the arm (/amf/run_policy) and fine-tunes it (/amf/fine_tune).

Callback groups: the control timer has its own group, each action server its own; fine-tuning runs in a worker
thread, so it never stalls the control timer. run_policy during a fine-tune keeps acting with the policy it
started with; a finished fine-tune takes effect from the next run_policy goal (amf_ros.runtime.policy_server).
Backend "octo" (amf_ros.runtime.octo_serving): acts on the camera topic with Octo's frozen trunk and its
fine-tuned head + prior; fine-tunes on trunk embeddings cached per recorded frame.
Parameters: amf_ros/bringup/params/policy_server.py.
"""

from __future__ import annotations

import sys
import threading

import numpy as np
from rclpy.action import ActionServer, CancelResponse
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from sensor_msgs.msg import Image

from amf_ros.action import FineTune, RunPolicy
from amf_ros.runtime import policy_server as policy_runtime
from amf_ros.runtime.control_loop import DoneEvent, EpisodeRun
from amf_ros.runtime.octo_serving import OctoServing
from amf_ros.data.ros_convert import image_to_rgb
from amf_ros.msg import CheckpointInfo, EefDeltaAction, StateVector
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.srv import TaskSuccess

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)
RELIABLE = QoSProfile(depth=10, reliability=ReliabilityPolicy.RELIABLE)
SWITCH_INTERVAL_S = 0.0005  # GIL switch interval of this process (see main)


class PolicyServerNode(Node):
    """Thin adapter around PolicyRuntime (fine-tuning) and EpisodeRun (one run_policy goal)."""

    def __init__(self) -> None:
        super().__init__("policy_server")
        p = self.p = declare(self, "policy_server")
        policy_runtime.set_torch_threads(self.p.torch_threads)
        self.octo = OctoServing(p) if p.backend == "octo" else None  # Octo: trunk on camera frames
        if self.octo is not None:
            self.runtime = self.octo.runtime
            self.get_logger().info(f"Octo warm-up (first trunk + head call): {self.octo.warm_up():.2f} s")
        else:
            path = policy_runtime.resolve_checkpoint(p.checkpoint, p.checkpoint_dir)
            self.runtime = policy_runtime.PolicyRuntime(
                policy_runtime.load_policy(path), path, p.checkpoint_dir, p.dataset_dir,
                steps=p.fine_tune_steps, batch_size=p.fine_tune_batch_size, lr=p.fine_tune_lr,
                alpha_steps=p.alpha_steps, seed=p.seed, action_space=p.action_space)
        path = self.runtime.checkpoint
        self.obs: tuple[dict, float] | None = None  # latest ({"state": (S,), "image": (H, W, 3)}, receive time)
        self.image: np.ndarray | None = None
        self.run: EpisodeRun | None = None
        self.run_lock = threading.Lock()
        self.pub = self.create_publisher(EefDeltaAction, p.action_topic, RELIABLE)
        self.ckpt_pub = self.create_publisher(CheckpointInfo, p.checkpoint_topic, LATCHED)
        if self.octo is None:  # Octo acts on the camera window only
            self.create_subscription(StateVector, p.state_topic, self.on_state, RELIABLE,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        latest = QoSProfile(depth=1, reliability=ReliabilityPolicy.BEST_EFFORT)  # the policy acts on the newest
        if p.image_topic:
            self.create_subscription(Image, p.image_topic, self.on_image, latest,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        self.wrist: np.ndarray | None = None
        if self.octo is not None and p.wrist_image_topic:
            self.create_subscription(Image, p.wrist_image_topic, self.on_wrist, latest,
                                     callback_group=MutuallyExclusiveCallbackGroup())
        self.success_client = (self.create_client(TaskSuccess, "sim/success", callback_group=ReentrantCallbackGroup())
                               if p.task_status_topic else None)  # interim: replaced by the task status topic
        self.timer = self.create_timer(1.0 / p.control_rate_hz, self.on_tick,
                                       callback_group=MutuallyExclusiveCallbackGroup())
        ActionServer(self, RunPolicy, "run_policy", self.execute_run,
                     cancel_callback=lambda _g: CancelResponse.ACCEPT, callback_group=ReentrantCallbackGroup())
        ActionServer(self, FineTune, "fine_tune", self.execute_fine_tune,
                     cancel_callback=lambda _g: CancelResponse.ACCEPT, callback_group=ReentrantCallbackGroup())
        self.announce()
        self.get_logger().info(f"ready: {p.backend} backend, checkpoint {path}, control {p.control_rate_hz} Hz")

    def announce(self) -> None:
        """Publish the acting checkpoint on the latched /amf/checkpoint topic."""
        alphas = policy_runtime.datasets.alphas(self.runtime.policy)
        msg = CheckpointInfo(path=str(self.runtime.checkpoint.resolve()), round=self.runtime.round,
                             tasks=list(alphas), alphas=list(alphas.values()))
        msg.header.stamp = self.get_clock().now().to_msg()
        self.ckpt_pub.publish(msg)

    def on_state(self, msg: StateVector) -> None:
        obs = {"state": np.asarray(msg.values, dtype=np.float32)}
        if self.image is not None:
            obs["image"] = self.image
        self.obs = (obs, self.get_clock().now().nanoseconds * 1e-9)

    def on_image(self, msg: Image) -> None:
        try:
            self.image = image_to_rgb(msg)
            if self.octo is not None:  # the camera frame (+ the newest wrist frame) is the observation
                obs = {"image": self.image} if self.wrist is None else {"image": self.image, "wrist": self.wrist}
                self.obs = (obs, self.get_clock().now().nanoseconds * 1e-9)
        except ValueError as exc:  # unsupported encoding: say so, keep running on the last good frame
            self.get_logger().error(f"{self.p.image_topic}: {exc}", throttle_duration_sec=5.0)

    def on_wrist(self, msg: Image) -> None:
        try:
            self.wrist = image_to_rgb(msg)
        except ValueError as exc:
            self.get_logger().error(f"{self.p.wrist_image_topic}: {exc}", throttle_duration_sec=5.0)

    def on_tick(self) -> None:
        """Control timer: one step of the active run_policy goal (if any)."""
        run = self.run
        if run is None or run.completing:
            return
        action = run.tick(self.obs, self.get_clock().now().nanoseconds * 1e-9)
        if action is not None:
            msg = EefDeltaAction(translation=action[:3].tolist(), rotation=action[3:6].tolist(),
                                 gripper=float(action[6]))
            msg.header.stamp = self.get_clock().now().to_msg()
            self.pub.publish(msg)
            run.goal.publish_feedback(RunPolicy.Feedback(step=run.steps, elapsed_s=run.elapsed))
            self._ask_success(run)
        if run.finished:
            run.completing = True
            if run.ok and not run.success and self._success_ready():
                fut = self.success_client.call_async(TaskSuccess.Request())
                fut.add_done_callback(lambda f: run.complete(bool(f.result() and f.result().success)))
            else:
                run.complete(run.success)

    def _success_ready(self) -> bool:
        return self.success_client is not None and self.success_client.service_is_ready()

    def _ask_success(self, run: EpisodeRun) -> None:
        """Poll the simulator's success service (async) so that a solved task ends the run early."""
        if not run.query_pending and self._success_ready():
            run.query_pending = True
            self.success_client.call_async(TaskSuccess.Request()).add_done_callback(
                lambda f: run.on_success_reply(f.result()))

    def execute_run(self, goal_handle) -> RunPolicy.Result:
        """One run_policy goal: the control timer does the stepping; this callback (on its own executor thread,
        Reentrant group) waits for the run to end (see execute_fine_tune for why it is not a coroutine)."""
        req = goal_handle.request
        with self.run_lock:
            busy = self.run is not None and not self.run.done.done()
            if not busy:
                policy = self.runtime.policy
                run = EpisodeRun(goal_handle, policy, req.task, req.max_steps or self.p.max_steps,
                                 self.p.action_space, self.p.ensemble_horizon, self.p.ensemble_exp_weight,
                                 self.p.observation_timeout_s, self.get_clock().now().nanoseconds * 1e-9,
                                 DoneEvent(), actor=self.octo.actor(policy) if self.octo is not None else None)
                self.run = run
        if busy:
            goal_handle.abort()
            return RunPolicy.Result(ok=False, message="another run_policy goal is active; cancel it first")
        run.done.wait()
        with self.run_lock:
            self.run = None
        result = RunPolicy.Result(ok=run.ok, message=run.message, success=run.success, steps=run.steps,
                                  mean_period_s=run.mean_period, median_period_s=run.median_period,
                                  max_period_s=run.max_period)
        if run.cancelled:
            goal_handle.canceled()
        elif run.ok:
            goal_handle.succeed()
        else:
            goal_handle.abort()
        self.get_logger().info(f"run_policy {req.task}: {run.message}")
        return result

    def execute_fine_tune(self, goal_handle) -> FineTune.Result:
        """Fine-tune on this executor worker thread (Reentrant group: never the control timer's thread).

        Not a coroutine: an rclpy coroutine awaiting a future is re-polled on every executor iteration (a busy loop
        that starves the control timer of the GIL); a plain callback occupying one of the executor's threads is not.
        """
        req = goal_handle.request
        try:
            res = self.runtime.fine_tune(
                req.steps, list(req.tasks),
                feedback=lambda s, n, loss: goal_handle.publish_feedback(
                    FineTune.Feedback(step=s, total_steps=n, loss=loss)),
                cancelled=lambda: goal_handle.is_cancel_requested)
        except Exception as exc:  # reported to the client as ok=false; the node keeps running
            (goal_handle.canceled if isinstance(exc, policy_runtime.Cancelled) else goal_handle.abort)()
            self.get_logger().warn(f"fine_tune failed: {exc}")
            return FineTune.Result(ok=False, message=str(exc), final_loss=float("nan"))
        self.announce()
        goal_handle.succeed()
        msg = f"round {res.round}: {len(res.losses)} steps in {res.wall_time_s:.1f} s, loss {res.final_loss:.4f}"
        self.get_logger().info(f"fine_tune {msg} -> {res.checkpoint}")
        return FineTune.Result(ok=True, message=msg, checkpoint=str(res.checkpoint.resolve()), tasks=res.tasks,
                               alphas=res.alphas, final_loss=res.final_loss)


def main(args=None) -> None:
    """Run the node until Ctrl-C / SIGTERM."""
    # A diffusion head's 20 denoising steps hand the GIL back and forth ~200 times per action; with the default 5 ms
    # switch interval every hand-over can wait for the executor threads, which turned a 12 ms inference into
    # seconds (amf bench ros-latency). A short interval bounds that wait.
    sys.setswitchinterval(SWITCH_INTERVAL_S)
    # threads: control timer, observations, a waiting run_policy goal, a fine-tune, service/action plumbing
    spin(PolicyServerNode, args, num_threads=6)

if __name__ == "__main__":
    main()
