"""The embedded simulation's pre-trained policy (Metaworld or WidowX; for the WidowX also the camera policy of `amf run
--trunk image_pretrained`): made by `amf pretrain` (the camera policy: training/camera.py) on first use, then cached.

Why cached: pre-training on scripted demonstrations takes a while; the cache key hashes every argument and the
source of the code that makes the checkpoint, so a changed recipe makes a new checkpoint instead of silently
reusing an old one. The command that reproduces a cached state checkpoint is written inside it (``pretrain.json``,
key ``command``; a camera checkpoint's ``pretrain.json`` holds its config).
"""

from __future__ import annotations

import hashlib
import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from amf_ros.training.camera import CameraPretrainConfig

log = logging.getLogger("amf.run")


def pretrain_args(seed: int, head: str = "diffusion", suite: str = "metaworld") -> list[str]:
    """Arguments of `amf pretrain` for the embedded simulation (mismatched allocation, the suite's defaults
    otherwise); Metaworld's arguments carry no ``--suite`` (its default), so its cache entries keep their keys."""
    args = ["--allocation", "mismatched", "--seed", str(seed), "--head", head]
    return args if suite == "metaworld" else [*args, "--suite", suite]


def recipe_key(args: Sequence[str], suite: str = "metaworld") -> str:
    """Hash of the pretrain arguments and of the code that makes the checkpoint: pre-training, policies, the suite
    registry and the suite's own sources (:attr:`amf_ros.envs.suites.Suite.sources`: for "widowx" the widowx_sim
    package, the driver and kinematics it steps through and config/tasks/widowx_sim.yaml)."""
    from amf_ros.envs.suites import get_suite

    root = Path(__file__).resolve().parents[1]
    paths = [root / "training" / "pretrain.py", root / "envs" / "suites.py", *(root / "policies").glob("*.py")]
    for rel in get_suite(suite).sources:
        path = root.parent / rel
        paths.extend(path.glob("*.py") if path.is_dir() else [path])
    h = hashlib.sha256(json.dumps(list(args)).encode())
    for path in sorted(paths):
        if path.is_file():
            h.update(path.name.encode() + path.read_bytes())
    return h.hexdigest()[:10]


def ensure_pretrained(cache: Path, seed: int = 0, extra: Sequence[str] = (), head: str = "diffusion",
                      suite: str = "metaworld") -> Path:
    """Path of the cached pre-trained checkpoint of ``suite`` ("metaworld" or "widowx") for these arguments; runs
    `amf pretrain` if it is missing.

    `amf pretrain` writes its output directory atomically, so an interrupted first run leaves no cache entry.
    """
    from amf_ros.training.pretrain import main as pretrain_main

    args = [*pretrain_args(seed, head, suite), *extra]
    key = recipe_key(args, suite)
    final = cache / f"pretrained_{key}"
    if (final / "pretrain.json").is_file():
        log.info("using cached pre-trained checkpoint %s", final)
        return final
    cache.mkdir(parents=True, exist_ok=True)
    command = "amf pretrain " + " ".join([*args, "--out", str(final)])
    log.info("pre-training (first run only): %s", command)
    code = pretrain_main([*args, "--out", str(final)])
    if code:
        raise RuntimeError(f"`{command}` failed with exit code {code}")
    return final


CAMERA_DEMOS_PER_TASK = 64
"""Successful scripted demonstrations per pre-trained task of `amf run --trunk image_pretrained` (64/64/0/0). Not the
state run's 16: 64 per task is the camera recipe's (training/camera.py), the only count its success was measured at
(0.85 on the four tasks with the wrist camera and 16000 steps, docs/ros-robot.md "A wrist camera"); the camera head
overfits its 104-D input on fewer scenes than the state head needs to place objects it reads from 14 exact numbers."""


def camera_pretrain_config(seed: int = 0, demos_per_task: int = CAMERA_DEMOS_PER_TASK,
                           tasks: Sequence[str] = (), **overrides: Any) -> CameraPretrainConfig:
    """The :class:`~amf_ros.training.camera.CameraPretrainConfig` of `amf run --arm widowx --trunk image_pretrained`:
    the state run's mismatched split (:func:`amf_ros.training.pretrain.allocation_counts`: ``demos_per_task`` on
    the first half of ``tasks``, none on the rest; default tasks: the WidowX suite's four, so spoon_on_towel and
    carrot_on_plate pre-trained, stack_cube and eggplant_in_basket new), the recipe's defaults otherwise;
    ``overrides``: further fields (tests: ``steps``, ``task_encoder="hash"``, ``projection_dim``)."""
    from amf_ros.envs.suites import get_suite
    from amf_ros.training.camera import CameraPretrainConfig
    from amf_ros.training.pretrain import allocation_counts

    if demos_per_task < 1:
        raise ValueError(f"demos_per_task must be >= 1, got {demos_per_task=}")
    keys = list(tasks or get_suite("widowx").default_tasks)
    counts = allocation_counts(keys, "mismatched", demos_per_task * ((len(keys) + 1) // 2))
    return CameraPretrainConfig(tasks=keys, demos_per_task=counts, seed=seed, **overrides)


def ensure_camera_pretrained_run(cache: Path, seed: int = 0, demos_per_task: int = CAMERA_DEMOS_PER_TASK,
                                 tasks: Sequence[str] = (), **overrides: Any) -> Path:
    """Path of the cached pre-trained camera policy of :func:`camera_pretrain_config` (its ``pretrain.json`` holds
    the config and ``pretrain_counts``); pre-trained now if missing (minutes on 2 cores), by
    :func:`amf_ros.training.camera.ensure_camera_pretrained`, whose key hashes the config and the code."""
    from amf_ros.training.camera import ensure_camera_pretrained

    return ensure_camera_pretrained(cache, camera_pretrain_config(seed, demos_per_task, tasks, **overrides))


def ensure_replay_store(checkpoint: str | Path) -> Path:
    """The replay of ``checkpoint``'s own pre-training demonstrations (``<checkpoint>_replay``, beside it), for
    fine-tuning with replay (`amf run --replay-fraction`, policy_server's replay_dir). A state policy's is an episode
    store, written on first use from the config in its ``pretrain.json``
    (:func:`amf_ros.training.pretrain.write_replay_store`: the scripted demonstrations are deterministic in the
    config, seconds to a minute to re-collect); a camera policy's holds the camera states of its pre-training frames
    (:func:`amf_ros.training.camera.ensure_camera_replay`: written when it was pre-trained, else collected again).

    Raises:
        ValueError: ``checkpoint`` has no ``pretrain.json`` with a pre-training config (not made by `amf pretrain`
            or the camera recipe).
    """
    from amf_ros.data.replay import replay_beside
    from amf_ros.policies.camera_policy import read_marker
    from amf_ros.training.pretrain import PretrainConfig, write_replay_store

    if read_marker(checkpoint) is not None:
        from amf_ros.training.camera import ensure_camera_replay

        return ensure_camera_replay(checkpoint)
    checkpoint = Path(checkpoint)
    out = replay_beside(checkpoint)
    if out.is_dir():  # written in one rename: present = complete
        return out
    try:
        config = json.loads((checkpoint / "pretrain.json").read_text(encoding="utf-8"))["config"]
        cfg = PretrainConfig(**config)
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{checkpoint} has no pretrain.json with an `amf pretrain` config ({type(exc).__name__}: "
                         f"{exc}): replay needs the checkpoint's pre-training demonstrations; give policy_server a "
                         "replay_dir of your own instead") from None
    log.info("writing the pre-training demonstrations of %s as the replay store %s (first use only)", checkpoint, out)
    return write_replay_store(cfg, out)
