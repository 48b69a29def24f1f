"""Image codecs for the episode store: PNG (lossless), JPEG (lossy, small), raw arrays, or video (H.264, AV1), and
the one image resize (loading, exports).

Why a packed layout: an ``.npz`` cannot hold a list of variable-length byte strings without pickle
(which the store refuses), so N encoded images are stored as one concatenated uint8 buffer plus
N+1 offsets.

Video: the frames of one chunk become one small MP4 (PyAV: libx264 or libsvtav1, yuv420p, constant quality
``video_crf``) stored as bytes inside the chunk file, so a chunk stays all-or-nothing (the store's crash safety
holds unchanged) and decodes on its own (every chunk starts with a key frame). yuv420p needs even sizes: an odd
frame is padded by repeating its last row/column and cropped back on decode (``@shape`` keeps the true size).
"""

from __future__ import annotations

import contextlib
import io
import os
from typing import Callable, Iterable, Iterator

import numpy as np

from amf_ros._optional import require

VIDEO_ENCODERS = {"h264": ("libx264", {"preset": "veryfast"}), "av1": ("libsvtav1", {"preset": "10"})}
"""Video codec -> (FFmpeg encoder, options); both ship in PyAV's wheels."""
CODECS = ("png", "jpeg", "raw", *VIDEO_ENCODERS)


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
    return [raw[int(a):int(b)] for a, b in zip(offsets[:-1], offsets[1:], strict=True)]


def encode_video(images: np.ndarray, codec: str, crf: int = 23) -> bytes:
    """Encode (n, H, W, 3) RGB uint8 frames as one MP4 (``codec`` "h264" or "av1"); odd sizes are edge-padded."""
    if codec not in VIDEO_ENCODERS:
        raise ValueError(f"encode_video: codec must be one of {sorted(VIDEO_ENCODERS)}, got {codec=}")
    images = np.asarray(images)
    if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3 or images.shape[0] == 0:
        raise ValueError(f"expected RGB uint8 frames (n >= 1, H, W, 3), got {images.dtype} {images.shape}")
    av = require("av", "video storage (image_codec h264/av1)")
    n, h, w = images.shape[:3]
    even = np.pad(images, ((0, 0), (0, h % 2), (0, w % 2), (0, 0)), mode="edge")
    encoder, options = VIDEO_ENCODERS[codec]
    os.environ.setdefault("SVT_LOG", "1")  # SVT-AV1 prints ~25 info lines per encoder to stderr otherwise
    buf = io.BytesIO()
    with _keep_scheduling():
        with av.open(buf, mode="w", format="mp4") as out:
            stream = out.add_stream(encoder, rate=30)  # nominal: a frame's time is its step's stamp
            stream.width, stream.height, stream.pix_fmt = even.shape[2], even.shape[1], "yuv420p"
            stream.options = {**options, "crf": str(int(crf))}
            for frame in even:
                out.mux(stream.encode(av.VideoFrame.from_ndarray(frame, format="rgb24")))
            out.mux(stream.encode())
    return buf.getvalue()


class VideoFileWriter:
    """Frames appended one by one to an MP4 file at a fixed rate: frame ``i`` is shown at ``i / fps`` seconds.

    Why a file writer next to :func:`encode_video`: a LeRobot dataset keeps many episodes back to back in one MP4
    per camera and finds an episode by timestamp, so frames must be streamed in (an export does not fit in RAM)
    and their times must be exact multiples of the frame period. ``gop`` is the key-frame interval (LeRobot's
    writer uses 2, so a reader seeking to any frame decodes at most one other).
    """

    def __init__(self, path: str | os.PathLike, codec: str, fps: int, height: int, width: int, crf: int = 30,
                 gop: int = 2) -> None:
        if codec not in VIDEO_ENCODERS:
            raise ValueError(f"video codec must be one of {sorted(VIDEO_ENCODERS)}, got {codec=}")
        if height % 2 or width % 2:
            raise ValueError(f"yuv420p video needs even frame sizes, got {height}x{width} (resize the images)")
        av = require("av", "video files")
        encoder, options = VIDEO_ENCODERS[codec]
        os.environ.setdefault("SVT_LOG", "1")
        self.path, self.fps, self.frames = os.fspath(path), int(fps), 0
        self._shape = (int(height), int(width), 3)
        self._av = av
        self._out = av.open(self.path, mode="w", format="mp4")
        self._stream = self._out.add_stream(encoder, rate=self.fps)
        self._stream.width, self._stream.height, self._stream.pix_fmt = int(width), int(height), "yuv420p"
        self._stream.options = {**options, "crf": str(int(crf)), "g": str(int(gop))}

    def add(self, frame: np.ndarray, key: bool = False) -> None:
        """Append one RGB uint8 (H, W, 3) frame of the writer's size; ``key`` forces a key frame (an episode's
        first frame: it then decodes without the previous episode, and no prediction spans the cut between two
        episodes, which SVT-AV1 1.x encoded as a garbled frame)."""
        if frame.shape != self._shape or frame.dtype != np.uint8:
            raise ValueError(f"{self.path}: expected a {self._shape} uint8 frame, got {frame.dtype} {frame.shape}")
        vf = self._av.VideoFrame.from_ndarray(np.ascontiguousarray(frame), format="rgb24")
        if key:
            vf.pict_type = self._av.video.frame.PictureType.I
        with _keep_scheduling():
            self._out.mux(self._stream.encode(vf))
        self.frames += 1

    def close(self) -> None:
        """Flush the encoder and finish the file (idempotent)."""
        if self._out is None:
            return
        try:
            with _keep_scheduling():
                self._out.mux(self._stream.encode())
        finally:
            self._out.close()
            self._out = None

    def __enter__(self) -> "VideoFileWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def iter_video_frames(path: str | os.PathLike) -> Iterator[tuple[float, np.ndarray]]:
    """(time in seconds, RGB uint8 frame) of every frame of a video file, in presentation order."""
    av = require("av", "video files")
    try:
        with av.open(os.fspath(path), mode="r") as inp:
            for frame in inp.decode(video=0):
                yield float(frame.time), frame.to_ndarray(format="rgb24")
    except av.error.FFmpegError as exc:
        raise ValueError(f"corrupt video file {path}: {exc}") from exc


@contextlib.contextmanager
def _keep_scheduling() -> Iterator[None]:
    """Restore the calling thread's scheduling policy after an encoder ran on it.

    Why: SVT-AV1 (libsvtav1 4.1 in PyAV 18's wheels) switches the thread that opens it to SCHED_FIFO when it may
    (root, as in many robot containers). A real-time thread then starves the node's executor on its core, and
    every process started from that thread inherits the policy: a test run that encoded AV1 on its main thread
    later wedged the ROS nodes it spawned (both processes spinning at 90 % CPU).
    """
    if not hasattr(os, "sched_getscheduler"):
        yield
        return
    policy, param = os.sched_getscheduler(0), os.sched_getparam(0)
    try:
        yield
    finally:
        if os.sched_getscheduler(0) != policy:
            os.sched_setscheduler(0, policy, param)


def decode_video(data: bytes | np.ndarray, shape: tuple[int, int, int] | None = None) -> np.ndarray:
    """Decode :func:`encode_video` bytes into (n, H, W, 3) RGB uint8; ``shape`` (n, H, W) checks the frame count
    and crops the padding."""
    av = require("av", "video decoding (image_codec h264/av1)")
    raw = _as_bytes(data)
    try:
        with av.open(io.BytesIO(raw), mode="r") as inp:
            frames = [f.to_ndarray(format="rgb24") for f in inp.decode(video=0)]
    except av.error.FFmpegError as exc:
        raise ValueError(f"corrupt video chunk ({len(raw)} bytes): {exc}") from exc
    if shape is not None:
        n, h, w = (int(v) for v in shape)
        if len(frames) != n:
            raise ValueError(f"video chunk holds {len(frames)} frames, expected {n}")
        frames = [f[:h, :w] for f in frames]
    return np.stack(frames) if frames else np.zeros((0, 0, 0, 3), dtype=np.uint8)


def _as_bytes(data: bytes | np.ndarray) -> bytes:
    """A stored video chunk (a uint8 array from the .npz, or bytes) as bytes."""
    return data.tobytes() if isinstance(data, np.ndarray) else bytes(data)


def video_codec_of(data: bytes | np.ndarray) -> str:
    """"h264" or "av1": the codec of a stored video chunk (for recovering an episode's metadata)."""
    av = require("av", "video decoding")
    raw = _as_bytes(data)
    with av.open(io.BytesIO(raw), mode="r") as inp:
        name = inp.streams.video[0].codec_context.name
    return "h264" if name == "h264" else "av1"


def encode_stack(images: np.ndarray, codec: str, jpeg_quality: int = 95, png_level: int = 1,
                 map_fn: Callable[..., Iterable[bytes]] = map, video_crf: int = 23) -> dict[str, np.ndarray]:
    """Encode (n, H, W, 3) images; returns the arrays to store under suffixes ``""`` (raw), ``@data/@offsets``
    (PNG/JPEG) or ``@video/@shape`` (H.264/AV1).

    ``map_fn`` may be a thread pool's ``map``: opencv releases the GIL while encoding.
    """
    if codec == "raw":
        return {"": np.ascontiguousarray(images, dtype=np.uint8)}
    if codec in VIDEO_ENCODERS:
        video = encode_video(images, codec, video_crf)
        return {"@video": np.frombuffer(video, dtype=np.uint8),
                "@shape": np.asarray(np.shape(images)[:3], dtype=np.int64)}
    data, offsets = pack(list(map_fn(lambda im: encode_image(im, codec, jpeg_quality, png_level), images)))
    return {"@data": data, "@offsets": offsets}


def decode_stack(arrays: dict[str, np.ndarray], key: str) -> np.ndarray:
    """Inverse of :func:`encode_stack` for the arrays of one image key found in a chunk."""
    if key in arrays:
        return np.asarray(arrays[key])
    if key + "@video" in arrays:
        return decode_video(np.asarray(arrays[key + "@video"]), tuple(np.asarray(arrays[key + "@shape"])))
    data, offsets = arrays.get(key + "@data"), arrays.get(key + "@offsets")
    if data is None or offsets is None:
        raise KeyError(key)
    frames = [decode_image(b) for b in unpack(np.asarray(data), np.asarray(offsets))]
    if not frames:
        return np.zeros((0, 0, 0, 3), dtype=np.uint8)
    return np.stack(frames)


def resize_images(images: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """Resize (N, H, W, 3) uint8 to (N, size[0], size[1], 3) with area interpolation (Octo: 256x256)."""
    h, w = size
    if images.shape[1:3] == (h, w):
        return images
    cv2 = require("cv2", "image resizing")
    out = np.empty((images.shape[0], h, w, images.shape[3]), dtype=np.uint8)
    for i, im in enumerate(images):
        out[i] = cv2.resize(im, (w, h), interpolation=cv2.INTER_AREA)
    return out
