"""One graph per namespace and workspace: the lock files a running graph holds (issue 33).

Why: a second `amf up` (or `ros2 launch`) with the same namespace on the same workspace duplicated every node: one
StartEpisode started two episodes in one dataset, two operators reset each other's simulators, and the first graph
stayed broken after the second stopped. Now:

* each node that owns workspace data (the nodes with a ``workspace`` parameter: policy_server, task_selector,
  demo_recorder) holds ``<workspace>/graphs/<namespace>/<node>.lock`` from its start to its exit; a second one
  refuses to start with one line naming the holder and exits with :data:`~amf_ros.bringup.lifetime.NO_RESPAWN_EXIT`,
  which `amf up` does not respawn;
* the process that starts a graph (`amf up`, `ros2 launch` through the launch files) holds
  ``<workspace>/graphs/<namespace>/graph.lock`` for its life and, before it starts any node, refuses with one line
  (:func:`claim_graph`; `amf up` exits with NO_RESPAWN_EXIT, `ros2 launch` with an error) when that lock or any of
  its nodes' locks is held, or when nodes of the same names answer in the ROS graph (another workspace or machine
  on the same domain and namespace: amf_ros.ros.graph_probe, run as a process of its own);
* `amf up` keeps the state of every node it supervises in ``<workspace>/graphs/<namespace>/status.json``.

Why flock (as data/writer.py's writer.lock): the kernel drops the lock with its holder's last descriptor, also on
SIGKILL, so a killed graph never leaves a stale lock and a respawned node takes its place again; the descriptor is
close-on-exec, so no process a node starts inherits it. The holder writes who it is into the file (pid, command),
which is what a refusal names.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from amf_ros.bringup.graph import NodeSpec, node_section
from amf_ros.bringup.lifetime import NoRespawnError
from amf_ros.paths import workspace_root

log = logging.getLogger(__name__)

GRAPHS_DIR = "graphs"
"""Under the workspace: one folder per namespace with the graph's lock files and status."""
GRAPH_LOCK = "graph.lock"
"""Held by the process that started the graph (`amf up`, `ros2 launch`) while it runs."""
STATUS_FILE = "status.json"
"""The node states `amf up` supervises (running / respawning / down), rewritten on every change."""
TAKE_RETRIES = 10
TAKE_RETRY_S = 0.1
"""A lock found held is tried again for about a second before refusing: `amf up` probes a node's lock by taking it
for an instant, which must not make a node starting at that instant refuse."""


class PlaceTakenError(NoRespawnError):
    """Another process of another graph holds this place (namespace + workspace); the message is one line."""


def namespace_key(namespace: str) -> str:
    """``/amf`` -> ``amf``, ``/a/b`` -> ``a.b`` (a folder name); the root namespace -> ``_root``."""
    ns = namespace.strip("/")
    return ns.replace("/", ".") if ns else "_root"


def graph_dir(workspace: str | os.PathLike, namespace: str) -> Path:
    """``<workspace root>/graphs/<namespace>``, the folder of one graph's lock files and status."""
    return workspace_root(workspace) / GRAPHS_DIR / namespace_key(namespace)


def node_lock_path(workspace: str | os.PathLike, namespace: str, node: str) -> Path:
    """The lock file node ``node`` of ``namespace`` holds while it runs."""
    return graph_dir(workspace, namespace) / f"{node}.lock"


def _me() -> str:
    argv = [Path(sys.argv[0]).name if sys.argv else "?", *sys.argv[1:]]
    cmd = " ".join(argv)
    return f"pid {os.getpid()} ({cmd[:120]}{'...' if len(cmd) > 120 else ''}) since {time.strftime('%H:%M:%S')}"


class GraphLock:
    """An exclusive flock on one lock file, held until :meth:`release` or the process exits."""

    def __init__(self, fd: int, path: Path) -> None:
        self._fd: int | None = fd
        self.path = path

    @classmethod
    def take(cls, path: Path, what: str) -> GraphLock:
        """Take the lock of ``path`` (``what`` names the place in the refusal), writing who holds it into the file.

        Raises:
            PlaceTakenError: another process holds it (one line naming that process and what to do).
        """
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        try:
            for attempt in range(TAKE_RETRIES):
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except BlockingIOError:
                    if attempt == TAKE_RETRIES - 1:
                        raise PlaceTakenError(refusal(what, path)) from None
                    time.sleep(TAKE_RETRY_S)
            os.ftruncate(fd, 0)
            os.pwrite(fd, (_me() + "\n").encode(), 0)
        except BaseException:
            os.close(fd)
            raise
        return cls(fd, path)

    def release(self) -> None:
        """Drop the lock (idempotent); the file stays (an unlocked file means: nobody holds the place)."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)


def holder(path: Path) -> str | None:
    """Who holds the lock of ``path`` (what the holder wrote into it), or None when nobody does. Taking the lock for
    an instant is how a free lock is told apart (:data:`TAKE_RETRIES` covers a node starting at that instant)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 400, 0).decode(errors="replace").strip()
            return text or "a process that has not said who it is yet"
        return None
    finally:
        os.close(fd)


def refusal(what: str, path: Path) -> str:
    """The one line a second graph prints: what is taken, by whom, and what to do."""
    who = holder(path) or "another process"
    return (f"refusing to start: {what} is already running ({who}; lock {path}): one graph per namespace and "
            "workspace; stop that graph first, or start this one with another namespace or workspace")


def hold_node_lock(workspace: str | os.PathLike, namespace: str, node: str) -> GraphLock:
    """Take node ``node``'s place in ``namespace`` on ``workspace`` for the life of this process (call it before
    the node serves anything). Raises PlaceTakenError when a node of another graph holds it."""
    fqn = f"/{namespace.strip('/')}/{node}" if namespace.strip("/") else f"/{node}"
    return GraphLock.take(node_lock_path(workspace, namespace, node), f"{fqn} (workspace {workspace_root(workspace)})")


def write_status(path: Path, nodes: Mapping[str, Mapping[str, Any]]) -> None:
    """Write the supervised nodes' states atomically (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps({"updated_unix": time.time(), "supervisor_pid": os.getpid(), "nodes": dict(nodes)},
                              indent=1, sort_keys=True))
    os.replace(tmp, path)


PROBE_TIMEOUT_S = 30.0
"""Bound on the ROS graph check (amf_ros.ros.graph_probe: rclpy start-up, about 2 s of discovery, 3 s of answers)."""


NODE_LOCKERS = ("policy_server", "task_selector", "demo_recorder")
"""The nodes that hold a workspace lock while they run (those with a ``workspace`` parameter: they own its data)."""


def node_lock(spec: NodeSpec) -> Path | None:
    """The workspace lock node ``spec`` takes at start (graph_lock.hold_node_lock), None for a node without one."""
    if spec.name not in NODE_LOCKERS:
        return None
    workspace = spec.overrides.get("workspace") or node_section(spec.params_file, spec.name).get("workspace") or ""
    return node_lock_path(str(workspace), spec.namespace, spec.name)


def fqn(spec: NodeSpec) -> str:
    """``/<namespace>/<name>`` of a node."""
    ns = spec.namespace.strip("/")
    return f"/{ns}/{spec.name}" if ns else f"/{spec.name}"


def answering_nodes(specs: Sequence[NodeSpec], env: Mapping[str, str] | None = None) -> list[str]:
    """Nodes of ``specs``' names that already answer in the ROS graph (amf_ros.ros.graph_probe, run as a process of
    its own: this module imports no rclpy). [] when the check itself cannot run (said in a warning)."""
    cmd = [sys.executable, "-m", "amf_ros.ros.graph_probe", *(fqn(s) for s in specs)]
    try:
        out = subprocess.run(cmd, env=dict(env) if env is not None else None, capture_output=True, text=True,
                             timeout=PROBE_TIMEOUT_S, check=True)
    except (subprocess.SubprocessError, OSError) as exc:
        tail = getattr(exc, "stderr", "") or ""
        log.warning("could not check the ROS graph for nodes of the same names (%s%s); starting anyway",
                    type(exc).__name__, f": {tail.strip().splitlines()[-1]}" if tail.strip() else "")
        return []
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def claim_graph(specs: Sequence[NodeSpec], workspace: str, namespace: str,
                env: Mapping[str, str] | None = None) -> GraphLock:
    """Take this graph's place (namespace on workspace) before any node starts (`amf up`, the launch files);
    returns the graph lock, held until released or this process exits.

    Raises:
        PlaceTakenError: another `amf up` or `ros2 launch` holds the place, a node of another graph holds its lock, or
            nodes of the same names answer in the ROS graph (one line naming them).
    """
    root = workspace_root(workspace)
    ns = "/" + namespace.strip("/")
    place = GraphLock.take(graph_dir(workspace, namespace) / GRAPH_LOCK,
                           f"a graph in namespace {ns} (workspace {root})")
    try:
        for spec in specs:
            path = node_lock(spec)
            if path is not None and holder(path) is not None:
                raise PlaceTakenError(refusal(f"{fqn(spec)} (workspace {root})", path))
        live = answering_nodes(specs, env)
        if live:
            domain = (env or os.environ).get("ROS_DOMAIN_ID", "0")
            raise PlaceTakenError(
                f"refusing to start: node(s) {live} already answer on ROS_DOMAIN_ID {domain}: another graph runs in "
                f"namespace {ns} (another workspace or machine); stop it first, or start this one with another "
                "namespace or ROS_DOMAIN_ID")
    except BaseException:
        place.release()
        raise
    return place
