"""`amf bench console-load`: does the operator console, with browsers connected, cost the robot anything?

    amf bench console-load [--out runs/bench/console-load] [--phase-s 60] [--pairs 2] [--clients 5] [--smoke]

Issue 16's load check. The embedded WidowX graph (amf_ros/bench/console_graph.py: every node a process, the
camera rendered and recorded) records continuously through phases that alternate side by side: no browser, then
``--clients`` headless Chromium windows with the console page open, ``--pairs`` times (default: none / 5 / none / 5,
60 s each, so two minutes with clients). In every phase, from the start of a fixed schedule that repeats identically
in every phase:

* back-to-back scripted demonstrations: /amf/sim/reset to a fixed (task, seed), StartEpisode, scripted_teleop
  demonstrates and ends the episode, EpisodeInfo. Per episode: the actions the simulator applied (its own
  TaskStatus.steps since that reset) and those the operator sent, recorded steps, image frames stored in the saved
  episode (read back through the store), frames fresh for their step (the image's stamp equals the state's:
  sim_bridge publishes both with one stamp, so an older image means a lost camera frame), steps the synchroniser
  skipped, and the recorder's per-stream dropped/duplicated estimates (meta.json ``extra.streams``: the final value
  of RecorderStatus topic_dropped/topic_duplicated for that episode; "drops" in the table, with the skipped steps).
  **Every frame kept** = every applied action is a stored step with a fresh frame of its own, in every episode: a
  check that does not depend on the machine's load.
  **Same as no client** = each (task, seed) has the steps and fresh frames of its first episode in a phase without
  clients (the issue's wording). That also needs the closed loop of scripted_teleop and sim_bridge to be
  deterministic, which it is not always on a saturated machine, with or without browsers: seen once as a 17-step
  episode taking 18 steps (all recorded), once as different states in a no-client phase, and as an action sent but
  never applied. The likely cause: scripted_teleop acts on the newest observation, so when sim_bridge's idle
  re-publish of the frame before an action (a new stamp, the old state) overtakes that action's own frame, the
  operator acts twice on one state; the simulator's depth-1 action queue keeps one of the two (``actions_sent`` >
  ``actions_applied``) or applies both (``repeated_state_steps``: the demonstration takes another path). Where
  the recorded actions and states first differ from the reference is reported too. sim_bridge now stamps a frame
  with the time its state was taken, before rendering (session 38), so such a re-publish carries a stamp before the
  action and scripted_teleop, which acts only on observations stamped after its last action, skips it; this
  benchmark has not been run since.
* a run_policy goal (fixed task and seed, ``policy_steps`` steps at 10 Hz) after every ``policy_every`` episodes,
  the first after the first episode: the control periods policy_server reports (median/mean/max) and the periods
  between /amf/action messages as received here.

A phase lasts ``phase_s`` s and ends with the item under way; an item that fails (an episode never announced, a
run_policy goal that ends with ok=false) is recorded with its phase and the schedule goes on. CPU per phase from
/proc (utime + stime deltas over the phase's wall time, % of one core): operator_console, every other node, the
Chromium process tree (started with ``nice`` 19: in deployment browsers run on other machines) and the whole machine
(shared machines carry other load: compare phases side by side, not with other runs). Each client window is checked
at the end of its phase: the page says "connected" and camera frames arrived during the phase (counted in the page
by a MutationObserver). Output: results.json + a table; numbers only, nothing asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import hashlib
import logging
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator, Sequence

import numpy as np

from amf_ros.bench.console_graph import ConsoleWindows
from amf_ros.bench.results import write_results
from amf_ros.bringup.ros_env import isolated_ros_env
from amf_ros.config_file import load_config
from amf_ros.outputs import format_table

if TYPE_CHECKING:
    from amf_ros.ros.client import AMFClient

log = logging.getLogger("amf.bench.console_load")

WIDOWX_TASKS = ["carrot_on_plate", "stack_cube", "spoon_on_towel", "eggplant_in_basket"]
IMAGE_KEY = "image_primary"
# counts camera frames shown by the page (console.js sets img.dataset.at for each one)
FRAME_COUNTER_JS = """
window.__amfFrames = 0;
new MutationObserver((ms) => { for (const m of ms) if (m.attributeName === 'data-at') window.__amfFrames++; })
  .observe(document.getElementById('cameras'), {subtree: true, attributes: true, attributeFilter: ['data-at']});
"""


@dataclass
class ConsoleLoadConfig:
    """Settings of the benchmark (recorded in results.json)."""

    phase_s: float = 60.0
    """Length of each phase, s (a phase ends with the episode or goal under way at that time)."""
    pairs: int = 2
    """(no client, clients) phase pairs, run alternately."""
    clients: int = 5
    """Browser windows with the console page open in a client phase."""
    tasks: list[str] = field(default_factory=lambda: list(WIDOWX_TASKS))
    """Tasks of the demonstrations, in turn (also the tiny policy's tasks)."""
    seeds: list[int] = field(default_factory=lambda: [0, 1])
    """Scene seeds: the schedule is every task with seeds[0], then every task with seeds[1], ..."""
    policy_task: str = "carrot_on_plate"
    """Task of the run_policy goals."""
    policy_seed: int = 100
    """Scene seed of every run_policy goal."""
    policy_steps: int = 30
    """Control steps of each run_policy goal (10 Hz)."""
    policy_every: int = 2
    """A run_policy goal after every this many episodes (the first right after the first episode)."""
    nice: int = 19
    """Niceness of Chromium (0 = as the nodes)."""

    def __post_init__(self) -> None:
        if self.phase_s <= 0 or self.pairs < 1 or self.clients < 1 or self.policy_steps < 2 or self.policy_every < 1:
            raise ValueError(f"invalid ConsoleLoadConfig: {self.phase_s=} {self.pairs=} {self.clients=} "
                             f"{self.policy_steps=} {self.policy_every=}")
        unknown = sorted(set(self.tasks + [self.policy_task]) - set(WIDOWX_TASKS))
        if not self.tasks or not self.seeds or unknown:
            raise ValueError(f"tasks must be WidowX tasks {WIDOWX_TASKS} and seeds non-empty; got {self.tasks=} "
                             f"{self.seeds=} {self.policy_task=}")
        if not 0 <= self.nice <= 19:
            raise ValueError(f"nice must be in [0, 19], got {self.nice=}")


# ---- CPU from /proc ------------------------------------------------------------------------------------------
_TICK = os.sysconf("SC_CLK_TCK")


def _proc_stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as fh:
            return fh.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def process_cpu_s(pid: int) -> float:
    """utime + stime of process ``pid`` (every thread), s; 0 once it is gone."""
    f = _proc_stat(pid)
    return (int(f[11]) + int(f[12])) / _TICK if f else 0.0


def tree_cpu_s(root: int) -> float:
    """CPU seconds of ``root`` and every descendant alive now, each with its reaped children's (cutime + cstime):
    a process tree's CPU, counting the processes that already exited once their parent has waited for them."""
    children: dict[int, list[int]] = {}
    stats: dict[int, list[str]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            f = _proc_stat(int(entry))
            if f:
                stats[int(entry)] = f
                children.setdefault(int(f[1]), []).append(int(entry))
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        f = stats.get(pid)
        if f:
            total += sum(int(x) for x in f[11:15]) / _TICK
        todo += children.get(pid, [])
    return total


def machine_busy_s() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine since boot, over all cores (/proc/stat)."""
    with open("/proc/stat", encoding="ascii") as fh:
        v = [int(x) for x in fh.readline().split()[1:9]]
    total = sum(v) / _TICK
    return total - (v[3] + v[4]) / _TICK, total


# ---- the browsers --------------------------------------------------------------------------------------------
class BrowserClients(ConsoleWindows):
    """``n`` windows of one headless Chromium with the console page open, each connected and showing the camera."""

    def __init__(self, url: str, n: int, nice: int) -> None:
        super().__init__(url, n, nice, window_size="1200,900", wait_camera=True)

    def count_frames(self) -> None:
        """Start counting camera frames in every window (from now)."""
        for handle in self.handles:
            self.driver.switch_to.window(handle)
            self.js(FRAME_COUNTER_JS)

    def check(self) -> list[dict[str, Any]]:
        """Per window: connection badge text, camera frames since :meth:`count_frames`, age of the newest frame."""
        out = []
        for handle in self.handles:
            self.driver.switch_to.window(handle)
            conn, frames, at = self.js("return [document.getElementById('conn').textContent, window.__amfFrames, "
                                        "Number((document.querySelector('#cameras img') || {dataset: {}})"
                                        ".dataset.at)]")
            out.append({"connection": conn, "frames": int(frames or 0),
                        "newest_frame_age_s": round(time.time() - float(at), 3) if at else None})
        return out


# ---- one phase -----------------------------------------------------------------------------------------------
def schedule(cfg: ConsoleLoadConfig) -> Iterator[tuple[str, str, int]]:
    """("episode" | "run_policy", task, seed), endlessly, the same from the start in every phase."""
    items = [(t, s) for s in cfg.seeds for t in cfg.tasks]
    i = 0
    while True:
        task, seed = items[i % len(items)]
        yield "episode", task, seed
        if i % cfg.policy_every == 0:
            yield "run_policy", cfg.policy_task, cfg.policy_seed
        i += 1


class SimSteps:
    """The simulator's own count of applied actions: the latest TaskStatus on /amf/sim/status (steps since the
    reset numbered ``resets``), received by the benchmark's client."""

    def __init__(self, client: AMFClient) -> None:
        from amf_ros.data.ros_convert import stamp_ns
        from amf_ros.msg import TaskStatus
        from amf_ros.ros import qos

        self._client, self._stamp_ns = client, stamp_ns
        self.latest: tuple[int, str, int, int] | None = None  # (stamp ns, task, resets, steps)
        client.node.create_subscription(TaskStatus, "sim/status", self._on_status, qos.LATCHED)

    def _on_status(self, msg: Any) -> None:
        self.latest = (self._stamp_ns(msg), str(msg.task), int(msg.resets), int(msg.steps))

    def now_ns(self) -> int:
        """The client node's ROS clock now, to compare with status stamps."""
        return int(self._client.node.get_clock().now().nanoseconds)

    def after(self, since_ns: int, timeout: float = 10.0) -> tuple[int, str, int, int]:
        """The first status stamped after ``since_ns`` (sim_bridge re-publishes it at least every 0.1 s)."""
        self._client.wait_for(lambda: self.latest is not None and self.latest[0] > since_ns, timeout,
                              "a simulator status (/amf/sim/status)")
        return self.latest  # type: ignore[return-value]


def _episode(client: AMFClient, sim: SimSteps, task: str, seed: int) -> dict[str, Any]:
    """One scripted demonstration of (task, seed), read back from the store, with the simulator's and the operator's
    own counts of the actions of the episode."""
    from amf_ros.data.schema import OBS_PREFIX, STAMP_PREFIX, STATE
    from amf_ros.data.store import EpisodeStore

    t0 = time.monotonic()
    since = sim.now_ns()
    client.reset(task, seed)
    _, on_task, resets, steps0 = sim.after(since)
    if on_task != task or steps0 != 0:
        raise RuntimeError(f"after the reset to {task!r} the simulator says {on_task!r} at step {steps0}")
    n0 = len(client.seen.actions)
    eid = client.start_episode(task).episode_id
    info = client.wait_episode(eid, timeout=120)
    sent = len(client.seen.actions) - n0  # scripted_teleop's actions (nothing else drives the arm meanwhile)
    _, _, resets_end, applied = sim.after(sim.now_ns())
    if resets_end != resets:
        raise RuntimeError(f"the simulator was reset during episode {eid} ({resets} -> {resets_end} resets)")
    path = Path(info.path)
    ep = EpisodeStore(path.parent, create=False).load(path.name, images=[IMAGE_KEY])
    images = ep.steps[OBS_PREFIX + IMAGE_KEY]
    img_stamp, state_stamp = ep.steps[STAMP_PREFIX + OBS_PREFIX + IMAGE_KEY], ep.steps[STAMP_PREFIX + STATE]
    states = ep.steps[STATE]
    streams = ep.meta.extra.get("streams", {})
    sync = ep.meta.sync_stats
    digest = hashlib.sha256()
    for key in ("action", STATE):
        digest.update(np.ascontiguousarray(ep.steps[key]).tobytes())
    return {"task": task, "seed": seed, "episode_id": eid, "success": bool(info.success),
            "steps": int(info.num_steps), "steps_stored": len(ep), "actions_applied": applied,
            "actions_sent": sent, "frames": int(images.shape[0]), "fresh_frames": int(np.sum(img_stamp == state_stamp)),
            "distinct_frames": int(np.unique(img_stamp).size),
            "repeated_state_steps": int(np.sum(np.all(states[1:] == states[:-1], axis=1))),
            "skipped_steps": int(sum(v for k, v in sync.items() if k.startswith("skipped") or k == "late_messages")),
            "dropped": {k: int(v.get("dropped", 0)) for k, v in streams.items()},
            "duplicated": {k: int(v.get("duplicated", 0)) for k, v in streams.items()},
            "content_sha256": digest.hexdigest()[:16], "wall_s": round(time.monotonic() - t0, 3),
            "_arrays": {k: ep.steps[k].copy() for k in ("action", STATE)}}  # for compare(), not saved


def _run_policy(client: AMFClient, task: str, seed: int, steps: int) -> dict[str, Any]:
    """One run_policy goal on a fixed scene; the server's control periods and the action periods seen here."""
    client.reset(task, seed)
    n0 = len(client.seen.actions)
    res = client.run_policy(task, max_steps=steps, timeout=120)
    received = [t for t, _ in client.seen.actions[n0:]]
    return {"task": task, "seed": seed, "ok": bool(res.ok), "message": "" if res.ok else str(res.message),
            "steps": int(res.steps), "mean_period_s": float(res.mean_period_s),
            "median_period_s": float(res.median_period_s), "max_period_s": float(res.max_period_s),
            "received_periods_s": np.diff(received).round(5).tolist()}


def _cpu_snapshot(procs: Any, browser: BrowserClients | None) -> dict[str, float]:
    snap = {name: process_cpu_s(p.pid) for name, p in procs.procs.items()}
    snap["chromium"] = tree_cpu_s(browser.pid) if browser is not None else 0.0
    snap["_busy"], snap["_total"] = machine_busy_s()
    snap["_wall"] = time.monotonic()
    return snap


def run_phase(cfg: ConsoleLoadConfig, index: int, clients: int, client: AMFClient, sim: SimSteps, procs: Any,
              url: str) -> dict[str, Any]:
    """One phase: ``clients`` browser windows (0 = none) while the schedule runs for ``cfg.phase_s`` s."""
    name = f"phase {index + 1}: {clients} clients" if clients else f"phase {index + 1}: no client"
    log.info("%s (%g s)", name, cfg.phase_s)
    browser = BrowserClients(url, clients, cfg.nice) if clients else None
    try:
        if browser is not None:
            browser.count_frames()
        episodes, goals, errors = [], [], []
        before = _cpu_snapshot(procs, browser)
        for kind, task, seed in schedule(cfg):
            if time.monotonic() - before["_wall"] >= cfg.phase_s:
                break
            try:
                if kind == "episode":
                    episodes.append(_episode(client, sim, task, seed))
                    e = episodes[-1]
                    log.info("  episode %s seed %d: %d actions applied (%d sent), %d steps, %d frames (%d fresh), "
                             "%d on a repeated state, skipped %d, dropped %s, %.1f s", task, seed,
                             e["actions_applied"], e["actions_sent"], e["steps"], e["frames"], e["fresh_frames"],
                             e["repeated_state_steps"], e["skipped_steps"], e["dropped"], e["wall_s"])
                else:
                    goals.append(_run_policy(client, task, seed, cfg.policy_steps))
                    g = goals[-1]
                    log.info("  run_policy %s: %d steps, period median %.1f ms, max %.1f ms%s", task, g["steps"],
                             g["median_period_s"] * 1e3, g["max_period_s"] * 1e3,
                             "" if g["ok"] else f"; FAILED: {g['message']}")
            except Exception as exc:
                errors.append({"item": kind, "task": task, "seed": seed, "error": f"{type(exc).__name__}: {exc}"})
                log.error("  %s %s seed %d failed: %s", kind, task, seed, errors[-1]["error"])
        after = _cpu_snapshot(procs, browser)
        windows = browser.check() if browser is not None else []
    finally:
        if browser is not None:
            browser.close()
    wall = after["_wall"] - before["_wall"]
    cpu = {k: round(100.0 * (after[k] - before[k]) / wall, 2) for k in after if not k.startswith("_")}
    machine = 100.0 * (after["_busy"] - before["_busy"]) / (after["_total"] - before["_total"]) * (os.cpu_count() or 1)
    periods = np.concatenate([g["received_periods_s"] for g in goals]) if goals else np.zeros(0)
    policy = {"goals": len(goals), "failed": sum(not g["ok"] for g in goals), "steps": sum(g["steps"] for g in goals)}
    if goals:
        policy.update({
            "server_median_period_ms": float(np.median([g["median_period_s"] for g in goals]) * 1e3),
            "server_mean_period_ms": float(np.mean([g["mean_period_s"] for g in goals]) * 1e3),
            "server_max_period_ms": float(max(g["max_period_s"] for g in goals) * 1e3)})
    if periods.size:
        policy.update({"received_p50_ms": float(np.percentile(periods, 50) * 1e3),
                       "received_p99_ms": float(np.percentile(periods, 99) * 1e3),
                       "received_max_ms": float(periods.max() * 1e3)})
    return {"name": name, "clients": clients, "wall_s": round(wall, 2), "episodes": episodes, "errors": errors,
            "run_policy": policy,
            "run_policy_goals": goals, "cpu_percent_of_one_core": cpu,
            "machine_busy_percent_of_one_core": round(machine, 1), "windows": windows}


def compare(phases: list[dict[str, Any]]) -> dict[str, Any]:
    """Fill in each phase's checks and return the summary.

    Per episode, load-independent: every action the simulator applied is a recorded step (stored), with a camera
    frame of its own (``kept``). Per (task, seed), against its first episode in a phase without clients: the same
    steps and frames (``same_steps`` / ``same_frames``), and bit-identical actions and states (``content_differs``
    says where not); both need the closed loop of scripted_teleop and the simulator to be deterministic.
    """
    reference: dict[tuple[str, int], dict[str, Any]] = {}
    for ph in phases:
        if ph["clients"] == 0:
            for e in ph["episodes"]:
                reference.setdefault((e["task"], e["seed"]), e)
    mismatches = []
    for ph in phases:
        eps = ph["episodes"]
        ph["kept"] = all(e["actions_applied"] == e["steps"] == e["steps_stored"] == e["frames"] == e["fresh_frames"]
                         for e in eps)
        ph["lost_steps"] = sum(max(0, e["actions_applied"] - e["steps_stored"]) for e in eps)
        ph["lost_frames"] = sum(e["steps_stored"] - e["fresh_frames"] for e in eps)
        ph["drops"] = sum(sum(e["dropped"].values()) + sum(e["duplicated"].values()) + e["skipped_steps"] for e in eps)
        ph["repeated_state_steps"] = sum(e["repeated_state_steps"] for e in eps)
        ph["actions_not_applied"] = sum(e["actions_sent"] - e["actions_applied"] for e in eps)
        ph["same_steps"] = ph["same_frames"] = True
        ph["compared"], ph["content_differs"] = 0, []
        for e in eps:
            ref = reference.get((e["task"], e["seed"]))
            if ref is None:
                continue
            ph["compared"] += 1
            same_steps, same_frames = e["steps"] == ref["steps"], e["fresh_frames"] == ref["fresh_frames"]
            ph["same_steps"] &= same_steps
            ph["same_frames"] &= same_frames
            if not (same_steps and same_frames):
                keys = ("actions_applied", "steps", "frames", "fresh_frames", "repeated_state_steps")
                mismatches.append({"phase": ph["name"], "task": e["task"], "seed": e["seed"],
                                   "got": {k: e[k] for k in keys}, "reference": {k: ref[k] for k in keys}})
            if e["content_sha256"] != ref["content_sha256"]:
                ph["content_differs"].append(_content_diff(e, ref))
    for ph in phases:
        for e in ph["episodes"]:
            e.pop("_arrays", None)
    client_phases = [ph for ph in phases if ph["clients"]]
    return {"every_frame_kept": all(ph["kept"] for ph in phases),
            "lost_steps": sum(ph["lost_steps"] for ph in phases),
            "lost_frames": sum(ph["lost_frames"] for ph in phases),
            "same_counts_as_no_client": all(ph["same_steps"] and ph["same_frames"] for ph in phases),
            "same_content_as_no_client": not any(ph["content_differs"] for ph in phases),
            "client_episodes_compared": sum(ph["compared"] for ph in client_phases),
            "drops_total": sum(ph["drops"] for ph in phases), "mismatches": mismatches}


def _content_diff(e: dict[str, Any], ref: dict[str, Any]) -> dict[str, Any]:
    """Where an episode's actions and states first differ from the reference episode of its (task, seed) (over
    the steps both have)."""
    out: dict[str, Any] = {"episode_id": e["episode_id"], "task": e["task"], "seed": e["seed"],
                           "steps": e["steps"], "reference_steps": ref["steps"]}
    for key, a in e["_arrays"].items():
        b = ref["_arrays"][key]
        n = min(len(a), len(b))
        rows = np.flatnonzero(np.any(a[:n] != b[:n], axis=tuple(range(1, a.ndim))))
        first = int(rows[0]) if rows.size else n
        out[key] = {"first_step": first,
                    "max_abs_diff": float(np.max(np.abs(a[:n].astype(np.float64) - b[:n]))) if rows.size else 0.0}
    return out


def _averages(phases: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Means over the phases with and without clients (side by side)."""
    out = {}
    for label, group in (("no client", [p for p in phases if not p["clients"]]),
                         ("clients", [p for p in phases if p["clients"]])):
        rp = [p["run_policy"] for p in group if p["run_policy"]["goals"]]
        out[label] = {
            "console_cpu_percent": float(np.mean([p["cpu_percent_of_one_core"]["operator_console"] for p in group])),
            "chromium_cpu_percent": float(np.mean([p["cpu_percent_of_one_core"]["chromium"] for p in group])),
            "machine_busy_percent": float(np.mean([p["machine_busy_percent_of_one_core"] for p in group])),
            "run_policy_median_period_ms": float(np.mean([r["server_median_period_ms"] for r in rp])) if rp else None,
            "run_policy_max_period_ms": float(max(r["server_max_period_ms"] for r in rp)) if rp else None}
    return out


def run(cfg: ConsoleLoadConfig, out: Path) -> dict[str, Any]:
    """Bring the graph up, run the phases, write ``out/results.json``; returns the results dict."""
    from amf_ros.bench.console_graph import console_url, start_console_graph
    from amf_ros.ros.client import session

    t0 = time.monotonic()
    env = isolated_ros_env()
    with tempfile.TemporaryDirectory(prefix="amf_console_load_") as tmp:
        work = Path(tmp)
        # round_robin: the console re-asks next_task after every saved episode; AMF's cost would grow with the store
        procs = start_console_graph(work, env, cfg.tasks, selector="round_robin",
                                    params={"scripted_teleop": {"end_episode": True},
                                            "policy_server": {"max_steps": cfg.policy_steps}})
        try:
            with session(f"amf_bench_console_load_{os.getpid()}", record_actions=True) as client:
                sim = SimSteps(client)
                client.wait_ready(timeout=180)
                url = console_url(work / "logs" / "operator_console.log")
                log.info("graph up (ROS_DOMAIN_ID=%s), console at %s; warm-up", env["ROS_DOMAIN_ID"], url)
                _episode(client, sim, cfg.tasks[0], cfg.seeds[0])  # first render, first commit, first inference
                _run_policy(client, cfg.policy_task, cfg.policy_seed, cfg.policy_steps)
                phases = [run_phase(cfg, i, cfg.clients if i % 2 else 0, client, sim, procs, url)
                          for i in range(2 * cfg.pairs)]
                dead = procs.dead()
        finally:
            codes = procs.stop()
        log.info("node exit codes: %s", codes)
    summary = compare(phases)
    summary["averages"] = _averages(phases)
    summary["nodes_died"] = dead
    results = {"benchmark": "console-load", "config": dataclasses.asdict(cfg), "metric": "counts, ms, % of one core",
               "wall_time_s": time.monotonic() - t0, "machine": {"cpus": os.cpu_count()}, "summary": summary,
               "settings": phases}
    write_results(out, results)
    return results


def table(results: dict[str, Any]) -> str:
    """The phases as a text table, then the averages with and without clients."""
    rows = []
    for p in results["settings"]:
        rp, cpu = p["run_policy"], p["cpu_percent_of_one_core"]
        ok_windows = sum(w["connection"] == "connected" and w["frames"] > 0 for w in p["windows"])
        rows.append([p["name"], f"{ok_windows}/{p['clients']}" if p["clients"] else "0", len(p["episodes"]),
                     sum(e["steps"] for e in p["episodes"]), "yes" if p["kept"] else "NO",
                     "yes" if p["same_steps"] and p["same_frames"] else "NO", p["drops"], len(p["errors"]),
                     f"{rp['goals']}" + (f" ({rp['failed']} failed)" if rp["failed"] else ""),
                     rp.get("server_median_period_ms", float("nan")), rp.get("server_max_period_ms", float("nan")),
                     cpu["operator_console"], cpu["chromium"], p["machine_busy_percent_of_one_core"]])
    text = format_table(["phase", "clients ok", "episodes", "steps", "every frame kept", "same as no client",
                         "drops", "errors", "goals", "period p50 ms", "period max ms", "console CPU %",
                         "chromium CPU %", "machine %"], rows, floatfmt=".1f")
    s = results["summary"]
    lines = [text, "",
             (f"every applied action recorded with its own camera frame: {'yes' if s['every_frame_kept'] else 'NO'} "
              f"(lost steps {s['lost_steps']}, lost frames {s['lost_frames']}; recorder drops/duplicates/skipped "
              f"{s['drops_total']})"),
             (f"same steps and frames per (task, seed) as without clients: "
              f"{'yes' if s['same_counts_as_no_client'] else 'NO'} ({s['client_episodes_compared']} episodes in "
              f"client phases compared); bit-identical actions and states: "
              f"{'yes' if s['same_content_as_no_client'] else 'NO'}")]
    for p in results["settings"]:
        for err in p["errors"]:
            lines.append(f"  {p['name']}: {err['item']} {err['task']} seed {err['seed']} failed: {err['error']}")
        for g in p["run_policy_goals"]:
            if not g["ok"]:
                lines.append(f"  {p['name']}: run_policy {g['task']} failed: {g['message']}")
    for m in s["mismatches"]:
        lines.append(f"  {m['phase']}: {m['task']} seed {m['seed']}: {m['got']} vs {m['reference']}")
    for p in results["settings"]:
        for d in p["content_differs"]:
            lines.append(f"  {p['name']}: {d['task']} seed {d['seed']} ({d['steps']} vs {d['reference_steps']} "
                         f"steps) differs from step {d['action']['first_step']} (actions) / "
                         f"{d['observation/state']['first_step']} (states)")
    for label, a in s["averages"].items():
        lines.append(f"{label:>9}: console {a['console_cpu_percent']:.1f} %, chromium "
                     f"{a['chromium_cpu_percent']:.1f} % of one core; run_policy period median "
                     f"{a['run_policy_median_period_ms'] or float('nan'):.1f} ms, max "
                     f"{a['run_policy_max_period_ms'] or float('nan'):.1f} ms; machine "
                     f"{a['machine_busy_percent']:.0f} %")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """Entry point of `amf bench console-load` (the Drive panel's camera and keys: `amf bench console-drive`)."""
    p = argparse.ArgumentParser(prog="amf bench console-load", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/bench/console-load", help="output directory")
    p.add_argument("--config", default=None, help="YAML with ConsoleLoadConfig fields")
    p.add_argument("--phase-s", type=float, default=None, help="seconds per phase (default 60)")
    p.add_argument("--pairs", type=int, default=None, help="(no client, clients) phase pairs (default 2)")
    p.add_argument("--clients", type=int, default=None, help="browser windows in a client phase (default 5)")
    p.add_argument("--nice", type=int, default=None, help="niceness of Chromium (default 19)")
    p.add_argument("--smoke", action="store_true", help="a quick check: 8 s phases, one pair, 2 clients")
    args = p.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="[console-load] %(message)s")
    smoke = {"phase_s": 8.0, "pairs": 1, "clients": 2} if args.smoke else {}
    cfg = load_config(ConsoleLoadConfig, args.config, defaults=smoke, phase_s=args.phase_s, pairs=args.pairs,
                      clients=args.clients, nice=args.nice)
    results = run(cfg, Path(args.out))
    sys.stdout.write(table(results) + f"\n\nwrote {Path(args.out) / 'results.json'} in "
                     f"{results['wall_time_s']:.0f} s\n")
    return 0
