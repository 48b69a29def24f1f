"""A small Octo-style episode store (camera frames, 8-D state, 7-D actions) for the octo backend tests."""

from __future__ import annotations

import numpy as np

from amf_ros.data.store import EpisodeStore

TASKS = {"carrot_on_plate": "put carrot on plate", "spoon_on_towel": "put the spoon on the towel"}


def octo_episodes(root, n_eps=3, steps=6, seed=0, wrist=False):
    """A store with n_eps episodes of 64x80 camera frames (and 48x48 wrist frames), 8-D state and 7-D actions."""
    rng = np.random.default_rng(seed)
    store = EpisodeStore(root)
    keys = list(TASKS)

    def obs() -> dict:
        out = {"state": rng.normal(size=8).astype(np.float32),
               "image_primary": rng.integers(0, 256, (64, 80, 3), dtype=np.uint8)}
        if wrist:
            out["image_wrist"] = rng.integers(0, 256, (48, 48, 3), dtype=np.uint8)
        return out

    for e in range(n_eps):
        task = keys[e % 2]
        store.write_episode(task, TASKS[task], [{
            "observation": obs(),
            "action": np.r_[rng.normal(0, 0.01, 6), rng.integers(0, 2)].astype(np.float32),
            "stamp_ns": 1000 + i * 200_000_000} for i in range(steps)])
    return store
