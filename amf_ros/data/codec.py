"""Image codecs for the episode store: PNG (lossless), JPEG (lossy, small) or raw arrays.

Why a packed layout: an ``.npz`` cannot hold a list of variable-length byte strings without pickle
(which the store refuses), so N encoded images are stored as one concatenated uint8 buffer plus
N+1 offsets.
"""

from __future__ import annotations

from typing import Callable, Iterable

import numpy as np

from amf_ros._optional import require

CODECS = ("png", "jpeg", "raw")


def encode_image(image: np.ndarray, codec: str, jpeg_quality: int = 95, png_level: int = 1) -> bytes:
    """Encode one RGB image (H, W, 3) uint8 as PNG or JPEG bytes."""
    if codec not in ("png", "jpeg"):
        raise ValueError(f"encode_image: codec must be 'png' or 'jpeg', got {codec=}")
    if image.dtype != np.uint8 or image.ndim != 3 or image.shape[2] != 3:
        raise ValueError(f"expected an RGB uint8 image (H, W, 3), got {image.dtype} {image.shape}")
    cv2 = require("cv2", "image compression")
    bgr = np.ascontiguousarray(image[:, :, ::-1])
    if codec == "png":
        ok, buf = cv2.imencode(".png", bgr, [cv2.IMWRITE_PNG_COMPRESSION, int(png_level)])
    else:
        ok, buf = cv2.imencode(".jpg", bgr, [cv2.IMWRITE_JPEG_QUALITY, int(jpeg_quality)])
    if not ok:
        raise ValueError(f"opencv could not encode a {image.shape} image as {codec}")
    return buf.tobytes()


def decode_image(data: bytes | np.ndarray) -> np.ndarray:
    """Decode PNG/JPEG bytes into an RGB uint8 image (H, W, 3)."""
    cv2 = require("cv2", "image decompression")
    buf = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray, memoryview)) else data
    bgr = cv2.imdecode(buf, cv2.IMREAD_COLOR)
    if bgr is None:
        raise ValueError(f"opencv could not decode {len(buf)} bytes as an image")
    return np.ascontiguousarray(bgr[:, :, ::-1])


def pack(blobs: list[bytes]) -> tuple[np.ndarray, np.ndarray]:
    """Concatenate byte strings: returns (data uint8 (sum len,), offsets int64 (n + 1,))."""
    offsets = np.zeros(len(blobs) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(b) for b in blobs])
    data = np.frombuffer(b"".join(blobs), dtype=np.uint8)
    return data, offsets


def unpack(data: np.ndarray, offsets: np.ndarray) -> list[bytes]:
    """Inverse of :func:`pack`."""
    if offsets.ndim != 1 or offsets[0] != 0 or offsets[-1] != data.size or (np.diff(offsets) < 0).any():
        raise ValueError(f"corrupt packed image offsets (data has {data.size} bytes, offsets end at "
                         f"{int(offsets[-1]) if offsets.size else None})")
    raw = data.tobytes()
    return [raw[int(a):int(b)] for a, b in zip(offsets[:-1], offsets[1:])]


def encode_stack(images: np.ndarray, codec: str, jpeg_quality: int = 95, png_level: int = 1,
                 map_fn: Callable[..., Iterable[bytes]] = map) -> dict[str, np.ndarray]:
    """Encode (n, H, W, 3) images; returns the arrays to store under suffixes ``""`` (raw) or ``@data/@offsets``.

    ``map_fn`` may be a thread pool's ``map``: opencv releases the GIL while encoding.
    """
    if codec == "raw":
        return {"": np.ascontiguousarray(images, dtype=np.uint8)}
    data, offsets = pack(list(map_fn(lambda im: encode_image(im, codec, jpeg_quality, png_level), images)))
    return {"@data": data, "@offsets": offsets}


def decode_stack(arrays: dict[str, np.ndarray], key: str) -> np.ndarray:
    """Inverse of :func:`encode_stack` for the arrays of one image key found in a chunk."""
    if key in arrays:
        return np.asarray(arrays[key])
    data, offsets = arrays.get(key + "@data"), arrays.get(key + "@offsets")
    if data is None or offsets is None:
        raise KeyError(key)
    frames = [decode_image(b) for b in unpack(np.asarray(data), np.asarray(offsets))]
    if not frames:
        return np.zeros((0, 0, 0, 3), dtype=np.uint8)
    return np.stack(frames)
