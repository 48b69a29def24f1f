"""Frozen trunks (state, small image CNN) and the per-frame feature cache that lets heads train without them.

The trunk embedding a head sees is ``concat(frame features (B, F), task embedding (B, L))`` (see
``policies/base.py``). Frame features depend only on the frame, so :class:`FrameCache` computes them once per
recorded frame (keyed by a hash of the frame's bytes) and fine-tuning, embeddings and alpha fitting reuse them.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from amf_ros.policies.normalizer import Normalizer


class StateTrunk(nn.Module):
    """Normalized, clipped state features: {"state": (B, S)} -> (B, F), F = S + sum of the difference widths.

    Why so small: with a state trunk the head is the whole policy (the paper fine-tunes the full MLP on
    Metaworld states), and the head's first layer does the feature learning.

    ``differences``: (a, b, n) triples; each appends ``state[b:b+n] - state[a:a+n]`` to the state before
    normalisation (e.g. the WidowX's object - gripper and receptacle - object vectors). Why: the scripted WidowX expert
    is a function of such differences (it closes within 8 mm of the object and carries by receptacle - object), and a
    head that must compute a 5 mm difference of two absolute coordinates, each normalised by a std of ~0.09 m, mostly
    did not (see :attr:`amf_ros.policies.config.PolicyConfig.state_differences`). No parameters to train.
    """

    frame_key = "state"

    def __init__(self, state_dim: int, clip: float = 10.0,
                 differences: Sequence[Sequence[int]] = ()) -> None:
        super().__init__()
        if state_dim < 1:
            raise ValueError(f"state_dim must be >= 1, got {state_dim=}")
        self.differences = tuple(check_differences(differences, state_dim))
        self.state_dim = state_dim
        self.feature_dim = state_dim + sum(n for _, _, n in self.differences)
        self.clip = clip
        self.register_buffer("mean", torch.zeros(self.feature_dim))
        self.register_buffer("std", torch.ones(self.feature_dim))

    def set_normalizer(self, norm: Normalizer) -> None:
        """Adopt pre-training statistics of the features (done once, before the prior is frozen); width F."""
        if norm.dim != self.feature_dim:
            raise ValueError(f"normalizer width {norm.dim} != feature width {self.feature_dim} (state_dim "
                             f"{self.state_dim} + differences {self.differences})")
        self.mean.copy_(torch.from_numpy(norm.mean))
        self.std.copy_(torch.from_numpy(norm.std))

    def raw_features(self, states: np.ndarray | torch.Tensor) -> torch.Tensor:
        """(B, F) un-normalized features: the states (B, S), then each difference in order."""
        s = torch.as_tensor(np.asarray(states, dtype=np.float32))
        if s.ndim != 2 or s.shape[1] != self.state_dim:
            raise ValueError(f"state: expected shape (B, {self.state_dim}), got {tuple(s.shape)}")
        if not self.differences:
            return s
        return torch.cat([s, *(s[:, b:b + n] - s[:, a:a + n] for a, b, n in self.differences)], dim=1)

    def encode_frames(self, frames: Mapping[str, np.ndarray | torch.Tensor]) -> torch.Tensor:
        """(B, F) float32 features from ``frames["state"]`` (B, S)."""
        return torch.clip((self.raw_features(frames["state"]) - self.mean) / self.std, -self.clip, self.clip)


def check_differences(differences: Sequence[Sequence[int]], state_dim: int | None = None
                      ) -> list[tuple[int, int, int]]:
    """Validated (a, b, n) triples of :class:`StateTrunk`; with ``state_dim``, both slices must lie inside the state."""
    out = []
    for d in differences:
        if len(d) != 3 or any(int(x) != x for x in d):
            raise ValueError(f"a state difference is (a, b, n) integers: state[b:b+n] - state[a:a+n], got {d!r}")
        a, b, n = (int(x) for x in d)
        if a < 0 or b < 0 or n < 1:
            raise ValueError(f"a state difference needs a, b >= 0 and n >= 1, got {(a, b, n)}")
        if state_dim is not None and max(a, b) + n > state_dim:
            raise ValueError(f"state difference {(a, b, n)} reaches past the state (width {state_dim})")
        out.append((a, b, n))
    return out


class ImageTrunk(nn.Module):
    """Small CNN: {"image": (B, h, w, 3) uint8} -> (B, feature_dim). Frozen during fine-tuning.

    conv 5x5/2 (32) -> conv 3x3/2 (64) -> conv 3x3/2 (64) -> conv 3x3/2 (64) -> spatial softmax-free global average
    pool -> Linear -> LayerNorm. Can be trained jointly during pre-training (``fit(..., train_trunk=True)``).
    """

    frame_key = "image"

    def __init__(self, feature_dim: int = 64, channels: tuple[int, ...] = (32, 64, 64, 64)) -> None:
        super().__init__()
        if feature_dim < 1:
            raise ValueError(f"feature_dim must be >= 1, got {feature_dim=}")
        self.feature_dim = feature_dim
        layers: list[nn.Module] = []
        c_in = 3
        for i, c in enumerate(channels):
            layers += [nn.Conv2d(c_in, c, 5 if i == 0 else 3, stride=2, padding=2 if i == 0 else 1), nn.SiLU()]
            c_in = c
        self.convs = nn.Sequential(*layers)
        self.proj = nn.Linear(c_in, feature_dim)
        self.norm = nn.LayerNorm(feature_dim)

    def encode_frames(self, frames: Mapping[str, np.ndarray | torch.Tensor]) -> torch.Tensor:
        """(B, feature_dim) from ``frames["image"]`` (B, h, w, 3) uint8 (or float in [0, 1])."""
        img = torch.as_tensor(np.asarray(frames["image"]))
        if img.ndim != 4 or img.shape[-1] != 3:
            raise ValueError(f"image: expected shape (B, h, w, 3), got {tuple(img.shape)}")
        x = img.permute(0, 3, 1, 2).to(torch.float32)
        if img.dtype == torch.uint8:
            x = x / 255.0
        x = self.convs(x * 2.0 - 1.0)
        return self.norm(self.proj(F.adaptive_avg_pool2d(x, 1).flatten(1)))


def make_trunk(kind: str, state_dim: int = 0, image_feature_dim: int = 64,
               state_differences: Sequence[Sequence[int]] = ()) -> nn.Module:
    """``"state"`` -> :class:`StateTrunk` (with ``state_differences``), ``"image"`` -> :class:`ImageTrunk`."""
    if kind == "state":
        return StateTrunk(state_dim, differences=state_differences)
    if kind == "image":
        return ImageTrunk(image_feature_dim)
    raise ValueError(f"unknown trunk {kind!r}; choose 'state' or 'image'")


@dataclass
class CacheStats:
    """Counters of :class:`FrameCache` (hits = frames served without running the trunk)."""

    hits: int = 0
    misses: int = 0


class FrameCache:
    """Trunk features per frame, computed once: ``features(frames) -> (N, F)``.

    Keys are blake2b digests of each frame's bytes (the same frame recorded twice shares one entry); the cache
    must be :meth:`clear`-ed whenever the trunk's weights change (e.g. after joint pre-training).
    """

    def __init__(self, trunk: nn.Module, batch_size: int = 256) -> None:
        self.trunk = trunk
        self.batch_size = batch_size
        self._index: dict[bytes, int] = {}
        self._rows: list[torch.Tensor] = []
        self._table: torch.Tensor | None = None
        self.stats = CacheStats()

    def __len__(self) -> int:
        return len(self._index)

    def clear(self) -> None:
        """Forget every cached feature."""
        self._index.clear()
        self._rows.clear()
        self._table = None

    def _keys(self, data: np.ndarray) -> list[bytes]:
        data = np.ascontiguousarray(data)
        flat = data.reshape(data.shape[0], -1).view(np.uint8) if data.size else data.reshape(data.shape[0], 0)
        return [hashlib.blake2b(row.tobytes(), digest_size=16).digest() for row in flat]

    def features(self, frames: Mapping[str, np.ndarray]) -> torch.Tensor:
        """(N, F) float32 features of the N frames in ``frames[trunk.frame_key]``."""
        key = self.trunk.frame_key
        if key not in frames:
            raise ValueError(f"this trunk needs frames[{key!r}], got keys {sorted(frames)}")
        data = np.asarray(frames[key])
        if key == "state":
            data = data.astype(np.float32, copy=False)
        keys = self._keys(data)
        missing = [i for i, k in enumerate(keys) if k not in self._index]
        todo: list[int] = []  # first row of each new frame (duplicates within the batch computed once)
        seen: set[bytes] = set()
        for i in missing:
            if keys[i] not in seen:
                seen.add(keys[i])
                todo.append(i)
        self.stats.hits += len(keys) - len(todo)
        self.stats.misses += len(todo)
        if todo:
            was_training = self.trunk.training
            self.trunk.eval()
            with torch.no_grad():
                for j in range(0, len(todo), self.batch_size):
                    idx = todo[j:j + self.batch_size]
                    feats = self.trunk.encode_frames({key: data[idx]})
                    for i, f in zip(idx, feats, strict=True):
                        self._index[keys[i]] = len(self._rows)
                        self._rows.append(f)
            self.trunk.train(was_training)
            self._table = None
        if self._table is None:
            self._table = torch.stack(self._rows) if self._rows else torch.zeros(0, self.trunk.feature_dim)
        return self._table[torch.as_tensor([self._index[k] for k in keys], dtype=torch.long)]
