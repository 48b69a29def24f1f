"""The embedded WidowX's scripted experts against a noisy hand, and the grasp's tolerance (``python -m
amf_ros.bench.widowx_expert``; not registered as an ``amf bench`` name yet).

What is measured (one process, no policy, no ROS):

* **expert success vs noise**: for every task of the task file (default: the family, config/tasks/widowx_family.yaml)
  and every noise level, ``seeds`` episodes of the scripted expert (scenes 0..seeds-1), each executed action's
  translation perturbed by N(0, noise^2) per axis and step (the noise model of :meth:`WidowXTaskEnv.perturb`, what
  pre-training's noisy demonstrations use), cut off at the task's ``max_steps``. Reported per task and noise: the
  success rate, the mean steps of the successful episodes, and the grasps the expert needed (fingers closed
  from open), so a re-grasp after a miss or a drop shows;
* **grasp tolerance**: for every graspable object, the gripper is driven (noise-free) to its grasp point plus an
  offset on a 5 mm grid within ``probe_radius_mm`` (33 offsets for 10 mm), closed and lifted 10 cm; the object
  counts as grasped when it came up at least 6 cm. This is what "a grasp within about 1 cm succeeds" means here;
* **cost**: control steps per second of CPU time of the physics and the arm logic (the expert excluded; CPU time,
  not wall time, so that other processes on a shared machine do not lower it).

Run::

    python -m amf_ros.bench.widowx_expert        # the family, 20 seeds, 0/5/10 mm -> docs/results/widowx_expert
    python -m amf_ros.bench.widowx_expert --tasks-file config/tasks/widowx_sim.yaml --seeds 50 --out /tmp/wx4
    python -m amf_ros.bench.widowx_expert --out /tmp/wx --seeds 3 --tasks carrot_on_plate

Writes results.json (and table.txt) under --out; prints the tables.
"""

from __future__ import annotations

import argparse
import itertools
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from amf_ros.bench.results import config_dict, summarize, write_results_and_table
from amf_ros.config_file import load_config
from amf_ros.outputs import format_table

DEFAULT_OUT = "docs/results/widowx_expert"
LIFT_CHECK = 0.06
"""A probed grasp holds when the object rose at least this much (m) with a 10 cm lift."""


@dataclass
class WidowXExpertBenchConfig:
    """What the benchmark runs (defaults: the acceptance setting)."""

    tasks_file: str = "config/tasks/widowx_family.yaml"
    """Task file (config/tasks/widowx_sim.yaml: SIMPLER's four tasks only)."""
    tasks: list[str] | None = None
    """Task keys of the file to run (None = all, in file order)."""
    seeds: int = 20
    """Episodes per task and noise level (scenes 0..seeds-1)."""
    noise_mm: list[float] = field(default_factory=lambda: [0.0, 5.0, 10.0])
    """Std of the translation noise per axis and step, millimetres."""
    noise_seed: int = 0
    """Seed of the noise generator (one per task and noise level, derived from it)."""
    probe_radius_mm: float = 10.0
    """Grasp-tolerance probe: offsets on a 5 mm grid within this distance of the grasp point (0 = no probe)."""

    def __post_init__(self) -> None:
        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds=}")
        if not self.noise_mm or any(n < 0 for n in self.noise_mm):
            raise ValueError(f"noise_mm must be a non-empty list of values >= 0, got {self.noise_mm=}")
        if self.probe_radius_mm < 0:
            raise ValueError(f"probe_radius_mm must be >= 0, got {self.probe_radius_mm=}")


def expert_episode(env: Any, seed: int, noise_m: float, rng: np.random.Generator | None) -> dict[str, Any]:
    """One episode of the scripted expert on a :class:`WidowXTaskEnv` with translation noise ``noise_m`` (m).

    Returns:
        ``success``, ``steps`` and ``grasps`` (times the expert closed the fingers from open).
    """
    env.reset(seed)
    grasps, was_open = 0, True
    while not env.done:
        expert = env.expert_action()
        closing = expert[6] < 0.5
        grasps += int(closing and was_open)
        was_open = not closing
        env.step(env.perturb(expert, noise_m, rng))
    return {"success": bool(env.success), "steps": int(env.steps), "grasps": grasps}


def expert_success(specs: Sequence[Any], seeds: int, noise_mm: Sequence[float],
                   noise_seed: int = 0) -> tuple[dict[str, dict[str, Any]], float]:
    """Expert episodes of every task at every noise level.

    Returns:
        ``{task: {"noise_mm": {"0": {"success", "episodes", "rate", "mean_steps", "mean_grasps", "per_seed"}}}}`` and
        the control steps per CPU second of stepping (physics + arm logic, the expert's own time excluded).
    """
    from amf_ros.envs.widowx_sim.task_env import WidowXTaskEnv

    out: dict[str, dict[str, Any]] = {}
    steps_total, step_time = 0, 0.0
    for i, spec in enumerate(specs):
        env = WidowXTaskEnv(spec)
        timed = _TimedEnv(env)
        by_noise = {}
        for j, noise in enumerate(noise_mm):
            rng = np.random.default_rng([noise_seed, i, j])
            eps = [expert_episode(timed, s, noise / 1000.0, rng) for s in range(seeds)]
            ok = [e for e in eps if e["success"]]
            by_noise[_label(noise)] = {
                "success": len(ok), "episodes": len(eps), "rate": len(ok) / len(eps),
                "mean_steps": float(np.mean([e["steps"] for e in ok])) if ok else None,
                "mean_grasps": float(np.mean([e["grasps"] for e in eps])),
                "per_seed": [int(e["success"]) for e in eps]}
        steps_total += timed.steps_total
        step_time += timed.step_time
        out[spec.key] = {"instruction": spec.instruction, "source": spec.source, "target": spec.target,
                         "skill": spec.skill, "split": spec.split, "max_steps": spec.max_steps, "noise_mm": by_noise}
    return out, steps_total / max(step_time, 1e-9)


class _TimedEnv:
    """A WidowXTaskEnv whose ``step`` is timed (the rest passes through)."""

    def __init__(self, env: Any) -> None:
        self.env, self.steps_total, self.step_time = env, 0, 0.0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.env, name)

    def step(self, action: np.ndarray) -> Any:
        t0 = time.process_time()
        out = self.env.step(action)
        self.step_time += time.process_time() - t0
        self.steps_total += 1
        return out


def grasp_offsets(radius_mm: float) -> list[tuple[float, float, float]]:
    """Offsets (m) on a 5 mm grid within ``radius_mm`` of the grasp point (x, y, z; y = the fingers' closing axis)."""
    n = int(radius_mm // 5)
    grid = [5e-3 * k for k in range(-n, n + 1)]
    return [o for o in itertools.product(grid, repeat=3) if np.linalg.norm(o) <= radius_mm * 1e-3 + 1e-9]


def probe_grasp(suite: Any, task: str, seed: int, offset: Sequence[float]) -> bool:
    """Drive the gripper (no noise) above the task's object, down to its grasp point + ``offset``, close, lift
    10 cm: True when the object came up at least :data:`LIFT_CHECK`.

    The grasp point is the expert's: the object's centre, the fingertips :data:`~amf_ros.envs.widowx_sim.expert.PRESS`
    below its bottom (they stop on the table).
    """
    from amf_ros.envs.widowx_sim.expert import PRESS
    from amf_ros.envs.widowx_sim.objects import BODIES

    spec = suite.specs[task]
    suite.reset(task, seed)
    src = suite.arm.position(spec.source)
    grasp = np.array([src[0], src[1], src[2] - BODIES[spec.source].half_height - PRESS]) + np.asarray(offset)
    for target, grip, steps in (((*grasp[:2], grasp[2] + 0.07), 1.0, 5), (grasp, 1.0, 3), (grasp, 0.0, 1),
                                ((*grasp[:2], grasp[2] + 0.10), 0.0, 3)):
        for _ in range(steps):
            obs = suite.observation
            a = np.zeros(7)
            a[:3] = np.clip(np.asarray(target) - obs[:3], -0.05, 0.05)
            a[3:6] = np.clip(-obs[3:6], -0.25, 0.25)
            a[6] = grip
            suite.step_eef7(a)
    return bool(suite.arm.position(spec.source)[2] >= src[2] + LIFT_CHECK)


def grasp_tolerance(specs: Sequence[Any], radius_mm: float) -> dict[str, dict[str, Any]]:
    """:func:`probe_grasp` at every offset of :func:`grasp_offsets` for each graspable object (the first place task
    that moves it), scenes cycling over seeds 0-4. Returns ``{object: {"task", "held", "offsets", "failed"}}``."""
    from amf_ros.envs.widowx_sim.suite import WidowXSimSuite

    by_object: dict[str, Any] = {}
    for spec in specs:
        if spec.skill == "place" and spec.source not in by_object:
            by_object[spec.source] = spec
    suite = WidowXSimSuite(tasks=list(by_object.values()), camera=False)
    offsets = grasp_offsets(radius_mm)
    out = {}
    for obj, spec in by_object.items():
        held = [probe_grasp(suite, spec.key, i % 5, o) for i, o in enumerate(offsets)]
        out[obj] = {"task": spec.key, "held": int(sum(held)), "offsets": len(offsets),
                    "failed_mm": [[round(1e3 * v, 1) for v in o] for o, h in zip(offsets, held, strict=True) if not h]}
    return out


def _label(noise_mm: float) -> str:
    return f"{noise_mm:g}"


def tables(results: dict[str, Any]) -> str:
    """The printed / README tables of a results dict."""
    noise = [_label(n) for n in results["config"]["noise_mm"]]
    rows = []
    for key, t in results["tasks"].items():
        cells = [f"{t['noise_mm'][n]['success']}/{t['noise_mm'][n]['episodes']}" for n in noise]
        steps = [t["noise_mm"][n]["mean_steps"] for n in (noise[0], noise[-1])]
        rows.append([key, t["split"] or "-", t["skill"], *cells, *("-" if v is None else f"{v:.1f}" for v in steps),
                     f"{t['noise_mm'][noise[-1]]['mean_grasps']:.2f}"])
    mean = [f"{np.mean([t['noise_mm'][n]['rate'] for t in results['tasks'].values()]):.3f}" for n in noise]
    rows.append(["mean success rate", "", "", *mean, "", "", ""])
    text = format_table(["task", "split", "skill", *(f"{n} mm" for n in noise), f"steps@{noise[0]}mm",
                         f"steps@{noise[-1]}mm", f"closes@{noise[-1]}mm"], rows)
    probe = results.get("grasp_tolerance") or {}
    if probe:
        prow = [[obj, p["task"], f"{p['held']}/{p['offsets']}"] for obj, p in probe.items()]
        text += (f"\n\ngrasp within {results['config']['probe_radius_mm']:g} mm of the grasp point (5 mm grid):\n"
                 + format_table(["object", "task", "held"], prow))
    text += (f"\n\nphysics + arm logic: {results['steps_per_s']:.0f} control steps per CPU second "
             "(0.2 s of simulated time each)")
    return text


def run(cfg: WidowXExpertBenchConfig) -> dict[str, Any]:
    """Every measurement of the module doc, as the results dict written to results.json."""
    from amf_ros.envs.widowx_sim import model
    from amf_ros.envs.widowx_sim.suite import load_tasks

    t0 = time.perf_counter()
    specs = load_tasks(cfg.tasks_file, cfg.tasks)
    tasks, steps_per_s = expert_success(specs, cfg.seeds, cfg.noise_mm, cfg.noise_seed)
    probe = grasp_tolerance(specs, cfg.probe_radius_mm) if cfg.probe_radius_mm > 0 else {}
    settings = []
    for n in cfg.noise_mm:
        per_episode = np.array([s for t in tasks.values() for s in t["noise_mm"][_label(n)]["per_seed"]], float)
        expert = summarize([0], per_episode[:, None])
        settings.append({"name": f"noise {_label(n)} mm", "methods": {"scripted expert": expert}})
    return {"benchmark": "widowx-expert", "config": config_dict(cfg),
            "metric": "scripted expert success rate (episodes of all tasks; per task under 'tasks')",
            "wall_time_s": time.perf_counter() - t0, "settings": settings, "tasks": tasks, "grasp_tolerance": probe,
            "steps_per_s": steps_per_s, "physics": {"contact_options": model.CONTACT_OPTIONS,
                                                    "timestep_s": 0.002, "control_period_s": 0.2}}


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run, write results.json and table.txt under --out, print the tables."""
    parser = argparse.ArgumentParser(prog="python -m amf_ros.bench.widowx_expert", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output directory (default: {DEFAULT_OUT})")
    parser.add_argument("--config", default=None, help="YAML file overriding the default config")
    parser.add_argument("--tasks-file", default=None, help="task file (default: config/tasks/widowx_family.yaml)")
    parser.add_argument("--tasks", default=None, help="comma list of task keys (default: all of the file)")
    parser.add_argument("--seeds", type=int, default=None, help="episodes per task and noise level (default 20)")
    parser.add_argument("--noise-mm", default=None, help="comma list of noise stds in mm (default 0,5,10)")
    parser.add_argument("--probe-radius-mm", type=float, default=None, help="grasp probe radius, 0 = none (10)")
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    cfg = load_config(WidowXExpertBenchConfig, args.config, tasks_file=args.tasks_file, seeds=args.seeds,
                      tasks=None if args.tasks is None else [k for k in args.tasks.split(",") if k],
                      noise_mm=None if args.noise_mm is None else [float(v) for v in args.noise_mm.split(",") if v],
                      probe_radius_mm=args.probe_radius_mm)
    results = run(cfg)
    out = Path(args.out)
    text = tables(results)
    write_results_and_table(out, results, text)
    print(text)
    print(f"\nwrote {out / 'results.json'} ({results['wall_time_s']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
