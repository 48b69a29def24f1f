"""The node graph of every bring-up, shared by launch/*.launch.py and `amf up` (no rclpy, no launch).

Why one module: `ros2 launch amf_ros sim.launch.py`, `ros2 launch amf_ros widowx.launch.py robot:=...` and
`amf up config/sim.yaml` must start the same nodes with the same YAML and the same overrides; the static launch
test checks this plan (every executable installed, every file present, every parameter declared).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from amf_ros.paths import PACKAGE, package_root, resolve_config

NAMESPACE = "amf"  # default namespace of every node (relative names resolve under it: /amf/next_task)
ROBOTS = ("real", "simpler", "sim", "sim_widowx", "wxai", "wxai_sim")
RESPAWN_DELAY_S = 2.0  # wait before restarting a node that exited (launch's respawn_delay)
RESPAWN_MAX_RETRIES = 3  # then leave it down (a node that cannot start, e.g. widowx_driver without Interbotix)

# The embedded simulation: the whole loop on one machine (Metaworld arm, scripted expert as the human).
SIM_NODES = ("policy_server", "task_selector", "demo_recorder", "sim_bridge", "scripted_teleop")
# Always present on a robot: the three nodes of the mission.
CORE_NODES = ("policy_server", "task_selector", "demo_recorder")
# What each robot adds to the core nodes.
ROBOT_NODES: dict[str, tuple[str, ...]] = {
    "real": ("widowx_driver",),          # Interbotix wx250s topics (/wx250s/...), the Octo engineer's driver
    "simpler": ("sim_bridge",),          # SIMPLER WidowX scenes hosted by sim_bridge (backend: simpler)
    "sim": ("sim_bridge", "scripted_teleop"),  # the embedded Metaworld simulation
    "sim_widowx": ("sim_bridge", "scripted_teleop"),  # the embedded WidowX 250s (widowx_driver's runtime inside)
    "wxai": ("widowx_driver",),          # a WidowX AI through Trossen's driver (executable wxai_driver)
    "wxai_sim": ("sim_bridge", "scripted_teleop"),  # the WidowX AI in trossen-arm-sim, Trossen's driver on loopback
}
EXECUTABLES: dict[tuple[str, str], str] = {("wxai", "widowx_driver"): "wxai_driver"}
"""(robot, node) -> the executable in lib/amf_ros when it is not the node's name: the WidowX AI's widowx_driver (same
node name, parameters and topics as the Interbotix one) is amf_ros/ros/nodes/wxai_driver.py."""
# Default config YAML per robot (relative to the package root / share directory).
ROBOT_CONFIG = {"real": "config/widowx.yaml", "simpler": "config/widowx.yaml", "sim": "config/sim.yaml",
                "sim_widowx": "config/sim_widowx.yaml", "wxai": "config/wxai.yaml", "wxai_sim": "config/wxai_sim.yaml"}
SIM_ARMS = {"metaworld": "sim", "widowx": "sim_widowx", "wxai": "wxai_sim"}
PRETRAIN_SUITES = {"metaworld": "metaworld", "widowx": "widowx", "wxai": "widowx"}
"""The embedded simulation's arms -> the suite their first policy is pre-trained on (`amf run`): the WidowX AI starts
from the embedded WidowX 250's (same tasks, observation and actions; its own simulator runs in real time)."""
CONSOLE_NODE = "operator_console"
"""The operator's web page (docs/console.md); started by default by every bring-up, last."""
"""The embedded simulation's arms (sim.launch.py ``arm:=``, `amf run --arm`) -> their robot in ROBOTS."""
TELEOP_NODE = "teleop"
"""A person's input device -> the arm's action topic (amf_ros/ros/nodes/teleop.py)."""
TELEOP_INPUTS = ("none", "joy", "twist", "spacemouse", "console")
"""The launch argument ``teleop:=`` / `amf up --teleop`: the teleop node's ``input`` ('none' = no teleop node). On an
embedded arm (sim, sim_widowx) a teleop takes scripted_teleop's place: the person demonstrates, not the scripted
expert (both would drive the arm at once)."""


@dataclass(frozen=True)
class NodeSpec:
    """One node process: executable in ``lib/amf_ros``, node name, namespace, params file, per-node overrides."""

    name: str
    executable: str
    params_file: str
    overrides: dict[str, Any] = field(default_factory=dict)
    namespace: str = NAMESPACE
    respawn: bool = True
    """Restart the node when it exits on its own (launch's ``respawn``; `amf up` does the same): one crashed node
    comes back while the others keep running."""
    respawn_delay_s: float = RESPAWN_DELAY_S
    respawn_max_retries: int = RESPAWN_MAX_RETRIES

    @property
    def key(self) -> str:
        """Unique name of this process in a graph (log file, NodeProcesses): the node name in the default namespace,
        else ``<namespace>.<name>`` (a fleet runs one policy_server per robot)."""
        ns = self.namespace.strip("/")
        return self.name if ns in ("", NAMESPACE) else f"{ns.replace('/', '.')}.{self.name}"

    def ros_args(self) -> list[str]:
        """Command-line arguments after the executable (``--ros-args ...``), as `amf up` passes them."""
        args = ["--ros-args", "-r", f"__node:={self.name}"]
        if self.namespace:
            args += ["-r", f"__ns:=/{self.namespace.strip('/')}"]
        args += ["--params-file", self.params_file]
        for key, value in self.overrides.items():
            args += ["-p", f"{key}:={_yaml_scalar(value)}"]
        return args


def _yaml_scalar(value: Any) -> str:
    """A value as `-p name:=value` expects it (YAML syntax)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_yaml_scalar(v) for v in value) + "]"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    return repr(value)


def node_names(robot: str, console: bool = True, teleop: str = "none") -> tuple[str, ...]:
    """Nodes started for ``robot`` (one of :data:`ROBOTS`), in start order (the arm and its operator
    first, the loop, then the operator console unless ``console`` is false). ``teleop`` other than 'none' adds the
    teleop node and, on an embedded arm, drops scripted_teleop (:data:`TELEOP_INPUTS`)."""
    if robot not in ROBOTS:
        raise ValueError(f"robot must be one of {ROBOTS}, got {robot=}")
    if teleop not in TELEOP_INPUTS:
        raise ValueError(f"teleop must be one of {TELEOP_INPUTS}, got {teleop=}")
    extra = ROBOT_NODES[robot]
    if teleop != "none":
        extra = (*(n for n in extra if n != "scripted_teleop"), TELEOP_NODE)
    return (*extra, *CORE_NODES, *((CONSOLE_NODE,) if console else ()))


def as_bool(value: bool | str) -> bool:
    """A launch argument ("true"/"false", as `ros2 launch` passes them) or a bool."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("true", "1", "yes", "on"):
        return True
    if text in ("false", "0", "no", "off", ""):
        return False
    raise ValueError(f"expected true or false, got {value!r}")


def overrides(robot: str, checkpoint: str = "", tasks: Sequence[str] | str = "",
              workspace: str = "", console: bool = True, console_host: str = "", console_port: int | str = "",
              console_token: str = "", teleop: str = "none", teleop_mapping: str = "",
              wxai_ip: str = "") -> dict[str, dict[str, Any]]:
    """Per-node parameter overrides implied by the launch arguments (on top of the YAML).

    Args:
        robot: one of :data:`ROBOTS`.
        checkpoint: checkpoint directory for policy_server and task_selector ("" = keep the YAML's); a relative
            path is taken relative to the directory the launch was started from (made absolute here).
        tasks: candidate task keys for task_selector, a list or a comma-separated string ("" = keep the YAML's).
        workspace: root of the nodes' relative data paths ("" = the nodes' default, see amf_ros.paths).
        console: start operator_console.
        console_host: operator_console's ``host`` ("" = keep the YAML's).
        console_port: operator_console's ``port`` ("" = keep the YAML's).
        console_token: operator_console's ``token`` ("" = keep the YAML's).
        teleop: the teleop node's ``input`` (:data:`TELEOP_INPUTS`; 'none' = no teleop node).
        teleop_mapping: the teleop node's ``mapping`` ("" = the input's default: config/teleop/<name>.yaml).
        wxai_ip: robot:=wxai: widowx_driver's ``wxai_ip``, the WidowX AI controller's address ("" = keep the YAML's).
    """
    if isinstance(tasks, str):
        tasks = [t.strip() for t in tasks.split(",") if t.strip()]
    out: dict[str, dict[str, Any]] = {name: {} for name in node_names(robot, console, teleop)}
    if teleop != "none":
        out[TELEOP_NODE]["input"] = teleop
        if teleop_mapping:
            out[TELEOP_NODE]["mapping"] = str(teleop_mapping)
    if console:
        for key, value in (("host", console_host), ("port", console_port), ("token", console_token)):
            if str(value) != "":
                out[CONSOLE_NODE][key] = int(value) if key == "port" else str(value)
        out[CONSOLE_NODE]["watch_nodes"] = [n for n in out if n != CONSOLE_NODE]  # the page's liveness rows
    if checkpoint:
        out["policy_server"]["checkpoint"] = str(Path(checkpoint).expanduser().resolve())
        out["task_selector"]["checkpoint"] = str(Path(checkpoint).expanduser().resolve())
    if workspace:
        for name in ("policy_server", "task_selector", "demo_recorder"):
            out[name]["workspace"] = str(Path(workspace).expanduser().resolve())
        if console:  # where `amf up` writes graphs/<namespace>/status.json (the console owns no data: no lock)
            out[CONSOLE_NODE]["status_workspace"] = str(Path(workspace).expanduser().resolve())
    if tasks:
        out["task_selector"]["tasks"] = list(tasks)
    if robot == "simpler":
        out["sim_bridge"]["backend"] = "simpler"
        out["policy_server"]["action_space"] = "eef7"
        out["policy_server"]["task_status_topic"] = "sim/status"  # SIMPLER reports success; a real arm cannot
        out["task_selector"]["action_space"] = "eef7"
    elif robot == "sim":
        out["sim_bridge"]["backend"] = "metaworld"
    elif robot == "sim_widowx":
        out["sim_bridge"]["backend"] = "widowx"
        if "scripted_teleop" in out:
            out["scripted_teleop"]["experts"] = "widowx"
    elif robot == "wxai":
        out["widowx_driver"]["backend"] = "wxai"
        if wxai_ip:
            out["widowx_driver"]["wxai_ip"] = str(wxai_ip)
    elif robot == "wxai_sim":  # the WidowX 250's tasks and scripted experts, on the WidowX AI in Trossen's simulator
        out["sim_bridge"]["backend"] = "wxai_sim"
        if "scripted_teleop" in out:
            out["scripted_teleop"]["experts"] = "widowx"
    return out


CONSOLE_PORT = 8765
"""operator_console's port in the default namespace (the YAMLs' ``port``)."""
CONSOLE_PORT_SPAN = 1000
"""Another namespace's console listens on one of the CONSOLE_PORT_SPAN ports after the YAML's (console_port)."""


def namespace_console_port(namespace: str, port: int = CONSOLE_PORT) -> int:
    """The console port of a graph in ``namespace`` when ``console_port`` is not given (issue 29): the YAML's
    ``port`` in the default namespace, else a port derived from the namespace name, the same on every start and
    machine (port + 1 + crc32(name) % CONSOLE_PORT_SPAN; robot1 -> 9630, robot2 -> 9248 from 8765), so that two
    graphs on one machine do not collide and the page of a namespace is always at the same address. Port 0 (any
    free port, the server logs the one it got) stays 0."""
    import zlib

    ns = namespace.strip("/").replace("/", ".")
    if port == 0 or ns == NAMESPACE:
        return port
    offset = 1 + zlib.crc32(ns.encode("utf-8")) % CONSOLE_PORT_SPAN
    return port + offset if port + CONSOLE_PORT_SPAN < 65536 else port - offset


def plan(robot: str = "sim", config: str | os.PathLike = "", checkpoint: str = "",
         tasks: Sequence[str] | str = "", namespace: str = NAMESPACE, workspace: str = "", console: bool | str = True,
         console_host: str = "", console_port: int | str = "", console_token: str = "",
         teleop: str = "none", teleop_mapping: str = "", wxai_ip: str = "") -> list[NodeSpec]:
    """The nodes to start, each with its params file and overrides (what both launch files and `amf up` run)."""
    cfg = str(resolve_config(config or ROBOT_CONFIG.get(robot, "config/sim.yaml")))
    console = as_bool(console)
    teleop = str(teleop or "none")
    over = overrides(robot, checkpoint, tasks, workspace, console, console_host, console_port, console_token, teleop,
                     teleop_mapping, wxai_ip)
    if console and "port" not in over[CONSOLE_NODE]:  # one port per namespace: two graphs on one machine
        yaml_port = int(node_section(cfg, CONSOLE_NODE).get("port", CONSOLE_PORT))
        if namespace_console_port(namespace, yaml_port) != yaml_port:
            over[CONSOLE_NODE]["port"] = namespace_console_port(namespace, yaml_port)
    return [NodeSpec(name=n, executable=EXECUTABLES.get((robot, n), n), params_file=cfg, overrides=over[n],
                     namespace=namespace) for n in node_names(robot, console, teleop)]


def sim_plan(config: str | os.PathLike = "", checkpoint: str = "", namespace: str = NAMESPACE,
             workspace: str = "", arm: str = "metaworld", console: bool | str = True, console_host: str = "",
             console_port: int | str = "", console_token: str = "", teleop: str = "none",
             teleop_mapping: str = "") -> list[NodeSpec]:
    """The embedded simulation of ``arm`` (launch/sim.launch.py, `amf up config/sim*.yaml`, `amf run`); an empty
    ``config`` = the arm's YAML (config/sim.yaml, config/sim_widowx.yaml); ``teleop`` other than 'none': a person
    drives instead of scripted_teleop."""
    if arm not in SIM_ARMS:
        raise ValueError(f"arm must be one of {list(SIM_ARMS)}, got {arm=}")
    return plan(SIM_ARMS[arm], config=config, checkpoint=checkpoint, namespace=namespace, workspace=workspace,
                console=console, console_host=console_host, console_port=console_port, console_token=console_token,
                teleop=teleop, teleop_mapping=teleop_mapping)


def node_section(params_file: str | os.PathLike, node: str) -> dict[str, Any]:
    """The ``ros__parameters`` of ``node`` in a params YAML (keys ``node``, ``/**/node`` or ``/<ns>/node``)."""
    import yaml

    with open(resolve_config(params_file), encoding="utf-8") as fh:
        doc = yaml.safe_load(fh) or {}
    for key, section in doc.items():
        if str(key).rsplit("/", 1)[-1] == node and isinstance(section, dict):
            return dict(section.get("ros__parameters") or {})
    return {}


def find_executable(name: str) -> Path:
    """Path of an installed node executable ``lib/amf_ros/<name>`` (AMENT_PREFIX_PATH, then ./install)."""
    prefixes = [p for p in os.environ.get("AMENT_PREFIX_PATH", "").split(os.pathsep) if p]
    prefixes.append(str(package_root() / "install" / PACKAGE))
    for prefix in prefixes:
        exe = Path(prefix) / "lib" / PACKAGE / name
        if exe.is_file() and os.access(exe, os.X_OK):
            return exe
    raise FileNotFoundError(f"node executable {name!r} is not installed (looked in lib/{PACKAGE} under "
                            f"{prefixes}); run `bash scripts/setup.sh` and `source scripts/env.sh`")


FLEET_NAMESPACE = "fleet"
"""Namespace of the fleet's shared nodes: one task_selector and the trainer policy_server (docs/fleet.md)."""
FLEET_ROBOT_NODES = ("sim_bridge", "scripted_teleop", "demo_recorder", "policy_server")
"""What each simulated robot of a fleet runs in its own namespace (robot1, robot2, ...)."""


def robot_names(n: int) -> list[str]:
    """robot1 ... robotN: each robot's namespace and the name it asks next_task with."""
    if n < 1:
        raise ValueError(f"a fleet needs at least one robot, got {n=}")
    return [f"robot{k}" for k in range(1, n + 1)]


def fleet_plan(robots: int, arm: str = "widowx", config: str | os.PathLike = "", checkpoint: str = "",
               workspace: str = "", independent: bool = False, assignment_timeout_s: float = 300.0) -> list[NodeSpec]:
    """N simulated arms in one graph, one selector and one trainer (`amf run --robots N`, docs/fleet.md).

    Each robot ``robotK`` runs its arm (sim_bridge, seed K), its operator (scripted_teleop), its recorder and an
    acting policy_server that follows the trainer's checkpoints (``follow_checkpoint_topic``). The namespace
    ``fleet`` runs the one task_selector (every robot's episodes end its assignments; ``independent``: no pending
    assignments, each request on its own) and the trainer policy_server, which fine-tunes once per round on the one
    store that every recorder writes (same ``dataset_dir``: episodes are directories committed by rename, each with
    its writer's lock, so several recorders share a store safely) and announces on /fleet/checkpoint.
    """
    names = robot_names(robots)
    robot = SIM_ARMS[arm] if arm in SIM_ARMS else arm
    cfg = str(resolve_config(config or ROBOT_CONFIG.get(robot, "config/sim.yaml")))
    base = overrides(robot, checkpoint, "", workspace, console=False)
    fleet_ckpt = f"/{FLEET_NAMESPACE}/checkpoint"
    specs: list[NodeSpec] = []
    for k, name in enumerate(names, start=1):
        for node in FLEET_ROBOT_NODES:
            over = dict(base.get(node, {}))
            if node == "sim_bridge":
                over["seed"] = k
            elif node == "scripted_teleop":
                over["seed"] = k
            elif node == "policy_server":
                over["follow_checkpoint_topic"] = fleet_ckpt
            specs.append(NodeSpec(name=node, executable=node, params_file=cfg, overrides=over, namespace=name))
    selector = dict(base["task_selector"])
    selector["episode_topics"] = [f"/{n}/episodes" for n in names]
    selector["assignment_timeout_s"] = 0.0 if independent else float(assignment_timeout_s)
    specs.append(NodeSpec(name="task_selector", executable="task_selector", params_file=cfg, overrides=selector,
                          namespace=FLEET_NAMESPACE))
    specs.append(NodeSpec(name="policy_server", executable="policy_server", params_file=cfg,
                          overrides=dict(base["policy_server"]), namespace=FLEET_NAMESPACE))
    return specs
