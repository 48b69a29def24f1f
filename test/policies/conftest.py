"""Shared fixtures of the policy tests: one MiniLM encoder per session, tiny synthetic demonstrations."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.threads import limit_threads

# Tiny models: intra-op threads only add synchronisation, and on a shared, loaded machine spinning thread pools
# make small ops 10x slower. One thread per test process (the benchmark does the same per worker).
limit_threads(1)


@pytest.fixture(scope="session")
def minilm_encoder():
    """The real all-MiniLM-L6-v2 encoder, loaded once for the whole session."""
    from amf_ros.policies.language import MiniLMEncoder

    return MiniLMEncoder()


def make_demos(task: str, episodes: int, *, steps: int = 12, state_dim: int = 5, episode_offset: int = 0,
               sign: float = 1.0, seed: int = 0) -> dict[str, np.ndarray]:
    """Episodes of a toy task: action = tanh(sign * state[:2]) (a different expert per sign)."""
    rng = np.random.default_rng(seed)
    st, ac, ep, stp = [], [], [], []
    for e in range(episodes):
        s = rng.normal(size=state_dim)
        for t in range(steps):
            st.append(s.copy())
            ac.append(np.tanh(sign * s[:2]))
            ep.append(episode_offset + e)
            stp.append(t)
            s = s + 0.1 * rng.normal(size=state_dim)
    return {"state": np.asarray(st, np.float32), "action": np.asarray(ac, np.float32),
            "episode_index": np.asarray(ep), "step": np.asarray(stp), "task": np.asarray([task] * len(st))}


def concat(*parts: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Row-wise concatenation of transition dicts."""
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}
