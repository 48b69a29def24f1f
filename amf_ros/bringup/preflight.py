"""The checks a bring-up makes before it starts any node: an argument no restart can fix is refused in one line.

Why (issue 29): a bad argument used to become a node traceback, three pointless respawns and a half-working graph
(``checkpoint:=`` to a missing directory, ``tasks:=`` with an unknown key, ``console_host:=0.0.0.0`` without a token,
a console port already in use), or an error that did not name the argument (``console_port:=abc``: "invalid literal
for int()"). Both launch files (through an OpaqueFunction) and `amf up` call :func:`checked_plan` and then
:func:`claim`, so that they refuse the same things with the same words before any node starts:

* the arguments themselves: ``robot:=`` / ``arm:=`` / ``teleop:=`` (one of the known ones), ``console:=`` (true/false),
  ``console_port:=`` (an integer 0-65535), ``namespace:=`` (a ROS namespace), ``config:=`` (a readable params YAML),
  ``checkpoint:=`` (an existing, readable directory), ``workspace:=`` (a directory that can be created and written);
* what the nodes would read: every node's YAML section against its parameter table, every ``tasks_file`` (it
  loads), ``tasks:=`` (every key is in task_selector's task file), every non-empty ``checkpoint`` of policy_server
  and task_selector (it exists), a native policy_server with nothing to start from (no checkpoint, no round under its
  checkpoint_dir, no ``pretrain_if_missing``), a console on a non-loopback address without a token;
* after this graph has taken its place (graph_lock): the console's port is free.

What is left to the nodes is what can still change while they run: Octo not installed, an unset Octo ``checkpoint``, an
Octo checkpoint directory whose files are not all there yet (policy_server and task_selector start "not ready" and
wait, amf_ros/runtime/readiness.py). Everything here
reads a few small files and ``stat``s paths: no rclpy, no torch, no network (the port check binds and closes).
"""

from __future__ import annotations

import errno
import os
import re
import socket
from pathlib import Path
from typing import Any, Mapping, Sequence

from amf_ros.bringup import graph, graph_lock
from amf_ros.bringup.graph import CONSOLE_NODE, NodeSpec
from amf_ros.bringup.lifetime import NoRespawnError
from amf_ros.bringup.params import flatten, load, params_class, validate

LAUNCH = "launch"
"""Name arguments as `ros2 launch` takes them: ``checkpoint:=DIR``."""
CLI = "cli"
"""Name arguments as `amf up` takes them: ``--checkpoint DIR``, the params file ``CONFIG``."""

_NAME_TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
"""One token of a ROS namespace (rcl: letters, digits and underscores, not starting with a digit)."""


class BadArgumentError(NoRespawnError):
    """A bring-up argument (or the params file it names) that no restart can fix. The message is one line, starting
    with "refusing to start" and naming each bad argument; `amf up` exits with NO_RESPAWN_EXIT, `ros2 launch` with
    its error."""


def argument(name: str, value: Any, style: str = LAUNCH) -> str:
    """How the user wrote argument ``name``: ``checkpoint:=/x`` (launch) or ``--checkpoint /x`` (`amf up`)."""
    if style == CLI:
        return f"CONFIG {value}" if name == "config" else f"--{name.replace('_', '-')} {value}"
    return f"{name}:={value}"


def refusal(problems: Sequence[str]) -> str:
    """The one line that refuses a bring-up (every problem, ``; `` between them, whitespace flattened)."""
    text = "; ".join(" ".join(str(p).split()) for p in problems)
    return f"refusing to start, no node started: {text}"


# -- the arguments -----------------------------------------------------------------------------------------------

def choice_problem(name: str, value: str, allowed: Sequence[str], style: str = LAUNCH) -> str:
    """"" if ``value`` is one of ``allowed``, else the problem naming the argument."""
    if value in allowed:
        return ""
    return f"{argument(name, value, style)} is not one of {' | '.join(allowed)}"


def bool_problem(name: str, value: str | bool, style: str = LAUNCH) -> str:
    """"" if ``value`` is a launch boolean (graph.as_bool), else the problem naming the argument."""
    try:
        graph.as_bool(value)
    except ValueError:
        return f"{argument(name, value, style)} is not true or false"
    return ""


def port_problem(name: str, value: int | str, style: str = LAUNCH) -> str:
    """"" if ``value`` is empty (keep the YAML's) or a TCP port 0-65535 (0 = any free port)."""
    if str(value).strip() == "":
        return ""
    try:
        port = int(str(value).strip())
    except ValueError:
        return f"{argument(name, value, style)} is not a port number (an integer 0-65535; 0 = any free port)"
    if not 0 <= port <= 65535:
        return f"{argument(name, value, style)} is outside 0-65535 (0 = any free port)"
    return ""


def namespace_problem(value: str, style: str = LAUNCH) -> str:
    """"" for a valid ROS namespace (``amf``, ``/robots/r1``; empty = the root namespace)."""
    tokens = [t for t in str(value).strip("/").split("/")]
    if str(value).strip("/") == "" or all(_NAME_TOKEN.fullmatch(t) for t in tokens):
        return ""
    return (f"{argument('namespace', value, style)} is not a ROS namespace (letters, digits and underscores, each "
            "part not starting with a digit, parts separated by /)")


def config_problem(config: str, style: str = LAUNCH) -> str:
    """"" if ``config`` (empty = the robot's default) is a readable params YAML of ``{node: {ros__parameters}}``."""
    import yaml

    from amf_ros.paths import resolve_config

    if not config:
        return ""
    arg = argument("config", config, style)
    try:
        path = resolve_config(config)
    except ValueError:
        return f"{arg}: no such file (looked for it as given and under the amf_ros package's share directory)"
    try:
        with open(path, encoding="utf-8") as fh:
            doc = yaml.safe_load(fh)
    except OSError as exc:
        return f"{arg}: cannot be read ({exc.strerror or exc})"
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        return f"{arg}: not valid YAML{where} ({getattr(exc, 'problem', None) or type(exc).__name__})"
    if not isinstance(doc, dict) or not all(isinstance(v, dict) and "ros__parameters" in v for v in doc.values()):
        return f"{arg}: not a ROS params file (expected {{/**/<node>: {{ros__parameters: {{...}}}}}} sections)"
    return ""


def directory_problem(what: str, path: str) -> str:
    """"" if ``path`` is an existing directory this process can list and read, else the problem (``what`` names the
    argument or parameter)."""
    p = Path(path).expanduser()
    shown = f"{what}" if str(p.resolve()) == str(path) else f"{what} ({p.resolve()})"
    if not p.exists():
        return f"{shown}: no such directory"
    if not p.is_dir():
        return f"{shown}: not a directory"
    if not os.access(p, os.R_OK | os.X_OK):
        return f"{shown}: cannot be read (permission denied)"
    return ""


def workspace_problem(workspace: str, style: str = LAUNCH) -> str:
    """"" if ``workspace`` is empty (the default) or a directory that exists or can be created, and can be written."""
    if not workspace:
        return ""
    arg = argument("workspace", workspace, style)
    p = Path(workspace).expanduser().resolve()
    if p.exists() and not p.is_dir():
        return f"{arg}: not a directory"
    existing = next(q for q in (p, *p.parents) if q.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return f"{arg}: cannot be written ({existing} is not writable)"
    return ""


def argument_problems(robot: str, args: Mapping[str, Any], style: str = LAUNCH) -> list[str]:
    """Problems of the bring-up arguments on their own (:func:`checked_plan` runs it first).

    Args:
        robot: one of graph.ROBOTS (real | simpler | sim | sim_widowx | wxai | wxai_sim).
        args: graph.plan's keyword arguments as given (strings from a launch file): config, checkpoint, tasks,
            namespace, workspace, console, console_host, console_port, console_token, teleop, teleop_mapping,
            wxai_ip; missing ones keep defaults.
        style: :data:`LAUNCH` or :data:`CLI` (how problems name the arguments).
    """
    problems = [choice_problem("robot", robot, graph.ROBOTS, style),
                choice_problem("teleop", str(args.get("teleop", "none") or "none"), graph.TELEOP_INPUTS, style),
                bool_problem("console", args.get("console", True), style),
                port_problem("console_port", args.get("console_port", ""), style),
                namespace_problem(str(args.get("namespace", graph.NAMESPACE)), style),
                config_problem(str(args.get("config", "")), style),
                workspace_problem(str(args.get("workspace", "")), style)]
    teleop_mapping = str(args.get("teleop_mapping", "") or "")
    if teleop_mapping and str(args.get("teleop", "none") or "none") == "none":
        problems.append(f"{argument('teleop_mapping', teleop_mapping, style)} needs a teleop device: pass "
                        f"{argument('teleop', 'joy', style)} (or twist, spacemouse, console) as well")
    wxai_ip = str(args.get("wxai_ip", "") or "")
    if wxai_ip and robot != "wxai":
        problems.append(f"{argument('wxai_ip', wxai_ip, style)} is for a WidowX AI: pass "
                        f"{argument('robot', 'wxai', style)} as well")
    checkpoint = str(args.get("checkpoint", ""))
    if checkpoint:
        problems.append(directory_problem(argument("checkpoint", checkpoint, style), checkpoint))
    return [p for p in problems if p]


# -- what the nodes would read ------------------------------------------------------------------------------------

def tasks_problem(tasks_file: str, tasks: Sequence[str] = (), file_label: str = "parameter 'tasks_file'",
                  tasks_label: str = "parameter 'tasks'") -> str:
    """What is wrong with a task configuration ("" = nothing): ``tasks_file`` that cannot be read, or a key in
    ``tasks`` it does not list (empty ``tasks_file``: nothing to check). The labels name where each came from (a
    node's parameter, or a launch argument)."""
    if not tasks_file:
        return ""
    from amf_ros.data.task_set import load_task_set
    from amf_ros.paths import resolve_config

    try:
        resolve_config(tasks_file)
    except ValueError:
        return f"{file_label} {tasks_file!r}: no such file (looked for it as given and in the amf_ros package)"
    try:
        table = load_task_set(tasks_file).instructions
    except (ValueError, OSError) as exc:
        return f"{file_label} {tasks_file!r}: {' '.join(str(exc).split())}"
    unknown = [k for k in tasks if k not in table]
    if unknown:
        return f"{tasks_label}: unknown task(s) {unknown}; {tasks_file!r} lists {list(table)}"
    return ""


def node_values(spec: NodeSpec) -> dict[str, Any]:
    """The parameters node ``spec`` starts with (its YAML section, then the launch overrides; defaults elsewhere),
    flattened (dotted names)."""
    return {**flatten(graph.node_section(spec.params_file, spec.name)), **flatten(spec.overrides)}


def _label(spec: NodeSpec, key: str, args: Mapping[str, Any], style: str, arg: str = "") -> str:
    """Where parameter ``key`` of ``spec`` came from: the launch argument ``arg`` when it set it, else the YAML."""
    if arg and key in spec.overrides and str(args.get(arg, "")):
        return argument(arg, args[arg], style)
    return f"{spec.name}.{key} in {spec.params_file}"


_KNOWN = re.compile(r" \(known: \[[^\]]*\]\)")
"""validate()'s list of every declared name, too long for a one-line refusal."""


def plan_problems(specs: Sequence[NodeSpec], args: Mapping[str, Any], style: str = LAUNCH) -> list[str]:
    """Problems of what the planned nodes would read (:func:`checked_plan` runs it after :func:`argument_problems`):
    YAML sections and overrides against the parameter tables, task files and task keys, checkpoints, the console's
    host and token. ``args`` as for :func:`argument_problems` (to name the argument a value came from)."""
    problems: list[str] = []
    typed: dict[str, Any] = {}
    for spec in specs:
        values = node_values(spec)
        found = validate(spec.name, values)
        if found:
            problems += [f"{spec.params_file}: " + _KNOWN.sub(f" (amf_ros/bringup/params/{spec.name}.py lists them)", p)
                         for p in found]
            continue
        typed[spec.name] = load(params_class(spec.name), values)
    files: dict[str, str] = {}  # tasks_file -> its problem ("" = it loads)
    for spec in specs:
        tasks_file = getattr(typed.get(spec.name), "tasks_file", "")
        if tasks_file and tasks_file not in files:
            files[tasks_file] = tasks_problem(tasks_file, file_label=_label(spec, "tasks_file", args, style))
    problems += files.values()
    selector = typed.get("task_selector")
    if selector is not None and selector.tasks and selector.tasks_file and not files.get(selector.tasks_file):
        spec = next(s for s in specs if s.name == "task_selector")
        problems.append(tasks_problem(selector.tasks_file, selector.tasks,
                                      tasks_label=_label(spec, "tasks", args, style, "tasks")))
    problems += _checkpoint_problems(specs, typed, args, style)
    problems += _wxai_problems(specs, typed, args, style)
    problems.append(_teleop_mapping_problem(specs, typed, args, style))
    console = typed.get(CONSOLE_NODE)
    if console is not None and not console.token and not _is_loopback(console.host):
        spec = next(s for s in specs if s.name == CONSOLE_NODE)
        problems.append(f"{_label(spec, 'host', args, style, 'console_host')} makes the console reachable from other "
                        f"machines without a token: pass {argument('console_token', 'SECRET', style)} as well (the "
                        "page then needs ?token=SECRET), or bind to 127.0.0.1")
    return [p for p in problems if p]


def _checkpoint_problems(specs: Sequence[NodeSpec], typed: Mapping[str, Any], args: Mapping[str, Any],
                         style: str) -> list[str]:
    """A non-empty ``checkpoint`` of policy_server / task_selector that is not a readable directory (said once when
    both name the same one); a native policy_server with nothing to start from."""
    from amf_ros.paths import in_data_root
    from amf_ros.policies.checkpoint_dirs import newest_checkpoint

    problems: list[str] = []
    said: set[str] = set()
    for spec in specs:
        p = typed.get(spec.name)
        if spec.name not in ("policy_server", "task_selector") or p is None:
            continue
        if p.checkpoint:
            if p.checkpoint not in said:
                said.add(p.checkpoint)
                problems.append(directory_problem(_label(spec, "checkpoint", args, style, "checkpoint"), p.checkpoint))
        elif spec.name == "policy_server" and p.backend == "native" and not p.pretrain_if_missing:
            where = in_data_root(p.checkpoint_dir, p.workspace, spec.namespace)
            if newest_checkpoint(where) is None:
                problems.append(
                    f"policy_server (backend native) has no policy to start from: no checkpoint given and no "
                    f"round_NNNN in {str(where)!r}; pass {argument('checkpoint', 'DIR', style)} (a checkpoint "
                    "`amf pretrain` wrote), or set pretrain_if_missing: true in the params file (embedded simulation)")
    return problems


def _wxai_problems(specs: Sequence[NodeSpec], typed: Mapping[str, Any], args: Mapping[str, Any],
                   style: str) -> list[str]:
    """The WidowX AI (robot:=wxai, wxai_sim): Trossen's driver (and for the simulator trossen-arm-sim) installed, and
    a valid controller IP. (The simulator's ports need no check: it takes the next loopback address when 127.0.0.1's
    are held, amf_ros/envs/wxai_sim/scene.py.)"""
    from importlib.util import find_spec

    from amf_ros.robots.wxai import INSTALL_HINT, NO_IP_LINE

    problems: list[str] = []
    driver = next((s for s in specs if s.name == "widowx_driver" and s.executable == "wxai_driver"), None)
    sim = next((s for s in specs if s.name == "sim_bridge" and getattr(typed.get("sim_bridge"), "backend", "")
                == "wxai_sim"), None)
    needs = (["trossen_arm"] if driver or sim else []) + (["trossen_arm_sim"] if sim else [])
    missing = [m for m in needs if find_spec(m) is None]
    if missing:
        problems.append(f"the WidowX AI needs {', '.join(missing)}: {INSTALL_HINT}")
    if driver is not None and typed.get("widowx_driver") is not None:
        ip = typed["widowx_driver"].wxai_ip
        try:
            if not ip:
                problems.append(NO_IP_LINE)
            else:
                socket.inet_aton(ip)
        except OSError:
            problems.append(f"{_label(driver, 'wxai_ip', args, style, 'wxai_ip')} = {ip!r} is not an IPv4 address")
    return problems


def _teleop_mapping_problem(specs: Sequence[NodeSpec], typed: Mapping[str, Any], args: Mapping[str, Any],
                            style: str) -> str:
    """"" unless the teleop node's ``mapping`` names no file (config/teleop/<name>.yaml or a path; its contents are
    parsed by the node, which ends with one line if they are wrong)."""
    from amf_ros.paths import resolve_config

    p = typed.get(graph.TELEOP_NODE)
    if p is None or not p.mapping:
        return ""
    spec = next(s for s in specs if s.name == graph.TELEOP_NODE)
    try:
        resolve_config(p.mapping if p.mapping.endswith((".yaml", ".yml")) else f"config/teleop/{p.mapping}.yaml")
    except ValueError:
        return (f"{_label(spec, 'mapping', args, style, 'teleop_mapping')}: no such mapping (a name of "
                "config/teleop/<name>.yaml: xbox, ps4, ps5, gamepad, spacenav, spacemouse, console; or a YAML path)")
    return ""


def _is_loopback(host: str) -> bool:
    """The console's rule (amf_ros.console.server.is_loopback): 127.0.0.0/8, ::1 and localhost need no token."""
    from amf_ros.console.server import is_loopback

    return is_loopback(host)


def checked_plan(robot: str, args: Mapping[str, Any], style: str = LAUNCH) -> list[NodeSpec]:
    """``graph.plan(robot, **args)`` once every check that needs no running process passed.

    Raises:
        BadArgumentError: one line naming every bad argument (:func:`argument_problems`, then :func:`plan_problems`).
    """
    problems = argument_problems(robot, args, style)
    if problems:
        raise BadArgumentError(refusal(problems))
    try:
        specs = graph.plan(robot, **args)
    except ValueError as exc:  # what the checks above do not foresee still ends in one line
        raise BadArgumentError(refusal([str(exc)])) from None
    problems = plan_problems(specs, args, style)
    if problems:
        raise BadArgumentError(refusal(problems))
    return specs


def checked_sim_plan(arm: str, args: Mapping[str, Any], style: str = LAUNCH) -> list[NodeSpec]:
    """:func:`checked_plan` of the embedded simulation of ``arm`` (sim.launch.py ``arm:=metaworld|widowx``)."""
    problem = choice_problem("arm", arm, list(graph.SIM_ARMS), style)
    if problem:
        raise BadArgumentError(refusal([problem, *argument_problems("sim", args, style)]))
    return checked_plan(graph.SIM_ARMS[arm], args, style)


# -- after this graph has taken its place ---------------------------------------------------------------------

def console_port_problem(specs: Sequence[NodeSpec], args: Mapping[str, Any], style: str = LAUNCH) -> str:
    """"" if operator_console of ``specs`` (if any) can listen on its host and port (port 0 always can); else the
    problem. Binds a socket per address as asyncio's server does (SO_REUSEADDR, IPv6 only on IPv6 sockets, an
    address family this machine lacks skipped) and closes it at once."""
    spec = next((s for s in specs if s.name == CONSOLE_NODE), None)
    if spec is None:
        return ""
    values = node_values(spec)
    host = str(values.get("host", "127.0.0.1"))
    port = int(values.get("port", graph.CONSOLE_PORT))
    if port == 0:
        return ""
    if str(args.get("console_port", "")).strip():
        what = argument("console_port", args["console_port"], style)
    elif "port" in spec.overrides:
        what = f"the console port of namespace /{spec.namespace.strip('/')} (derived from the namespace)"
    else:
        what = f"{spec.name}.port in {spec.params_file}"
    host_label = _label(spec, "host", args, style, "console_host")
    try:
        infos = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    except socket.gaierror as exc:
        return f"{host_label}: cannot be resolved ({exc.strerror})"
    bound = 0
    for family, kind, proto, _name, address in infos:
        try:
            sock = socket.socket(family, kind, proto)
        except OSError:
            continue  # an address family this machine does not have
        with sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            try:
                sock.bind(address)
                bound += 1
            except OSError as exc:
                if exc.errno == errno.EADDRNOTAVAIL:
                    continue  # as asyncio: this family is not enabled here
                if exc.errno == errno.EADDRINUSE:
                    return (f"{what}: port {port} on {host or '*'} is already in use (another console or program; "
                            f"`ss -ltnp 'sport = :{port}'` names it): pass {argument('console_port', 'N', style)}, "
                            f"or {argument('console_port', 0, style)} for any free port")
                if exc.errno == errno.EACCES:
                    return f"{what}: port {port} needs privileges; choose one above 1023"
                return f"{what}: cannot listen on {host}:{port} ({exc.strerror or exc})"
    if not bound:
        return f"{host_label}: {host} is not an address of this machine"
    return ""


def claim(specs: Sequence[NodeSpec], args: Mapping[str, Any], style: str = LAUNCH,
          env: Mapping[str, str] | None = None) -> graph_lock.GraphLock:
    """Take this graph's place (graph_lock.claim_graph: one graph per namespace and workspace), then check the
    console's port; returns the graph lock, held until released or this process exits.

    Raises:
        graph_lock.PlaceTakenError: another graph holds the place (one line naming it).
        BadArgumentError: the console's port cannot be listened on (one line; the place is released).
    """
    place = graph_lock.claim_graph(specs, str(args.get("workspace", "")), str(args.get("namespace", graph.NAMESPACE)),
                                   env)
    problem = console_port_problem(specs, args, style)
    if problem:
        place.release()
        raise BadArgumentError(refusal([problem]))
    return place
