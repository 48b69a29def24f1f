"""What `amf run` (loop/run.py) and its fleet mode (loop/fleet.py) share about driving the node graph: the per-node
parameter overrides of a run, naming the node that died when a step fails, and the scene seeds of demonstrations
and evaluations (the same scenes for one arm and for a fleet, so that their numbers compare).

Why a module of its own: run.py starts the fleet mode and the report, and both need these; here they sit below all
three, so that no file of loop/ imports one that imports it back.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol, Sequence, TypeVar

from amf_ros.bringup import graph
from amf_ros.bringup.params import schema
from amf_ros.bringup.processes import NodeProcesses
from amf_ros.core.acquisition import ENSEMBLE_METRICS
from amf_ros.policies.camera_policy import TRUNKS

T = TypeVar("T")

ENSEMBLE_MEMBERS = 2
"""policy_server's ``ensemble_members`` for the selectors scored by ensemble disagreement (ENSEMBLE_METRICS: vfd,
action_l2, gu): a second head fine-tuned every round, as ``amf bench metaworld``."""
DEMO_SEED_OFFSET = 10_000
"""Demonstration scenes: sim_bridge's reset seed is this + 100 x the run's seed + the round (fleet: + 10 x round +
robot)."""
EVAL_SEED_OFFSET = 1_000_000
"""Evaluation scenes: sim_bridge's reset seed is this + the episode (fixed scenes, the same every round)."""
CAMERA_TOPIC = "camera/image_raw"
"""The primary camera's topic (relative: under the graph's namespace), as sim_bridge publishes it."""
CAMERA_KEY = "image_primary"
"""The recorded camera stream the camera policy is trained on (policies.camera_policy.CameraSpec.image_key)."""
WRIST_TOPIC = "camera/wrist/image_raw"
"""The wrist camera's topic, as sim_bridge publishes it with ``wrist_camera_name: wrist``."""
WRIST_KEY = "image_wrist"
"""The recorded wrist camera stream (CameraSpec.wrist_image_key)."""
CAMERA_STALE_PERIODS = 20.0
"""policy_server's ``observation_stale_periods`` with the cameras (2 s at config/sim_widowx.yaml's 10 Hz; the state
run's 5 periods, 0.5 s, stay). sim_bridge then renders two 256 x 256 frames per step: it answered an action in
0.15-0.35 s on an idle machine, and in over 1 s beside a CI run, where two evaluation goals in a row ended "observation
stale" after one step and `amf run` stopped (session 36; before the control loop's fix of that session the loop ran
one step behind, never waited for the simulator's answer, and so never met the bound)."""

CAMERA_OVERRIDES: dict[str, list[str]] = {
    "policy_server": ["-p", "trunk:=image_pretrained", "-p", f"image_topic:={CAMERA_TOPIC}",
                      "-p", f"wrist_image_topic:={WRIST_TOPIC}",
                      "-p", f"observation_stale_periods:={CAMERA_STALE_PERIODS}"],
    "demo_recorder": ["-p", f"image_topics:=[{CAMERA_TOPIC},{WRIST_TOPIC}]",
                      "-p", f"image_keys:=[{CAMERA_KEY},{WRIST_KEY}]"],
    "sim_bridge": ["-p", "render:=true", "-p", "wrist_camera_name:=wrist", "-p", f"wrist_image_topic:={WRIST_TOPIC}"],
}
"""``trunk: image_pretrained``: policy_server acts on the cameras (and waits longer for the simulator's answer:
:data:`CAMERA_STALE_PERIODS`), sim_bridge renders them (the primary and the gripper's wrist camera), demo_recorder
records both (fine-tuning and task_selector read each recorded frame's cached embeddings, data/image_embeddings.py).
A camera policy without a wrist camera ignores the wrist stream."""


class RunSettings(Protocol):
    """What :func:`node_overrides` reads of a run's settings (`amf run`'s LoopConfig)."""

    selector: str
    seed: int
    trunk: str


def node_overrides(run_dir: Path, cfg: RunSettings, tasks: Sequence[str] = ()) -> dict[str, list[str]]:
    """Per-node `-p` overrides: this run's dataset/checkpoint dirs and workspace, selector and seed (only declared
    names); for the ensemble rules also policy_server's ensemble_members and task_selector's selection_policy
    'latest' (the config's 'frozen' would keep the pre-trained checkpoint, which has no members; ``amf bench
    metaworld`` scores the peer rules with the current fine-tuned heads too). ``tasks``: task_selector's
    candidates (`amf run`: the pre-trained checkpoint's tasks, which it evaluates; empty = the YAML's tasks_file).
    ``trunk`` image_pretrained adds :data:`CAMERA_OVERRIDES`."""
    run_dir = run_dir.resolve()
    # the run dir is the graph's workspace: its nodes' locks (bringup/graph_lock.py) live there, so a run never
    # collides with an `amf up` graph of the same namespace on the default workspace (its own DDS domain, own data)
    values: dict[str, Any] = {"dataset_dir": str(run_dir / "dataset"), "checkpoint_dir": str(run_dir / "checkpoints"),
                              "workspace": str(run_dir), "selector": cfg.selector, "seed": cfg.seed,
                              "batch_conditioning": cfg.batch_conditioning}
    if cfg.selector in ENSEMBLE_METRICS:  # a second head every round, and a selector that follows the rounds
        values.update(ensemble_members=ENSEMBLE_MEMBERS, selection_policy="latest")
    out: dict[str, list[str]] = {}
    for node in graph.SIM_NODES:
        declared = {p.name for p in schema(node)}
        args: list[str] = []
        for key, value in values.items():
            if key in declared:
                args += ["-p", f"{key}:={value}"]
        out[node] = args
    if tasks:
        out["task_selector"] += ["-p", f"tasks:=[{', '.join(tasks)}]"]
    if cfg.trunk not in TRUNKS:
        raise ValueError(f"trunk must be one of {' | '.join(TRUNKS)}, got {cfg.trunk=}")
    if cfg.trunk == "image_pretrained":
        for node, args in CAMERA_OVERRIDES.items():
            out[node] += args
    return out


def checked(procs: NodeProcesses, fn: Callable[[], T], what: str) -> T:
    """Run ``fn``; if it fails and a node has died, say which node and show the end of its log."""
    try:
        return fn()
    except Exception as exc:
        dead = procs.dead()
        if dead:
            tails = "\n".join(f"--- {n} (exit {c}) ---\n{procs.log_tail(n)}" for n, c in dead.items())
            raise RuntimeError(f"{what} failed ({exc}); node(s) died:\n{tails}") from exc
        raise
