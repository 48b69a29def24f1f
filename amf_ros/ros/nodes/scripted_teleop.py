"""scripted_teleop: the simulated human operator of the embedded simulation.

When the recorder's latched status (``status_topic``) shows a new episode, this node drives the arm with that
task's scripted Metaworld expert, publishing EefDeltaAction on ``action_topic`` exactly as a teleop device
would, and ends the episode (EndEpisode, success from the simulator) like an operator pressing "done".

It sends at most one action per control period (``control_rate_hz``), as soon as a FRESH observation is in (or
at the next tick): one stamped after the episode started and after its previous action (the simulator publishes
one observation per applied action). Before each action it asks ``success_service``; when the task is solved or
``max_steps`` actions were sent, it ends the episode. So every action is computed from exactly one observation,
the newest one, whose stamp precedes the action's stamp: the pair a recorder must store together.
If the simulator is on another task than the episode, or no fresh observation arrives within
``start_timeout_s``, the episode is ended with discard=true (an operator who cannot demonstrate throws it away).
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import numpy as np
from rclpy.callback_groups import MutuallyExclusiveCallbackGroup, ReentrantCallbackGroup
from rclpy.node import Node
from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy
from rclpy.task import Future

from amf_ros.paths import resolve_config
from amf_ros.envs.metaworld_suite import MetaworldTaskEnv, load_tasks, native_to_eef7, noisy
from amf_ros.msg import EefDeltaAction, RecorderStatus, StateVector
from amf_ros.ros.params import declare
from amf_ros.ros.spin import spin
from amf_ros.srv import EndEpisode, TaskSuccess


_QUERY_TIMEOUT_NS = 2_000_000_000  # a success query unanswered this long is sent again


def _ns(stamp: Any) -> int:
    """builtin_interfaces/Time -> integer nanoseconds."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


@dataclasses.dataclass
class _Episode:
    episode_id: str
    task: str
    start_ns: int  # observations stamped at or before this are from before the episode
    max_steps: int
    started_ns: int  # node clock when this node saw the start (for start_timeout_s)
    steps: int = 0
    last_action_ns: int = 0
    pending_since: int = 0  # node clock when the success query in flight was sent (0 = none in flight)
    last_query_ns: int = 0  # node clock of the last success query (paces the actions)


class ScriptedTeleop(Node):
    """Drives the simulator with the scripted expert while the recorder records; see the module docstring."""

    def __init__(self) -> None:
        super().__init__("scripted_teleop")
        self.p = declare(self, "scripted_teleop")
        specs = load_tasks(resolve_config(self.p.tasks_file) if self.p.tasks_file else None)
        self._experts = {s.key: MetaworldTaskEnv(s) for s in specs}  # built now: never inside a callback
        self._max_steps = {s.key: s.max_steps for s in specs}
        self._rng = np.random.default_rng(self.p.seed)
        self._lock = threading.RLock()  # a future may complete inside add_done_callback
        self._episode: _Episode | None = None
        self._handled: set[str] = set()
        self._obs: tuple[int, np.ndarray] | None = None
        subs, calls = MutuallyExclusiveCallbackGroup(), ReentrantCallbackGroup()
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        reliable = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.create_subscription(RecorderStatus, self.p.status_topic, self._on_status, latched,
                                 callback_group=subs)
        self.create_subscription(StateVector, self.p.state_topic, self._on_state, reliable, callback_group=subs)
        self._action_pub = self.create_publisher(EefDeltaAction, self.p.action_topic, reliable)
        self._success = self.create_client(TaskSuccess, self.p.success_service, callback_group=calls)
        self._end = self.create_client(EndEpisode, self.p.end_episode_service, callback_group=calls)
        self.create_timer(1.0 / self.p.control_rate_hz, self._on_tick, callback_group=subs)
        self.get_logger().info(f"ready: experts for {sorted(self._experts)}")

    def _now_ns(self) -> int:
        return self.get_clock().now().nanoseconds

    def _on_state(self, msg: StateVector) -> None:
        with self._lock:
            self._obs = (_ns(msg.header.stamp), np.asarray(msg.values, dtype=np.float64))
            self._maybe_act()  # an observation later than the tick is acted on at once (still at most the rate)

    def _on_status(self, msg: RecorderStatus) -> None:
        with self._lock:
            ep = self._episode
            if ep is not None and (not msg.recording or msg.episode_id != ep.episode_id):
                self.get_logger().info(f"episode {ep.episode_id} ended by someone else after {ep.steps} actions")
                self._episode = None
            if not msg.recording or msg.episode_id in self._handled or self._episode is not None:
                return
            self._handled.add(msg.episode_id)
            if msg.task not in self._experts:
                self.get_logger().error(f"episode {msg.episode_id}: no scripted expert for task {msg.task!r} "
                                        f"(have {sorted(self._experts)}); discarding it")
                self._finish(msg.episode_id, success=False, discard=True)
                return
            max_steps = self.p.max_steps or self._max_steps[msg.task]
            self._episode = _Episode(msg.episode_id, msg.task, _ns(msg.header.stamp), max_steps, self._now_ns())
            self.get_logger().info(f"episode {msg.episode_id}: demonstrating {msg.task!r} (max {max_steps} steps)")

    def _on_tick(self) -> None:
        with self._lock:
            self._maybe_act()

    def _maybe_act(self) -> None:
        """Ask the simulator for success before acting on a fresh observation, at most once per control period."""
        ep, now = self._episode, self._now_ns()
        if ep is None or (ep.pending_since and now - ep.pending_since < _QUERY_TIMEOUT_NS):
            return  # idle, or waiting for the simulator's answer (asked again after _QUERY_TIMEOUT_NS)
        if now - ep.last_query_ns < 0.9 * 1e9 / self.p.control_rate_hz:
            return  # at most one action per control period (10% slack for timer jitter)
        fresh_after = max(ep.start_ns, ep.last_action_ns)
        if self._obs is None or self._obs[0] <= fresh_after:
            if ep.steps == 0 and now - ep.started_ns > self.p.start_timeout_s * 1e9:
                self.get_logger().error(f"episode {ep.episode_id}: no observation on {self.p.state_topic} "
                                        f"within {self.p.start_timeout_s} s; discarding it")
                self._episode = None
                self._finish(ep.episode_id, success=False, discard=True)
            return
        if not self._success.service_is_ready():
            self.get_logger().warn(f"waiting for {self.p.success_service}", throttle_duration_sec=2.0)
            return
        ep.pending_since = ep.last_query_ns = now
        obs = self._obs
        future = self._success.call_async(TaskSuccess.Request())
        future.add_done_callback(lambda f: self._after_success(ep, obs, f))

    def _after_success(self, ep: _Episode, obs: tuple[int, np.ndarray], future: Future) -> None:
        """The simulator's answer for the observation ``obs``: end the episode, or send the expert's action."""
        with self._lock:
            if self._episode is not ep or obs[0] <= ep.last_action_ns:
                return  # episode over, or a late answer for an observation already acted on
            ep.pending_since = 0
            res = future.result()
            if res is None or not res.ok or res.task != ep.task:
                self.get_logger().error(f"episode {ep.episode_id}: simulator is on task "
                                        f"{getattr(res, 'task', '?')!r}, not {ep.task!r}; discarding it")
                self._episode = None
                self._finish(ep.episode_id, success=False, discard=True)
                return
            if res.success or ep.steps >= ep.max_steps:
                self.get_logger().info(f"episode {ep.episode_id}: {'solved' if res.success else 'gave up'} after "
                                       f"{ep.steps} actions")
                self._episode = None
                self._finish(ep.episode_id, success=bool(res.success), discard=False)
                return
            a4 = noisy(self._experts[ep.task].expert_action(obs[1]), self.p.noise_std, self._rng)
            a7 = native_to_eef7(a4)
            msg = EefDeltaAction(translation=a7[:3].tolist(), rotation=a7[3:6].tolist(), gripper=float(a7[6]))
            now = self.get_clock().now()
            msg.header.stamp = now.to_msg()
            ep.last_action_ns = max(now.nanoseconds, obs[0] + 1)
            ep.steps += 1
            self._action_pub.publish(msg)

    def _finish(self, episode_id: str, success: bool, discard: bool) -> None:
        """Ask the recorder to end the episode (asynchronously; the answer is only logged)."""
        if not self.p.end_episode:
            return
        request = EndEpisode.Request(episode_id=episode_id, success=success, discard=discard)
        future = self._end.call_async(request)

        def log(f: Future) -> None:
            res = f.result()
            if res is not None and res.ok:
                self.get_logger().info(f"episode {episode_id} ended: {res.num_steps} steps, {res.path or 'discarded'}")
            else:
                self.get_logger().error(f"EndEpisode({episode_id}) failed: {getattr(res, 'message', 'no answer')}")
        future.add_done_callback(log)


def main(args: list[str] | None = None) -> None:
    """Entry point of ``lib/amf_ros/scripted_teleop``."""
    spin(ScriptedTeleop, args)


if __name__ == "__main__":
    main()
