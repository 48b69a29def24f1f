"""widowx_driver against Interbotix's own xs_sdk simulator (issue 31): the robot:=real graph, unchanged, driving
``interbotix_xs_sdk/scripts/xs_sdk_sim.py`` for a wx250s over real DDS.

What it checks, each against Interbotix's code rather than ours: the operating modes the driver sets (read back with
the SDK's get_robot_info / get_motor_registers), joint_group commands moving the simulated arm, the published
proprio against forward kinematics of the wx250s URDF made from Interbotix's xacro (not the package's screw axes),
the package's joint limits against the limits the SDK serves, the PWM gripper stopping at the SDK's finger limits,
the e-stop holding, a recorded demonstration (a scripted EefDeltaAction publisher) and a run_policy goal.

Runs where ``interbotix_xs_msgs`` is importable and ``AMF_INTERBOTIX_SRC`` names a folder holding the sources of
Interbotix/interbotix_ros_core (``interbotix_xs_sdk``) and Interbotix/interbotix_ros_manipulators
(``interbotix_xsarm_control/config``, ``interbotix_xsarm_descriptions/urdf``); skips otherwise (CI: the messages
are not on PyPI). Runbook (outside the repository; none of it is committed):
    1. copy both repositories' ROS 2 branch (rolling/jazzy) into a scratch workspace, e.g. /work/interbotix_ws/src;
    2. ``pip install ros-trajectory-msgs xacro urdf-parser-py`` into the venv (interbotix_xs_msgs depends on
       trajectory_msgs), then ``colcon build --base-paths src/.../interbotix_xs_msgs`` with the venv as
       AMENT_PREFIX_PATH/CMAKE_PREFIX_PATH, as scripts/setup.sh builds this package;
    3. ``source scripts/env.sh; source <ws>/install/setup.bash; AMF_INTERBOTIX_SRC=<ws>/src pytest
       test/dds/test_interbotix_sim.py``.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import yaml
from robot_testutil import Stream
from ros_system_util import REPO
from ros_testing import wait_for

pytest.importorskip("interbotix_xs_msgs")
SRC = Path(os.environ.get("AMF_INTERBOTIX_SRC", "")).expanduser()
if not os.environ.get("AMF_INTERBOTIX_SRC") or not SRC.is_dir():
    pytest.skip("AMF_INTERBOTIX_SRC does not name the Interbotix sources (xs_sdk_sim.py, wx250s configs and xacro; "
                "runbook in this module's docstring)", allow_module_level=True)
pytest.importorskip("urdf_parser_py")
pytest.importorskip("xacro")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASKS = ("carrot_on_plate", "stack_cube")
CONFIG = REPO / "config" / "widowx.yaml"
F32 = float(np.finfo(np.float32).eps)
# The IK's convergence tolerance (kinematics.ik_space ev: 1e-3 on the twist's linear part, eomg 1e-3 rad) bounds how
# far a reached target may be from the commanded one; the sim stores float32 joints (JointGroupCommand.cmd), whose
# rounding moves the 0.46 m arm by well under 1e-6 m.
IK_POS_TOL = 2e-3


def _one(pattern: str) -> Path:
    found = sorted(SRC.rglob(pattern))
    if not found:
        pytest.skip(f"{pattern} not found under AMF_INTERBOTIX_SRC={SRC}")
    return found[0]


def _wx250s_urdf(tmp: Path) -> str:
    """The wx250s URDF from Interbotix's xacro ($(find interbotix_xsarm_descriptions) through a stand-in ament
    prefix in ``tmp``)."""
    xacro_file = _one("interbotix_xsarm_descriptions/urdf/wx250s.urdf.xacro")
    prefix = tmp / "prefix"
    (prefix / "share/ament_index/resource_index/packages").mkdir(parents=True)
    (prefix / "share/ament_index/resource_index/packages/interbotix_xsarm_descriptions").touch()
    (prefix / "share/interbotix_xsarm_descriptions").mkdir(parents=True)
    (prefix / "share/interbotix_xsarm_descriptions/urdf").symlink_to(xacro_file.parent)
    env = {**os.environ, "AMENT_PREFIX_PATH": f"{prefix}:{os.environ.get('AMENT_PREFIX_PATH', '')}"}
    out = subprocess.run([sys.executable, "-c", "import sys, xacro; sys.argv[0] = 'xacro'; xacro.main()",
                          str(xacro_file), "robot_model:=wx250s"], env=env,
                         capture_output=True, text=True, timeout=120, check=True)
    return out.stdout


def _urdf_fk(urdf: object, q: dict[str, float], tip: str = "wx250s/ee_gripper_link") -> np.ndarray:
    """Pose (4, 4) of ``tip`` in the root link, chaining the URDF's joint origins and axes (revolute/fixed)."""
    from amf_ros.policies.postprocess import rpy_to_matrix
    from amf_ros.robots.kinematics import exp3

    by_child = {j.child: j for j in urdf.joints}
    chain = []
    link = tip
    while link in by_child:
        chain.append(by_child[link])
        link = by_child[link].parent
    T = np.eye(4)
    for j in reversed(chain):
        origin = np.eye(4)
        origin[:3, :3] = rpy_to_matrix(j.origin.rpy)  # URDF rpy: fixed-axis x-y-z, R = Rz Ry Rx
        origin[:3, 3] = j.origin.xyz
        motion = np.eye(4)
        if j.type in ("revolute", "continuous"):
            motion[:3, :3] = exp3(np.asarray(j.axis, float) * q.get(j.name, 0.0))
        T = T @ origin @ motion
    return T


@pytest.fixture(scope="module")
def interbotix_graph(ros_env, rclpy_context, tmp_path_factory):
    """The robot:=real graph (graph.plan, as widowx.launch.py) with a tiny 8-D state policy in place of Octo, then
    xs_sdk_sim for the wx250s once widowx_driver waits for it; yields (run dir, client, procs, streams, urdf)."""
    from interbotix_xs_msgs.msg import JointGroupCommand, JointSingleCommand
    from sensor_msgs.msg import JointState
    from urdf_parser_py.urdf import URDF

    from amf_ros.bench.tiny_checkpoint import fit_on_noise
    from amf_ros.bringup import graph
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.loop.nodes import node_overrides
    from amf_ros.loop.run import LoopConfig
    from amf_ros.msg import ArmStatus, EefDeltaAction, StateVector
    from amf_ros.policies.agent import TaskConditionedPolicy
    from amf_ros.policies.config import PolicyConfig
    from amf_ros.ros import qos
    from amf_ros.ros.client import AMFClient

    run = tmp_path_factory.mktemp("interbotix")
    urdf_xml = _wx250s_urdf(run)
    config_dir = _one("interbotix_xsarm_control/config/wx250s.yaml").parent
    # Interbotix's modes.yaml, but with the gripper in position mode (as a mode config for position grippers has
    # it): the driver must put it in the PWM mode its commands need, not rely on the file
    modes = yaml.safe_load((config_dir / "modes.yaml").read_text())
    assert modes["groups"]["arm"]["profile_type"] == "time" and modes["singles"]["gripper"]["operating_mode"] == "pwm"
    modes["singles"]["gripper"]["operating_mode"] = "position"
    (run / "modes.yaml").write_text(yaml.safe_dump(modes))
    sim_params = run / "xs_sdk_sim.yaml"
    sim_params.write_text(yaml.safe_dump({"/**/xs_sdk_sim": {"ros__parameters": {
        "motor_configs": str(config_dir / "wx250s.yaml"), "mode_configs": str(run / "modes.yaml"),
        "robot_description": urdf_xml}}}))

    # Octo's place: a tiny policy on the real arm's 8-D proprio (Octo itself is not installable here)
    doc = yaml.safe_load(CONFIG.read_text())
    tasks_file = doc["/**/task_selector"]["ros__parameters"]["tasks_file"]
    spec = {t["key"]: t["instruction"] for t in yaml.safe_load((REPO / tasks_file).read_text())["tasks"]}
    policy = TaskConditionedPolicy(PolicyConfig(head="mlp", trunk="state", task_encoder="hash", action_horizon=4),
                                   action_dim=7, state_dim=8, tasks={k: spec[k] for k in TASKS})
    ckpt = fit_on_noise(policy, list(TASKS), run / "pretrained", episodes=4, steps_per_episode=10, fit_steps=5,
                        seed=0, state_dim=8, action_dim=7)
    doc["/**/policy_server"]["ros__parameters"].update(backend="native", torch_threads=1)
    doc["/**/task_selector"]["ros__parameters"].update(backend="native", torch_threads=1)
    doc["/**/demo_recorder"]["ros__parameters"].update(image_topics=[], image_keys=[])  # no camera on the sim
    config = run / "widowx_sim_xs.yaml"
    config.write_text(yaml.safe_dump(doc, sort_keys=False))
    specs = graph.plan("real", config=str(config), checkpoint=str(ckpt), tasks=list(TASKS), console=False)
    assert [s.name for s in specs][0] == "widowx_driver"
    extra = node_overrides(run, LoopConfig(selector="amf"))
    procs = NodeProcesses(specs, log_dir=run / "logs", env=ros_env, extra_args=extra).start()
    # xs_sdk after the driver, as a launch that starts both at once may have it: the driver must wait for xs_sdk
    # (sdk_wait_s) and then connect; the sim comes up once the driver says it is waiting
    try:
        wait_for(lambda: "waiting for xs_sdk" in procs.log_tail("widowx_driver", 20000), 60, "widowx_driver waiting")
    except AssertionError:
        print("node exit codes:", procs.stop())
        raise
    sim_log = open(run / "xs_sdk_sim.log", "w")  # closed at teardown
    sim = subprocess.Popen([sys.executable, str(_one("interbotix_xs_sdk/scripts/xs_sdk_sim.py")), "--ros-args",
                            "-r", "__ns:=/wx250s", "--params-file", str(sim_params)],
                           env={**os.environ, **ros_env}, stdout=sim_log, stderr=subprocess.STDOUT)
    client = AMFClient(f"amf_test_xs_{int(time.time() * 1e3) % 100000}", record_actions=True)
    streams = {name: Stream() for name in ("joints", "group", "single", "state", "applied", "arm")}
    node = client.node
    node.create_subscription(JointState, "/wx250s/joint_states", streams["joints"], 10)
    node.create_subscription(JointGroupCommand, "/wx250s/commands/joint_group", streams["group"], 10)
    node.create_subscription(JointSingleCommand, "/wx250s/commands/joint_single", streams["single"], 10)
    node.create_subscription(StateVector, "observation/state", streams["state"], qos.STREAM)
    node.create_subscription(EefDeltaAction, "action/applied", streams["applied"], qos.STREAM)
    node.create_subscription(ArmStatus, "arm/status", streams["arm"], qos.LATCHED)
    try:
        client.wait_ready(timeout=120, sim=False)
        client.wait_for(lambda: streams["state"].items and streams["arm"].items, 30, "the driver's state")
        yield run, client, procs, streams, URDF.from_xml_string(urdf_xml)
    finally:
        client.close()
        print("node exit codes:", procs.stop())
        sim.terminate()
        try:
            sim.wait(timeout=10)
        except subprocess.TimeoutExpired:
            sim.kill()
        sim_log.close()
        print((run / "xs_sdk_sim.log").read_text()[-3000:])


def test_a_driver_started_before_xs_sdk_waits_and_one_that_never_sees_it_gives_up(interbotix_graph, ros_env,
                                                                                   tmp_path) -> None:
    from amf_ros.bringup.processes import NodeProcesses

    _, _, procs, _, _ = interbotix_graph
    log = procs.log_tail("widowx_driver", 200000)
    assert "waiting for xs_sdk" in log and "xs_sdk is up" in log, log[-3000:]
    assert log.index("waiting for xs_sdk") < log.index("xs_sdk is up") < log.index("ready:")
    _alive(procs)
    # a driver (in a namespace of its own) whose xs_sdk never comes: one line after sdk_wait_s, exit 1, no traceback
    spec = next(s for s in procs.specs if s.name == "widowx_driver")
    lonely = dataclasses.replace(spec, namespace="lonely", overrides={
        **spec.overrides, "joint_states_topic": "/nobody/joint_states",
        "operating_modes_service": "/nobody/set_operating_modes", "sdk_wait_s": 1.0})
    done = subprocess.run(NodeProcesses([lonely]).command(lonely), env={**os.environ, **ros_env},
                          capture_output=True, text=True, timeout=60)  # a bound, never a hang
    assert done.returncode == 1, done.stderr[-2000:]
    ours = [x for x in done.stderr.splitlines() if x.startswith("widowx_driver: ")]
    assert len(ours) == 1, done.stderr[-2000:]
    assert ours[0].startswith("widowx_driver: the Interbotix xs_sdk did not come up within sdk_wait_s = 1 s"), ours
    assert "no publisher on /nobody/joint_states" in ours[0] and "/nobody/set_operating_modes not available" in ours[0]
    assert "Traceback" not in done.stderr


def _alive(procs) -> None:
    assert procs.dead() == {}, {n: procs.log_tail(n) for n in procs.dead()}


def _sdk_call(node, srv_type, name: str, request):
    from ros_testing import call

    return call(node, srv_type, name, request)  # queries: resending does no harm


def _home(client, streams, q: np.ndarray) -> None:
    """Move the arm as an operator would with Interbotix's tools: e-stop engaged (the driver commands nothing), a
    JointGroupCommand of the SDK's own, then release (the driver re-anchors its target at the arm)."""
    from interbotix_xs_msgs.msg import JointGroupCommand

    client.estop(True)
    pub = client.node.create_publisher(JointGroupCommand, "/wx250s/commands/joint_group", 10)
    client.wait_for(lambda: pub.get_subscription_count() > 0, 10, "xs_sdk_sim's joint_group subscription")
    pub.publish(JointGroupCommand(name="arm", cmd=[float(v) for v in q]))
    client.wait_for(lambda: np.allclose(_joints(streams["joints"].last())[0], q, atol=1e-6), 10, "the arm homed")
    client.node.destroy_publisher(pub)
    client.estop(False)


def _joints(msg) -> tuple[np.ndarray, float]:
    from amf_ros.robots import wx250s

    pos = dict(zip(msg.name, msg.position, strict=True))
    return np.array([pos[j] for j in wx250s.ARM_JOINTS]), float(pos[wx250s.FINGER_JOINT])


def _send(client, a7, period: float = 0.2, valid_for: float = 0.5) -> None:
    from amf_ros.msg import EefDeltaAction
    from amf_ros.ros import qos
    from amf_ros.ros.arm_msgs import action_msg

    if not hasattr(client, "_xs_action_pub"):  # the scripted operator's publisher, matched before its first action
        client._xs_action_pub = client.node.create_publisher(EefDeltaAction, "action", qos.ACTIONS)
        client.wait_for(lambda: client._xs_action_pub.get_subscription_count() >= 2, 10,
                        "widowx_driver and demo_recorder on the action topic")
    client._xs_action_pub.publish(action_msg(list(a7), client.node.get_clock().now().to_msg(), valid_for))
    time.sleep(period)


def test_operating_modes_limits_and_proprio_agree_with_interbotix(interbotix_graph) -> None:
    """After the driver's start: the arm group in position mode with a time profile of control_period_s, the
    gripper in PWM (read back from the SDK); the SDK's joint limits (from Interbotix's URDF) equal the package's;
    the published proprio equals the package's FK of the joint states and FK of Interbotix's URDF chain."""
    from interbotix_xs_msgs.srv import RegisterValues, RobotInfo

    from amf_ros.robots import widowx, wx250s

    run, client, procs, streams, urdf = interbotix_graph
    period_ms = round(float(yaml.safe_load(CONFIG.read_text())["/**/widowx_driver"]["ros__parameters"]
                            ["control_period_s"]) * 1000)
    arm = _sdk_call(client.node, RobotInfo, "/wx250s/get_robot_info", RobotInfo.Request(cmd_type="group", name="arm"))
    assert (arm.mode, arm.profile_type) == ("position", "time")
    assert list(arm.joint_names) == list(wx250s.ARM_JOINTS)
    # the limits travel as float32: equal to the package's within float32 rounding of a value below pi
    np.testing.assert_allclose(arm.joint_lower_limits, wx250s.JOINT_LOWER, rtol=0, atol=4 * F32)
    np.testing.assert_allclose(arm.joint_upper_limits, wx250s.JOINT_UPPER, rtol=0, atol=4 * F32)
    np.testing.assert_allclose(arm.joint_velocity_limits, wx250s.JOINT_VELOCITY_LIMIT, rtol=0, atol=4 * F32)
    for reg, want in (("Profile_Velocity", period_ms), ("Profile_Acceleration", max(period_ms // 4, 1))):
        got = _sdk_call(client.node, RegisterValues, "/wx250s/get_motor_registers",
                        RegisterValues.Request(cmd_type="group", name="arm", reg=reg))
        assert list(got.values) == [want] * 6, (reg, list(got.values))
    grip = _sdk_call(client.node, RobotInfo, "/wx250s/get_robot_info",
                     RobotInfo.Request(cmd_type="single", name="gripper"))
    assert grip.mode == "pwm" and list(grip.joint_names) == [wx250s.FINGER_JOINT]
    np.testing.assert_allclose([grip.joint_lower_limits[0], grip.joint_upper_limits[0]], wx250s.FINGER_LIMITS,
                               rtol=0, atol=4 * F32 * 0.04)

    # proprio: published for every joint state; compare pairs by stamp (the driver copies the joint state's stamp)
    t0 = time.monotonic()
    client.wait_for(lambda: len(streams["state"].since(t0)) >= 5, 10, "proprio after the joint states")
    joints = {(m.header.stamp.sec, m.header.stamp.nanosec): m for m in streams["joints"].since(t0 - 1.0)}
    pairs = [(joints[(s.header.stamp.sec, s.header.stamp.nanosec)], s) for s in streams["state"].since(t0)
             if (s.header.stamp.sec, s.header.stamp.nanosec) in joints]
    assert len(pairs) >= 3
    for js, state in pairs:
        q, finger = _joints(js)
        want = widowx.proprio(wx250s.fk(q), wx250s.finger_to_gripper(finger))
        np.testing.assert_allclose(state.values, want, rtol=0, atol=1e-12)
        T = _urdf_fk(urdf, dict(zip(wx250s.ARM_JOINTS, q, strict=True)))
        np.testing.assert_allclose(T[:3, 3], want[:3], rtol=0, atol=1e-9)  # URDF and screw axes: same numbers
        np.testing.assert_allclose(widowx.pose_to_state(T, 0.0)[3:6], want[3:6], rtol=0, atol=1e-9)
    _alive(procs)


def test_joint_group_commands_move_the_arm_and_the_pwm_gripper_stops_at_its_limits(interbotix_graph) -> None:
    """From BridgeData's neutral pose: five -1 cm z actions with the gripper closing, then five with it opening.
    The SDK's joints equal the last JointGroupCommand (float32), the proprio went down 10 cm, and each gripper direction
    was driven with the configured PWM, then 0 once the finger passed the SDK's limit for that direction."""
    from amf_ros.robots import wx250s

    run, client, procs, streams, _ = interbotix_graph
    _home(client, streams, wx250s.NEUTRAL_JOINTS)
    p = yaml.safe_load(CONFIG.read_text())["/**/widowx_driver"]["ros__parameters"]
    pwm = p["gripper_pwm_low"] + p["gripper_pressure"] * (p["gripper_pwm_high"] - p["gripper_pwm_low"])
    t0 = time.monotonic()
    z0 = float(streams["state"].last().values[2])
    for gripper in (0.0, 1.0):
        for _ in range(5):
            _send(client, [0.0, 0.0, -0.01, 0.0, 0.0, 0.0, gripper])

        def at_end(opening: float = gripper) -> bool:  # 250/2000 rad per 30 Hz tick: ~0.3 s from end to end
            lo, hi = wx250s.FINGER_LIMITS
            finger = _joints(streams["joints"].last())[1]
            return finger >= hi - 1e-3 if opening else finger <= lo + 1e-3

        client.wait_for(at_end, 10, f"the finger at its {'open' if gripper else 'closed'} end")
        client.wait_for(lambda: streams["single"].items and streams["single"].last().cmd == 0.0, 10, "PWM 0")
    commands = streams["group"].since(t0)
    from amf_ros.ros.arm_msgs import arm_counts

    assert len(commands) == 10 and all(m.name == "arm" for m in commands), arm_counts(streams["arm"].last())
    q, _ = _joints(streams["joints"].last())
    np.testing.assert_array_equal(q, np.asarray(commands[-1].cmd, dtype=np.float32).astype(float))
    z1 = float(streams["state"].last().values[2])
    assert abs((z0 - z1) - 0.10) <= IK_POS_TOL, (z0, z1)
    singles = [(m.name, round(m.cmd, 3)) for m in streams["single"].since(t0)]
    assert singles == [("gripper", -pwm), ("gripper", 0.0), ("gripper", pwm), ("gripper", 0.0)], singles
    assert len(streams["applied"].since(t0)) == 10
    _alive(procs)


def test_estop_holds_the_simulated_arm(interbotix_graph) -> None:
    """widowx/estop while actions stream in: one hold command (the measured joints), then no JointGroupCommand and
    bit-identical joint states while actions keep arriving; they are counted as refused for the e-stop."""
    from amf_ros.robots import wx250s
    from amf_ros.ros.arm_msgs import arm_counts

    run, client, procs, streams, _ = interbotix_graph
    _home(client, streams, wx250s.NEUTRAL_JOINTS)
    t0 = time.monotonic()
    for _ in range(3):
        _send(client, [0.01, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    client.wait_for(lambda: len(streams["group"].since(t0)) == 3, 10, "the three actions' commands")
    before = arm_counts(streams["arm"].last())
    t_call = time.monotonic()
    client.estop(True)
    for _ in range(5):
        _send(client, [0.01, 0.0, 0.0, 0.0, 0.0, 0.0, 1.0])
    held = streams["group"].since(t_call)
    assert len(held) == 1, len(held)  # the hold command, nothing after it
    states = [_joints(m)[0] for m in streams["joints"].since(t_call + 0.2)]
    assert len(states) >= 10 and all(np.array_equal(s, states[0]) for s in states)
    np.testing.assert_allclose(states[0], np.asarray(held[0].cmd, np.float32).astype(float), rtol=0, atol=0)
    after = arm_counts(streams["arm"].last())
    assert after.estop and after.applied == before.applied
    assert after.refused.get("e-stop", 0) - before.refused.get("e-stop", 0) == 5
    client.estop(False)
    _alive(procs)


def test_recorded_demonstration_and_run_policy(interbotix_graph) -> None:
    """A scripted operator's EefDeltaActions are recorded as the arm's echo (every step's action is one the
    operator sent, the states are the 8-D proprio); a run_policy goal runs its steps and the arm applies them."""
    from amf_ros.data.store import EpisodeStore
    from amf_ros.robots import wx250s

    run, client, procs, streams, _ = interbotix_graph
    _home(client, streams, wx250s.NEUTRAL_JOINTS)
    script = [[0.01 * np.cos(k / 3), 0.01 * np.sin(k / 3), 0.0, 0.0, 0.0, 0.02, float(k < 8)] for k in range(15)]
    ep = client.start_episode(TASKS[0], "")
    for a in script:
        _send(client, a)
    end = client.end_episode(ep.episode_id, success=True)
    assert end.ok and 10 <= end.num_steps <= len(script), end
    episode = EpisodeStore(run / "dataset", create=False).load(ep.episode_id, images=False)
    actions, states = np.asarray(episode.steps["action"]), np.asarray(episode.observation["state"])
    assert actions.shape == (end.num_steps, 7) and states.shape == (end.num_steps, 8)
    sent = np.asarray(script, dtype=np.float32)
    for a in actions:  # every recorded action is one the operator sent (float32 on the wire)
        assert np.any(np.all(np.abs(sent - a) <= 4 * F32 * np.maximum(np.abs(sent), 1.0), axis=1)), a
    assert np.all(np.abs(states[:, 6]) == 0.0) and np.ptp(states[:, 0]) > 0.01  # pad; the arm moved in x

    n0 = len(streams["applied"].items)
    res = client.run_policy(TASKS[1], max_steps=8, timeout=120)
    assert res.ok and res.steps == 8, res.message
    assert "the arm applied" in res.message and len(streams["applied"].items) > n0, res.message
    _alive(procs)
