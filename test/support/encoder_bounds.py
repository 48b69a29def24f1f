"""Tolerances of the frozen camera encoder (amf_ros/policies/image_encoders.py) between two evaluation orders (another
batch size or batch order), derived from fp_bounds: the network's sums, then what the pooling does to their error."""

from __future__ import annotations

import math

import numpy as np
from fp_bounds import fan_in_sum, two_path_tolerance


def stage_maps(enc, frames: np.ndarray) -> np.ndarray:
    """(B, C, h, w) float32 maps of the last MBConv stage for RGB uint8 frames (what every pooling reads)."""
    import torch

    net = enc.net
    with torch.no_grad():
        h = net._swish(net._bn0(net._conv_stem(enc.preprocess(frames))))
        for block in net._blocks:
            h = block(h)
    return h.numpy()


def encoder_tolerance(enc, frames: np.ndarray, out: np.ndarray) -> float:
    """Largest difference two evaluation orders may give ``out = enc.encode(frames)``.

    The maps: the conv fan-ins plus the largest average pool (the squeeze-and-excitation pool of the stride-2 stage,
    h w / 4 terms) and the output grid pool, at the scale of the output (grid and avg poolings) or of the maps
    (keypoints). Keypoints: a map error eps changes each softmax weight by a factor within exp(+-2 eps / T), so an
    expected coordinate (|x| <= 1, weights summing to 1) by at most expm1(2 eps / T); plus the rounding of the
    softmax's normaliser, its weighted sums and their row sums (3 h w terms at scale 1)."""
    from amf_ros.policies.image_encoders import KEYPOINT_TEMPERATURE

    h, w = enc.input_hw
    n = fan_in_sum(enc) + (h // 2) * (w // 2) + (h // 32) * (w // 32)
    if enc.pool not in ("keypoints", "table_keypoints"):
        return two_path_tolerance(n, float(np.abs(out).max()))
    maps = stage_maps(enc, frames)
    eps = two_path_tolerance(n, float(np.abs(maps).max()))
    return math.expm1(2.0 * eps / KEYPOINT_TEMPERATURE) + two_path_tolerance(3 * maps.shape[2] * maps.shape[3], 1.0)
