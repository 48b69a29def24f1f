"""Shared helpers for the data tests: small synthetic episodes and fake ROS messages."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np

from amf_ros.data.store import EpisodeStore, StoreConfig

S = 1_000_000_000


def header(t_ns: int, frame_id: str = "") -> SimpleNamespace:
    return SimpleNamespace(stamp=SimpleNamespace(sec=t_ns // S, nanosec=t_ns % S), frame_id=frame_id)


def fake_action(t_ns: int, value: float, gripper: float = 1.0) -> SimpleNamespace:
    """Duck-typed EefDeltaAction: translation[0] carries ``value`` so tests can tell actions apart."""
    return SimpleNamespace(header=header(t_ns), translation=np.array([value, 0.0, 0.0], np.float32),
              rotation=np.zeros(3, np.float32), gripper=gripper)


def fake_state(t_ns: int, value: float) -> SimpleNamespace:
    """Duck-typed StateVector with two entries."""
    return SimpleNamespace(header=header(t_ns), names=["x", "y"], values=[value, -value])


def fake_image(t_ns: int, value: int, h: int = 8, w: int = 10) -> SimpleNamespace:
    """Duck-typed rgb8 Image filled with ``value``."""
    img = np.full((h, w, 3), value % 256, np.uint8)
    return SimpleNamespace(header=header(t_ns), height=h, width=w, encoding="rgb8", is_bigendian=0, step=w * 3,
              data=img.reshape(-1))


def synthetic_steps(n: int, seed: int = 0, h: int = 24, w: int = 32) -> list[dict]:
    """n steps with a state, an image and a 7-D action, deterministic in ``seed``."""
    rng = np.random.default_rng(seed)
    steps = []
    for i in range(n):
        steps.append({
            "observation": {"state": rng.normal(size=4).astype(np.float32),
                            "image_primary": rng.integers(0, 256, (h, w, 3), dtype=np.uint8)},
            "action": rng.normal(size=7).astype(np.float32),
            "stamp_ns": 1_000 + i * 200_000_000,
            "stamps": {"action": 1_000 + i * 200_000_000, "observation/state": 900 + i * 200_000_000},
        })
    return steps


def camera_frame(k: int, seed: int = 0, h: int = 480, w: int = 640) -> np.ndarray:
    """A camera-like RGB frame (smooth gradients and a moving bright block), distinct per ``k`` and ``seed``:
    what a video codec is made for, unlike noise."""
    yy, xx = np.mgrid[0:h, 0:w]
    img = np.stack([(xx // 3 + 5 * k + seed) % 256, (yy // 2 + 7 * seed) % 256, ((xx + yy) // 5 + 3 * k) % 256],
                   axis=-1).astype(np.uint8)
    top = (k * 7 + 13 * seed) % max(1, h - 40)
    img[top:top + 40, w // 6:w // 6 + 60] = 255
    return img


def camera_episode_steps(n: int, rate_hz: float, seed: int = 0, h: int = 480, w: int = 640) -> list[dict]:
    """n steps of a camera episode recorded at ``rate_hz``: state (5), camera frame, 7-D action, stamps at the
    rate (with 2 ms of jitter, as a real control loop has)."""
    rng = np.random.default_rng(seed)
    t0 = 1_700_000_000 * S + seed * 100 * S
    period = S / rate_hz
    return [{"observation": {"state": rng.normal(size=5).astype(np.float32),
                             "image_primary": camera_frame(k, seed, h, w)},
             "action": np.r_[rng.uniform(-0.01, 0.01, 6), float(k % 2)].astype(np.float32),
             "stamp_ns": int(t0 + k * period + rng.integers(0, 2_000_000))} for k in range(n)]


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    """Peak signal-to-noise ratio of two uint8 images (dB; inf if equal)."""
    mse = float(np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2))
    return float("inf") if mse == 0 else 10 * np.log10(255.0 ** 2 / mse)


# The LeRobot export tests (test/data/test_lerobot.py, test_lerobot_reader.py): one recorded store per rate.
EPISODES = 20
RATES = {5: 8, 30: 15}  # recording rate (Hz) -> steps per episode
TASKS = ("reach", "push")
MIN_PSNR_DB = 30.0  # constant-quality AV1 at crf 30 keeps these frames at 34-41 dB; 30 dB is lossy video's
# usual "no visible loss" floor, so a frame below it is a wrong frame (off by one, other episode), not codec noise


def record_lerobot_store(root, rate: int, n: int) -> EpisodeStore:
    """A PNG-coded store of EPISODES episodes of n steps at ``rate`` Hz, alternating TASKS."""
    store = EpisodeStore(root, StoreConfig(image_codec="png"))
    for e in range(EPISODES):
        task = TASKS[e % 2]
        store.write_episode(task, f"{task} the object", camera_episode_steps(n, rate, seed=e),
                            success=None if e == 3 else e % 3 != 0, control_rate_hz=rate, robot="widowx",
                            state_names=["x", "y", "z", "grip", "t"], extra={"streams": {"note": e}})
    return store
