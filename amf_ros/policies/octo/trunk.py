"""The frozen Octo transformer as a trunk: observation window + instruction -> readout embedding (B, E).

Real code against Octo's API (octo-models/octo, v1.5 at 241fb35; v1.0 at 653c54a as pinned by SimplerEnv):
``OctoModel.load_pretrained(path, step)``, ``model.create_tasks(texts=...)``, ``model.run_transformer(obs, tasks,
pad_mask, train=False)`` whose ``["readout_action"].tokens`` are (B, W, 1, E), and ``model.sample_actions`` for
Octo's own head. Octo, JAX and (for its loader) TensorFlow are imported only when an :class:`OctoTrunk` is built;
without them the constructor raises an ImportError that says what to install.

The embedding the diffusion head sees is ``mean over readout tokens`` at the last window position (Octo's head
with ``use_map=False`` denoises every window position independently and returns the last, so this is the
same function). Unlike the package's small trunks, Octo's embedding is already conditioned on the instruction
(the language tokens attend into the readout), so the per-frame cache key must include the instruction and the
"task embedding" part of the package's trunk seam is empty for Octo.

Offline use: the loader needs the ``t5-base`` tokenizer and config. Either have them in the Hugging Face cache
and set ``HF_HUB_OFFLINE=1``, or pass ``t5_path`` (a directory from ``AutoTokenizer.save_pretrained`` plus
``AutoConfig.save_pretrained``) and the checkpoint is loaded through a view whose config.json points there.
"""

from __future__ import annotations

import inspect
import logging
import os
import tempfile
from typing import Any, Mapping, Sequence

import numpy as np

from amf_ros._optional import load_object, require
from amf_ros.policies.octo.checkpoint import (
    DEFAULT_DATASET,
    OctoCheckpointInfo,
    prepare_offline_checkpoint,
    read_checkpoint,
)
from amf_ros.policies.octo.observation import ObservationWindow

log = logging.getLogger(__name__)
READOUT_KEY = "readout_action"


def pad_key_of(run_transformer: Any) -> str:
    """Which observation key the installed Octo code reads the pad mask from (1.5: timestep_pad_mask, 1.0: pad_mask)."""
    params = inspect.signature(run_transformer).parameters
    return "timestep_pad_mask" if "timestep_pad_mask" in params else "pad_mask"


def readout_embedding(transformer_outputs: Mapping[str, Any], readout_key: str = READOUT_KEY) -> np.ndarray:
    """(B, W, E) mean over the readout tokens (B, W, n, E) of ``run_transformer``'s output (token mask ignored,
    as Octo's DiffusionActionHead does with use_map=False)."""
    if readout_key not in transformer_outputs:
        raise ValueError(f"transformer outputs have no {readout_key!r}; groups: {sorted(transformer_outputs)}")
    tokens = np.asarray(transformer_outputs[readout_key].tokens, dtype=np.float32)
    if tokens.ndim != 4:
        raise ValueError(f"readout tokens must be (B, W, n, E), got {tokens.shape}")
    return tokens.mean(axis=-2)


class OctoTrunk:
    """A loaded Octo model used as a frozen encoder (and, for evaluation, with its own head)."""

    def __init__(self, checkpoint: str | os.PathLike, step: int | None = None,
                 dataset_name: str | None = DEFAULT_DATASET, t5_path: str | os.PathLike | None = None,
                 workdir: str | os.PathLike | None = None, seed: int = 0) -> None:
        """Load ``checkpoint`` (a local directory; see :mod:`amf_ros.policies.octo.checkpoint`).

        Args:
            checkpoint: the local Octo checkpoint directory.
            step: orbax step to restore (default: latest).
            dataset_name: key of the action statistics used to un-normalise (pretrained: "bridge_dataset").
            t5_path: local t5-base tokenizer/config directory for offline loading (see module doc).
            workdir: where the offline view is created (default: a temporary directory).
            seed: seed of the JAX sampling key for :meth:`sample_actions`.
        """
        self.info: OctoCheckpointInfo = read_checkpoint(checkpoint)  # clear errors before importing JAX
        require("octo", feature="the Octo trunk")
        require("jax", feature="the Octo trunk")
        import jax
        from octo.model.octo_model import OctoModel

        path = str(self.info.path)
        if t5_path is not None:
            path = prepare_offline_checkpoint(checkpoint, t5_path, workdir or tempfile.mkdtemp(prefix="amf-octo-"))
        log.info("loading Octo %s checkpoint %s (step %s)", self.info.version, path, step or "latest")
        self.model = OctoModel.load_pretrained(str(path), step)
        self._jax = jax
        self._rng = jax.random.PRNGKey(seed)
        self.pad_key = pad_key_of(OctoModel.run_transformer)
        self.dataset_name = dataset_name
        self.feature_dim = self.info.embedding_dim
        self._tasks: dict[tuple[str, ...], Any] = {}

    # -- inputs --------------------------------------------------------------------------------------------
    def new_window(self, mode: str = "octo", crop_scale: float | None = None,
                   wrist: bool = True) -> ObservationWindow:
        """An observation window with this model's window size, image sizes and pad-mask key.

        ``wrist=False``: primary camera only, even if the model has a wrist tokenizer (Octo skips a missing image
        key as padding; Octo's Bridge evaluation passes only ``image_primary``)."""
        keys = self.info.image_keys
        return ObservationWindow(window=self.info.window_size, primary_size=keys.get("image_primary", (256, 256)),
                                 wrist_size=keys.get("image_wrist") if wrist else None, pad_key=self.pad_key,
                                 mode=mode, crop_scale=crop_scale)

    def tasks(self, instructions: Sequence[str]) -> Any:
        """Octo task dict for a batch of instructions (T5-tokenised once per distinct batch, then cached)."""
        key = tuple(str(s) for s in instructions)
        if key not in self._tasks:
            self._tasks[key] = self.model.create_tasks(texts=list(key))
        return self._tasks[key]

    def _check(self, observations: Mapping[str, np.ndarray], instructions: Sequence[str]) -> int:
        if self.pad_key not in observations:
            raise ValueError(f"observations need {self.pad_key!r} (B, W); got keys {sorted(observations)}")
        b, w = np.shape(observations[self.pad_key])
        if w != self.info.window_size:
            log.debug("window %d differs from the training window %d", w, self.info.window_size)
        if len(instructions) != b:
            raise ValueError(f"{b} observations but {len(instructions)} instructions")
        return b

    # -- outputs -------------------------------------------------------------------------------------------
    def readout(self, observations: Mapping[str, np.ndarray], instructions: Sequence[str]) -> np.ndarray:
        """(B, W, E) readout embeddings for observations (B, W, ...) and one instruction per row."""
        self._check(observations, instructions)
        out = self.model.run_transformer(dict(observations), self.tasks(instructions),
                                         observations[self.pad_key], train=False)
        return readout_embedding(out)

    def embed(self, observations: Mapping[str, np.ndarray], instructions: Sequence[str]) -> np.ndarray:
        """(B, E) embedding of the last window position: what the diffusion head acts on."""
        return self.readout(observations, instructions)[:, -1]

    def encode_frames(self, frames: Mapping[str, Any]) -> Any:
        """Trunk seam (policies/base.py): ``{image_primary, [image_wrist], pad key, "instruction": (B,)}`` ->
        (B, E) float32 torch tensor."""
        import torch

        obs = {k: v for k, v in frames.items() if k != "instruction"}
        return torch.from_numpy(np.ascontiguousarray(self.embed(obs, list(frames["instruction"]))))

    def embed_episode(self, images: np.ndarray, instruction: str, wrist: np.ndarray | None = None,
                      batch_size: int = 16) -> np.ndarray:
        """(T, E) embeddings of every frame of one recorded episode, each with its Octo-style history window.

        Args:
            images: (T, H, W, 3) uint8 primary camera frames.
            instruction: the language instruction every frame is embedded with.
            wrist: (T, h, w, 3) uint8 wrist frames, if the model has a wrist camera (None = primary only).
            batch_size: frames per model call (bounds the memory of one call).
        """
        images = np.asarray(images)
        if images.ndim != 4:
            raise ValueError(f"images must be (T, H, W, 3), got {images.shape}")
        win = self.new_window(wrist=wrist is not None)
        windows = [win.add(images[t], None if wrist is None else wrist[t]) for t in range(len(images))]
        out = []
        for i in range(0, len(windows), batch_size):
            chunk = windows[i: i + batch_size]
            obs = {k: np.concatenate([w[k] for w in chunk]) for k in chunk[0]}
            out.append(self.embed(obs, [instruction] * len(chunk)))
        return np.concatenate(out) if out else np.zeros((0, self.feature_dim), np.float32)

    def sample_actions(self, observations: Mapping[str, np.ndarray], instructions: Sequence[str]) -> np.ndarray:
        """(B, H, A) *normalised* actions from Octo's own head (a fresh split of the JAX key per call)."""
        self._check(observations, instructions)
        self._rng, key = self._jax.random.split(self._rng)
        actions = self.model.sample_actions(dict(observations), self.tasks(instructions), rng=key)
        return np.asarray(actions, dtype=np.float64)

    def head_params(self) -> dict:
        """Octo's ``heads_action`` parameter tree as numpy (input of ``convert.octo_head_pair``)."""
        return {"heads_action": self._jax.device_get(self.model.params["heads_action"])}

    def action_statistics(self, dataset_name: str | None = None) -> dict[str, np.ndarray]:
        """Action statistics used to un-normalise (see ``checkpoint.action_statistics``)."""
        return self.info.action_statistics(dataset_name or self.dataset_name)


DEFAULT_TRUNK_FACTORY = "amf_ros.policies.octo.trunk:OctoTrunk"
"""The real Octo loader; tests pass a fake with Octo's API (``"module:function"``)."""


def load_octo_trunk(octo_checkpoint: str, factory: str = DEFAULT_TRUNK_FACTORY, t5_path: str = "",
                    dataset_name: str = "bridge_dataset") -> Any:
    """The frozen trunk of an Octo checkpoint (``OctoTrunk`` API: new_window, embed, embed_episode, head_params,
    action_statistics), built by ``factory`` (``"module:function"``, called with the checkpoint directory)."""
    if not octo_checkpoint:
        raise ValueError("the octo backend needs 'checkpoint' = an Octo checkpoint directory (config.json, "
                         "dataset_statistics.json, orbax step directories)")
    make = load_object(factory, "trunk factory")
    return make(octo_checkpoint, t5_path=t5_path or None, dataset_name=dataset_name or None)
