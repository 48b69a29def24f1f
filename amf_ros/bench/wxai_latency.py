"""Latency and control-period jitter of the WidowX AI backend on trossen-arm-sim (`amf bench wxai-latency`).

What is measured (one process, no ROS): the package's WidowX AI backend (:class:`amf_ros.robots.wxai.WXAIArm`) drives
Trossen's unmodified ``trossen_arm`` driver, which talks to trossen-arm-sim's controller server over the controller's
TCP/UDP protocol on 127.0.0.1 (robot:=wxai_sim's path); the simulator's physics runs in real time in the same
process.

* **state read**: the duration of one :meth:`WXAIArm.observe` (the driver's latest robot output, the vendor's
  forward kinematics, the gripper; no network round trip: the driver's daemon keeps the output current);
* **wire**: a joint command applied at once (goal time 0, the driver's own call) until the first state read in which
  joint 0 moved 1 mrad: the protocol's round trip plus the simulated servo's response;
* **command to state**: ``trials`` actions of ``step_mm`` (alternately +y and -y) from rest, each sent through
  :meth:`WXAIArm.on_action` (the vendor's Cartesian command, goal time one control period); the state is then read
  every millisecond and two times are recorded from the call: the first read in which the end effector moved
  ``first_motion_mm`` towards the goal (the protocol and controller's response), and the first in which it covered
  90 % of the step (the goal time is one control period, so this includes the 0.2 s trajectory by design);
* **control-period jitter**: a ``jitter_ticks``-tick loop at ``rate_hz`` on a monotonic deadline, as policy_server's
  control loop runs: each tick reads the state and sends a small action; reported are the tick-to-tick periods'
  deviations from 1/rate (p50, p99, max of the absolute value) and the work per tick.

Run::

    amf bench wxai-latency                 # 50 trials, 100 ticks at 5 Hz -> docs/results/wxai_latency
    amf bench wxai-latency --trials 10 --ticks 25 --out /tmp/wxai_latency

Writes results.json and table.txt under --out; prints the JSON and the table. Numbers depend on the machine's load
(the physics thread and the driver's daemon share its cores).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from amf_ros.bench.results import config_dict, write_results_and_table
from amf_ros.outputs import format_table

DEFAULT_OUT = "docs/results/wxai_latency"


@dataclass(frozen=True)
class WXAILatencyConfig:
    """What the bench measures (module doc)."""

    trials: int = 50
    """Actions of the command-to-state measurement."""
    step_mm: float = 20.0
    """Size of each of those actions (y translation), mm."""
    first_motion_mm: float = 0.5
    """Motion towards the goal that counts as the first response, mm."""
    timeout_s: float = 1.0
    """Give up on a trial after this long, s."""
    rate_hz: float = 5.0
    """Rate of the jitter loop (BridgeData: 5 Hz)."""
    jitter_ticks: int = 100
    """Ticks of the jitter loop."""
    reads: int = 2000
    """State reads timed."""


def _pct(values: Sequence[float]) -> dict[str, float]:
    v = np.asarray(values, dtype=float)
    if v.size == 0:
        return {"n": 0}
    return {"n": int(v.size), "p50": float(np.percentile(v, 50)), "p99": float(np.percentile(v, 99)),
            "max": float(v.max()), "mean": float(v.mean())}


def run(cfg: WXAILatencyConfig) -> dict[str, Any]:
    """Start trossen-arm-sim with an empty table, connect the backend, measure; the results dict."""
    import trossen_arm as ta

    from amf_ros.envs.wxai_sim.scene import TabletopHost
    from amf_ros.robots.widowx import state_to_pose
    from amf_ros.robots.wxai import NEUTRAL_POSE, WXAIArm, WXAIConfig, matrix_to_pose6

    period = 1.0 / cfg.rate_hz
    t0 = time.monotonic()
    host = TabletopHost((), camera=False)
    arm = WXAIArm(WXAIConfig(ip=host.host, control_period_s=period, action_timeout_s=0.0))
    try:
        t_connect = time.monotonic()
        arm.connect()
        connect_s = time.monotonic() - t_connect
        pose = matrix_to_pose6(state_to_pose([*NEUTRAL_POSE, 0.0, 0.0, 0.0]))
        arm.driver.set_cartesian_positions(pose, ta.InterpolationSpace.joint, 1.0, True)
        arm.observe()
        arm.reset()

        reads = []
        for _ in range(cfg.reads):
            t = time.perf_counter()
            arm.observe()
            reads.append((time.perf_counter() - t) * 1e3)

        wire = []  # a joint command applied at once (goal time 0) -> the first joint position that moved 1 mrad
        for k in range(cfg.trials):
            time.sleep(period / 2)
            q = np.asarray(list(arm.driver.get_arm_positions()))
            goal = q.copy()
            goal[0] += 0.01 if k % 2 == 0 else -0.01
            t = time.perf_counter()
            arm.driver.set_arm_positions(goal.tolist(), 0.0, False)
            while time.perf_counter() - t < cfg.timeout_s:
                if abs(arm.driver.get_arm_positions()[0] - q[0]) >= 1e-3:
                    wire.append((time.perf_counter() - t) * 1e3)
                    break
                time.sleep(0.0002)
        arm.observe()
        arm.reset()

        first, ninety, missed = [], [], 0
        step = cfg.step_mm / 1000.0
        for k in range(cfg.trials):
            time.sleep(period)  # at rest: the previous move ended
            start = arm.observe()[1]
            sign = 1.0 if k % 2 == 0 else -1.0
            now = time.time_ns()
            t = time.perf_counter()
            out = arm.on_action([0.0, sign * step, 0.0, 0.0, 0.0, 0.0, 1.0], now, now)
            if not out.applied:
                missed += 1
                continue
            t_first = t_ninety = None
            while time.perf_counter() - t < cfg.timeout_s and t_ninety is None:
                moved = sign * (arm.observe()[1] - start)
                dt = (time.perf_counter() - t) * 1e3
                if t_first is None and moved >= cfg.first_motion_mm / 1000.0:
                    t_first = dt
                if moved >= 0.9 * step:
                    t_ninety = dt
                time.sleep(0.001)
            if t_first is None or t_ninety is None:
                missed += 1
                continue
            first.append(t_first)
            ninety.append(t_ninety)

        arm.observe()
        arm.reset()
        ticks, work = [], []
        deadline = time.monotonic()
        for k in range(cfg.jitter_ticks):
            deadline += period
            delay = deadline - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            t = time.monotonic()
            ticks.append(t)
            arm.observe()
            now = time.time_ns()
            arm.on_action([0.0, 0.005 if (k // 10) % 2 == 0 else -0.005, 0.0, 0.0, 0.0, 0.0, 1.0], now, now)
            work.append((time.monotonic() - t) * 1e3)
        periods = np.diff(ticks) * 1e3
    finally:
        arm.close()
        host.close()
    settings = {
        "connect_s": connect_s, "state_read_ms": _pct(reads), "joint_command_to_motion_ms": _pct(wire),
        "command_to_first_motion_ms": _pct(first), "command_to_90pct_ms": _pct(ninety), "missed_trials": missed,
        "control_period_ms": _pct(periods), "period_jitter_ms": _pct(np.abs(periods - period * 1e3)),
        "tick_work_ms": _pct(work),
    }
    return {"benchmark": "wxai-latency", "config": config_dict(cfg), "metric": "milliseconds (p50, p99, max)",
            "settings": settings, "wall_time_s": time.monotonic() - t0}


def table(results: dict[str, Any]) -> str:
    """The measurements as one table (ms)."""
    rows = []
    for key, label in (("state_read_ms", "state read (observe)"),
                       ("joint_command_to_motion_ms", "joint command (goal time 0) -> motion"),
                       ("command_to_first_motion_ms", "action -> first motion"),
                       ("command_to_90pct_ms", "action -> 90 % of the step"),
                       ("control_period_ms", f"control period at {results['config']['rate_hz']:g} Hz"),
                       ("period_jitter_ms", "|period - nominal|"),
                       ("tick_work_ms", "work per tick (read + act)")):
        r = results["settings"][key]
        rows.append([label, r["n"], r.get("p50", float("nan")), r.get("p99", float("nan")),
                     r.get("max", float("nan"))])
    return format_table(["WidowX AI on trossen-arm-sim (ms)", "n", "p50", "p99", "max"], rows, floatfmt=".2f")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run, write results.json and table.txt under --out, print JSON and table."""
    parser = argparse.ArgumentParser(prog="amf bench wxai-latency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output directory (default: {DEFAULT_OUT})")
    parser.add_argument("--trials", type=int, default=WXAILatencyConfig.trials, help="command-to-state trials")
    parser.add_argument("--ticks", type=int, default=WXAILatencyConfig.jitter_ticks, help="ticks of the 5 Hz loop")
    parser.add_argument("--rate-hz", type=float, default=WXAILatencyConfig.rate_hz, help="control loop rate")
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    results = run(WXAILatencyConfig(trials=args.trials, jitter_ticks=args.ticks, rate_hz=args.rate_hz))
    text = table(results)
    write_results_and_table(args.out, results, text)
    print(json.dumps(results, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
