"""task_selector: answers /amf/next_task (which task should a human demonstrate next?).

Keeps its own copy of the policy (paper: a separate copy for selection), loaded from the newest checkpoint and
reloaded on /amf/checkpoint; reads the episode store; runs the configured selector. The logic lives in
amf_ros.runtime.task_selector; this node maps messages to calls. Parameters: amf_ros/bringup/params/task_selector.py.
"""

from __future__ import annotations

from rclpy.callback_groups import MutuallyExclusiveCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

from amf_ros.runtime import policy_server as policy_runtime
from amf_ros.runtime.octo_serving import OctoSelection
from amf_ros.runtime.task_selector import TaskSelection
from amf_ros.data.tasks import task_set
from amf_ros.msg import CheckpointInfo
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.srv import NextTask

LATCHED = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE, durability=DurabilityPolicy.TRANSIENT_LOCAL)


class TaskSelectorNode(Node):
    """Service /amf/next_task in its own callback group; checkpoint reloads in another."""

    def __init__(self) -> None:
        super().__init__("task_selector")
        self.p = declare(self, "task_selector")
        policy_runtime.set_torch_threads(self.p.torch_threads)
        self.octo: OctoSelection | None = None
        if self.p.backend == "octo":  # head checkpoints + policy_server's cached Octo frame embeddings
            self.octo = OctoSelection(self.p, task_set(self.p.tasks_file, None, self.p.tasks))
        policy, checkpoint = self._initial_policy()
        instructions = task_set(self.p.tasks_file, policy, self.p.tasks)
        if self.octo is not None:
            self.octo.cache.instructions.update(getattr(policy, "instructions", None) or {})
        self.selection = TaskSelection(
            self.p.selector, instructions, self.p.dataset_dir,
            seed=self.p.seed, form=self.p.form, noise_var=self.p.noise_var, prior_var=self.p.prior_var,
            frames_per_episode=self.p.frames_per_episode, max_points=self.p.max_points,
            action_space=self.p.action_space, targets=self.p.targets,
            condition_on_data=self.p.condition_on_data,
            episode_loader=self.octo.episode_loader() if self.octo is not None else None)
        if policy is not None:
            self.selection.set_policy(policy, checkpoint, self._pretrain_counts(checkpoint))
        self.reloads = 0
        self.create_service(NextTask, "next_task", self.on_next_task,
                            callback_group=MutuallyExclusiveCallbackGroup())
        self.create_subscription(CheckpointInfo, self.p.checkpoint_topic, self.on_checkpoint, LATCHED,
                                 callback_group=MutuallyExclusiveCallbackGroup())
        self.get_logger().info(f"ready: selector={self.p.selector} tasks={list(self.selection.instructions)} "
                               f"checkpoint={checkpoint or '(none)'}")

    def _initial_policy(self):
        """The newest checkpoint, or (None, "") when there is none (fine for uniform / round_robin)."""
        if self.octo is not None:
            head = self.octo.newest_head()
            return (self.octo.load(head), str(head.resolve())) if head is not None else (None, "")
        try:
            path = policy_runtime.resolve_checkpoint(self.p.checkpoint, self.p.checkpoint_dir)
        except ValueError as exc:
            if self.p.selector == "amf":
                self.get_logger().warn(f"no policy yet ({exc}); AMF scores need one after the warm start")
            return None, ""
        return policy_runtime.load_policy(path), str(path.resolve())

    def _pretrain_counts(self, checkpoint: str) -> dict | None:
        """Pre-training demonstrations per task from ``<checkpoint>/pretrain.json`` (written by `amf pretrain`)."""
        return policy_runtime.pretrain_counts(checkpoint) if self.p.pretrain_counts else None

    def on_checkpoint(self, msg: CheckpointInfo) -> None:
        """Reload the policy copy (in this callback group, so next_task keeps answering with the old copy)."""
        if msg.path == self.selection.checkpoint:
            return
        if self.p.selection_policy == "frozen" and self.selection.policy is not None:
            self.get_logger().info(f"checkpoint {msg.path} announced; selection_policy=frozen keeps "
                                   f"{self.selection.checkpoint}")
            return
        try:
            current = self.selection.policy  # share its language model instead of loading another copy
            policy = (self.octo.load(msg.path) if self.octo is not None else
                      policy_runtime.load_policy(msg.path, task_encoder=getattr(current, "encoder", None)))
        except Exception as exc:  # a bad checkpoint must not kill the node
            self.get_logger().error(f"cannot load announced checkpoint {msg.path!r}: {exc}")
            return
        self.selection.set_policy(policy, msg.path, self._pretrain_counts(msg.path))
        self.reloads += 1
        self.get_logger().info(f"reloaded policy from {msg.path} (round {msg.round})")

    def on_next_task(self, request: NextTask.Request, response: NextTask.Response) -> NextTask.Response:
        try:
            d = self.selection.next_task(list(request.candidate_tasks), int(request.batch_size))
        except Exception as exc:  # caller errors (ValueError) and library failures alike -> ok=false
            response.ok, response.message = False, str(exc)
            response.selector = self.p.selector
            self.get_logger().warn(f"next_task refused: {exc}")
            return response
        response.ok, response.message = True, d.message
        response.task, response.instruction, response.selected_tasks = d.task, d.instruction, d.selected_tasks
        response.tasks, response.scores, response.demo_counts = d.tasks, d.scores, d.demo_counts
        response.warm_start, response.selector, response.compute_time = d.warm_start, d.selector, d.compute_time
        response.effective_sample_size = d.effective_sample_size
        self.get_logger().info(f"next_task -> {d.task} ({d.compute_time * 1e3:.1f} ms): {d.message}")
        return response


def main(args=None) -> None:
    """Run the node until Ctrl-C / SIGTERM."""
    spin(TaskSelectorNode, args, num_threads=2)

if __name__ == "__main__":
    main()
