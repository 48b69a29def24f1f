"""What every exporter shares: which episodes go out, and the one feature layout they must all have.

An exported dataset (RLDS, LeRobot) declares its features once, so every episode in it must agree on the state
and action widths, the camera keys and (unless images are resized) the image shapes. The first episode sets the
layout; a disagreeing one is refused by name rather than written as a dataset its readers would choke on.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from amf_ros.atomic import fsync_dir
from amf_ros.data.schema import ACTION, OBS_PREFIX, STATE, is_image_key
from amf_ros.data.store import Episode, EpisodeStore


def select_episodes(store: EpisodeStore, tasks: Sequence[str] | None,
                    include_unsuccessful: bool) -> tuple[list[str], dict[str, str]]:
    """Ids to export (oldest first) and, for each episode left out for its verdict, why."""
    chosen, skipped = [], {}
    for eid in store.episode_ids():
        meta = store.meta(eid)
        if tasks is not None and meta.task not in tasks:
            continue
        if meta.success is not True and not include_unsuccessful:
            skipped[eid] = f"success={meta.success} (use --include-unsuccessful)"
            continue
        chosen.append(eid)
    return chosen, skipped


def plan_export(store: EpisodeStore | str | os.PathLike, tasks: Sequence[str] | None, include_unsuccessful: bool,
                target: Path, overwrite: bool) -> tuple[EpisodeStore, list[str], dict[str, str]]:
    """The store, the episodes to export and the skipped ones; ValueError if there is nothing to export or
    ``target`` exists without ``overwrite`` (checked before anything is written)."""
    if not isinstance(store, EpisodeStore):
        store = EpisodeStore(store, create=False)
    ids, skipped = select_episodes(store, tasks, include_unsuccessful)
    if not ids:
        raise ValueError(f"no episode to export from {store.root} (skipped: {skipped or 'none present'})")
    if target.exists() and not overwrite:
        raise ValueError(f"{target} exists; pass overwrite=True (--overwrite) to replace it")
    return store, ids, skipped


@contextlib.contextmanager
def staged_directory(target: Path) -> Iterator[Path]:
    """A hidden temporary directory beside ``target`` to build an export in: renamed into place (replacing an old
    ``target``) when the block completes, removed when it raises, so a crash never leaves half a dataset."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.parent / f".{target.name}.tmp-{os.getpid()}-{int(time.time())}"
    tmp.mkdir()
    try:
        yield tmp
        if target.exists():
            shutil.rmtree(target)
        os.rename(tmp, target)
        fsync_dir(target.parent)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def image_keys_of(store: EpisodeStore, episode_id: str) -> list[str]:
    """Camera keys of an episode, without the ``observation/`` prefix (``image_primary``...), sorted."""
    return sorted(k[len(OBS_PREFIX):] for k in store.meta(episode_id).image_codec)


def check_consistent(ep: Episode, spec: dict[str, Any], image_keys: Sequence[str],
                     image_size: tuple[int, int] | None) -> None:
    """Record the feature layout from the first episode into ``spec``; raise ValueError naming a later one that
    differs (state/action width, camera keys, image shape unless ``image_size`` resizes every image)."""
    keys = sorted(k[len(OBS_PREFIX):] for k in ep.steps if is_image_key(k))
    if keys != sorted(image_keys):
        raise ValueError(f"episode {ep.episode_id!r}: image keys {keys} differ from the first episode's "
                         f"{sorted(image_keys)}")
    images = {}
    for k in image_keys:
        h, w, c = ep.steps[OBS_PREFIX + k].shape[1:]
        images[k] = (image_size[0], image_size[1], c) if image_size else (h, w, c)
    state = ep.steps[STATE].shape[1] if STATE in ep.steps else None
    cur = {"state": state, "action": ep.steps[ACTION].shape[1], "images": images}
    if not spec:
        spec.update(cur)
    elif cur != spec:
        raise ValueError(f"episode {ep.episode_id!r}: shapes {cur} differ from the first episode's {spec} "
                         "(set an image size to resize images)")
