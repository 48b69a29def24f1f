"""From an episode store to the flat transitions dict the policies fine-tune on.

``load_transitions`` returns N = total steps over the selected episodes::

    {"state": float32 (N, S), "action": float32 (N, A), "task": str (N,), "episode_index": int64 (N,),
     "step": int64 (N,), ["image": uint8 (N, H, W, 3)]}

``episode_index`` counts the selected episodes in store order (oldest first); ``load_transitions(...,
return_ids=True)`` also returns the matching episode ids.
"""

from __future__ import annotations

import os
from typing import Sequence

import numpy as np

from amf_ros._optional import require
from amf_ros.data.schema import ACTION, OBS_PREFIX, STATE
from amf_ros.data.store import EpisodeStore


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


def load_transitions(store: EpisodeStore | str | os.PathLike, *, tasks: Sequence[str] | None = None,
                     image_key: str | None = None, image_size: tuple[int, int] | None = None,
                     action_key: str = ACTION, state_key: str = STATE, success_only: bool = False,
                     episode_ids: Sequence[str] | None = None,
                     return_ids: bool = False) -> dict[str, np.ndarray] | tuple[dict[str, np.ndarray], list[str]]:
    """Concatenate the steps of the selected episodes.

    Args:
        store: an EpisodeStore or a dataset directory.
        tasks: keep only these task keys (None = all).
        image_key: also load this image stream (e.g. ``"image_primary"``) as ``"image"``.
        image_size: (H, W) to resize images to (None = as stored).
        action_key: ``"action"`` (7-D EefDelta) or ``"action_native"`` (simulator's own action space).
        state_key: which observation array is the state (default ``observation/state``).
        success_only: skip episodes not marked successful (recovered episodes have success=None).
        episode_ids: load exactly these episodes (overrides ``tasks``).
        return_ids: also return the list of episode ids, indexed by ``episode_index``.
    Raises:
        ValueError: no episode selected, or episodes disagree on state/action width.
        EpisodeValidationError: an episode fails validation (names the episode and field).
    """
    if not isinstance(store, EpisodeStore):
        store = EpisodeStore(store, create=False)
    state_key = state_key if state_key.startswith(OBS_PREFIX) else OBS_PREFIX + state_key
    ids = list(episode_ids) if episode_ids is not None else store.episode_ids()
    cols: dict[str, list[np.ndarray]] = {"state": [], "action": [], "task": [], "episode_index": [], "step": []}
    if image_key is not None:
        cols["image"] = []
    used: list[str] = []
    for eid in ids:
        meta = store.meta(eid)
        if episode_ids is None and tasks is not None and meta.task not in tasks:
            continue
        if success_only and meta.success is not True:
            continue
        ep = store.load(eid, images=[image_key] if image_key else False)
        n = len(ep)
        if action_key not in ep.steps:
            raise ValueError(f"episode {eid!r} has no {action_key!r} (has {sorted(ep.steps)})")
        if state_key not in ep.steps:
            raise ValueError(f"episode {eid!r} has no {state_key!r} (has {sorted(ep.steps)})")
        cols["state"].append(np.asarray(ep.steps[state_key], dtype=np.float32).reshape(n, -1))
        cols["action"].append(np.asarray(ep.steps[action_key], dtype=np.float32))
        cols["task"].append(np.full(n, meta.task))
        cols["episode_index"].append(np.full(n, len(used), dtype=np.int64))
        cols["step"].append(np.arange(n, dtype=np.int64))
        if image_key is not None:
            img = ep.steps[OBS_PREFIX + image_key if not image_key.startswith(OBS_PREFIX) else image_key]
            cols["image"].append(resize_images(img, image_size) if image_size else img)
        used.append(eid)
    if not used:
        raise ValueError(f"no episode selected in {store.root} ({tasks=}, {success_only=}, "
                         f"{len(ids)} episodes present)")
    for key in ("state", "action"):
        widths = {a.shape[1] for a in cols[key]}
        if len(widths) > 1:
            raise ValueError(f"episodes disagree on the {key} width: {sorted(widths)}")
    out = {k: np.concatenate(v) for k, v in cols.items()}
    return (out, used) if return_ids else out
