"""`amf bench ros-latency`: /amf/next_task round-trip latency and run_policy control-loop jitter, over real DDS.

    amf bench ros-latency [--out runs/bench/ros-latency] [--calls 30] [--episodes 10,100,400]

1. next_task: task_selector runs as its own process on an episode store with 10, 100 and 400 synthetic episodes
   (written through the store, ``--steps-per-episode`` steps each); this process calls /amf/next_task ``--calls``
   times per setting (after 2 warm-up calls; the first, cold call, which reads and embeds every episode, is reported
   on its own) and records the round trip (client side) and the selector's own compute_time (server side), for the
   AMF selector (loss-gradient embeddings + criterion) and for round_robin (ROS + store overhead only).
2. jitter, per rclpy executor of policy_server (``--executors``; its ``executor`` parameter, chosen one first):
   idle CPU per thread (/proc; with the 50 Hz observation stream and without), fine-tune steps/s alone, then run_policy
   at ``--rate`` Hz on observations published by this process, idle and while a fine-tune runs in the background,
   alternating; the period between consecutive /amf/action messages as received here is the control period the arm
   sees. An executor that cannot serve the action at all is recorded with its error.
Every node runs as its own process with its own ROS_DOMAIN_ID, loopback only. Output: results.json + a table.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from amf_ros.bench.results import write_results
from amf_ros.bringup.ros_env import isolated_ros_env
from amf_ros.config_file import load_config
from amf_ros.outputs import format_table

if TYPE_CHECKING:
    from amf_ros.ros.client import AMFClient

log = logging.getLogger("amf.bench.ros_latency")


@dataclass
class LatencyConfig:
    """Settings of the benchmark (recorded in results.json)."""

    episodes: list[int] = field(default_factory=lambda: [10, 100, 400])
    """Store sizes (recorded episodes) at which next_task is timed."""
    steps_per_episode: int = 50
    """Steps of each synthetic episode (Metaworld-sized: 39-D state, 7-D action)."""
    calls: int = 30
    """Timed next_task calls per setting (after 2 warm-up calls)."""
    selectors: list[str] = field(default_factory=lambda: ["amf", "round_robin"])
    """Selectors to time."""
    rate: float = 10.0
    """run_policy control rate for the jitter measurement, Hz."""
    jitter_steps: int = 200
    """Control steps per jitter run (idle, and during a fine-tune), after a 10-step warm-up run."""
    jitter_repeats: int = 3
    """Idle / during-fine-tune pairs (alternating), to separate the fine-tune's effect from load on a shared
    machine."""
    checkpoint: str = ""
    """Policy checkpoint to serve (empty = a fresh Metaworld-sized policy, as `amf pretrain` builds it)."""
    executors: list[str] = field(default_factory=lambda: ["single", "multi", "multi_rclpy", "events"])
    """policy_server executors to measure side by side (its ``executor`` parameter): the chosen one first."""
    head: str = "diffusion"
    """Head of that fresh policy ("diffusion", the default everywhere, or "mlp"): it sets the embedding cost."""
    seed: int = 0

    def __post_init__(self) -> None:
        if (not self.episodes or min(self.episodes) < 1 or self.calls < 1 or self.rate <= 0 or self.jitter_steps < 3
                or self.jitter_repeats < 1):
            raise ValueError(f"invalid LatencyConfig: {self.episodes=} {self.calls=} {self.rate=} "
                             f"{self.jitter_steps=}")
        if self.head not in ("diffusion", "mlp"):
            raise ValueError(f"head must be 'diffusion' or 'mlp', got {self.head=}")


def _make_checkpoint(path: Path, seed: int, head: str = "diffusion") -> Path:
    """A Metaworld-sized policy (MiniLM task encoder) fitted briefly on synthetic data, with a prior."""
    from amf_ros.bench.tiny_checkpoint import fit_on_noise
    from amf_ros.envs.metaworld_suite import load_tasks
    from amf_ros.training.pretrain import DEFAULT_TASKS, make_policy

    specs = load_tasks(keys=list(DEFAULT_TASKS))
    policy = make_policy(specs, head=head, seed=seed)
    return fit_on_noise(policy, [s.key for s in specs], path, episodes=10, steps_per_episode=20, fit_steps=20,
                        seed=seed)


def _write_store(root: Path, n: int, steps: int, instructions: dict[str, str], seed: int) -> None:
    """``n`` synthetic episodes (random Metaworld-like states, in-range 7-D actions), tasks in turn."""
    from amf_ros.data.store import EpisodeStore

    store = EpisodeStore(root)
    rng = np.random.default_rng(seed)
    keys = list(instructions)
    for i in range(len(store), n):
        task = keys[i % len(keys)]
        states = rng.normal(size=(steps, 39)).astype(np.float32)
        actions = np.concatenate([rng.uniform(-0.01, 0.01, (steps, 3)), np.zeros((steps, 3)),
                                  rng.uniform(0, 1, (steps, 1))], axis=1).astype(np.float32)
        t0 = time.time_ns()
        store.write_episode(task, instructions[task], [{"observation": {"state": s}, "action": a,
                                                        "stamp_ns": t0 + k * 100_000_000}
                                                       for k, (s, a) in enumerate(zip(states, actions, strict=True))],
                            robot="synthetic", control_rate_hz=10.0)


def _stats_ms(x: Sequence[float]) -> dict[str, float]:
    a = np.asarray(x, dtype=np.float64) * 1e3
    return {"n": int(a.size), "mean_ms": float(a.mean()), "p50_ms": float(np.percentile(a, 50)),
            "p99_ms": float(np.percentile(a, 99)), "max_ms": float(a.max()), "std_ms": float(a.std())}


def _params_file(path: Path, node: str, values: dict[str, Any]) -> Path:
    import yaml

    path.write_text(yaml.safe_dump({f"/**/{node}": {"ros__parameters": values}}))
    return path


def _node(name: str, params: Path, log_dir: Path, env: dict[str, str]) -> Any:
    from amf_ros.bringup.graph import NodeSpec
    from amf_ros.bringup.processes import NodeProcesses

    return NodeProcesses([NodeSpec(name, name, str(params))], log_dir=log_dir, env=env).start()


def time_next_task(cfg: LatencyConfig, work: Path, ckpt: Path, instructions: dict[str, str], env: dict[str, str],
                   client: AMFClient) -> list[dict[str, Any]]:
    """next_task round trips per (selector, store size)."""
    settings = []
    for n in sorted(cfg.episodes):
        store = work / f"store_{n}"
        _write_store(store, n, cfg.steps_per_episode, instructions, cfg.seed)
        for selector in cfg.selectors:
            params = _params_file(work / f"ts_{selector}_{n}.yaml", "task_selector", {
                "selector": selector, "checkpoint": str(ckpt), "dataset_dir": str(store), "seed": cfg.seed,
                "tasks": list(instructions), "checkpoint_topic": "/amf/bench_checkpoint_unused"})
            procs = _node("task_selector", params, work / "logs" / f"{selector}_{n}", env)
            try:
                client.next_task_cli.wait_for_service(timeout_sec=120)
                rtt, server, first = [], [], 0.0
                for i in range(cfg.calls + 2):
                    t0 = time.perf_counter()
                    resp = client.next_task(timeout=300)
                    dt = time.perf_counter() - t0
                    first = first or dt  # cold: the node reads and embeds every episode once
                    if i >= 2:
                        rtt.append(dt)
                        server.append(resp.compute_time)
                row = {"name": f"next_task {selector} {n} episodes", "selector": selector, "episodes": n,
                       "round_trip": _stats_ms(rtt), "compute_time": _stats_ms(server), "first_call_ms": first * 1e3,
                       "warm_start": bool(resp.warm_start)}
                log.info("%s: p50 %.1f ms, p99 %.1f ms", row["name"], row["round_trip"]["p50_ms"],
                         row["round_trip"]["p99_ms"])
                settings.append(row)
            finally:
                procs.stop()
    return settings


def _cpu_seconds(pid: int) -> dict[str, float]:
    """utime + stime of every thread of ``pid`` (and its children's totals), s, from /proc."""
    tick = os.sysconf("SC_CLK_TCK")
    out = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            name = (task / "comm").read_text().strip()
        except OSError:  # the thread ended meanwhile
            continue
        out[f"{name}[{task.name}]"] = (int(fields[11]) + int(fields[12])) / tick
    return out


def _idle_cpu(pid: int, label: str, inputs: str, seconds: float = 10.0) -> dict:
    """CPU use of policy_server with no goal active, per thread (percent of one core), over ``seconds``;
    ``inputs`` says what arrives meanwhile (for the row's name)."""
    before = _cpu_seconds(pid)
    time.sleep(seconds)
    after = _cpu_seconds(pid)
    per_thread = {k: 100.0 * (after[k] - before.get(k, 0.0)) / seconds for k in after}
    busy = {k: round(v, 2) for k, v in sorted(per_thread.items(), key=lambda kv: -kv[1]) if v > 0}
    total = sum(per_thread.values())
    log.info("policy_server (%s) idle CPU, %s: %.2f %% of one core (threads: %s)", label, inputs, total, busy)
    return {"name": f"policy_server idle CPU (no goal, {inputs}) [{label}]", "executor": label,
            "cpu_percent_of_one_core": total, "per_thread": busy, "seconds": seconds}


def _fine_tune_alone(client: AMFClient, label: str, seconds: float = 15.0) -> dict:
    """Fine-tune steps/s with no run_policy goal active (the reference for the during-control figures)."""
    fb: list = []
    pending = client.send_fine_tune(steps=10_000_000, feedback=fb.append)
    client.wait_for(lambda: len(fb) > 0, 120, "fine-tune feedback")
    step0, t0 = fb[-1].step, time.monotonic()
    time.sleep(seconds)
    rate = (fb[-1].step - step0) / (time.monotonic() - t0)
    client.cancel_fine_tunes()
    client.wait_result(pending, timeout=120)
    log.info("fine-tune alone [%s]: %.1f steps/s", label, rate)
    return {"name": f"fine-tune alone [{label}]", "executor": label, "fine_tune_steps_per_s": rate}


def _jitter_run(cfg: LatencyConfig, client: AMFClient, label: str, executor: str, during_fine_tune: bool) -> dict:
    """One run_policy goal of ``cfg.jitter_steps`` steps; periods of the actions as received here."""
    pending, fb = None, []
    if during_fine_tune:
        pending = client.send_fine_tune(steps=10_000_000, feedback=fb.append)
        client.wait_for(lambda: len(fb) > 0, 120, "fine-tune feedback")
    n0, step0, t_start = len(client.seen.actions), (fb[-1].step if fb else 0), time.monotonic()
    res = client.run_policy("faucet-open", max_steps=cfg.jitter_steps, timeout=600)
    if not res.ok:
        raise RuntimeError(f"run_policy failed: {res.message}")
    periods = np.diff(np.array([t for t, _ in client.seen.actions[n0:]]))
    row = {"name": f"run_policy period {label} [{executor}]", "executor": executor, "rate_hz": cfg.rate,
           "steps": int(res.steps), "period": _stats_ms(periods),
           "server_mean_period_ms": float(res.mean_period_s * 1e3),
           "server_median_period_ms": float(res.median_period_s * 1e3),
           "abs_deviation": _stats_ms(np.abs(periods - 1.0 / cfg.rate))}
    if pending is not None:
        row["fine_tune_still_running"] = not pending.done()
        row["fine_tune_steps_per_s_during_run"] = (fb[-1].step - step0) / (time.monotonic() - t_start)
        client.cancel_fine_tunes()
        client.wait_result(pending, timeout=120)
    log.info("%s: |period - %.0f ms| p50 %.1f ms, p99 %.1f ms, max %.1f ms", row["name"], 1e3 / cfg.rate,
             row["abs_deviation"]["p50_ms"], row["abs_deviation"]["p99_ms"], row["abs_deviation"]["max_ms"])
    return row


def time_jitter(cfg: LatencyConfig, work: Path, ckpt: Path, env: dict[str, str], client: AMFClient) -> list[dict]:
    """Per executor of policy_server: idle CPU, fine-tune alone, and control periods of run_policy idle and during
    a background fine-tune (alternating, ``cfg.jitter_repeats`` pairs)."""
    from amf_ros.msg import StateVector

    pub = client.node.create_publisher(StateVector, "/amf/observation/state", 10)
    stop, streaming = threading.Event(), threading.Event()
    streaming.set()

    def publish() -> None:  # a 50 Hz "arm" publishing observations (paused while ``streaming`` is clear)
        rng = np.random.default_rng(cfg.seed)
        while not stop.is_set():
            if streaming.wait(0.1):
                pub.publish(StateVector(values=rng.normal(size=39).tolist()))
                time.sleep(0.02)

    thread = threading.Thread(target=publish, daemon=True)
    thread.start()
    settings = []
    try:
        for executor in cfg.executors:
            params = _params_file(work / f"ps_{executor}.yaml", "policy_server", {
                "checkpoint": str(ckpt), "checkpoint_dir": str(work / "checkpoints"),
                "dataset_dir": str(work / f"store_{min(cfg.episodes)}"), "control_rate_hz": float(cfg.rate),
                "task_status_topic": "", "seed": cfg.seed, "executor": executor,
                "checkpoint_topic": "/amf/bench_checkpoint_unused"})
            procs = _node("policy_server", params, work / "logs" / f"policy_server_{executor}", env)
            try:
                client.run_cli.wait_for_server(timeout_sec=120)
                try:  # warm-up: first inference, lazy torch initialisation; also: does this executor work at all?
                    client.run_policy("faucet-open", max_steps=10, timeout=60)
                except Exception as exc:
                    log.error("executor %s: warm-up goal failed: %s", executor, exc)
                    settings.append({"name": f"run_policy [{executor}]", "executor": executor,
                                     "error": f"{type(exc).__name__}: {exc}"})
                    continue
                settings.append(_idle_cpu(procs.procs["policy_server"].pid, executor, "50 Hz observations"))
                streaming.clear()  # the node's own idle cost, without any incoming message
                time.sleep(0.5)
                settings.append(_idle_cpu(procs.procs["policy_server"].pid, executor, "no observations"))
                streaming.set()
                settings.append(_fine_tune_alone(client, executor))
                for r in range(cfg.jitter_repeats):
                    for during in (False, True):
                        label = f"{'during fine-tune' if during else 'idle'} #{r + 1}"
                        settings.append(_jitter_run(cfg, client, label, executor, during))
            finally:
                codes = procs.stop()
                if procs.killed:
                    settings.append({"name": f"policy_server stop [{executor}]", "executor": executor,
                                     "error": f"did not stop on SIGINT within 10 s (SIGKILL); exit codes {codes}"})
            # the next executor's server must not be mistaken for this one's lingering graph entry
            client.wait_for(lambda: not client.run_cli.server_is_ready(), 30, "run_policy server to disappear")
    finally:
        stop.set()
        thread.join(timeout=2)
    return settings


def run(cfg: LatencyConfig, out: Path) -> dict[str, Any]:
    """Run both measurements; returns the results dict (also written to ``out/results.json``)."""
    import tempfile

    from amf_ros.policies.loading import load_native
    from amf_ros.ros.client import session

    t0 = time.monotonic()
    env = isolated_ros_env()
    with tempfile.TemporaryDirectory(prefix="amf_ros_latency_") as tmp:
        work = Path(tmp)
        ckpt = Path(cfg.checkpoint) if cfg.checkpoint else _make_checkpoint(work / "policy", cfg.seed, cfg.head)
        instructions = dict(load_native(ckpt).instructions)
        with session("amf_bench_latency", record_actions=True) as client:
            settings = time_next_task(cfg, work, ckpt, instructions, env, client)
            settings += time_jitter(cfg, work, ckpt, env, client)
    results = {"benchmark": "ros-latency", "config": dataclasses.asdict(cfg), "metric": "milliseconds",
               "wall_time_s": time.monotonic() - t0, "machine": {"cpus": os.cpu_count()}, "settings": settings}
    write_results(out, results)
    return results


def table(results: dict[str, Any]) -> str:
    """The results as a text table."""
    rows = []
    for s in results["settings"]:
        if "cpu_percent_of_one_core" in s:
            rows.append([s["name"], "", None, None, None, None, f"{s['cpu_percent_of_one_core']:.2f} % of one core"])
            continue
        if "error" in s:
            rows.append([s["name"], "", None, None, None, None, s["error"][:70]])
            continue
        if "fine_tune_steps_per_s" in s:
            rows.append([s["name"], "", None, None, None, None, f"{s['fine_tune_steps_per_s']:.0f} steps/s"])
            continue
        st = s.get("round_trip") or s.get("period")
        extra = (f"server p50 {s['compute_time']['p50_ms']:.1f} ms, cold 1st call {s['first_call_ms']:.0f} ms"
                 if "compute_time" in s
                 else f"|dev| p50 {s['abs_deviation']['p50_ms']:.1f} / p99 {s['abs_deviation']['p99_ms']:.1f} ms"
                 + (f", fine-tune {s['fine_tune_steps_per_s_during_run']:.0f} steps/s"
                    if "fine_tune_steps_per_s_during_run" in s else ""))
        rows.append([s["name"], st["n"], st["mean_ms"], st["p50_ms"], st["p99_ms"], st["max_ms"], extra])
    return format_table(["setting", "n", "mean ms", "p50 ms", "p99 ms", "max ms", "note"], rows, floatfmt=".1f")


def main(argv: Sequence[str]) -> int:
    """Entry point of `amf bench ros-latency`."""
    p = argparse.ArgumentParser(prog="amf bench ros-latency", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/bench/ros-latency", help="output directory")
    p.add_argument("--config", default=None, help="YAML with LatencyConfig fields")
    p.add_argument("--calls", type=int, default=None, help="timed next_task calls per setting (default 30)")
    p.add_argument("--episodes", default=None, help="comma-separated store sizes (default 10,100,400)")
    p.add_argument("--rate", type=float, default=None, help="run_policy control rate, Hz (default 10)")
    p.add_argument("--jitter-steps", type=int, default=None, help="control steps per jitter run (default 100)")
    p.add_argument("--jitter-repeats", type=int, default=None, help="idle/fine-tune jitter pairs (default 3)")
    p.add_argument("--executors", default=None, help="comma-separated policy_server executors to compare "
                   "(default single,multi,multi_rclpy,events)")
    p.add_argument("--checkpoint", default=None, help="serve this checkpoint instead of a fresh policy")
    p.add_argument("--head", choices=("diffusion", "mlp"), default=None, help="head of the fresh policy "
                   "(default diffusion)")
    args = p.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="[ros-latency] %(message)s")
    episodes = [int(x) for x in args.episodes.split(",")] if args.episodes else None
    executors = args.executors.split(",") if args.executors else None
    cfg = load_config(LatencyConfig, args.config, calls=args.calls, episodes=episodes, rate=args.rate,
                      executors=executors,
                      jitter_steps=args.jitter_steps, jitter_repeats=args.jitter_repeats, checkpoint=args.checkpoint,
                      head=args.head)
    results = run(cfg, Path(args.out))
    print(table(results))
    print(f"\nwrote {Path(args.out) / 'results.json'} in {results['wall_time_s']:.0f} s")
    return 0
