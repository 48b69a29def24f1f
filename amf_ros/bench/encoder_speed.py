"""The camera encoder's cost per frame on this CPU, torch against ONNX Runtime (`amf bench encoder-speed`).

What is measured (one process, one thread unless ``--threads``): :meth:`PretrainedImageEncoder.encode` of the camera
policy's two cameras (``table_keypoints`` for the primary camera, ``keypoints`` for the wrist camera) on random 256 x
256 RGB frames, at batch 1 (policy_server acting on one arm) and batch 5 (an evaluation's five lockstep episodes of a
task), each runtime's calls interleaved with the other's so that both see the same machine load. Reported per
setting: ms per frame (median and p90 over ``reps`` calls, preprocessing included), the speed-up of ONNX Runtime, and
the largest difference of the two runtimes' embeddings against their scale (float32 rounding of other summation
orders). Run::

    amf bench encoder-speed                      # -> docs/results/encoder_speed
    amf bench encoder-speed --reps 5 --out /tmp/encoder_speed

Writes results.json and table.txt under --out; prints the JSON and the table.
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

DEFAULT_OUT = "docs/results/encoder_speed"


@dataclass(frozen=True)
class EncoderSpeedConfig:
    """What the bench measures (module doc)."""

    pools: tuple[str, ...] = ("table_keypoints", "keypoints")
    """Poolings timed: the primary camera's and the wrist camera's."""
    batches: tuple[int, ...] = (1, 5)
    """Frames per call."""
    reps: int = 15
    """Timed calls per setting and runtime (after one untimed warm-up)."""
    threads: int = 1
    """torch's (and so ONNX Runtime's) intra-op threads."""
    seed: int = 0


def _frames(n: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 256, 256, 3), dtype=np.uint8)


def run(config: EncoderSpeedConfig) -> dict[str, Any]:
    """Time every (pool, batch) on both runtimes side by side; returns the results dict (module doc)."""
    import torch

    from amf_ros.policies.image_encoders import PretrainedImageEncoder, onnxruntime_available
    from amf_ros.threads import limited_threads

    if not onnxruntime_available():
        raise ImportError("amf bench encoder-speed compares against ONNX Runtime: pip install onnxruntime==1.32.0 "
                          "onnx==1.23.2")
    t_start = time.perf_counter()
    settings: dict[str, Any] = {}
    with limited_threads(config.threads), torch.inference_mode():
        for pool in config.pools:
            encoders = {rt: PretrainedImageEncoder(pool=pool, runtime=rt) for rt in ("torch", "onnxruntime")}
            for batch in config.batches:
                frames = _frames(batch, config.seed)
                out = {rt: enc.encode(frames, batch_size=batch) for rt, enc in encoders.items()}  # warm-up
                times: dict[str, list[float]] = {rt: [] for rt in encoders}
                for _ in range(config.reps):
                    for rt, enc in encoders.items():
                        t0 = time.perf_counter()
                        enc.encode(frames, batch_size=batch)
                        times[rt].append(1000.0 * (time.perf_counter() - t0) / batch)
                row: dict[str, Any] = {"pool": pool, "batch": batch}
                for rt, ts in times.items():
                    row[f"{rt}_ms_p50"] = float(np.median(ts))
                    row[f"{rt}_ms_p90"] = float(np.percentile(ts, 90))
                row["speedup"] = row["torch_ms_p50"] / row["onnxruntime_ms_p50"]
                row["max_abs_diff"] = float(np.abs(out["torch"] - out["onnxruntime"]).max())
                row["output_scale"] = float(np.abs(out["torch"]).max())
                settings[f"{pool}_b{batch}"] = row
    return {"benchmark": "encoder_speed", "config": config_dict(config), "metric": "ms per frame",
            "settings": settings, "torch": torch.__version__, "onnxruntime": _ort_version(),
            "wall_time_s": time.perf_counter() - t_start}


def _ort_version() -> str:
    import onnxruntime

    return str(onnxruntime.__version__)


def table(results: dict[str, Any]) -> str:
    """The results as a fixed-width table."""
    rows = [[r["pool"], r["batch"], r["torch_ms_p50"], r["onnxruntime_ms_p50"], r["speedup"],
             f"{r['max_abs_diff']:.1e} / {r['output_scale']:.2f}"] for r in results["settings"].values()]
    return format_table(["pooling", "batch", "torch ms/frame", "ONNX Runtime ms/frame", "speed-up",
                         "max |difference| / scale"], rows, floatfmt=".1f")


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point: run, write results.json and table.txt under --out, print JSON and table."""
    parser = argparse.ArgumentParser(prog="amf bench encoder-speed", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default=DEFAULT_OUT, help=f"output directory (default: {DEFAULT_OUT})")
    parser.add_argument("--reps", type=int, default=EncoderSpeedConfig.reps, help="timed calls per setting")
    parser.add_argument("--threads", type=int, default=EncoderSpeedConfig.threads, help="intra-op threads")
    args = parser.parse_args(sys.argv[1:] if argv is None else list(argv))
    if args.reps < 1 or args.threads < 1:
        parser.error("--reps and --threads must be >= 1")
    results = run(EncoderSpeedConfig(reps=args.reps, threads=args.threads))
    text = table(results)
    write_results_and_table(args.out, results, text)
    print(json.dumps(results, indent=1))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
