"""`amf bench simpler`: evaluate a policy on SIMPLER's WidowX tasks the way SimplerEnv's scripts do.

Protocol (SimplerEnv ``scripts/octo_bridge.sh``): per task, object layouts (episode ids) 0..23, each run with
policy seeds 0, 2, 4 (= 72 episodes); every episode runs to SIMPLER's time limit (60 steps, eggplant 120) and
counts as a success if the task is solved at the last step. Reported: success rate per task with a 90%
bootstrap CI over episodes, next to the published SIMPLER numbers of Octo-Small and Octo-Base
(``simpler_env/utils/metrics.py`` SIMPLER_PERF, v1.0 checkpoints, visual matching).

    amf bench simpler --checkpoint ~/octo-small --out runs/bench/simpler            # Octo's own head
    amf bench simpler --policy mypkg.mod:make_policy --tasks carrot_on_plate --episodes 4 --seeds 1

``--policy octo`` builds ``OctoSimplerPolicy(OctoTrunk(checkpoint))``; ``--policy MODULE:FACTORY`` calls
``FACTORY(config)`` and uses what it returns (``reset(instruction, seed)``, ``step(image) -> (7,)``).
Needs simpler_env (and for ``octo``, Octo + a local checkpoint); without them it exits with what to install.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import time
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from amf_ros._optional import load_object
from amf_ros.bench.results import add_common_args, config_dict, summarize, write_results_and_table
from amf_ros.config_file import load_config
from amf_ros.outputs import format_table, save_figure

log = logging.getLogger(__name__)

# simpler_env/utils/metrics.py SIMPLER_PERF (success, visual matching, 72 episodes each).
PUBLISHED_SUCCESS: dict[str, dict[str, float]] = {
    "widowx_spoon_on_towel": {"octo-small": 0.472, "octo-base": 0.125, "rt-1-x": 0.000},
    "widowx_carrot_on_plate": {"octo-small": 0.097, "octo-base": 0.083, "rt-1-x": 0.042},
    "widowx_stack_cube": {"octo-small": 0.042, "octo-base": 0.000, "rt-1-x": 0.000},
    "widowx_put_eggplant_in_basket": {"octo-small": 0.569, "octo-base": 0.431, "rt-1-x": 0.000},
}


@dataclasses.dataclass
class SimplerBenchConfig:
    """Settings of `amf bench simpler` (defaults = SIMPLER's official Bridge protocol)."""

    checkpoint: str = ""
    """Local Octo checkpoint directory (``--policy octo``)."""
    step: int | None = None
    """Orbax step of the checkpoint (None = latest)."""
    policy: str = "octo"
    """"octo" or a "module:factory" import string (factory(config) -> policy with reset/step)."""
    policy_name: str = ""
    """Name shown in the results (default: "octo" or the factory's name)."""
    tasks: list[str] = dataclasses.field(default_factory=list)
    """Task keys from tasks_file (empty = all four)."""
    tasks_file: str = ""
    """Task set YAML (empty = config/tasks/simpler_widowx.yaml)."""
    episodes: int = 24
    """Object layouts per seed (episode ids 0..episodes-1; SIMPLER has 24)."""
    seeds: int = 3
    """Policy seeds per layout: 0, 2, 4, ... (SIMPLER: 3 seeds = 72 episodes per task)."""
    dataset_name: str = "bridge_dataset"
    """Action statistics used to un-normalise."""
    mask_mode: str = "all"
    """"all" = SimplerEnv's manual un-normalisation (all 7 dims); "stats" = Octo's (gripper raw)."""
    t5_path: str = ""
    """Local t5-base tokenizer/config directory for offline loading (empty = HF cache)."""

    def __post_init__(self) -> None:
        if self.episodes < 1 or self.seeds < 1:
            raise ValueError(f"episodes and seeds must be >= 1, got {self.episodes=} {self.seeds=}")
        if self.mask_mode not in ("all", "stats"):
            raise ValueError(f"mask_mode must be 'all' or 'stats', got {self.mask_mode=}")
        if self.policy != "octo" and ":" not in self.policy:
            raise ValueError(f"policy must be 'octo' or 'module:factory', got {self.policy=}")

    @property
    def seed_values(self) -> list[int]:
        """Policy seeds 0, 2, 4, ... as SimplerEnv's scripts use them."""
        return [2 * i for i in range(self.seeds)]


def make_policy(config: SimplerBenchConfig) -> Any:
    """The policy to evaluate (see module doc)."""
    if config.policy == "octo":
        if not config.checkpoint:
            raise ValueError("--policy octo needs --checkpoint DIR (a local Octo checkpoint; see README.md, "
                             "'Deploying with Octo')")
        from amf_ros.policies.octo.simpler_policy import OctoSimplerPolicy
        from amf_ros.policies.octo.trunk import OctoTrunk

        trunk = OctoTrunk(config.checkpoint, step=config.step, dataset_name=config.dataset_name,
                          t5_path=config.t5_path or None)
        return OctoSimplerPolicy(trunk, dataset_name=config.dataset_name, mask_mode=config.mask_mode)
    factory: Callable[[SimplerBenchConfig], Any] = load_object(config.policy, "policy factory")
    return factory(config)


def run_episode(suite: Any, policy: Any, task: str, episode_id: int, seed: int) -> tuple[bool, int]:
    """One SIMPLER episode to the time limit; returns (success at the last step, steps)."""
    suite.reset(task, seed=episode_id, episode_id=episode_id)
    env = suite.current
    policy.reset(env.instruction, seed)
    done, success, steps = False, False, 0
    while not done:
        _, success, done = suite.step(policy.step(env.image))
        steps += 1
    return bool(success), steps


def evaluate(suite: Any, policy: Any, config: SimplerBenchConfig,
             progress: Callable[[str], None] | None = None) -> dict[str, np.ndarray]:
    """Success (episodes * seeds,) per task, ordered seed-major like SIMPLER's loops."""
    keys = config.tasks or suite.task_keys
    out: dict[str, np.ndarray] = {}
    for task in keys:
        results = []
        for seed in config.seed_values:
            for eid in range(config.episodes):
                ok, _ = run_episode(suite, policy, task, eid, seed)
                results.append(ok)
            if progress is not None:
                progress(f"{task} seed {seed}: {np.mean(results[-config.episodes:]):.3f}")
        out[task] = np.asarray(results, dtype=float)
    return out


def results_dict(success: dict[str, np.ndarray], suite: Any, config: SimplerBenchConfig, name: str,
                 wall: float) -> dict[str, Any]:
    """results.json content: one setting per task, our method plus the published anchors."""
    settings = []
    for task, s in success.items():
        env_name = suite.specs[task].env_name
        published = PUBLISHED_SUCCESS.get(env_name, {})
        methods = {name: summarize([0], s[:, None])}
        settings.append({"name": task, "env_name": env_name, "episodes": int(len(s)), "methods": methods,
                         "published_success": published})
    return {"benchmark": "simpler", "config": config_dict(config), "metric": "success rate (last step)",
            "wall_time_s": wall, "settings": settings}


def table(results: dict[str, Any]) -> str:
    """Per task: our success with its 90% CI next to the published Octo-Small and Octo-Base numbers."""
    rows = []
    for st in results["settings"]:
        m = next(iter(st["methods"].values()))
        pub = st["published_success"]
        rows.append([st["name"], st["episodes"], f"{m['mean'][0]:.3f} [{m['ci_low'][0]:.3f}, {m['ci_high'][0]:.3f}]",
                     pub.get("octo-small", float("nan")), pub.get("octo-base", float("nan"))])
    return format_table(["task", "episodes", "ours (90% CI)", "Octo-Small (pub.)", "Octo-Base (pub.)"], rows)


def plot(results: dict[str, Any], path: Path) -> Path:
    """Success per task (bars with the 90% CI) beside the published Octo numbers; returns the PNG path."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [s["name"] for s in results["settings"]]
    x = np.arange(len(names))
    ours = [next(iter(s["methods"].values())) for s in results["settings"]]
    mean = np.array([m["mean"][0] for m in ours])
    err = np.array([[m["mean"][0] - m["ci_low"][0], m["ci_high"][0] - m["mean"][0]] for m in ours]).T
    fig, ax = plt.subplots(figsize=(7, 3.5))
    ax.bar(x - 0.25, mean, 0.25, yerr=err, label="ours", capsize=3)
    for off, key in ((0.0, "octo-small"), (0.25, "octo-base")):
        ax.bar(x + off, [s["published_success"].get(key, np.nan) for s in results["settings"]], 0.25,
               label=f"{key} (published)")
    ax.set_xticks(x, names, rotation=15)
    ax.set_ylabel("success rate")
    ax.set_ylim(0, 1)
    ax.legend()
    ax.grid(axis="y", alpha=0.3)
    out = save_figure(fig, path)
    plt.close(fig)
    return out


def main(argv: Sequence[str]) -> int:
    """Entry point of `amf bench simpler`."""
    parser = argparse.ArgumentParser(prog="amf bench simpler", description=__doc__.split("\n\n")[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    add_common_args(parser, out="runs/bench/simpler")
    parser.add_argument("--checkpoint", default=None, help="local Octo checkpoint directory (--policy octo)")
    parser.add_argument("--step", type=int, default=None, help="orbax step (default: latest)")
    parser.add_argument("--policy", default=None, help="'octo' (default) or MODULE:FACTORY")
    parser.add_argument("--tasks", default=None, help="comma-separated task keys (default: all four)")
    parser.add_argument("--tasks-file", default=None, help="task set YAML (default: config/tasks/simpler_widowx.yaml)")
    parser.add_argument("--episodes", type=int, default=None, help="layouts per seed (default 24)")
    parser.add_argument("--mask-mode", default=None, choices=("all", "stats"),
                        help="un-normalise all 7 dims like SimplerEnv ('all', default) or leave the gripper raw")
    parser.add_argument("--t5-path", default=None, help="local t5-base tokenizer/config directory")
    args = parser.parse_args(list(argv))
    tasks = [t.strip() for t in args.tasks.split(",") if t.strip()] if args.tasks else None
    try:
        config = load_config(SimplerBenchConfig, args.config, checkpoint=args.checkpoint, step=args.step,
                             policy=args.policy, tasks=tasks, tasks_file=args.tasks_file, episodes=args.episodes,
                             seeds=args.seeds, mask_mode=args.mask_mode, t5_path=args.t5_path)
        from amf_ros.envs.suites import get_suite

        simpler = get_suite("simpler")
        specs = simpler.load_tasks(config.tasks or None, config.tasks_file or None)
        suite = simpler.make_backend(specs)
        suite.env(specs[0].key)  # build one env now: a missing simpler_env fails here, before the policy loads
        policy = make_policy(config)
    except (ImportError, ValueError) as exc:
        print(f"amf bench simpler: {exc}")
        return 2
    name = config.policy_name or (config.policy if config.policy == "octo" else config.policy.split(":")[1])
    t0 = time.perf_counter()
    success = evaluate(suite, policy, config, progress=lambda msg: print(msg, flush=True))
    wall = time.perf_counter() - t0
    suite.close()
    results = results_dict(success, suite, config, name, wall)
    out = Path(args.out)
    text = table(results)
    write_results_and_table(out, results, text)
    plot(results, out / "simpler_success.png")
    print(text)
    print(f"wrote {out / 'results.json'} ({wall:.1f} s)")
    return 0
