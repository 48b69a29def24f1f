"""The `amf` command: benchmarks, bring-up, data tools.

Every sub-command lives in its own module and is imported only when called (``module:function`` strings),
so `amf --help` works without torch, rclpy or Metaworld. A sub-command function takes ``argv`` (the
arguments after its name) and returns an exit code.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from amf_ros._optional import load_object

# `amf bench NAME ...`: each writes results.json + a table (+ plots) under --out.
BENCHMARKS: dict[str, tuple[str, str]] = {
    "integrator": ("amf_ros.bench.integrator:main", "AMF-GP vs baselines on the paper's 2D integrator (Fig. 2)"),
    "selector-scaling": ("amf_ros.bench.selector_scaling:main", "time/memory of one AMF criterion evaluation"),
    "criterion-map": ("amf_ros.bench.criterion_map:main", "didactic criterion map around the circle (Fig. 14)"),
    "metaworld": ("amf_ros.bench.metaworld:main", "AMF-NN vs baselines on a Metaworld multi-task suite (Fig. 3)"),
    "widowx": ("amf_ros.bench.metaworld:widowx_main",
               "AMF-NN vs baselines on the embedded WidowX (four tasks; the 16-task family: --config "
               "config/bench/widowx_family.yaml; the camera policy: --trunk image_pretrained)"),
    "widowx-expert": ("amf_ros.bench.widowx_expert:main",
                      "scripted expert success on the embedded WidowX's task family at 0/5/10 mm of noise"),
    "compare": ("amf_ros.bench.compare:main", "metaworld/widowx results on one axis of demonstrations (B, replay)"),
    "perf-finetune": ("amf_ros.bench.perf_finetune:main", "head fine-tuning speed on cached trunk embeddings"),
    "store": ("amf_ros.bench.store:main", "episode store write/read throughput and bytes per step"),
    "simpler": ("amf_ros.bench.simpler:main", "evaluate a policy on SIMPLER WidowX tasks (needs simpler_env)"),
    "faults": ("amf_ros.bench.faults:main", "fault probes (killed/frozen nodes, floods, stop, checkpoints) vs bounds"),
    "ros-latency": ("amf_ros.bench.ros_latency:main", "next_task latency and control-loop jitter over ROS 2"),
    "console-drive": ("amf_ros.bench.console_drive:main",
                      "the console's Drive panel: camera rate to the page, CPU, key -> Joy / applied action latency"),
    "fleet": ("amf_ros.bench.fleet:main",
              "amf run --robots 1 vs 2 (joint / independent selection): throughput, success"),
    "console-load": ("amf_ros.bench.console_load:main",
                     "operator console with 5 browsers during recording: frames kept, control periods, CPU"),
    "encoder-speed": ("amf_ros.bench.encoder_speed:main",
                      "the camera encoder's ms per frame: torch vs ONNX Runtime, batch 1 and 5"),
    "wxai-latency": ("amf_ros.bench.wxai_latency:main",
                     "the WidowX AI on trossen-arm-sim via Trossen's driver: command -> motion latency, jitter"),
}

# `amf NAME ...` for everything else.
COMMANDS: dict[str, tuple[str, str]] = {
    "run": ("amf_ros.loop.run:main", "the main job: the whole AMF loop on the embedded simulation over ROS 2"),
    "up": ("amf_ros.bringup.up:main", "start the nodes of a config YAML as processes (no `ros2 launch` needed)"),
    "stop": ("amf_ros.ros.stop:main", "stop the arm(s) now: drop the actions sent so far, end run_policy / demos"),
    "pretrain": ("amf_ros.training.pretrain:main", "pre-train a policy on scripted demonstrations (metaworld, widowx)"),
    "inspect": ("amf_ros.data.cli:inspect_main", "summarise and validate an episode dataset"),
    "export": ("amf_ros.data.cli:export_main", "export episodes (rlds, lerobot)"),
    "import": ("amf_ros.data.cli:import_main", "import episodes (bag: rosbag2 sqlite3/MCAP; lerobot: LeRobot v3)"),
}


def _load(target: str) -> Callable[[Sequence[str]], int]:
    """The sub-command function of ``target`` (``module:function``); a module left out of this installation
    exits with a one-line message, any other import error propagates with its cause."""
    try:
        return load_object(target, "command")
    except ValueError as exc:
        missing = exc.__cause__
        module_name = target.partition(":")[0]
        if isinstance(missing, ModuleNotFoundError) and missing.name and module_name.startswith(missing.name):
            raise SystemExit(f"amf: {module_name} is not part of this installation ({missing})") from exc
        raise


def _listing(table: dict[str, tuple[str, str]]) -> str:
    return "\n".join(f"  {name:<18} {help_}" for name, (_, help_) in table.items())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the `amf` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = argparse.ArgumentParser(
        prog="amf",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description="amf_ros: active multi-task fine-tuning for Octo on a WidowX arm.",
        epilog="commands:\n" + _listing(COMMANDS) + "\n  bench NAME         one of:\n" + _listing(BENCHMARKS)
        + "\n\nRun `amf COMMAND --help` for the options of a command.",
    )
    parser.add_argument("command", choices=[*COMMANDS, "bench"], help="what to do")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the command")
    if not argv:
        parser.print_help()
        return 2
    ns = parser.parse_args(argv[:1])
    rest = argv[1:]
    if ns.command == "bench":
        if not rest or rest[0] in ("-h", "--help"):
            print("usage: amf bench NAME [--out DIR] [--seeds N] [--rounds N] [--jobs N] [--config FILE]\n")
            print("benchmarks:\n" + _listing(BENCHMARKS))
            return 0 if rest else 2
        name, rest = rest[0], rest[1:]
        if name not in BENCHMARKS:
            parser.error(f"unknown benchmark {name!r}; choose from {', '.join(BENCHMARKS)}")
        return int(_load(BENCHMARKS[name][0])(rest) or 0)
    return int(_load(COMMANDS[ns.command][0])(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
