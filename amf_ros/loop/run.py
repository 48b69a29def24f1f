"""`amf run`: the main job. The whole AMF loop on the embedded simulation, over real ROS 2, every node a process.

    amf run                                  # defaults: 10 rounds (6 warm start + 4 AMF), about 10 min on 2 cores
    amf run --rounds 12 --selector uniform --out runs/demo
    amf run --arm widowx                     # the embedded WidowX 250s with SIMPLER's four tasks (Bridge actions)
    amf run --arm widowx --trunk image_pretrained   # the same loop with the camera policy (acts on the camera)

1. A pre-trained policy: `amf pretrain` on a mismatched allocation (scripted demonstrations of half of the tasks:
   the robot arrives knowing some tasks, not others), made on the first run and cached under ``--cache``. With
   ``--trunk image_pretrained`` the camera policy (frozen EfficientNet-Lite0 on the primary camera + diffusion head,
   training/camera.py) on the same split (bringup/pretrained.py ``camera_pretrain_config``), cached likewise, and the
   nodes switched to it: policy_server acts on the camera, sim_bridge renders it, demo_recorder records it.
2. The nodes of launch/sim.launch.py (amf_ros.bringup.graph) as processes: policy_server, task_selector,
   demo_recorder, sim_bridge (Metaworld, or with ``--arm widowx`` the WidowX tabletop driven through widowx_driver's
   runtime), scripted_teleop (the scripted expert stands in for the human).
3. Round 0 evaluates the pre-trained policy; then every round: /amf/next_task -> /amf/sim/reset -> StartEpisode ->
   the scripted operator demonstrates and ends the episode -> /amf/fine_tune -> evaluation of every task through
   /amf/run_policy. Prints a table per round, writes results.json and a plot into the run directory.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from amf_ros.bringup import graph
from amf_ros.bringup.ros_env import isolated_ros_env
from amf_ros.core.selection import BATCH_CONDITIONING
from amf_ros.data.replay import check_fraction
from amf_ros.loop.nodes import DEMO_SEED_OFFSET, checked, node_overrides
from amf_ros.policies.camera_policy import TRUNKS
from amf_ros.policies.fine_tuning import FINE_TUNE

if TYPE_CHECKING:
    from amf_ros.ros.client import AMFClient

log = logging.getLogger("amf.run")

LOOP_SELECTORS = ("amf", "uniform", "round_robin", "progress", "vfd", "action_l2", "gu", "diversity",
                  "dropout")
"""Selectors `amf run --selector` accepts (amf_ros.core.selectors.SELECTOR_NAMES but rebalancing, as before)."""


ARM_DEFAULTS: dict[str, dict[str, int]] = {
    "metaworld": {"rounds": 10, "eval_episodes": 1, "eval_max_steps": 0},
    "widowx": {"rounds": 12, "eval_episodes": 3, "eval_max_steps": 40},
}
"""The defaults of the fields left None, by arm (others: Metaworld's). WidowX: its four tasks' warm start and 8 more
rounds, 3 evaluation episodes per task so that a task's success reads in thirds, not 0 or 1."""


@dataclass
class LoopConfig:
    """Settings of `amf run` (every field is a flag; results.json records them)."""

    rounds: int | None = None
    """Selection rounds (the first |tasks| rounds are AMF's warm start: each task once); default: the arm's
    (ARM_DEFAULTS: Metaworld 10, WidowX 12)."""
    arm: str = "metaworld"
    """The embedded simulation's arm: metaworld (config/sim.yaml) or widowx (config/sim_widowx.yaml)."""
    selector: str = "amf"
    """task_selector's selector: amf | uniform | round_robin | progress (learning progress from the per-round
    evaluations: core/progress.py), or a peer rule (amf_ros/core/peer_selectors.py): vfd | action_l2 | gu (ensemble
    disagreement: policy_server then fine-tunes a second head every round, about twice the fine-tuning time) |
    diversity | dropout. Every scored rule starts with a warm start (each task once)."""
    config: str = ""
    """Params YAML of the nodes (empty = the arm's: config/sim.yaml or config/sim_widowx.yaml, as sim.launch.py)."""
    out: str = "runs/demo"
    """Parent of the run directory (dataset, checkpoints, node logs, results.json, plot)."""
    cache: str = ""
    """Where the pre-trained checkpoint is cached (made by `amf pretrain` on first use; empty = <workspace>/cache, the
    cache policy_server's pretrain_if_missing also uses: amf_ros.paths)."""
    checkpoint: str = ""
    """Start from this checkpoint instead of the cached pre-trained one."""
    fine_tune_steps: int = FINE_TUNE.steps
    """Gradient steps per /amf/fine_tune (policies.fine_tuning.FineTuneSettings)."""
    eval_episodes: int | None = None
    """Evaluation episodes per task per round (fixed scenes, the same every round); default: the arm's (Metaworld 1,
    WidowX 3)."""
    eval_max_steps: int | None = None
    """Step limit of an evaluation episode (0 = the task's max_steps); default: the arm's (Metaworld 0, WidowX 40:
    a solved episode takes 16-25 steps, and a failed one would otherwise run to 60-120)."""
    seed: int = 0
    """Seed of the pre-training and of the nodes."""
    head: str = "diffusion"
    """Action head of the pre-trained policy (diffusion = Octo's head, as amf bench metaworld; or mlp)."""
    trunk: str = "state"
    """What the policy sees: state (the state vector) or image_pretrained (--arm widowx only: the camera policy,
    frozen EfficientNet-Lite0 on the 256x256 primary camera + proprio, its diffusion head fine-tuned on the cached
    embeddings of the recorded frames; pre-trained 64/64/0/0 on first use, minutes)."""
    startup_timeout_s: float = 180.0
    """How long the nodes may take to come up (torch import, checkpoint load)."""
    robots: int = 0
    """Fleet: N simulated arms (robot1..robotN), one selector, one fine-tune per round over all their demonstrations
    (0 = the single-arm graph; docs/fleet.md)."""
    independent: bool = False
    """Fleet: each robot's request ignores the others' pending assignments (independent per-robot selection)."""
    batch_conditioning: str = "hallucinated"
    """Selector amf, fleet: what another robot's pending task counts as while a robot's request is scored:
    hallucinated (its target states, the paper's batch) or recorded (its latest recorded demonstration; task_selector's
    parameter batch_conditioning)."""
    console: bool = False
    """Also start operator_console: watch the run live at http://127.0.0.1:<console_port>/ (docs/console.md)."""
    console_port: int = 8765
    """TCP port of the console with --console (0 = any free port, printed in the console's log)."""
    replay_fraction: float = 0.0
    """Replay of pre-training data: every fine-tune draws this share of its minibatches from the pre-trained
    checkpoint's own pre-training demonstrations (written beside it on first use, <checkpoint>_replay; uq_vla: 0.5),
    and AMF's criterion is replay-aware (it weighs the data as the fine-tune does); 0 = no replay. One arm; the
    camera policy replays the camera states of its pre-training frames (stored beside its checkpoint)."""

    def __post_init__(self) -> None:
        for name, value in ARM_DEFAULTS.get(self.arm, ARM_DEFAULTS["metaworld"]).items():
            if getattr(self, name) is None:
                setattr(self, name, value)
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds=}")
        if self.selector not in LOOP_SELECTORS:
            raise ValueError(f"selector must be one of {' | '.join(LOOP_SELECTORS)}, got {self.selector=}")
        if self.arm not in graph.SIM_ARMS:
            raise ValueError(f"arm must be one of {list(graph.SIM_ARMS)}, got {self.arm=}")
        if self.head not in ("diffusion", "mlp"):
            raise ValueError(f"head must be diffusion | mlp, got {self.head=}")
        if self.trunk not in TRUNKS:
            raise ValueError(f"trunk must be one of {' | '.join(TRUNKS)}, got {self.trunk=}")
        if self.trunk == "image_pretrained":
            if self.arm != "widowx":
                raise ValueError(f"trunk image_pretrained is the embedded WidowX's camera policy: it needs --arm "
                                 f"widowx, got {self.arm=}")
            if self.head != "diffusion":
                raise ValueError(f"trunk image_pretrained has a diffusion head only, got {self.head=}")
            if self.robots:
                raise ValueError(f"trunk image_pretrained runs on one arm: the fleet mode (--robots) does not "
                                 f"support it yet, got {self.robots=}")
        if self.batch_conditioning not in BATCH_CONDITIONING:
            raise ValueError(f"batch_conditioning must be one of {' | '.join(BATCH_CONDITIONING)}, got "
                             f"{self.batch_conditioning=}")
        if self.robots < 0:
            raise ValueError(f"robots must be >= 0, got {self.robots=}")
        if check_fraction(self.replay_fraction) > 0 and self.robots:
            raise ValueError(f"--replay-fraction runs on one arm (the fleet does not replay yet), got {self.robots=}")
        if self.eval_episodes < 0 or self.fine_tune_steps < 1:
            raise ValueError(f"bad eval_episodes/fine_tune_steps, got {self.eval_episodes=} {self.fine_tune_steps=}")


def run_loop(cfg: LoopConfig) -> dict[str, Any]:
    """Run the loop; returns the results dict (also written to ``<run dir>/results.json``)."""
    from amf_ros.bringup.pretrained import ensure_camera_pretrained_run, ensure_pretrained, ensure_replay_store
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.data.task_set import load_task_set
    from amf_ros.data.tasks import checkpoint_tasks
    from amf_ros.loop.report import evaluate, print_round, write_outputs
    from amf_ros.paths import workspace_root
    from amf_ros.policies.loading import pretrain_counts
    from amf_ros.ros.client import session

    t_start = time.monotonic()
    cache = Path(cfg.cache) if cfg.cache else workspace_root() / "cache"
    if cfg.checkpoint:
        checkpoint = Path(cfg.checkpoint)
        _check_trunk(checkpoint, cfg.trunk)
    elif cfg.trunk == "image_pretrained":
        checkpoint = ensure_camera_pretrained_run(cache, seed=cfg.seed)
    else:
        checkpoint = ensure_pretrained(cache, seed=cfg.seed, head=cfg.head, suite=graph.PRETRAIN_SUITES[cfg.arm])
    t_pretrain = time.monotonic() - t_start  # seconds: ~0 when cached
    run_dir = Path(cfg.out) / time.strftime("run_%Y%m%d_%H%M%S")
    run_dir.mkdir(parents=True, exist_ok=False)
    env = isolated_ros_env(keep_discovery_range=True)  # a domain of its own (unless ROS_DOMAIN_ID is set)
    if cfg.robots > 0:
        from amf_ros.loop.fleet import run_fleet, write_fleet_outputs

        tasks_file = graph.node_section(graph.fleet_plan(1, cfg.arm, cfg.config)[0].params_file,
                                        "task_selector").get("tasks_file")
        instructions = checkpoint_tasks(checkpoint)
        results = {"benchmark": "amf-run-fleet", "config": dataclasses.asdict(cfg), "metric": "success",
                   "tasks": list(instructions), "pretrained_checkpoint": str(checkpoint), "run_dir": str(run_dir),
                   "rounds": []}
        log.info("fleet of %d robots, run dir %s, ROS_DOMAIN_ID=%s", cfg.robots, run_dir, env["ROS_DOMAIN_ID"])
        try:
            run_fleet(cfg, checkpoint, run_dir, instructions, load_task_set(tasks_file).max_steps, env, results)
        finally:
            results["wall_time_s"] = time.monotonic() - t_start
            if len(results["rounds"]) > 1:
                write_fleet_outputs(results, run_dir)
        return results
    specs = graph.sim_plan(cfg.config, checkpoint=str(checkpoint.resolve()), arm=cfg.arm, console=cfg.console,
                           console_port=cfg.console_port)
    tasks_file = graph.node_section(specs[0].params_file, "task_selector").get("tasks_file") or \
        "config/tasks/metaworld.yaml"
    instructions = checkpoint_tasks(checkpoint)  # the tasks the policy knows = the candidates of task_selector
    max_steps = load_task_set(tasks_file).max_steps
    log.info("run dir %s, ROS_DOMAIN_ID=%s, trunk %s, pre-trained checkpoint %s (%.0f s to get it)", run_dir,
             env["ROS_DOMAIN_ID"], cfg.trunk, checkpoint, t_pretrain)
    if cfg.console:
        log.info("operator console: http://127.0.0.1:%s/ (its log: %s)", cfg.console_port or "<see log>",
                 run_dir / "logs" / "operator_console.log")
    pre = pretrain_counts(checkpoint)  # the table marks which tasks the generalist was pre-trained on
    results: dict[str, Any] = {"benchmark": "amf-run", "config": dataclasses.asdict(cfg), "metric": "success",
                               "trunk": cfg.trunk, "tasks": list(instructions),
                               "pretrained_checkpoint": str(checkpoint), "pretrain_counts": pre,
                               "pretrain_wall_s": t_pretrain, "run_dir": str(run_dir), "rounds": []}
    extra = node_overrides(run_dir, cfg, tasks=list(instructions))  # the candidates it evaluates
    extra[graph.CONSOLE_NODE] = ["-p", "auto_ask:=false"]  # watching must not ask: asks advance the selector's draws
    if cfg.replay_fraction > 0:  # both nodes read the same replay: the fine-tune mixes it in, AMF weighs it alike
        replay = ensure_replay_store(checkpoint)
        results["replay_dir"] = str(replay)
        for node in ("policy_server", "task_selector"):
            extra[node] += ["-p", f"replay_dir:={replay.resolve()}", "-p", f"replay_fraction:={cfg.replay_fraction}"]
    procs = NodeProcesses(specs, log_dir=run_dir / "logs", env=env, extra_args=extra)
    with procs, session("amf_run") as client:
        try:
            checked(procs, lambda: client.wait_ready(timeout=cfg.startup_timeout_s), "bring-up")
            row = {"round": 0, "task": "", "evaluation": evaluate(client, list(instructions), cfg, max_steps)}
            results["rounds"].append(row)
            print_round(row, list(instructions), pre)
            for r in range(1, cfg.rounds + 1):
                row = checked(procs, lambda r=r: _one_round(client, r, cfg), f"round {r}")
                row["evaluation"] = checked(procs, lambda: evaluate(client, list(instructions), cfg, max_steps),
                                            f"evaluation of round {r}")
                results["rounds"].append(row)
                print_round(row, list(instructions), pre)
        except BaseException as exc:  # keep every finished round: results.json + plot, then re-raise
            results["error"] = f"{type(exc).__name__}: {exc}"
            results["wall_time_s"] = time.monotonic() - t_start
            if results["rounds"]:
                write_outputs(results, run_dir)
                log.error("stopped after round %d; rounds so far in %s", results["rounds"][-1]["round"],
                          run_dir / "results.json")
            raise
    results["wall_time_s"] = time.monotonic() - t_start
    write_outputs(results, run_dir)
    return results


def _check_trunk(checkpoint: Path, trunk: str) -> None:
    """A --checkpoint of the kind --trunk serves (a camera policy has policies.camera_policy.MARKER): said before the
    nodes start, not by a policy_server that ends for good."""
    from amf_ros.policies.camera_policy import MARKER, read_marker

    camera = read_marker(checkpoint) is not None
    if camera != (trunk == "image_pretrained"):
        raise ValueError(f"--checkpoint {checkpoint} is {'a camera' if camera else 'a state'}-policy checkpoint "
                         f"({MARKER} {'present' if camera else 'absent'}), but --trunk is {trunk}")


def _one_round(client: AMFClient, r: int, cfg: LoopConfig) -> dict[str, Any]:
    """next_task -> reset -> StartEpisode -> (scripted operator demonstrates, ends it) -> fine_tune."""
    t0 = time.monotonic()
    d = client.next_task()
    t_select = time.monotonic() - t0
    client.reset(d.task, seed=DEMO_SEED_OFFSET + 100 * cfg.seed + r)
    ep = client.start_episode(d.task, d.instruction)
    info = client.wait_episode(ep.episode_id, timeout=300.0)
    ft = client.fine_tune(steps=cfg.fine_tune_steps, timeout=1800.0)
    if not ft.ok:
        raise RuntimeError(f"fine_tune failed: {ft.message}")
    return {"round": r, "task": d.task, "instruction": d.instruction, "warm_start": bool(d.warm_start),
            "scores": dict(zip(d.tasks, map(float, d.scores), strict=True)),
            "demo_counts": dict(zip(d.tasks, map(int, d.demo_counts), strict=True)),
            "selector_time_s": float(d.compute_time), "next_task_round_trip_s": t_select,
            "episode": {"id": info.episode_id, "steps": int(info.num_steps), "success": bool(info.success)},
            "fine_tune": {"checkpoint": ft.checkpoint, "final_loss": float(ft.final_loss),
                          "alphas": dict(zip(ft.tasks, map(float, ft.alphas), strict=True))},
            "round_time_s": time.monotonic() - t0}


def _field_docs(cls: type) -> dict[str, str]:
    """The docstring under each dataclass field (the help text of its flag)."""
    import ast
    import inspect

    body = ast.parse(inspect.getsource(cls)).body[0].body
    return {a.target.id: b.value.value.strip() for a, b in zip(body, body[1:], strict=False)
            if isinstance(a, ast.AnnAssign) and isinstance(b, ast.Expr) and isinstance(b.value, ast.Constant)}


CHOICES: dict[str, Sequence[str]] = {"trunk": TRUNKS, "batch_conditioning": BATCH_CONDITIONING}
"""The LoopConfig fields whose flag takes one of a few names."""


def build_parser() -> argparse.ArgumentParser:
    """Flags of `amf run`, one per LoopConfig field."""
    p = argparse.ArgumentParser(prog="amf run", description=__doc__.split("\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    docs = _field_docs(LoopConfig)
    for f in dataclasses.fields(LoopConfig):
        if isinstance(f.default, bool):
            p.add_argument("--" + f.name.replace("_", "-"), action="store_true", help=docs.get(f.name, f.name))
            continue
        kind = int if f.default is None else type(f.default)  # None = the arm's default (ARM_DEFAULTS): an int
        p.add_argument("--" + f.name.replace("_", "-"), type=kind, default=f.default, help=docs.get(f.name, f.name),
                       choices=CHOICES.get(f.name))
    return p


def main(argv: Sequence[str]) -> int:
    """Entry point of `amf run`."""
    logging.basicConfig(level=logging.INFO, format="[amf run] %(message)s")
    parser = build_parser()
    args = parser.parse_args(list(argv))
    try:
        cfg = LoopConfig(**{f.name: getattr(args, f.name) for f in dataclasses.fields(LoopConfig)})
    except ValueError as exc:  # a bad combination of options: the usage and the reason, not a traceback
        parser.error(str(exc))
    try:
        results = run_loop(cfg)
    except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the rounds so far are written and the nodes stopped (run_loop)
        print("\n[amf run] interrupted", file=sys.stderr)
        return 130
    summary = results.get("summary", {})
    if summary.get("new_tasks_success"):
        pre, new = summary["pretrained_tasks_success"], summary["new_tasks_success"]
        print(f"\npre-trained tasks {pre[0]:.2f} -> {pre[-1]:.2f}, new tasks {new[0]:.2f} -> {new[-1]:.2f} "
              f"(round 0 -> round {len(new) - 1}, {cfg.eval_episodes} evaluation episode(s) per task)")
    print(f"\nresults: {results['run_dir']}/results.json  plot: {results['run_dir']}/amf_run.png  "
          f"wall time {results['wall_time_s']:.0f} s")
    return 0
