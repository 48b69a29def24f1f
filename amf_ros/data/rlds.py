"""Export an episode store as an RLDS dataset in TFDS layout, the format Octo's fine-tuning reads.

Output (``amf export rlds DATASET OUT``)::

    OUT/<name>/<version>/
      dataset_info.json                      TFDS DatasetInfo (proto JSON): name, version, splits + shard lengths
      features.json                          TFDS FeaturesDict (proto JSON), see :func:`features_json`
      <name>-train.tfrecord-00000-of-0000N   tf.train.Example per episode, written without TensorFlow

Open it with ``tfds.builder("<name>", data_dir="OUT")`` or ``tfds.builder_from_directory(...)``; in Octo,
``make_single_dataset(dict(name="<name>", data_dir="OUT", image_obs_keys={"primary": "image_primary"},
proprio_obs_key="state", language_key="language_instruction"), ...)``.

Each episode: ``steps`` (a TFDS ``Dataset``) with ``observation`` (``image_*``: Image (H, W, 3) uint8,
``state``: float32 (S,), when recorded), ``action`` float32 (A,), ``reward`` (1.0 on the last step of a successful
demonstration, else 0), ``discount`` 1.0, ``is_first``, ``is_last``, ``is_terminal``, ``actor`` (int64: 0 a
person acted, 1 the policy; amf_ros/data/schema.py),
``language_instruction``; and ``episode_metadata`` (``file_path``, ``episode_id``, ``task``, ``success``).
"""

from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from amf_ros.atomic import atomic_write_bytes, atomic_write_text
from amf_ros.data.codec import encode_image, resize_images
from amf_ros.data.export_select import check_consistent, image_keys_of, plan_export, staged_directory
from amf_ros.data.schema import ACTION, OBS_PREFIX, STATE, actors
from amf_ros.data.store import Episode, EpisodeStore
from amf_ros.data.tfrecord import Feature, encode_example, tfrecord_bytes

log = logging.getLogger(__name__)

_FD = "tensorflow_datasets.core.features.features_dict.FeaturesDict"
_DATASET = "tensorflow_datasets.core.features.dataset_feature.Dataset"
_TENSOR = "tensorflow_datasets.core.features.tensor_feature.Tensor"
_SCALAR = "tensorflow_datasets.core.features.scalar.Scalar"
_IMAGE = "tensorflow_datasets.core.features.image_feature.Image"
_TEXT = "tensorflow_datasets.core.features.text_feature.Text"
FILEPATH_TEMPLATE = "{DATASET}-{SPLIT}.{FILEFORMAT}-{SHARD_X_OF_Y}"


@dataclass
class RldsExportConfig:
    """Options of the RLDS export."""

    name: str = "amf_demos"  # TFDS dataset name (Octo: dataset_kwargs["name"])
    version: str = "1.0.0"
    image_size: tuple[int, int] | None = (256, 256)  # (H, W) images are resized to (Octo: 256x256); None = keep
    image_format: str = "png"  # encoding inside the TFRecords: "png" or "jpeg"
    episodes_per_shard: int = 50
    include_unsuccessful: bool = False  # export episodes with success False/None too (reward 0)
    tasks: Sequence[str] | None = None  # only these task keys (None = all)

    def __post_init__(self) -> None:
        if not self.name.isidentifier() or self.name != self.name.lower():
            raise ValueError(f"name must be a lower-case identifier (TFDS rule), got {self.name=}")
        parts = self.version.split(".")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise ValueError(f"version must be 'X.Y.Z', got {self.version=}")
        if self.image_format not in ("png", "jpeg"):
            raise ValueError(f"image_format must be 'png' or 'jpeg', got {self.image_format=}")
        if self.episodes_per_shard < 1:
            raise ValueError(f"episodes_per_shard must be >= 1, got {self.episodes_per_shard=}")
        if self.image_size is not None:
            self.image_size = (int(self.image_size[0]), int(self.image_size[1]))


@dataclass
class RldsExportResult:
    """What an export wrote."""

    path: Path  # OUT/<name>/<version>
    episodes: int
    steps: int
    shards: int
    num_bytes: int
    skipped: dict[str, str]  # episode id -> why it was not exported


def _tensor(shape: Sequence[int], dtype: str, cls: str = _TENSOR) -> dict[str, Any]:
    shape_json: dict[str, Any] = {"dimensions": [str(int(d)) for d in shape]} if len(shape) else {}
    return {"pythonClassName": cls, "tensor": {"dtype": dtype, "encoding": "none", "shape": shape_json}}


def _dict(features: dict[str, Any]) -> dict[str, Any]:
    return {"featuresDict": {"features": features}, "pythonClassName": _FD}


def features_json(state_dim: int | None, action_dim: int, images: dict[str, tuple[int, int, int]],
                  image_format: str) -> dict[str, Any]:
    """TFDS FeaturesDict of the RLDS episode, as TFDS writes it to features.json (no state if state_dim is None)."""
    obs: dict[str, Any] = {} if state_dim is None else {"state": _tensor([state_dim], "float32")}
    for key, shape in images.items():
        obs[key] = {"image": {"dtype": "uint8", "encodingFormat": image_format,
                              "shape": {"dimensions": [str(d) for d in shape]}}, "pythonClassName": _IMAGE}
    step = {
        "observation": _dict(obs),
        "action": _tensor([action_dim], "float32"),
        "reward": _tensor([], "float32", _SCALAR),
        "discount": _tensor([], "float32", _SCALAR),
        "is_first": _tensor([], "bool", _SCALAR),
        "is_last": _tensor([], "bool", _SCALAR),
        "is_terminal": _tensor([], "bool", _SCALAR),
        "actor": _tensor([], "int64", _SCALAR),
        "language_instruction": {"pythonClassName": _TEXT, "text": {}},
    }
    meta = {"file_path": {"pythonClassName": _TEXT, "text": {}},
            "episode_id": {"pythonClassName": _TEXT, "text": {}},
            "task": {"pythonClassName": _TEXT, "text": {}},
            "success": _tensor([], "bool", _SCALAR)}
    return _dict({"steps": {"pythonClassName": _DATASET, "sequence": {"feature": _dict(step), "length": "-1"}},
                  "episode_metadata": _dict(meta)})


def episode_example(ep: Episode, image_keys: Sequence[str], image_size: tuple[int, int] | None,
                    image_format: str) -> bytes:
    """One episode as a serialised tf.train.Example (the flattening TFDS uses for a nested Dataset)."""
    n = len(ep)
    success = ep.meta.success is True
    reward = np.zeros(n, np.float32)
    reward[-1] = 1.0 if success else 0.0
    feats: dict[str, Feature] = {
        "steps/action": ("float", ep.steps[ACTION]),
        "steps/reward": ("float", reward),
        "steps/discount": ("float", np.ones(n, np.float32)),
        "steps/is_first": ("int64", ep.steps["is_first"].astype(np.int64)),
        "steps/is_last": ("int64", ep.steps["is_last"].astype(np.int64)),
        "steps/is_terminal": ("int64", ep.steps["is_terminal"].astype(np.int64)),
        "steps/actor": ("int64", actors(ep.steps).astype(np.int64)),
        "steps/language_instruction": ("bytes", [ep.meta.instruction.encode("utf-8")] * n),
        "episode_metadata/file_path": ("bytes", [str(ep.path).encode("utf-8")]),
        "episode_metadata/episode_id": ("bytes", [ep.episode_id.encode("utf-8")]),
        "episode_metadata/task": ("bytes", [ep.meta.task.encode("utf-8")]),
        "episode_metadata/success": ("int64", np.asarray([int(success)], np.int64)),
    }
    if STATE in ep.steps:
        feats["steps/observation/state"] = ("float", ep.steps[STATE])
    for key in image_keys:
        imgs = ep.steps[OBS_PREFIX + key]
        if image_size is not None:
            imgs = resize_images(imgs, image_size)
        feats[f"steps/observation/{key}"] = ("bytes", [encode_image(im, image_format) for im in imgs])
    return encode_example(feats)


def export_rlds(store: EpisodeStore | str | os.PathLike, out_dir: str | os.PathLike,
                config: RldsExportConfig | None = None, overwrite: bool = False) -> RldsExportResult:
    """Write the selected episodes of ``store`` as ``out_dir/<name>/<version>/`` (atomically: temp dir + rename).

    Raises:
        ValueError: nothing to export, the target exists (without ``overwrite``), or episodes disagree on
            state/action width, image keys, or (without ``image_size``) image shape; names the episode.
    """
    config = config or RldsExportConfig()
    target = Path(out_dir) / config.name / config.version
    store, ids, skipped = plan_export(store, config.tasks, config.include_unsuccessful, target, overwrite)
    with staged_directory(target) as tmp:
        image_keys = image_keys_of(store, ids[0])
        spec: dict[str, Any] = {}
        n_shards = (len(ids) + config.episodes_per_shard - 1) // config.episodes_per_shard
        shard_lengths, num_bytes, total_steps = [], 0, 0
        for s in range(n_shards):
            records = []
            for eid in ids[s * config.episodes_per_shard:(s + 1) * config.episodes_per_shard]:
                ep = store.load(eid, images=True)
                check_consistent(ep, spec, image_keys, config.image_size)
                records.append(episode_example(ep, image_keys, config.image_size, config.image_format))
                total_steps += len(ep)
            data = tfrecord_bytes(records)
            name = f"{config.name}-train.tfrecord-{s:05d}-of-{n_shards:05d}"
            atomic_write_bytes(tmp / name, data)
            shard_lengths.append(len(records))
            num_bytes += len(data)
        feats = features_json(spec["state"], spec["action"], spec["images"], config.image_format)
        atomic_write_text(tmp / "features.json", json.dumps(feats, indent=4, sort_keys=True))
        info = {"fileFormat": "tfrecord", "name": config.name, "version": config.version,
                "description": f"amf_ros demonstrations exported from {store.root} ({len(ids)} episodes)",
                "moduleName": "amf_ros.data.rlds",
                "splits": [{"filepathTemplate": FILEPATH_TEMPLATE, "name": "train", "numBytes": str(num_bytes),
                            "shardLengths": [str(n) for n in shard_lengths]}]}
        atomic_write_text(tmp / "dataset_info.json", json.dumps(info, indent=2, sort_keys=True))
    log.info("exported %d episodes (%d steps) to %s", len(ids), total_steps, target)
    return RldsExportResult(target, len(ids), total_steps, n_shards, num_bytes, skipped)

