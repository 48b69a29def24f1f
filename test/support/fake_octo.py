"""A trunk factory with a fake Octo model (Octo 1.5's method signatures) for the octo backend's tests.

``fake_trunk(checkpoint, t5_path=None, dataset_name=...)`` has the factory signature policy_server calls
(``octo_trunk_factory: "fake_octo:fake_trunk"``): it is the real :class:`OctoTrunk` (windowing, pad mask,
batching, readout mean, embed_episode) around a fake ``OctoModel`` whose readout depends on the images and the
instruction, and whose head parameters are a synthetic tree with Octo's exact structure (test/octo/octo_testlib).
Every ``run_transformer`` / ``embed_episode`` call is appended to the file named by ``AMF_FAKE_OCTO_LOG`` (if set),
so a test in another process can tell whether the trunk ran.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
from octo_testlib import make_checkpoint, synthetic_octo_params

from amf_ros.policies.octo.checkpoint import read_checkpoint
from amf_ros.policies.octo.trunk import OctoTrunk, pad_key_of

E = 384


def _log(line: str) -> None:
    path = os.environ.get("AMF_FAKE_OCTO_LOG")
    if path:
        with open(path, "a") as f:
            f.write(line + "\n")


class _TokenGroup:  # octo.model.components.base.TokenGroup
    def __init__(self, tokens: np.ndarray) -> None:
        self.tokens = tokens
        self.mask = np.ones(tokens.shape[:-1], bool)


class FakeOctoModel:
    """OctoModel surface: create_tasks(texts=), run_transformer(obs, tasks, timestep_pad_mask, train)."""

    def __init__(self, embedding_dim: int = E) -> None:
        self.E = embedding_dim
        self.run_calls: list[int] = []

    def create_tasks(self, goals=None, texts=None):
        return {"language_instruction": {"input_ids": np.array([[len(t)] for t in texts])}}

    def run_transformer(self, observations, tasks, timestep_pad_mask, train=False):
        img = observations["image_primary"].astype(np.float32) / 255.0  # (B, W, 256, 256, 3)
        b, w = timestep_pad_mask.shape
        self.run_calls.append(b)
        _log(f"run_transformer {b}")
        ids = tasks["language_instruction"]["input_ids"].astype(np.float32) / 10.0  # (B, 1)
        base = img.mean(axis=(2, 3))  # (B, W, 3): colour means
        tokens = np.zeros((b, w, 2, self.E), np.float32)
        tokens[..., 0, :3] = base
        tokens[..., 0, 3] = ids
        tokens[..., 1, 4:] = np.sin(np.arange(self.E - 4) * (1 + base[..., :1]))  # varies with the image
        return {"readout_action": _TokenGroup(tokens)}


class FakeTrunk(OctoTrunk):
    """The real OctoTrunk code around :class:`FakeOctoModel` (no JAX, no Octo)."""

    def __init__(self, checkpoint, step=None, dataset_name="bridge_dataset", t5_path=None, workdir=None,
                 seed=0) -> None:
        self.info = read_checkpoint(checkpoint)
        self.model = FakeOctoModel(self.info.embedding_dim)
        self.pad_key = pad_key_of(FakeOctoModel.run_transformer)
        self.dataset_name = dataset_name
        self.feature_dim = self.info.embedding_dim
        self._tasks = {}
        self.episodes_embedded = 0
        _log("load")

    def head_params(self) -> dict:
        params = synthetic_octo_params(self.feature_dim, seed=3)
        last = params["heads_action"]["diffusion_model"]["reverse_network"]["Dense_1"]
        last["kernel"] *= 0.1  # keep the DDPM chain well inside +-5
        return {"heads_action": params["heads_action"]}

    def embed_episode(self, images, instruction, wrist=None, batch_size=16):
        self.episodes_embedded += 1
        _log(f"embed_episode {len(images)}")
        return super().embed_episode(images, instruction, wrist=wrist, batch_size=batch_size)


def fake_trunk(checkpoint, t5_path=None, dataset_name="bridge_dataset"):
    """The factory policy_server / task_selector call (``octo_trunk_factory: fake_octo:fake_trunk``)."""
    return FakeTrunk(checkpoint, dataset_name=dataset_name, t5_path=t5_path)


def fake_checkpoint(root: Path, wrist: bool = True) -> Path:
    """A fake Octo 1.5 checkpoint directory (config, statistics, example batch with a 128x128 wrist image as in
    octo-small-1.5, step dir)."""
    return make_checkpoint(Path(root), version="1.5", wrist=wrist)
