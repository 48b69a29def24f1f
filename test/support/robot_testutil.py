"""Helpers for the robot-side ROS tests: waiting, service calls, message builders, sim parameter sets."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from ros_testing import call, recorder_call, spinning_node, wait_for  # noqa: F401  (re-exported)


def stamp_msg(ns: int) -> Any:
    """builtin_interfaces/Time from nanoseconds."""
    from builtin_interfaces.msg import Time

    return Time(sec=int(ns // 1_000_000_000), nanosec=int(ns % 1_000_000_000))


def stamp_ns(stamp: Any) -> int:
    """Nanoseconds of a builtin_interfaces/Time."""
    return int(stamp.sec) * 1_000_000_000 + int(stamp.nanosec)


def make_action(a7: Sequence[float], ns: int) -> Any:
    """EefDeltaAction from a 7-vector, stamped ``ns``."""
    from amf_ros.msg import EefDeltaAction

    msg = EefDeltaAction(translation=[float(x) for x in a7[:3]], rotation=[float(x) for x in a7[3:6]],
                         gripper=float(a7[6]))
    msg.header.stamp = stamp_msg(ns)
    return msg


def make_state(values: Sequence[float], ns: int, names: Sequence[str] = ()) -> Any:
    """StateVector stamped ``ns``."""
    from amf_ros.msg import StateVector

    msg = StateVector(names=list(names), values=[float(v) for v in values])
    msg.header.stamp = stamp_msg(ns)
    return msg


def make_image(rgb: np.ndarray, ns: int, encoding: str = "rgb8") -> Any:
    """sensor_msgs/Image from an (H, W, C) uint8 array, stamped ``ns``."""
    from sensor_msgs.msg import Image

    rgb = np.ascontiguousarray(rgb, dtype=np.uint8)
    h, w = rgb.shape[:2]
    c = rgb.shape[2] if rgb.ndim == 3 else 1
    msg = Image(height=h, width=w, encoding=encoding, is_bigendian=0, step=w * c, data=rgb.tobytes())
    msg.header.stamp = stamp_msg(ns)
    return msg


STATE_TOPIC, IMAGE_TOPIC, ACTION_TOPIC = "/amf/observation/state", "/amf/camera/image_raw", "/amf/action"
STATE_NAMES = ("s0", "s1", "s2", "s3", "s4")


def scripted_sequence(start_ns: int, frames: int = 40, period_ns: int = 50_000_000, action_every: int = 2,
                      image_hw: tuple[int, int] = (24, 32), seed: int = 0) -> list[tuple[str, int, str, Any]]:
    """A teleop session as ``(topic, stamp_ns, kind, value)``: state + image every frame, an action every
    ``action_every`` frames, 3 ms after the frame it reacts to. Images alternate rgb8/bgr8 encodings."""
    rng = np.random.default_rng(seed)
    seq: list[tuple[str, int, str, Any]] = []
    for k in range(frames):
        t = start_ns + k * period_ns
        seq.append((STATE_TOPIC, t, "state", rng.normal(size=len(STATE_NAMES))))
        rgb = rng.integers(0, 256, size=(*image_hw, 3), dtype=np.uint8)
        seq.append((IMAGE_TOPIC, t, "bgr8" if k % 3 == 0 else "rgb8", rgb))
        if k % action_every == action_every - 1:
            a7 = np.concatenate([rng.uniform(-0.02, 0.02, 6), [float(k % 4 < 2)]])
            seq.append((ACTION_TOPIC, t + 3_000_000, "action", a7))
    return seq


def wait_action_path(pub: Any, procs: Any, node: str = "sim_bridge", timeout: float = 30.0) -> None:
    """Wait until an action published now reaches ``node``: unstamped probes, which every arm drops without
    stepping and logs, until one shows in its log. ``pub.get_subscription_count()`` only says the publisher has
    matched the arm; until the arm has matched the publisher too, a sample waits for a reliable resend (~1 s in
    CI), long enough for the arm to drop a real action as stale."""
    def probe() -> bool:
        pub.publish(make_action([0.0] * 6 + [1.0], 0))
        return "unstamped action" in procs.log_tail(node, 50000)
    wait_for(lambda: pub.get_subscription_count() > 0, timeout, f"{node} subscribing to the action topic")
    wait_for(probe, timeout, f"an action to reach {node} (both sides of DDS discovery)", poll=0.3)


class LivePublisher:
    """Publishes a scripted sequence with rclpy (reliable QoS), paced so that no queue overflows."""

    def __init__(self, node: Any) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image

        from amf_ros.msg import EefDeltaAction, StateVector

        qos = QoSProfile(depth=100, reliability=ReliabilityPolicy.RELIABLE)
        self.node = node
        self.pubs = {STATE_TOPIC: node.create_publisher(StateVector, STATE_TOPIC, qos),
                     IMAGE_TOPIC: node.create_publisher(Image, IMAGE_TOPIC, qos),
                     ACTION_TOPIC: node.create_publisher(EefDeltaAction, ACTION_TOPIC, qos)}

    def wait_matched(self, timeout: float = 20.0) -> None:
        wait_for(lambda: all(p.get_subscription_count() > 0 for p in self.pubs.values()), timeout,
                 "the recorder subscribing to state, image and action topics")

    def message(self, topic: str, ns: int, kind: str, value: Any) -> Any:
        from sensor_msgs.msg import Image

        from amf_ros.data.ros_convert import fill_image

        if kind == "state":
            return make_state(value, ns, STATE_NAMES)
        if kind == "action":
            return make_action(value, ns)
        msg = Image()
        msg.header.stamp = stamp_msg(ns)
        try:
            return fill_image(msg, value, kind)
        except ValueError:  # an encoding the converter does not know: raw bytes, for bad-input tests
            h, w = value.shape[:2]
            msg.height, msg.width, msg.encoding, msg.step = h, w, kind, w * 2
            msg.data = bytes(np.ascontiguousarray(value[:, :, :2]).tobytes())
            return msg

    def publish(self, seq: Sequence[tuple[str, int, str, Any]], pause_s: float = 0.01) -> None:
        for topic, ns, kind, value in seq:
            self.pubs[topic].publish(self.message(topic, ns, kind, value))
            time.sleep(pause_s)


def write_bag(path: Any, seq: Sequence[tuple[str, int, str, Any]], storage: str = "sqlite3") -> None:
    """Write the same sequence into a rosbag2 with rosbags (receive time = stamp)."""
    from rosbags.rosbag2 import StoragePlugin, Writer

    from amf_ros.data.bag_types import make_typestore
    from amf_ros.data.ros_convert import fill_image

    ts = make_typestore()
    T = ts.types
    types = {STATE_TOPIC: "amf_ros/msg/StateVector", IMAGE_TOPIC: "sensor_msgs/msg/Image",
             ACTION_TOPIC: "amf_ros/msg/EefDeltaAction"}

    def header(ns: int) -> Any:
        return T["std_msgs/msg/Header"](stamp=T["builtin_interfaces/msg/Time"](sec=ns // 10**9, nanosec=ns % 10**9),
                                        frame_id="")

    plugin = StoragePlugin.MCAP if storage == "mcap" else StoragePlugin.SQLITE3
    with Writer(path, version=9, storage_plugin=plugin) as writer:
        conns = {t: writer.add_connection(t, ty, typestore=ts) for t, ty in types.items()}
        for topic, ns, kind, value in seq:
            if kind == "state":
                msg = T[types[topic]](header=header(ns), names=list(STATE_NAMES), values=np.asarray(value, np.float64))
            elif kind == "action":
                a = np.asarray(value, dtype=np.float32)
                msg = T[types[topic]](header=header(ns), translation=a[:3], rotation=a[3:6], gripper=float(a[6]),
                                      valid_for=T["builtin_interfaces/msg/Duration"](sec=0, nanosec=0))
            else:
                msg = T[types[topic]](header=header(ns), height=0, width=0, encoding="", is_bigendian=0, step=0,
                                      data=np.zeros(0, np.uint8))
                fill_image(msg, value, kind)
            writer.write(conns[topic], ns, ts.serialize_cdr(msg, types[topic]))


def assert_same_episode(a: Any, b: Any) -> None:
    """Two loaded episodes hold identical step arrays and the same task/instruction/steps/state names."""
    assert (a.meta.task, a.meta.instruction, a.meta.num_steps, a.meta.state_names) == \
        (b.meta.task, b.meta.instruction, b.meta.num_steps, b.meta.state_names)
    assert sorted(a.steps) == sorted(b.steps), (sorted(a.steps), sorted(b.steps))
    for key in a.steps:
        np.testing.assert_array_equal(a.steps[key], b.steps[key], err_msg=key)


class StatusWatcher:
    """Keeps the newest latched RecorderStatus."""

    def __init__(self, node: Any, topic: str = "/amf/recorder/status") -> None:
        from rclpy.qos import DurabilityPolicy, QoSProfile, ReliabilityPolicy

        from amf_ros.msg import RecorderStatus

        self.last: Any = None
        latched = QoSProfile(depth=1, reliability=ReliabilityPolicy.RELIABLE,
                             durability=DurabilityPolicy.TRANSIENT_LOCAL)
        node.create_subscription(RecorderStatus, topic, self._on, latched)

    def _on(self, msg: Any) -> None:
        self.last = msg

    def topic_seen(self, topic: str) -> bool:
        return self.last is not None and topic in self.last.topics and \
            self.last.topic_age_s[list(self.last.topics).index(topic)] >= 0


def warm_up(live: LivePublisher, status: StatusWatcher, timeout: float = 20.0) -> None:
    """Publish old-stamped state + image until the recorder reports having received both (DDS discovery is
    asymmetric: the first messages after matching can be missed)."""
    live.wait_matched(timeout)
    deadline = time.monotonic() + timeout
    k = 0
    while not (status.topic_seen(STATE_TOPIC) and status.topic_seen(IMAGE_TOPIC)):
        if time.monotonic() > deadline:
            raise AssertionError(f"recorder never reported state and image topics: {status.last}")
        ns = live.node.get_clock().now().nanoseconds - 500_000_000
        live.publish([(t, ns, kind, v) for t, _, kind, v in scripted_sequence(ns, frames=1, seed=k)[:2]], 0.0)
        k += 1
        time.sleep(0.1)


def steps_decided_live(live: LivePublisher, seq: Sequence[tuple[str, int, str, Any]], **sync: Any) -> int:
    """How many steps a recorder has decided once every message of ``seq`` arrived (before EndEpisode flushes
    the rest): the same synchroniser fed offline. Lets a test end an episode only after delivery completed."""
    from amf_ros.data.sync import StreamSynchronizer, SyncConfig

    sync_ = StreamSynchronizer({ACTION_TOPIC: "action", STATE_TOPIC: "state", IMAGE_TOPIC: "image_primary"},
                               SyncConfig(**sync))
    return sum(len(sync_.feed(t, ns, live.message(t, ns, k, v))) for t, ns, k, v in seq)


def vga_frame(k: int) -> np.ndarray:
    """A 480x640 camera-like image (smooth gradients + a moving block), distinct per frame."""
    yy, xx = np.mgrid[0:480, 0:640]
    img = np.stack([(xx // 3 + k) % 256, (yy // 2) % 256, ((xx + yy) // 5 + 3 * k) % 256], axis=-1).astype(np.uint8)
    img[(k * 7) % 440:(k * 7) % 440 + 40, 100:160] = 255
    return img


class Stream:
    """Every message of one topic with its arrival time (monotonic s), as a subscription callback: the client node
    spins it on its own thread, the test reads it under the lock."""

    def __init__(self) -> None:
        self.items: list[tuple[float, Any]] = []
        self._lock = threading.Lock()

    def __call__(self, msg: Any) -> None:
        with self._lock:
            self.items.append((time.monotonic(), msg))

    def timed(self, since: float = float("-inf")) -> list[tuple[float, Any]]:
        """(arrival, message) of the messages that arrived after ``since``."""
        with self._lock:
            return [(t, m) for t, m in self.items if t > since]

    def msgs(self) -> list[Any]:
        """Every message so far, in arrival order."""
        return [m for _, m in self.timed()]

    def since(self, t: float) -> list[Any]:
        """The messages that arrived after ``t``."""
        return [m for _, m in self.timed(t)]

    def last(self) -> Any:
        """The newest message (None before the first)."""
        with self._lock:
            return self.items[-1][1] if self.items else None

    def clear(self) -> None:
        """Forget every message so far."""
        with self._lock:
            self.items.clear()


class Device:
    """An input device driver (joy, spacenav): republishes the current message at 20 Hz (joy's autorepeat) on a
    thread, and at once on every change; ``set`` returns the node-clock stamp it was published with."""

    def __init__(self, node: Any, publish: Any, make: Any) -> None:
        self._node, self._publish, self._make = node, publish, make
        self._value: Any = None
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def set(self, value: Any) -> int:
        with self._lock:
            self._value = value
            return self._send()

    def _send(self) -> int:
        now = self._node.get_clock().now()
        self._publish(self._make(self._value, now.to_msg()))
        return now.nanoseconds

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            with self._lock:
                if self._value is not None:
                    self._send()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2.0)


@contextmanager
def loop_graph(ros_env: dict, run: Path, config: Path, arm: str, tasks: Sequence[str],
               name: str) -> Iterator[tuple[Any, Any, Stream, Stream]]:
    """The embedded loop graph of ``arm`` (`amf run`'s nodes, each a process, a tiny WidowX checkpoint on
    ``tasks``) from ``config``, ready: yields (AMFClient recording actions, NodeProcesses, applied-action stream,
    state stream); stopped on exit, with every node's log printed (shown when the test failed)."""
    from amf_ros.bench.tiny_checkpoint import tiny_widowx_checkpoint
    from amf_ros.bringup import graph
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.loop.nodes import node_overrides
    from amf_ros.loop.run import LoopConfig
    from amf_ros.msg import EefDeltaAction, StateVector
    from amf_ros.ros import qos
    from amf_ros.ros.client import AMFClient

    ckpt = tiny_widowx_checkpoint(run / "pretrained", tuple(tasks))
    specs = graph.sim_plan(str(config), checkpoint=str(ckpt), arm=arm, console=False)
    extra = node_overrides(run, LoopConfig(selector="amf"))
    extra["task_selector"] += ["-p", f"tasks:=[{', '.join(tasks)}]"]
    procs = NodeProcesses(specs, log_dir=run / "logs", env=ros_env, extra_args=extra).start()
    client = AMFClient(f"amf_test_{name}_{int(time.time() * 1e3) % 100000}", record_actions=True)
    applied, states = Stream(), Stream()
    client.node.create_subscription(EefDeltaAction, "action/applied", applied, qos.STREAM)
    client.node.create_subscription(StateVector, "observation/state", states, qos.STREAM)
    try:
        client.wait_ready(timeout=120)
        yield client, procs, applied, states
    finally:
        client.close()
        print("node exit codes:", procs.stop())
        for node in procs.procs:
            print(f"----- log of {node} -----\n{procs.log_tail(node, 3000)}")
