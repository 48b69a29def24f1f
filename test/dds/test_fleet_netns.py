"""The fleet across two hosts (issue 17): the robot's nodes in one network namespace, the selector and the trainer in
another, joined by a veth pair, DDS discovering across it (ROS_AUTOMATIC_DISCOVERY_RANGE=SUBNET + ROS_STATIC_PEERS),
as docs/fleet.md tells real hosts to configure it.

Robot host: sim_bridge, scripted_teleop, demo_recorder, the acting policy_server (follows /fleet/checkpoint), and the
driver (the robot's operator program). Selector host: task_selector and the trainer policy_server. The driver asks
/fleet/next_task from the robot host, records the demonstration there, starts the fine-tune on the selector host
(action over the veth) and waits for the robot's policy_server to reload the new round. Episodes and checkpoints are
files on the storage both hosts mount (docs/fleet.md: a fleet needs its dataset and checkpoint folders on shared
storage, e.g. NFS; here both namespaces see the same file system), never copied over DDS.

Needs root (network namespaces): skipped otherwise, with the reason.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
import uuid

import pytest
from ros_system_util import REPO

pytest.importorskip("mujoco")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASKS = ("carrot_on_plate", "stack_cube")
CONFIG = REPO / "config" / "sim_widowx.yaml"
ROBOT_IP, FLEET_IP = "10.231.7.1", "10.231.7.2"


def _sh(*cmd: str) -> None:
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=30)


@pytest.fixture
def two_hosts():
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("needs root and iproute2 to create network namespaces (run the suite as root: .ci/run does)")
    tag = uuid.uuid4().hex[:6]
    robot, fleet = f"amf_robot_{tag}", f"amf_fleet_{tag}"
    try:
        _sh("ip", "netns", "add", robot)
    except subprocess.CalledProcessError as exc:
        pytest.skip(f"cannot create a network namespace here: {exc.stderr.strip()}")
    try:
        _sh("ip", "netns", "add", fleet)
        _sh("ip", "link", "add", f"vr{tag}", "type", "veth", "peer", "name", f"vf{tag}")
        for ns, dev, ip in ((robot, f"vr{tag}", ROBOT_IP), (fleet, f"vf{tag}", FLEET_IP)):
            _sh("ip", "link", "set", dev, "netns", ns)
            _sh("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", dev)
            _sh("ip", "-n", ns, "link", "set", dev, "up", "multicast", "on")
            _sh("ip", "-n", ns, "link", "set", "lo", "up")
            _sh("ip", "-n", ns, "route", "add", "default", "dev", dev)  # DDS multicast discovery needs a route
        yield robot, fleet
    finally:
        for ns in (robot, fleet):
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)


DRIVER = textwrap.dedent("""
    import json, sys, rclpy
    from amf_ros.ros.client import AMFClient
    rclpy.init()
    robot = AMFClient("driver_robot1", namespace="robot1", next_task_service="/fleet/next_task")
    fleet = AMFClient("driver_fleet", namespace="fleet")
    out = {}
    try:
        robot.wait_ready(timeout=120)
        fleet.fine_tune_cli.wait_for_server(timeout_sec=120)
        d = robot.next_task(robot="robot1")
        out["task"], out["robot"] = d.task, d.robot
        robot.reset(d.task, seed=7)
        ep = robot.start_episode(d.task, d.instruction)
        info = robot.wait_episode(ep.episode_id, timeout=120)
        out["episode"] = {"id": info.episode_id, "steps": int(info.num_steps), "path": info.path}
        ft = fleet.fine_tune(steps=20, timeout=600)
        out["fine_tune"] = {"ok": bool(ft.ok), "checkpoint": ft.checkpoint, "message": ft.message}
        robot.wait_for(lambda: any(int(m.round) >= 1 for m in robot.seen.checkpoints), 60, "robot1 to adopt round 1")
        out["robot_checkpoint"] = [m.path for m in robot.seen.checkpoints if int(m.round) >= 1][0]
    finally:
        print("RESULT " + json.dumps(out), flush=True)
        robot.close(); fleet.close(); rclpy.try_shutdown()
""")


def test_robot_and_selector_on_two_hosts(two_hosts, ros_env, tmp_path):
    from amf_ros.bench.tiny_checkpoint import tiny_widowx_checkpoint
    from amf_ros.bringup import graph
    from amf_ros.bringup.processes import NodeProcesses

    robot_ns, fleet_ns = two_hosts
    ckpt = tiny_widowx_checkpoint(tmp_path / "pretrained", TASKS)
    specs = graph.fleet_plan(1, arm="widowx", config=str(CONFIG), checkpoint=str(ckpt))
    shared = ["-p", f"dataset_dir:={tmp_path / 'dataset'}", "-p", f"checkpoint_dir:={tmp_path / 'checkpoints'}"]
    extra = {s.key: [*shared] if s.name in ("demo_recorder", "policy_server", "task_selector") else []
             for s in specs}
    extra["fleet.task_selector"] += ["-p", f"tasks:=[{', '.join(TASKS)}]"]
    # UDP only: Fast DDS would otherwise move data through shared memory, which two real hosts do not share
    env = {**os.environ, **ros_env, "ROS_AUTOMATIC_DISCOVERY_RANGE": "SUBNET", "FASTDDS_BUILTIN_TRANSPORTS": "UDPv4"}
    host_env = {robot_ns: {**env, "ROS_STATIC_PEERS": FLEET_IP}, fleet_ns: {**env, "ROS_STATIC_PEERS": ROBOT_IP}}
    procs, logs = [], {}
    planner = NodeProcesses(specs, extra_args=extra)
    try:
        for spec in specs:
            ns = fleet_ns if spec.namespace == graph.FLEET_NAMESPACE else robot_ns
            logs[spec.key] = open(tmp_path / f"{spec.key}.log", "wb")
            procs.append(subprocess.Popen(["ip", "netns", "exec", ns, *planner.command(spec)], env=host_env[ns],
                                          stdout=logs[spec.key], stderr=subprocess.STDOUT, start_new_session=True))
        driver = subprocess.run(["ip", "netns", "exec", robot_ns, sys.executable, "-c", DRIVER], env=host_env[robot_ns],
                                capture_output=True, text=True, timeout=500)
        line = next((ln for ln in driver.stdout.splitlines() if ln.startswith("RESULT ")), "RESULT {}")
        out = json.loads(line[len("RESULT "):])
        tails = {k: (tmp_path / f"{k}.log").read_text(errors="replace")[-1500:] for k in logs}
        assert driver.returncode == 0, (driver.stderr[-3000:], tails)
        assert out["robot"] == "robot1" and out["task"] in TASKS
        assert out["episode"]["steps"] > 0 and os.path.isdir(out["episode"]["path"])  # recorded on the robot host
        assert out["fine_tune"]["ok"], out["fine_tune"]  # trained on the selector host
        assert out["robot_checkpoint"] == out["fine_tune"]["checkpoint"]  # reloaded on the robot host
        assert "adopted round 1" in (tmp_path / "robot1.policy_server.log").read_text()
        assert all(p.poll() is None for p in procs), tails
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGINT)
        deadline = time.monotonic() + 15
        for p in procs:
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        for fh in logs.values():
            fh.close()
