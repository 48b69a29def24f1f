"""Action chunks that stay within an episode (Octo's ``chunk_act_obs`` for window 1).

chunk[i, h] = action of the frame ``h`` steps after frame i in the same episode; past the episode end the last
action is repeated and the mask is False, so padded steps never enter the loss.
"""

from __future__ import annotations

import numpy as np


def action_chunks(actions: np.ndarray, episode_index: np.ndarray, step: np.ndarray, horizon: int
                  ) -> tuple[np.ndarray, np.ndarray]:
    """Chunks (N, H, A) and their validity mask (N, H, A) bool, rows in the input order.

    Args:
        actions: (N, A) per-frame actions.
        episode_index: (N,) episode id of each frame (any integers; rows may be in any order).
        step: (N,) step of each frame within its episode (unique per episode).
        horizon: H >= 1.
    """
    actions = np.asarray(actions)
    ep = np.asarray(episode_index).reshape(-1)
    st = np.asarray(step).reshape(-1)
    if actions.ndim != 2:
        raise ValueError(f"actions must be (N, A), got shape {actions.shape}")
    n = actions.shape[0]
    if ep.shape != (n,) or st.shape != (n,):
        raise ValueError(f"episode_index and step must be ({n},), got {ep.shape=} {st.shape=}")
    if horizon < 1:
        raise ValueError(f"horizon must be >= 1, got {horizon=}")
    order = np.lexsort((st, ep))
    ep_s, st_s = ep[order], st[order]
    if n > 1 and np.any((ep_s[1:] == ep_s[:-1]) & (st_s[1:] == st_s[:-1])):
        raise ValueError("duplicate (episode_index, step) pairs in transitions")
    # position of each sorted row's last frame in its episode
    last = np.empty(n, dtype=np.int64)
    if n:
        ends = np.flatnonzero(np.r_[ep_s[1:] != ep_s[:-1], True])
        last = np.repeat(ends, np.diff(np.r_[-1, ends]))
    pos = np.arange(n)[:, None] + np.arange(horizon)[None, :]  # (N, H) in sorted order
    valid = pos <= last[:, None]
    pos = np.minimum(pos, last[:, None])
    chunks_sorted = actions[order][pos]  # (N, H, A)
    mask_sorted = np.broadcast_to(valid[:, :, None], chunks_sorted.shape)
    inverse = np.empty(n, dtype=np.int64)
    inverse[order] = np.arange(n)
    return chunks_sorted[inverse], np.ascontiguousarray(mask_sorted[inverse])
