"""Synthetic recorded episodes for tests that need a store without a simulator."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Sequence

import numpy as np


def write_synthetic_episodes(root: Path, tasks: Sequence[str]) -> None:
    """Two synthetic Metaworld episodes per task (39-D states, in-range native actions as EefDeltaActions)."""
    from amf_ros.data.store import EpisodeStore
    from amf_ros.policies.action_spaces import native_to_eef7

    store, rng = EpisodeStore(root), np.random.default_rng(0)
    for task in [*tasks, *tasks]:
        t0 = time.time_ns()
        store.write_episode(task, f"do {task}", [
            {"observation": {"state": rng.normal(size=39).astype(np.float32)},
             "action": np.asarray(native_to_eef7(rng.uniform(-0.9, 0.9, 4)), np.float32),
             "stamp_ns": t0 + k * 100_000_000} for k in range(20)], robot="synthetic", control_rate_hz=10.0)
