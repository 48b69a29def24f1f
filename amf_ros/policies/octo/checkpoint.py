"""Read a local Octo checkpoint directory without Octo, JAX or TensorFlow.

Layout (what ``OctoModel.save_pretrained`` writes and ``load_pretrained`` reads)::

    <ckpt>/config.json              config["model"] = OctoModule.create kwargs (ModuleSpec dicts), window_size, ...
    <ckpt>/example_batch.msgpack    flax msgpack of {"observation": ..., "task": ...} with the expected shapes
    <ckpt>/dataset_statistics.json  {dataset: {"action": {mean, std, min, max, p01, p99, mask}, "proprio": ...}}
                                    or one flat dataset's statistics (models fine-tuned on a single dataset)
    <ckpt>/<step>/default/...       orbax PyTree checkpoint of the params (e.g. 300000/)

Octo 1.0 vs 1.5 names (``OctoModel.load_pretrained`` applies the same shims): the head kwarg ``pred_horizon`` is
``action_horizon`` in 1.5; the example batch key ``tasks`` is ``task``; the observation key ``pad_mask`` is
``timestep_pad_mask``. :func:`read_checkpoint` normalises to the 1.5 names and records which version it saw.
"""

from __future__ import annotations

import copy
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import numpy as np

CONFIG_FILE = "config.json"
EXAMPLE_BATCH_FILE = "example_batch.msgpack"
STATISTICS_FILE = "dataset_statistics.json"
DEFAULT_DATASET = "bridge_dataset"
"""Key of the BridgeData V2 statistics in the pretrained checkpoints (what WidowX and SIMPLER use)."""
T5_NAME = "t5-base"


# ------------------------------------------------------------------------------------------------ msgpack
def _ndarray_from_bytes(data: bytes) -> np.ndarray:
    import msgpack

    shape, dtype_name, buffer = msgpack.unpackb(data, raw=True)
    name = dtype_name.decode() if isinstance(dtype_name, bytes) else dtype_name
    if name == "bfloat16":
        raise ValueError("example_batch holds a bfloat16 array; reading it needs ml_dtypes/JAX")
    return np.frombuffer(buffer, dtype=np.dtype(name)).reshape(shape, order="C")


def _ext_hook(code: int, data: bytes) -> Any:
    import msgpack

    if code == 1:  # flax _MsgpackExtType.ndarray
        return _ndarray_from_bytes(data)
    if code == 2:  # native complex
        re, im = msgpack.unpackb(data)
        return complex(re, im)
    if code == 3:  # numpy scalar, packed as a 0-d ndarray
        return _ndarray_from_bytes(data)[()]
    return msgpack.ExtType(code, data)


def _unchunk(tree: Any) -> Any:
    """Undo flax's chunking of very large arrays ({"__msgpack_chunked_array__": ..., "chunks", "shape"})."""
    if isinstance(tree, dict):
        if "__msgpack_chunked_array__" in tree:
            chunks = tree["chunks"]
            shape = tuple(tree["shape"][str(i)] for i in range(len(tree["shape"])))
            flat = np.concatenate([chunks[str(i)] for i in range(len(chunks))])
            return flat.reshape(shape)
        return {k: _unchunk(v) for k, v in tree.items()}
    return tree


def msgpack_restore(data: bytes) -> Any:
    """Decode bytes written by ``flax.serialization.msgpack_serialize`` into nested dicts of numpy arrays."""
    import msgpack

    return _unchunk(msgpack.unpackb(data, ext_hook=_ext_hook, raw=False))


def msgpack_serialize(tree: Any) -> bytes:
    """Encode nested dicts of numpy arrays like flax does (used to write test fixtures and converted batches)."""
    import msgpack

    def default(x: Any) -> Any:
        if isinstance(x, np.ndarray):
            payload = msgpack.packb((x.shape, x.dtype.name, x.tobytes("C")), use_bin_type=True)
            return msgpack.ExtType(1, payload)
        if isinstance(x, np.generic):
            arr = np.asarray(x)
            payload = msgpack.packb((arr.shape, arr.dtype.name, arr.tobytes("C")), use_bin_type=True)
            return msgpack.ExtType(3, payload)
        raise TypeError(f"cannot msgpack-serialise {type(x).__name__}")

    return msgpack.packb(tree, default=default, strict_types=True)


# ------------------------------------------------------------------------------------------------ checkpoint
@dataclass
class OctoCheckpointInfo:
    """What a checkpoint directory says about the model, in Octo 1.5 names."""

    path: Path
    config: dict
    """config.json after the 1.0 -> 1.5 shim."""
    example_batch: dict
    """{"observation": {...}, "task": {...}} of numpy arrays (shapes only matter)."""
    dataset_statistics: dict
    steps: list[int]
    """Orbax step directories present, ascending."""
    version: str
    """"1.5" or "1.0" (1.0 = old key names were found)."""
    renamed: list[str] = field(default_factory=list)
    """Which 1.0 names were translated, for the log."""

    @property
    def latest_step(self) -> int:
        """Newest orbax step present (what is restored by default); ValueError if there is none."""
        if not self.steps:
            raise ValueError(f"{self.path}: no orbax step directory (e.g. 300000/) found")
        return self.steps[-1]

    @property
    def head_kwargs(self) -> dict:
        """kwargs of the action head's ModuleSpec (action_horizon, action_dim, readout_key, ...)."""
        return dict(self.config["model"]["heads"]["action"].get("kwargs", {}))

    @property
    def head_name(self) -> str:
        """Class name of the action head in the config (e.g. "DiffusionActionHead"); "" when it names none."""
        return str(self.config["model"]["heads"]["action"].get("name", ""))

    @property
    def embedding_dim(self) -> int:
        """Token width E (384 Octo-Small, 768 Octo-Base)."""
        return int(self.config["model"]["token_embedding_size"])

    @property
    def window_size(self) -> int:
        """Observation history the model was trained with (pretrained Octo: 2)."""
        return int(self.config.get("window_size", self.example_batch["observation"]["timestep_pad_mask"].shape[1]))

    @property
    def action_horizon(self) -> int:
        """H, actions per predicted chunk (1 when the head does not say)."""
        return int(self.head_kwargs.get("action_horizon", 1))

    @property
    def action_dim(self) -> int:
        """A, width of one action (7 when the head does not say: WidowX EEF delta + gripper)."""
        return int(self.head_kwargs.get("action_dim", 7))

    @property
    def image_keys(self) -> dict[str, tuple[int, int]]:
        """Observation image keys and their (height, width), e.g. {"image_primary": (256, 256), ...}."""
        obs = self.example_batch["observation"]
        return {k: tuple(int(s) for s in v.shape[2:4]) for k, v in obs.items()
                if k.startswith("image_") and hasattr(v, "shape")}

    def action_statistics(self, dataset_name: str | None = DEFAULT_DATASET) -> dict[str, np.ndarray]:
        """Action statistics {mean, std, mask, ...} as numpy arrays, see :func:`action_statistics`."""
        return action_statistics(self.dataset_statistics, dataset_name)


def normalize_config(config: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """Copy of config.json with Octo 1.0 names renamed to 1.5 ones (``pred_horizon`` -> ``action_horizon``)."""
    cfg = copy.deepcopy(dict(config))
    renamed = []
    try:
        kwargs = cfg["model"]["heads"]["action"]["kwargs"]
    except (KeyError, TypeError) as exc:
        raise ValueError("config.json has no model.heads.action.kwargs: not an Octo checkpoint config") from exc
    if "pred_horizon" in kwargs:
        kwargs["action_horizon"] = kwargs.pop("pred_horizon")
        renamed.append("pred_horizon->action_horizon")
    if "token_embedding_size" not in cfg["model"]:
        raise ValueError("config.json has no model.token_embedding_size")
    return cfg, renamed


def normalize_example_batch(batch: Mapping[str, Any]) -> tuple[dict, list[str]]:
    """Copy of the example batch with Octo 1.0 keys renamed (``tasks`` -> ``task``, ``pad_mask`` ->
    ``timestep_pad_mask``)."""
    b = dict(batch)
    renamed = []
    if "tasks" in b and "task" not in b:
        b["task"] = b.pop("tasks")
        renamed.append("tasks->task")
    if "observation" not in b or "task" not in b:
        raise ValueError(f"example batch needs 'observation' and 'task', got keys {sorted(b)}")
    obs = dict(b["observation"])
    if "timestep_pad_mask" not in obs:
        if "pad_mask" not in obs:
            raise ValueError(f"example observation has neither timestep_pad_mask nor pad_mask: {sorted(obs)}")
        obs["timestep_pad_mask"] = obs.pop("pad_mask")
        renamed.append("pad_mask->timestep_pad_mask")
    b["observation"] = obs
    return b, renamed


def action_statistics(stats: Mapping[str, Any], dataset_name: str | None = DEFAULT_DATASET) -> dict[str, np.ndarray]:
    """One dataset's action statistics as numpy arrays (mask as bool; missing mask = all True).

    Accepts the pretrained layout ``{dataset: {"action": ...}}`` and the single-dataset layout ``{"action": ...}``.
    ``dataset_name=None`` picks the only dataset, or raises if there are several.
    """
    if "action" in stats and isinstance(stats["action"], Mapping) and "mean" in stats["action"]:
        entry = stats["action"]
    else:
        names = sorted(k for k, v in stats.items() if isinstance(v, Mapping) and "action" in v)
        if dataset_name is None:
            if len(names) != 1:
                raise ValueError(f"several datasets in the statistics, name one of {names}")
            dataset_name = names[0]
        if dataset_name not in stats:
            raise ValueError(f"no statistics for dataset {dataset_name!r}; available: {names}")
        entry = stats[dataset_name]["action"]
    out = {k: np.asarray(v, dtype=np.float64) for k, v in entry.items() if k != "mask"}
    if "mean" not in out or "std" not in out:
        raise ValueError(f"action statistics need mean and std, got {sorted(entry)}")
    out["mask"] = np.asarray(entry.get("mask", np.ones_like(out["mean"], dtype=bool)), dtype=bool)
    return out


def find_steps(path: str | os.PathLike) -> list[int]:
    """Integer-named subdirectories (orbax steps), ascending; half-written ``*.orbax-checkpoint-tmp-*`` are ignored."""
    p = Path(path)
    return sorted(int(d.name) for d in p.iterdir() if d.is_dir() and d.name.isdigit())


def read_checkpoint(path: str | os.PathLike) -> OctoCheckpointInfo:
    """Parse an Octo checkpoint directory (config, example batch, statistics, steps); no Octo needed.

    Raises:
        ValueError: a required file is missing or malformed (the message names it).
    """
    p = Path(path).expanduser()
    if str(path).startswith(("hf://", "gs://")):
        raise ValueError(f"give a local checkpoint directory, got {path!s}; download it first (see README.md, "
                         "'Deploying with Octo')")
    if not p.is_dir():
        raise ValueError(f"Octo checkpoint directory not found: {p}")
    missing = [f for f in (CONFIG_FILE, EXAMPLE_BATCH_FILE, STATISTICS_FILE) if not (p / f).is_file()]
    if missing:
        raise ValueError(f"{p} is not an Octo checkpoint: missing {missing}")
    with open(p / CONFIG_FILE, encoding="utf-8") as fh:
        config, renamed = normalize_config(json.load(fh))
    batch, renamed_b = normalize_example_batch(msgpack_restore((p / EXAMPLE_BATCH_FILE).read_bytes()))
    with open(p / STATISTICS_FILE, encoding="utf-8") as fh:
        stats = json.load(fh)
    renamed += renamed_b
    return OctoCheckpointInfo(path=p, config=config, example_batch=batch, dataset_statistics=stats,
                              steps=find_steps(p), version="1.0" if renamed else "1.5", renamed=renamed)


def replace_t5(config: Mapping[str, Any], t5_path: str) -> tuple[dict, int]:
    """Point every ``t5-base`` reference (text_processor tokenizer_name, language tokenizer encoder) at ``t5_path``.

    Octo's loader calls ``AutoTokenizer.from_pretrained("t5-base")`` and ``AutoConfig.from_pretrained("t5-base")``;
    with a local directory holding the t5-base tokenizer and config (``save_pretrained`` output) it works offline.
    Returns (new config, number of replacements).
    """
    count = 0

    def walk(x: Any) -> Any:
        nonlocal count
        if isinstance(x, dict):
            return {k: walk(v) for k, v in x.items()}
        if isinstance(x, list):
            return [walk(v) for v in x]
        if x == T5_NAME:
            count += 1
            return str(t5_path)
        return x

    return walk(copy.deepcopy(dict(config))), count


def prepare_offline_checkpoint(path: str | os.PathLike, t5_path: str | os.PathLike,
                               workdir: str | os.PathLike) -> Path:
    """A view of checkpoint ``path`` under ``workdir`` whose config.json loads T5 from ``t5_path``.

    Every entry except config.json is a symlink to the original (no weights are copied). The T5 directory is
    reached through a link named ``t5-base`` inside the view: Octo's LanguageTokenizer builds the encoder-only T5
    model only ``if "t5" in encoder`` (octo/model/components/tokenizers.py) and otherwise the full encoder-decoder,
    which fails (``'NoneType' object has no attribute 'dtype'``) for a directory like ``~/models/lm``.
    """
    src, t5 = Path(path).expanduser().resolve(), Path(t5_path).expanduser().resolve()
    if not (t5 / "config.json").is_file():
        raise ValueError(f"{t5} must hold the t5-base tokenizer and config (config.json, spiece.model, ...)")
    read_checkpoint(src)  # validates the directory before anything is written
    with open(src / CONFIG_FILE, encoding="utf-8") as fh:
        raw = json.load(fh)
    out = Path(workdir).expanduser().resolve() / f"{src.name}-offline"
    new_cfg, n = replace_t5(raw, str(out / T5_NAME))
    if n == 0:
        raise ValueError(f"{src / CONFIG_FILE} does not mention {T5_NAME!r}; nothing to redirect")
    out.mkdir(parents=True, exist_ok=True)
    t5_link = out / T5_NAME
    if t5_link.is_symlink() and t5_link.resolve() != t5:
        t5_link.unlink()
    if not t5_link.exists():
        t5_link.symlink_to(t5, target_is_directory=True)
    for entry in src.iterdir():
        if entry.name == CONFIG_FILE:
            continue
        link = out / entry.name
        if not link.exists():
            link.symlink_to(entry)
    from amf_ros.atomic import atomic_write_json

    atomic_write_json(out / CONFIG_FILE, new_cfg)
    return out
