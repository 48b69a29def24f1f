"""Start node executables as child processes and stop them cleanly (SIGINT, then SIGKILL).

Why: `amf up`, `amf run` and the process-level tests start each node as its own OS process over real DDS,
exactly as `ros2 launch` would, on machines where `launch` is not installed.

Supervision: each node runs in a session of its own (a Ctrl-C in the terminal reaches only the parent, which
forwards one SIGINT to every node, instead of every process receiving it at once) and gets SIGTERM from the kernel
if the parent dies for any reason, SIGKILL included (Linux ``PR_SET_PDEATHSIG``): no node outlives its starter.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import time
from pathlib import Path
from typing import IO, Mapping, Sequence

from amf_ros.bringup.graph import NodeSpec, find_executable
from amf_ros.bringup.lifetime import STACK_DUMP_SIGNAL, die_with_parent, stays_down

log = logging.getLogger(__name__)

STACK_DUMP_WAIT_S = 0.5
"""How long a node that outlived its stop timeout gets to write its stacks before SIGKILL."""


class NodeProcesses:
    """A set of running node processes; a context manager that always stops them.

    Args:
        specs: nodes to start (from :func:`amf_ros.bringup.graph.plan`).
        log_dir: each node's stdout+stderr goes to ``log_dir/<name>.log`` (None = inherit the terminal).
        env: extra environment variables (e.g. ``ROS_DOMAIN_ID``) on top of ``os.environ``.
        extra_args: per-node extra ``--ros-args`` items, e.g. ``{"policy_server": ["-p", "seed:=1"]}``.
    """

    def __init__(self, specs: Sequence[NodeSpec], log_dir: str | os.PathLike | None = None,
                 env: Mapping[str, str] | None = None,
                 extra_args: Mapping[str, Sequence[str]] | None = None) -> None:
        self.specs = list(specs)
        self.log_dir = Path(log_dir) if log_dir is not None else None
        self.env = {**os.environ, **(env or {})}
        self.extra_args = {k: list(v) for k, v in (extra_args or {}).items()}
        self.procs: dict[str, subprocess.Popen] = {}
        self.killed: set[str] = set()
        self.restarts: dict[str, int] = {}  # respawns per node (supervise)
        self.given_up: dict[str, int] = {}  # nodes left down after respawn_max_retries, with their last exit code
        self.down_reason: dict[str, str] = {}  # why each node of given_up stays down
        self._exited_at: dict[str, float] = {}
        self._logs: list[IO[bytes]] = []

    def command(self, spec: NodeSpec) -> list[str]:
        """The full command line of one node."""
        extra = self.extra_args.get(spec.name, [])  # per node type; then per process (a fleet's robot1.policy_server)
        extra = extra + (self.extra_args.get(spec.key, []) if spec.key != spec.name else [])
        return [str(find_executable(spec.executable)), *spec.ros_args(), *extra]

    def start(self) -> "NodeProcesses":
        """Start every node (in order); returns self."""
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
        for spec in self.specs:
            self._launch(spec)
        return self

    def _launch(self, spec: NodeSpec) -> None:
        cmd = self.command(spec)
        out: IO[bytes] | None = None
        if self.log_dir is not None:
            out = open(self.log_dir / f"{spec.key}.log", "ab")
            self._logs.append(out)
        log.info("starting %s: %s", spec.key, " ".join(cmd))
        self.procs[spec.key] = subprocess.Popen(cmd, env=self.env, stdout=out, start_new_session=True,
                                                 stderr=subprocess.STDOUT if out else None,
                                                 preexec_fn=die_with_parent)

    def restart(self, name: str) -> None:
        """Start node ``name`` again after it exited (its log is appended to); an error while it still runs."""
        if self.procs[name].poll() is None:
            raise RuntimeError(f"{name} is still running (pid {self.procs[name].pid})")
        self._launch(next(s for s in self.specs if s.key == name))

    def supervise(self) -> list[str]:
        """Respawn policy, called periodically by the supervisor (`amf up`): a node that exited on its own is
        started again ``respawn_delay_s`` later, at most ``respawn_max_retries`` times, else left down (listed in
        :attr:`given_up`); a node that exited with NO_RESPAWN_EXIT (its place is taken by another graph, or its
        configuration is wrong) is left down at once. Returns log lines for what happened."""
        lines, now = [], time.monotonic()
        for spec in self.specs:
            name = spec.key
            code = self.procs[name].poll() if name in self.procs else None
            if code is None or name in self.given_up:
                continue
            first = self._exited_at.setdefault(name, now)
            if first == now:
                lines.append(f"{name} exited with code {code}")
            why = stays_down(code, self.restarts.get(name, 0), spec.respawn, spec.respawn_max_retries)
            if why:
                self.given_up[name] = code
                self.down_reason[name] = why
                lines.append(f"{name} stays down ({why}); the other nodes keep running")
            elif now - first >= spec.respawn_delay_s:
                self.restarts[name] = self.restarts.get(name, 0) + 1
                del self._exited_at[name]
                self._launch(spec)
                lines.append(f"{name} respawned ({self.restarts[name]}/{spec.respawn_max_retries})")
        return lines

    def log_path(self, name: str) -> Path | None:
        """The log file of node ``name`` (None without ``log_dir``: its output goes to the terminal)."""
        return self.log_dir / f"{name}.log" if self.log_dir is not None else None

    def down_report(self, name: str) -> str:
        """The line that says node ``name`` of :attr:`given_up` is down for good (:func:`down_report`)."""
        return down_report(name, self.given_up[name], self.down_reason.get(name, "left down"),
                           str(self.log_path(name) or "the terminal above (no --log-dir)"))

    def states(self) -> dict[str, dict[str, object]]:
        """``{node: {state, pid, exit_code, restarts, reason, log}}``: state "running", "respawning" (exited,
        about to be started again) or "down" (:attr:`given_up`); what `amf up` writes to its status file."""
        out: dict[str, dict[str, object]] = {}
        for spec in self.specs:
            name = spec.key
            proc = self.procs.get(name)
            code = proc.poll() if proc is not None else None
            state = "down" if name in self.given_up else ("running" if proc is not None and code is None
                                                          else "respawning")
            log_file = self.log_path(name)
            out[name] = {"state": state, "pid": proc.pid if proc is not None else None, "exit_code": code,
                         "restarts": self.restarts.get(name, 0), "reason": self.down_reason.get(name, ""),
                         "log": str(log_file) if log_file is not None else ""}
        return out

    def dead(self) -> dict[str, int]:
        """Nodes that have exited, with their exit codes."""
        return {name: p.returncode for name, p in self.procs.items() if p.poll() is not None}

    def log_tail(self, name: str, chars: int = 3000) -> str:
        """The end of one node's log file (for error messages)."""
        if self.log_dir is None:
            return ""
        path = self.log_dir / f"{name}.log"
        return path.read_text(errors="replace")[-chars:] if path.exists() else ""

    def stop(self, timeout: float = 10.0) -> dict[str, int]:
        """SIGINT every node, wait up to ``timeout`` s, SIGKILL the rest (listed in :attr:`killed`) after asking each
        for its threads' stacks (STACK_DUMP_SIGNAL: they land in its log); return exit codes."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGINT)
        deadline = time.monotonic() + timeout
        for name, p in self.procs.items():
            try:
                p.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                where = self.log_path(name)
                log.warning("%s did not stop on SIGINT within %.1f s: SIGKILL (its stacks: %s)", name, timeout,
                            where if where is not None else "its stderr")
                self.killed.add(name)
                p.send_signal(STACK_DUMP_SIGNAL)
                try:
                    p.wait(timeout=STACK_DUMP_WAIT_S)  # the dump is written by a C handler: milliseconds
                except subprocess.TimeoutExpired:
                    pass
                p.kill()
                p.wait()
        for fh in self._logs:
            fh.close()
        self._logs.clear()
        return {name: p.returncode for name, p in self.procs.items()}

    def __enter__(self) -> "NodeProcesses":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def down_report(name: str, code: int | None, why: str, log: str) -> str:
    """The line that says node ``name`` is down for good (`amf up`, the launch files): its last exit code, why, where
    its log is, and that the rest of the graph runs without it."""
    return (f"NODE DOWN FOR GOOD: {name} exited with code {code} and will not be restarted ({why}); its log: {log}; "
            "the rest of the graph keeps running WITHOUT it: fix the cause, then restart the graph")
