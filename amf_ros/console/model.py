"""Everything the operator console shows, as JSON-ready sections, fed by the ROS adapter and read by the server.

Why a model of its own: ROS callbacks (many threads) write, the web server (its own thread) reads, and browsers get
only what changed. Each section (``selector``, ``policy``, ``recorder``, ``streams``, ``sim``, ``episodes``,
``log``, ``nodes``, ``camera``, ``drive``) carries a version; the server pushes a section to every browser when its
version moves, so a burst of messages costs one push and no browser ever polls the ROS graph.

How AMF's decision is shown: task_selector's score of a candidate is the criterion after a hypothetical
demonstration of it (the posterior entropy of the policy over the target tasks' states, App. E: lower = more
informative). The console turns it into ``gain``: how much more that demonstration is expected to reduce the
policy's uncertainty (nats) than a demonstration of the least useful candidate; the bar of the chosen task is the
longest, and the raw score is kept for the hover text.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from typing import Any, Callable, Mapping, Sequence

SECTIONS = ("selector", "policy", "recorder", "streams", "sim", "episodes", "log", "nodes", "camera", "drive")

EXPECTED_ANSWERS = ("not recording", "already recording", "no fine-tune started here", "no evaluate started here",
                    "no fine_tune goal sent", "no evaluate goal sent")
"""How a refusal that is a normal event begins (e.g. the README's end_episode after a scripted episode already ended
it: "not recording ..."): shown as information, never as an error."""


def answer_level(ok: bool, text: str) -> str:
    """"info" for a success or an expected refusal (:data:`EXPECTED_ANSWERS`), "error" for any other refusal."""
    return "info" if ok or str(text).strip().lower().startswith(EXPECTED_ANSWERS) else "error"


def loss_axis(losses: Sequence[float]) -> dict[str, Any]:
    """How the loss chart's y axis shows the whole curve: ``{"log": True}`` when every loss is positive and they
    span more than a factor 10 (a first loss of 100 beside later ones near 0.1 stays readable), else a robust
    ``{"range": [lo, hi]}`` from the 5th-95th percentiles with a margin (an outlier leaves the chart, not the curve
    flattened), or ``{}`` (the chart's own range) for fewer than 2 finite values."""
    xs = sorted(float(x) for x in losses if isinstance(x, (int, float)) and math.isfinite(x))
    if len(xs) < 2:
        return {}
    if xs[0] > 0 and xs[-1] / xs[0] > 10:
        return {"log": True}
    lo, hi = xs[int(0.05 * (len(xs) - 1))], xs[int(round(0.95 * (len(xs) - 1)))]
    pad = 0.1 * (hi - lo) if hi > lo else max(abs(hi) * 0.1, 1e-6)
    return {"range": [lo - pad, hi + pad]}


NODE_STATES = ("down", "not ready", "ready", "unknown")
"""Per-node liveness on the page: down (not in the ROS graph, or `amf up` says it exited), not ready (its reason),
ready, unknown (not heard of yet: before the first graph check)."""


def node_rows(watch: Sequence[str], in_graph: set[str] | None, statuses: Mapping[str, str],
              supervisor: Mapping[str, Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    """One row per watched node: ``{node, state, reason}`` (states: :data:`NODE_STATES`).

    Args:
        watch: node names (without namespace) to show, in order.
        in_graph: names present in the ROS graph under the console's namespace (None = not looked yet).
        statuses: the newest latched status line per node (``"ready: ..."`` / ``"not ready: <reason>"``), from the
            node's ``~/status`` topic or, for demo_recorder, from its RecorderStatus.
        supervisor: ``amf up``'s status.json ``nodes`` (state running / respawning / down, exit_code, reason, log)
            when it exists; it says why a node is gone.
    """
    rows = []
    for node in watch:
        sup = (supervisor or {}).get(node) or {}
        status = str(statuses.get(node, ""))
        if sup.get("state") in ("down", "respawning", "stopped") or (in_graph is not None and node not in in_graph):
            why = {"down": "exited and not restarted", "respawning": "exited, being restarted",
                   "stopped": "stopped"}.get(str(sup.get("state")), "not in the ROS graph")
            extra = [f"exit code {sup['exit_code']}"] if sup.get("exit_code") is not None else []
            extra += [str(sup["reason"])] if sup.get("reason") else []
            extra += [f"log {sup['log']}"] if sup.get("log") else []
            rows.append({"node": node, "state": "down", "reason": "; ".join([why, *extra])})
        elif status.lower().startswith("not ready"):
            rows.append({"node": node, "state": "not ready",
                         "reason": status.split(":", 1)[1].strip() if ":" in status else status})
        elif in_graph is None:
            rows.append({"node": node, "state": "unknown", "reason": "not looked yet"})
        else:
            rows.append({"node": node, "state": "ready", "reason": status[len("ready:"):].strip()
                         if status.lower().startswith("ready:") else ""})
    return rows


def gains(scores: Sequence[float]) -> list[float | None]:
    """Expected extra uncertainty reduction per candidate, relative to the least informative one (>= 0, nats for
    the log-variance form); None where a score is not finite (warm start, no policy yet)."""
    finite = [s for s in scores if isinstance(s, (int, float)) and math.isfinite(s)]
    if not finite:
        return [None] * len(scores)
    worst = max(finite)
    return [worst - s if isinstance(s, (int, float)) and math.isfinite(s) else None for s in scores]


def _finite(x: float) -> float | None:
    return float(x) if isinstance(x, (int, float)) and math.isfinite(x) else None


class StreamMonitor:
    """Arrival times of the recorder's input topics as the console itself receives them: age and rate per topic.

    Why here rather than the recorder's 1 Hz status: an operator must see a stopped camera within 2 s; ages from
    arrivals are exact at any moment, and rates come from the last ``window_s`` of arrivals.
    """

    def __init__(self, window_s: float = 2.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.window_s = float(window_s)
        self._clock = clock
        self._arrivals: dict[str, deque[float]] = {}
        self._lock = threading.Lock()

    def watch(self, topic: str) -> None:
        """Start tracking ``topic`` before its first message, so that silence shows as "never heard"."""
        with self._lock:
            self._arrivals.setdefault(topic, deque(maxlen=4096))

    def arrived(self, topic: str) -> None:
        """Record one message of ``topic`` at the monitor's clock."""
        t = self._clock()
        with self._lock:
            self._arrivals.setdefault(topic, deque(maxlen=4096)).append(t)

    def snapshot(self) -> dict[str, tuple[float | None, float]]:
        """{topic: (age_s or None if never heard, rate_hz over the window)}."""
        now = self._clock()
        with self._lock:
            out = {}
            for topic, times in self._arrivals.items():
                while times and now - times[0] > self.window_s:
                    times.popleft()
                out[topic] = (now - times[-1] if times else None, len(times) / self.window_s)
            return out

    def topics(self) -> list[str]:
        """The tracked topics, in the order they were first seen."""
        with self._lock:
            return list(self._arrivals)


class ConsoleModel:
    """The console's state (see the module docstring). Thread-safe; every ``on_*`` bumps its section's version.

    Args:
        tasks: candidate task keys -> instructions (the page lists them in this order).
        targets: optional demonstrations wanted per task (shown against the counts).
        stale_after_s: a stream not heard for this long is flagged stale.
        min_rate_fraction: a stream below this fraction of its nominal rate is flagged slow.
    """

    def __init__(self, tasks: Mapping[str, str], targets: Mapping[str, int] | None = None,
                 stale_after_s: float = 1.0, min_rate_fraction: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.tasks = dict(tasks)
        self.targets = {k: int(v) for k, v in (targets or {}).items()}
        self.stale_after_s = float(stale_after_s)
        self.min_rate_fraction = float(min_rate_fraction)
        self.monitor = StreamMonitor(clock=clock)
        self._clock = clock
        self._lock = threading.Lock()
        self._version = {s: 0 for s in SECTIONS}
        self._data: dict[str, Any] = {
            "selector": {"tasks": list(self.tasks), "instructions": dict(self.tasks), "targets": self.targets,
                         "decision": None},
            "policy": {"checkpoint": "", "round": None, "alphas": {}, "success": {}, "fine_tune": None,
                       "evaluation": None},
            "recorder": None,
            "streams": [],
            "sim": {"available": False},
            "episodes": [],
            "log": [],
            "nodes": [],
            "camera": {"topics": [], "publishers": {}},
            "drive": {"session": None, "teleop": None, "teleop_error": "", "topic": "",
                      "control": {"source": "none", "node": "", "stamp_ns": 0}},
        }
        self._watch_nodes: list[str] = []
        self._in_graph: set[str] | None = None
        self._node_status: dict[str, str] = {}
        self._supervisor: dict[str, Any] | None = None
        self.recorder_min_rate_fraction: float | None = None  # the recorder's own rule, once read
        self._nominal: dict[str, float] = {}
        self.idle_quiet: set[str] = set()  # streams flagged only while recording (actions flow only then)
        self._recording = False
        self._log: deque[dict[str, Any]] = deque(maxlen=50)
        self._episodes: deque[dict[str, Any]] = deque(maxlen=20)

    # -- reading ---------------------------------------------------------------------------------------------
    def versions(self) -> dict[str, int]:
        """Each section's version; the server pushes a section whose version moved since its last look."""
        with self._lock:
            return dict(self._version)

    def section(self, name: str) -> Any:
        """A deep copy of one section (refreshing stream ages first), safe to serialise outside the lock."""
        if name == "streams":
            self.refresh_streams()
        with self._lock:
            return _copy(self._data[name])

    def snapshot(self) -> dict[str, Any]:
        """Every section, as sent to a browser when it connects."""
        return {name: self.section(name) for name in SECTIONS}

    def _set(self, name: str, value: Any) -> None:
        with self._lock:
            self._data[name] = value
            self._version[name] += 1

    def _update(self, name: str, **fields: Any) -> None:
        with self._lock:
            self._data[name] = {**(self._data[name] or {}), **fields}
            self._version[name] += 1

    # -- the selector ----------------------------------------------------------------------------------------
    def on_decision(self, d: Mapping[str, Any]) -> None:
        """A /next_task response (fields of NextTask.Response as a dict)."""
        scores = [float(s) for s in d.get("scores", [])]
        with self._lock:  # no tasks_file: the candidates of the first decision become the page's task list
            for task in d.get("tasks", []):
                self.tasks.setdefault(str(task), "")
            if str(d.get("task", "")) and d.get("instruction"):
                self.tasks[str(d.get("task"))] = self.tasks.get(str(d.get("task"))) or str(d.get("instruction"))
            self._data["selector"]["tasks"] = list(self.tasks)
            self._data["selector"]["instructions"] = dict(self.tasks)
        decision = {
            "ok": bool(d.get("ok")), "message": str(d.get("message", "")), "task": str(d.get("task", "")),
            "instruction": str(d.get("instruction", "")), "tasks": list(d.get("tasks", [])),
            "scores": [_finite(s) for s in scores],
            # gains only mean something for AMF's criterion, and not during its warm start (scores = has a demo)
            "gains": (gains(scores) if str(d.get("selector", "")) == "amf" and not d.get("warm_start")
                      else [None] * len(scores)),
            "demo_counts": [int(c) for c in d.get("demo_counts", [])],
            "effective_sample_size": [_finite(float(e)) for e in d.get("effective_sample_size", [])],
            "warm_start": bool(d.get("warm_start")), "selector": str(d.get("selector", "")),
            "compute_time_s": _finite(float(d.get("compute_time", float("nan")))), "at": time.time(),
        }
        self._update("selector", decision=decision)

    # -- the policy ------------------------------------------------------------------------------------------
    def on_checkpoint(self, path: str, round_: int, tasks: Sequence[str], alphas: Sequence[float]) -> None:
        """A new checkpoint was loaded: its path, fine-tuning round and per-task alphas."""
        self._update("policy", checkpoint=str(path), round=int(round_),
                     alphas={t: _finite(float(a)) for t, a in zip(tasks, alphas, strict=False)})

    def on_fine_tune(self, running: bool, step: int = 0, total: int = 0, loss: float | None = None,
                     message: str = "") -> None:
        """Progress of the fine-tune worker; keeps the loss curve of the running (or the last finished) fine-tune."""
        with self._lock:
            old = self._data["policy"].get("fine_tune") or {}
        # the curve of the running fine-tune; a finished one keeps its curve until the next one starts
        losses = list(old.get("losses", [])) if (old.get("running") or not running) else []
        if loss is not None and math.isfinite(loss):
            losses = (losses + [[int(step), float(loss)]])[-500:]
        self._update("policy", fine_tune={"running": bool(running), "step": int(step), "total": int(total),
                                          "losses": losses, "loss_axis": loss_axis([x[1] for x in losses]),
                                          "message": str(message)})

    def on_outcome(self, task: str, success: bool, steps: int) -> None:
        """A finished run_policy goal (policy_server's outcomes topic, whoever sent it): (acting round, success)
        joins the task's curve."""
        with self._lock:
            policy = _copy(self._data["policy"])
        curve = policy["success"].setdefault(task, [])
        curve.append([policy["round"] if policy["round"] is not None else 0, 1.0 if success else 0.0])
        policy["success"][task] = curve[-200:]
        self._set("policy", policy)

    def on_evaluation(self, running: bool, task: str, step: int = 0, success: bool | None = None,
                      message: str = "") -> None:
        """Progress of an evaluation started from this console (its outcome reaches the curve via on_outcome)."""
        with self._lock:
            policy = _copy(self._data["policy"])
        policy["evaluation"] = {"running": bool(running), "task": task, "step": int(step), "success": success,
                                "message": str(message)}
        self._set("policy", policy)

    # -- the recorder and its streams ------------------------------------------------------------------------
    def on_recorder_status(self, s: Mapping[str, Any]) -> None:
        """A RecorderStatus as a dict; also registers its topics with the stream monitor."""
        for topic, nominal in zip(s.get("topics", []), s.get("topic_nominal_hz", []) or [], strict=False):
            if nominal and nominal > 0:
                self._nominal[topic] = float(nominal)
        for topic in s.get("topics", []):
            self.monitor.watch(topic)
        self._recording = bool(s.get("recording"))
        keep = ("recording", "episode_id", "task", "instruction", "num_steps", "control_rate_hz", "ready",
                "not_ready_reason", "rate_warnings", "episodes_in_store", "last_error")
        rec = {**{k: _plain(s.get(k)) for k in keep}, "received_at": time.time(), "last_note": ""}
        if rec["last_error"] and answer_level(False, rec["last_error"]) == "info":
            rec["last_note"], rec["last_error"] = rec["last_error"], ""  # a normal answer, not an error
        self._set("recorder", rec)
        self.on_node_status("demo_recorder", "ready" if s.get("ready") or s.get("recording")
                            else f"not ready: {s.get('not_ready_reason') or 'no reason given'}")

    def refresh_streams(self) -> None:
        """Recompute ages, rates and warnings of the watched streams (the server calls this a few times a second)."""
        rows = []
        # the recorder's own rule when known: its min_rate_fraction 0 (the simulators publish at the operator's
        # pace, slowly while idle) means no rate warnings, and the console never warns more than the recorder
        fraction = self.min_rate_fraction if self.recorder_min_rate_fraction is None else min(
            self.min_rate_fraction, self.recorder_min_rate_fraction)
        for topic, (age, rate) in sorted(self.monitor.snapshot().items()):
            nominal = self._nominal.get(topic, 0.0)
            quiet_ok = topic in self.idle_quiet and not self._recording
            stale = not quiet_ok and (age is None or age > self.stale_after_s)
            slow = not stale and not quiet_ok and nominal > 0 and fraction > 0 and rate < fraction * nominal
            warning = ("never heard" if age is None else f"stale: nothing for {age:.1f} s") if stale else (
                f"slow: {rate:.1f} Hz, nominal {nominal:.1f} Hz" if slow else "")
            rows.append({"topic": topic, "age_s": _finite(age) if age is not None else None,
                         "rate_hz": round(rate, 2), "nominal_hz": nominal or None, "warning": warning})
        with self._lock:
            if rows != self._data["streams"]:
                self._data["streams"] = rows
                self._version["streams"] += 1

    # -- liveness and the camera ----------------------------------------------------------------------------
    @property
    def watch_nodes(self) -> list[str]:
        """The nodes whose liveness the page shows (one row each, in this order)."""
        return list(self._watch_nodes)

    @watch_nodes.setter
    def watch_nodes(self, nodes: Sequence[str]) -> None:
        self._watch_nodes = [str(n) for n in nodes]
        self._refresh_nodes()

    def on_node_status(self, node: str, line: str) -> None:
        """A node's newest status line ("ready: ..." / "not ready: <reason>"), e.g. its latched ``~/status``."""
        with self._lock:
            self._node_status[str(node)] = str(line)
        self._refresh_nodes()

    def on_graph(self, names: set[str] | None = None, supervisor: Mapping[str, Any] | None = None) -> None:
        """The node names present in the ROS graph (the console's namespace) and ``amf up``'s status.json
        ``nodes`` (None: no such file); called once a second by the adapter."""
        with self._lock:
            self._in_graph = None if names is None else set(names)
            self._supervisor = dict(supervisor) if supervisor is not None else None
        self._refresh_nodes()

    def _refresh_nodes(self) -> None:
        with self._lock:
            rows = node_rows(self._watch_nodes, self._in_graph, self._node_status, self._supervisor)
            if rows != self._data["nodes"]:
                self._data["nodes"] = rows
                self._version["nodes"] += 1

    def on_camera_sources(self, topics: Sequence[str], publishers: Mapping[str, int]) -> None:
        """The camera topics the console shows and how many publishers each has now: the page says "no camera
        configured" when none is published (e.g. the simulator's ``render: false``), not "no frames yet"."""
        value = {"topics": list(topics), "publishers": {t: int(publishers.get(t, 0)) for t in topics}}
        with self._lock:
            if value != self._data["camera"]:
                self._data["camera"] = value
                self._version["camera"] += 1

    # -- driving -----------------------------------------------------------------------------------------------
    def on_drive(self, session: Mapping[str, Any] | None = None, **fields: Any) -> None:
        """The Drive panel: ``session`` (:meth:`amf_ros.console.drive.DriveSession.status` without its age and
        counters: who drives, the input) and ``teleop`` (the teleop node's latched state) / ``teleop_error`` /
        ``topic`` / ``control`` (who commands the arm: policy_server's ControlSource, ``{"source": "policy" | "human"
        | "none", "node", "stamp_ns"}``); pushed only when it changed."""
        value = dict(fields)
        if session is not None:
            value["session"] = {k: _plain(v) for k, v in session.items()
                                if k in ("driver", "last_driver", "input", "deadman")}
        with self._lock:
            new = {**self._data["drive"], **value}
            if new != self._data["drive"]:
                self._data["drive"] = new
                self._version["drive"] += 1

    # -- the arm, episodes, outcomes -------------------------------------------------------------------------
    def on_sim(self, available: bool, **status: Any) -> None:
        """The simulator's status: ``available`` (sim_bridge's reset service is up) and its task counters."""
        self._set("sim", {"available": bool(available), **{k: _plain(v) for k, v in status.items()}})

    def on_episode(self, info: Mapping[str, Any]) -> None:
        """A saved episode (EpisodeInfo as a dict), listed newest first; the page keeps the last 20."""
        with self._lock:
            self._episodes.appendleft({k: _plain(v) for k, v in info.items()})
            self._data["episodes"] = list(self._episodes)
            self._version["episodes"] += 1

    def log(self, level: str, text: str) -> None:
        """An outcome line the page shows (every button's service answer lands here)."""
        with self._lock:
            self._log.appendleft({"level": level, "text": str(text)[:500], "at": time.time()})
            self._data["log"] = list(self._log)
            self._version["log"] += 1


def _plain(v: Any) -> Any:
    """A message field as JSON: sequences to lists, numpy/array scalars to Python numbers, NaN to None."""
    if isinstance(v, float):
        return _finite(v)
    if isinstance(v, (str, bool, int)) or v is None:
        return v
    if hasattr(v, "tolist"):
        return _plain(v.tolist())
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    return str(v)


def _copy(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _copy(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_copy(x) for x in v]
    return v
