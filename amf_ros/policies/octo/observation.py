"""Octo observation windows: image resizing, history stacking and the timestep pad mask.

Two conventions exist and both are reproduced:

- ``mode="octo"`` (Octo's ``HistoryWrapper``, used by its WidowX example): the window always has W entries; at
  reset the first observation fills all of them and ``timestep_pad_mask`` marks the copies as padding
  (False), e.g. [False, True] on the first step with W = 2.
- ``mode="simpler"`` (SimplerEnv's ``OctoInference``): no pre-fill; the window grows from 1 to W entries and the
  mask is all ones.

Images: ``resize_image`` does Lanczos resizing to the model size (Octo/SimplerEnv use ``tf.image.resize(...,
"lanczos3", antialias=True)``; OpenCV's INTER_LANCZOS4 is the closest without TensorFlow, and INTER_AREA is used
for large downscales, which is what antialiasing approximates). ``crop_scale=0.9`` adds Octo's
``ResizeImageWrapper`` centre crop (the mean of the training random-resized-crop); SimplerEnv does not crop.

Output of :meth:`ObservationWindow.add`: ``{"image_primary": (1, W, 256, 256, 3) uint8, ["image_wrist":
(1, W, 128, 128, 3) uint8,] pad_key: (1, W) bool}``, where ``pad_key`` is "timestep_pad_mask" (Octo 1.5 code)
or "pad_mask" (Octo 1.0 code, as pinned by SimplerEnv).
"""

from __future__ import annotations

from collections import deque

import numpy as np

PAD_KEYS = ("timestep_pad_mask", "pad_mask")


def resize_image(image: np.ndarray, size: tuple[int, int], crop_scale: float | None = None) -> np.ndarray:
    """(H, W, 3) uint8 -> (size[0], size[1], 3) uint8, optionally after a centre crop of area ``crop_scale``."""
    import cv2

    img = np.asarray(image)
    if img.ndim != 3 or img.shape[2] != 3:
        raise ValueError(f"image must be (H, W, 3), got {img.shape}")
    if img.dtype != np.uint8:
        raise ValueError(f"image must be uint8, got {img.dtype}")
    h, w = size
    if crop_scale is not None:
        if not 0.0 < crop_scale <= 1.0:
            raise ValueError(f"crop_scale must be in (0, 1], got {crop_scale=}")
        # Octo: resize first, then crop_and_resize a centred box of side sqrt(scale) (avg_ratio 1), bilinear.
        img = resize_image(img, size)
        side = float(np.sqrt(crop_scale))
        y0, x0 = (1 - side) / 2 * h, (1 - side) / 2 * w
        crop = img[int(round(y0)): int(round(y0 + side * h)), int(round(x0)): int(round(x0 + side * w))]
        return cv2.resize(crop, (w, h), interpolation=cv2.INTER_LINEAR)
    if img.shape[:2] == (h, w):
        return img.copy()
    shrink = img.shape[0] / h > 2.0 or img.shape[1] / w > 2.0
    return cv2.resize(img, (w, h), interpolation=cv2.INTER_AREA if shrink else cv2.INTER_LANCZOS4)


class ObservationWindow:
    """History of the last W observations in Octo's batch format (batch size 1)."""

    def __init__(self, window: int = 2, primary_size: tuple[int, int] = (256, 256),
                 wrist_size: tuple[int, int] | None = None, pad_key: str = "timestep_pad_mask",
                 mode: str = "octo", crop_scale: float | None = None) -> None:
        if window < 1:
            raise ValueError(f"window must be >= 1, got {window=}")
        if pad_key not in PAD_KEYS:
            raise ValueError(f"pad_key must be one of {PAD_KEYS}, got {pad_key=}")
        if mode not in ("octo", "simpler"):
            raise ValueError(f"mode must be 'octo' or 'simpler', got {mode=}")
        self.window = int(window)
        self.primary_size = tuple(primary_size)
        self.wrist_size = tuple(wrist_size) if wrist_size is not None else None
        self.pad_key = pad_key
        self.mode = mode
        self.crop_scale = crop_scale
        self._frames: deque[dict[str, np.ndarray]] = deque(maxlen=self.window)
        self._seen = 0

    def reset(self) -> None:
        """Forget the history (new episode)."""
        self._frames.clear()
        self._seen = 0

    def __len__(self) -> int:
        return len(self._frames)

    def add(self, primary: np.ndarray, wrist: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Add one camera frame (any size, uint8 RGB) and return the model's observation dict (see module doc)."""
        frame = {"image_primary": resize_image(primary, self.primary_size, self.crop_scale)}
        if self.wrist_size is not None:
            if wrist is None:
                raise ValueError("this model takes a wrist image (image_wrist) but none was given")
            frame["image_wrist"] = resize_image(wrist, self.wrist_size)  # Octo does not crop the wrist view
        elif wrist is not None:
            raise ValueError("a wrist image was given but the window was built without wrist_size")
        self._seen += 1
        if self.mode == "octo" and not self._frames:
            self._frames.extend([frame] * self.window)
        else:
            self._frames.append(frame)
        n = len(self._frames)
        mask = np.ones(n, dtype=bool)
        if self.mode == "octo":
            mask[: n - min(self._seen, n)] = False
        obs = {k: np.stack([f[k] for f in self._frames])[None] for k in frame}
        obs[self.pad_key] = mask[None]
        return obs
