"""policy_server and task_selector serving Octo over real DDS, each its own process, with the fake Octo model.

The nodes load the trunk through ``octo_trunk_factory: fake_octo:fake_trunk`` (the real OctoTrunk code around a
fake OctoModel); the test publishes camera frames, runs run_policy, fine-tunes twice on a store of recorded episodes
with images, and asks next_task. The fake trunk logs every call to a file, so the test can see whether the trunk
ran again.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from fake_octo import fake_checkpoint
from octo_episodes import TASKS
from octo_episodes import octo_episodes as _episodes
from testpaths import SUPPORT

pytestmark = [pytest.mark.ros]  # ~12 s (two node processes)

RATE_HZ = 10.0


def _yaml(run: Path, ckpt: Path) -> Path:
    tasks_file = run / "tasks.yaml"
    tasks_file.write_text("tasks:\n" + "".join(f"  - key: {k}\n    instruction: {v}\n" for k, v in TASKS.items()))
    common = (f"    backend: octo\n    checkpoint: {ckpt}\n    octo_trunk_factory: fake_octo:fake_trunk\n"
              f"    checkpoint_dir: {run / 'ckpts'}\n    dataset_dir: {run / 'data'}\n"
              f"    tasks_file: {tasks_file}\n    embed_batch_size: 8\n")
    path = run / "params.yaml"
    path.write_text(
        "/**/policy_server:\n  ros__parameters:\n" + common +
        f"    control_rate_hz: {RATE_HZ}\n    image_topic: /amf/camera/image_raw\n    action_space: eef7\n"
        "    task_status_topic: ''\n    fine_tune_steps: 5\n    fine_tune_batch_size: 16\n    alpha_steps: 2\n"
        "    observation_timeout_s: 2.0\n"
        "/**/task_selector:\n  ros__parameters:\n" + common +
        "    selector: amf\n    action_space: eef7\n    frames_per_episode: 4\n")
    return path


def _log_lines(path: Path) -> list[str]:
    return path.read_text().splitlines() if path.is_file() else []


@pytest.fixture(scope="module")
def octo_graph(ros_env, rclpy_context, tmp_path_factory):
    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.ros.client import AMFClient

    run = tmp_path_factory.mktemp("octo_serving")
    ckpt = fake_checkpoint(run / "octo-small")
    _episodes(run / "data", n_eps=4, steps=6)
    params = _yaml(run, ckpt)
    log = run / "trunk_calls.log"
    env = {**ros_env, "AMF_FAKE_OCTO_LOG": str(log),
           "PYTHONPATH": os.pathsep.join([str(SUPPORT), os.environ.get("PYTHONPATH", "")])}
    specs = [NodeSpec("policy_server", "policy_server", str(params)),
             NodeSpec("task_selector", "task_selector", str(params))]
    procs = NodeProcesses(specs, log_dir=run / "logs", env=env).start()
    client = AMFClient(f"amf_test_octo_{int(time.time() * 1e3) % 100000}", record_actions=True)
    try:
        client.wait_ready(timeout=120, sim=False, recorder=False)
        yield run, client, procs, log
    finally:
        client.close()
        procs.stop()


def _alive(procs) -> None:
    assert procs.dead() == {}, {n: procs.log_tail(n) for n in procs.dead()}


class _Camera:
    """Publishes 96x128 RGB frames on /amf/camera/image_raw at 20 Hz from a thread (a camera driver)."""

    def __init__(self, node) -> None:
        from rclpy.qos import QoSProfile, ReliabilityPolicy
        from sensor_msgs.msg import Image

        self.pub = node.create_publisher(Image, "/amf/camera/image_raw", QoSProfile(
            depth=1, reliability=ReliabilityPolicy.RELIABLE))
        self.msg_type, self.stop, self.sent = Image, threading.Event(), 0
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def _loop(self) -> None:
        from amf_ros.data.ros_convert import fill_image

        rng = np.random.default_rng(0)
        while not self.stop.is_set():
            self.pub.publish(fill_image(self.msg_type(), rng.integers(0, 256, (96, 128, 3), dtype=np.uint8)))
            self.sent += 1
            time.sleep(0.05)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=2)


def test_run_policy_acts_with_octo_on_camera_frames(octo_graph) -> None:
    run, client, procs, log = octo_graph
    assert client.run_policy("carrot_on_plate", max_steps=3, timeout=60).ok is False  # no camera yet
    camera = _Camera(client.node)
    try:
        client.wait_for(lambda: camera.sent > 5, 10, "camera frames")
        before = len(client.seen.actions)
        res = client.run_policy("carrot_on_plate", max_steps=30, timeout=90)
        assert res.ok, res.message
        # counts, not rates: the control rate is `amf bench ros_latency`'s number (on a loaded machine a mean or
        # median period measures the machine)
        assert res.steps == 30
        client.wait_for(lambda: len(client.seen.actions) >= before + 30, 10, "30 actions")
        acts = client.seen.actions[before:before + 30]
        a = np.array([list(m.translation) + list(m.rotation) + [m.gripper] for _, m in acts])
        assert np.all(np.isfinite(a))
        assert np.all(np.abs(a[:, :3]) <= 0.05 + 1e-9) and np.all(np.abs(a[:, 3:6]) <= 0.25 + 1e-9)
        assert set(np.unique(a[:, 6])) <= {0.0, 1.0}  # Octo's sticky binary gripper
        assert np.ptp(a[:, :6], axis=0).max() > 0  # actions follow the changing frames
        bad = client.run_policy("fly-to-the-moon", max_steps=3, timeout=60)
        assert not bad.ok and "unknown task" in bad.message
    finally:
        camera.close()
    assert sum(line.startswith("run_transformer 1") for line in _log_lines(log)) >= 30  # one trunk call per tick
    _alive(procs)


def test_fine_tune_embeds_once_and_task_selector_uses_the_cache(octo_graph) -> None:
    run, client, procs, log = octo_graph
    n0 = len(_log_lines(log))
    ft = client.fine_tune(steps=5, timeout=120)
    assert ft.ok, ft.message
    assert Path(ft.checkpoint).name == "round_0001" and (Path(ft.checkpoint) / "octo_source.json").is_file()
    new = _log_lines(log)[n0:]
    assert sum(line.startswith("embed_episode") for line in new) == 4  # every recorded episode, once
    assert len(list((run / "data_octo_embeddings").rglob("*.npz"))) == 4
    n1 = len(_log_lines(log))
    ft2 = client.fine_tune(steps=5, timeout=120)
    assert ft2.ok and Path(ft2.checkpoint).name == "round_0002", ft2.message
    assert _log_lines(log)[n1:] == []  # the second fine-tune did not run the trunk at all
    # task_selector reloads the announced head and scores on policy_server's cached embeddings
    client.wait_for(lambda: any(c.path == ft2.checkpoint for c in client.seen.checkpoints), 20, "checkpoint")
    deadline = time.monotonic() + 30
    while True:
        d = client.next_task()
        if "round_0002" in d.message or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert "round_0002" in d.message, d.message
    assert d.task in TASKS and not d.warm_start and np.all(np.isfinite(d.scores)), d
    assert list(d.demo_counts) == [2, 2]
    assert not any(line == "load" for line in _log_lines(log)[n1:])  # task_selector never needed the trunk
    _alive(procs)
