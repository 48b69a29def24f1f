"""Episode schema: what one recorded demonstration holds, and the checks every load runs.

An episode of N control steps is a flat mapping of arrays whose first axis is time (N):

==========================  =========  ==========  =====================================================
key                         dtype      shape       meaning
==========================  =========  ==========  =====================================================
``action``                  float32    (N, A)      the action taken at the step (A = 7: EefDeltaAction,
                                                   xyz delta m, rpy delta rad, gripper 1 = open)
``action_native``           float32    (N, A')     optional: the simulator's native action, when known
``observation/state``       float32    (N, S)      robot/simulator state vector (names in the metadata)
``observation/image_*``     uint8      (N, H, W, 3) camera images, RGB (``image_primary`` = Octo's camera)
``observation/<other>``     numeric    (N, ...)    any other low-dimensional observation
``is_first``                bool       (N,)        True on step 0 only
``is_last``                 bool       (N,)        True on step N-1 only
``is_terminal``             bool       (N,)        True on the last step of a successful episode
``stamp_ns``                int64      (N,)        time of the step (ns): tick time or action stamp
``stamp/<stream>``          int64      (N,)        each stream's own timestamp (``stamp/action``,
                                                   ``stamp/observation/state``, ...), -1 = none
``actor``                   uint8      (N,)        optional: who sent the step's action, 0 = a person
                                                   (:data:`ACTOR_HUMAN`), 1 = the policy
                                                   (:data:`ACTOR_POLICY`: a run_policy goal with a
                                                   takeover); absent = every step is a person's
==========================  =========  ==========  =====================================================

A plain demonstration is an episode whose steps are all a person's; an intervention episode (a run_policy goal
recorded while a person took over, amf_ros/runtime/handover.py) mixes both, and fine-tuning trains on the person's
steps only by default (amf_ros/data/transitions.py). Episodes written before the column existed load unchanged and
count as all-human (:func:`actors`).

Metadata (``meta.json``) is :class:`EpisodeMeta`. Validation (:func:`validate_steps`,
:func:`validate_meta`) raises :class:`EpisodeValidationError`, which names the episode and the field.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np

from amf_ros.data.codec import CODECS

SCHEMA_VERSION = 1
SUPPORTED_SCHEMA_VERSIONS = (1,)

ACTION = "action"
ACTION_NATIVE = "action_native"
OBS_PREFIX = "observation/"
STATE = "observation/state"
STAMP = "stamp_ns"
STAMP_PREFIX = "stamp/"
FLAGS = ("is_first", "is_last", "is_terminal")
ACTOR = "actor"
ACTOR_HUMAN = 0
"""``actor`` of a step whose action a person sent (teleop, the console, scripted_teleop's simulated person)."""
ACTOR_POLICY = 1
"""``actor`` of a step whose action the policy sent (run_policy)."""
ACTOR_NAMES = {ACTOR_HUMAN: "human", ACTOR_POLICY: "policy"}


def actors(steps: Mapping[str, np.ndarray]) -> np.ndarray:
    """The ``actor`` column of an episode's steps as uint8 (N,); all :data:`ACTOR_HUMAN` when the episode has none
    (recorded before the column existed, or imported)."""
    if ACTOR in steps:
        return np.asarray(steps[ACTOR], dtype=np.uint8).reshape(-1)
    return np.full(int(np.shape(steps[ACTION])[0]), ACTOR_HUMAN, dtype=np.uint8)


MAX_TASK_KEY_CHARS = 128
"""Longest task key (keys name episodes' metadata, log lines and plots; amf_ros/data/tasks.py checks keys)."""
MAX_INSTRUCTION_CHARS = 1000
"""Longest language instruction stored with an episode (a sentence; Octo's tokenizer reads 16 tokens of it)."""
MAX_NOTE_CHARS = 2000
"""Longest operator note stored with an episode."""
MAX_NAME_CHARS = 256
"""Longest robot name or episode id stored with an episode (and robot name a service takes)."""

TEXT_LIMITS: dict[str, int] = {"task": MAX_TASK_KEY_CHARS, "instruction": MAX_INSTRUCTION_CHARS,
                               "operator_note": MAX_NOTE_CHARS, "robot": MAX_NAME_CHARS,
                               "episode_id": MAX_NAME_CHARS}
"""The free-text fields of :class:`EpisodeMeta` and their longest value in characters. Why bounded: every field is
stored in meta.json, the first three also in the store's index.json (rewritten at every commit), announced on
/amf/episodes and echoed in logs; a 1 MB instruction made index.json 1 MB (issue 33). Services refuse longer values
with the same limits (demo_recorder's StartEpisode), and :meth:`amf_ros.data.store.EpisodeStore.begin` refuses
them too."""


def text_problem(name: str, value: str, limit: int) -> str:
    """Why ``value`` cannot be ``name`` ("" if it can): longer than ``limit`` characters. The message states the
    limit and quotes at most 40 characters of the value (bounded answers and logs)."""
    if len(value) <= limit:
        return ""
    return f"{name} of {len(value)} characters is too long (at most {limit}): {value[:40]!r}..."


def text_limit_problem(**fields: str) -> str:
    """The first of ``fields`` (names of :data:`TEXT_LIMITS`, e.g. ``instruction=..., operator_note=...``) that is
    too long, said as :func:`text_problem` says it, or "" if none is."""
    for name, value in fields.items():
        problem = text_problem(name.replace("_", " "), value, TEXT_LIMITS[name])
        if problem:
            return problem
    return ""


def is_image_key(key: str) -> bool:
    """Observation keys ``observation/image*`` hold uint8 (H, W, 3) images, compressed by the store."""
    return key.startswith(OBS_PREFIX + "image")


class EpisodeValidationError(ValueError):
    """An episode on disk (or about to be written) breaks the schema.

    Attributes:
        episode: episode id (or directory name).
        field: the offending key (array key, ``meta.<name>`` or ``file``).
    """

    def __init__(self, episode: str, field: str, problem: str) -> None:
        self.episode = episode
        self.field = field
        self.problem = problem
        super().__init__(f"episode {episode!r}: field {field!r}: {problem}")


@dataclass
class EpisodeMeta:
    """Everything about an episode that is not a per-step array (stored as ``meta.json``)."""

    episode_id: str
    task: str
    instruction: str
    success: bool | None = None  # None = unknown (e.g. an episode recovered after a crash)
    operator_note: str = ""
    robot: str = ""  # e.g. "widowx250s", "metaworld", "sim"
    control_rate_hz: float = 5.0
    num_steps: int = 0
    topics: dict[str, str] = field(default_factory=dict)  # stream name -> ROS topic it came from
    state_names: list[str] = field(default_factory=list)  # one name per state entry (may be empty)
    image_codec: dict[str, str] = field(default_factory=dict)  # image key -> "png" | "jpeg" | "raw" | "h264" | "av1"
    chunks: list[dict[str, Any]] = field(default_factory=list)  # [{"file", "num_steps", "sha256"}]
    created_unix: float = 0.0
    ended_unix: float = 0.0
    recovered: bool = False  # True if committed by recovery after the writer died
    sync_stats: dict[str, int] = field(default_factory=dict)  # synchroniser counters (skipped ticks, ...)
    package_version: str = ""
    schema_version: int = SCHEMA_VERSION
    extra: dict[str, Any] = field(default_factory=dict)  # free-form, JSON-able

    def to_json(self) -> dict[str, Any]:
        """JSON-able dict (NaN/inf are refused by the atomic JSON writer)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, obj: Mapping[str, Any], episode: str = "?") -> "EpisodeMeta":
        """Build from a decoded ``meta.json``; unknown or missing required keys raise EpisodeValidationError."""
        if not isinstance(obj, Mapping):
            raise EpisodeValidationError(episode, "meta", f"expected a JSON object, got {type(obj).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(obj) - known)
        if unknown:
            raise EpisodeValidationError(episode, f"meta.{unknown[0]}", f"unknown metadata keys {unknown}")
        for name in ("episode_id", "task", "instruction", "schema_version"):
            if name not in obj:
                raise EpisodeValidationError(episode, f"meta.{name}", "missing")
        meta = cls(**dict(obj))
        validate_meta(meta, episode)
        return meta


_META_TYPES: dict[str, tuple[type, ...]] = {
    "episode_id": (str,), "task": (str,), "instruction": (str,), "operator_note": (str,), "robot": (str,),
    "control_rate_hz": (int, float), "num_steps": (int,), "topics": (dict,), "state_names": (list,),
    "image_codec": (dict,), "chunks": (list,), "created_unix": (int, float), "ended_unix": (int, float),
    "recovered": (bool,), "sync_stats": (dict,), "package_version": (str,), "schema_version": (int,),
    "extra": (dict,),
}


def validate_meta(meta: EpisodeMeta, episode: str | None = None) -> None:
    """Check types and values of the metadata fields; raise EpisodeValidationError naming the field."""
    ep = episode or meta.episode_id or "?"
    for name, types in _META_TYPES.items():
        value = getattr(meta, name)
        if isinstance(value, bool) and bool not in types:
            raise EpisodeValidationError(ep, f"meta.{name}", f"expected {types[0].__name__}, got bool")
        if not isinstance(value, types):
            raise EpisodeValidationError(ep, f"meta.{name}", f"expected {types[0].__name__}, got {value!r}")
    if meta.success is not None and not isinstance(meta.success, bool):
        raise EpisodeValidationError(ep, "meta.success", f"expected true/false/null, got {meta.success!r}")
    if meta.schema_version not in SUPPORTED_SCHEMA_VERSIONS:
        raise EpisodeValidationError(ep, "meta.schema_version", f"unsupported version {meta.schema_version} "
                                     f"(this amf_ros reads {SUPPORTED_SCHEMA_VERSIONS})")
    if not meta.task:
        raise EpisodeValidationError(ep, "meta.task", "empty task key")
    if meta.num_steps < 0:
        raise EpisodeValidationError(ep, "meta.num_steps", f"negative: {meta.num_steps}")
    if not (math.isfinite(meta.control_rate_hz) and meta.control_rate_hz > 0):
        raise EpisodeValidationError(ep, "meta.control_rate_hz", f"must be > 0, got {meta.control_rate_hz}")
    for codec in meta.image_codec.values():
        if codec not in CODECS:
            raise EpisodeValidationError(ep, "meta.image_codec", f"unknown codec {codec!r}")


def validate_steps(steps: Mapping[str, np.ndarray], episode: str, *, num_steps: int | None = None,
                   state_names: list[str] | None = None, check_images: bool = True) -> int:
    """Check the step arrays against the schema; return N.

    Checks: required keys, a common first dimension N (= ``num_steps`` if given), dtypes and ranks,
    flags (is_first only at 0, is_last only at N-1), strictly increasing ``stamp_ns``, non-decreasing
    per-stream stamps, and no NaN/inf in float arrays.
    """
    for key in (ACTION, STAMP, *FLAGS):
        if key not in steps:
            raise EpisodeValidationError(episode, key, "missing")
    n = int(np.shape(steps[ACTION])[0]) if np.ndim(steps[ACTION]) else -1
    if num_steps is not None and n != num_steps:
        raise EpisodeValidationError(episode, ACTION, f"has {n} steps but the metadata says {num_steps}")
    if n <= 0:
        raise EpisodeValidationError(episode, ACTION, f"an episode needs at least one step, got {n}")
    for key, arr in steps.items():
        arr = np.asarray(arr)
        if arr.ndim == 0 or arr.shape[0] != n:
            raise EpisodeValidationError(episode, key, f"first dimension must be N={n}, got shape {arr.shape}")
        if is_image_key(key):
            if not check_images:
                continue
            if arr.dtype != np.uint8 or arr.ndim != 4 or arr.shape[-1] != 3:
                raise EpisodeValidationError(episode, key, f"expected uint8 (N, H, W, 3), got {arr.dtype} "
                                             f"{arr.shape}")
            continue
        if key in (ACTION, ACTION_NATIVE, STATE):
            if arr.dtype != np.float32 or arr.ndim != 2:
                raise EpisodeValidationError(episode, key, f"expected float32 (N, D), got {arr.dtype} {arr.shape}")
        elif key in FLAGS:
            if arr.dtype != np.bool_ or arr.ndim != 1:
                raise EpisodeValidationError(episode, key, f"expected bool (N,), got {arr.dtype} {arr.shape}")
        elif key == ACTOR:
            if arr.dtype != np.uint8 or arr.ndim != 1 or not np.isin(arr, list(ACTOR_NAMES)).all():
                raise EpisodeValidationError(episode, key, f"expected uint8 (N,) in {sorted(ACTOR_NAMES)}, got "
                                             f"{arr.dtype} {arr.shape}")
        elif key == STAMP or key.startswith(STAMP_PREFIX):
            if arr.dtype != np.int64 or arr.ndim != 1:
                raise EpisodeValidationError(episode, key, f"expected int64 (N,), got {arr.dtype} {arr.shape}")
        elif not (np.issubdtype(arr.dtype, np.number) or arr.dtype == np.bool_):
            raise EpisodeValidationError(episode, key, f"expected a numeric array, got {arr.dtype}")
        if np.issubdtype(arr.dtype, np.floating):
            bad = ~np.isfinite(arr)
            if bad.any():
                step = int(np.argwhere(bad)[0][0])
                raise EpisodeValidationError(episode, key, f"NaN/inf at step {step}")
    first, last = np.asarray(steps["is_first"]), np.asarray(steps["is_last"])
    if not first[0] or first[1:].any():
        raise EpisodeValidationError(episode, "is_first", "must be True at step 0 and only there")
    if not last[-1] or last[:-1].any():
        raise EpisodeValidationError(episode, "is_last", f"must be True at step {n - 1} and only there")
    if np.asarray(steps["is_terminal"])[:-1].any():
        raise EpisodeValidationError(episode, "is_terminal", "True before the last step")
    stamps = np.asarray(steps[STAMP])
    if n > 1 and not (np.diff(stamps) > 0).all():
        step = int(np.argwhere(np.diff(stamps) <= 0)[0][0]) + 1
        raise EpisodeValidationError(episode, STAMP, f"not strictly increasing at step {step}")
    for key, arr in steps.items():
        if key.startswith(STAMP_PREFIX):
            valid = np.asarray(arr)[np.asarray(arr) >= 0]
            if valid.size > 1 and (np.diff(valid) < 0).any():
                raise EpisodeValidationError(episode, key, "per-stream timestamps go backwards")
    if state_names and STATE in steps and np.shape(steps[STATE])[1] != len(state_names):
        raise EpisodeValidationError(episode, STATE, f"has {np.shape(steps[STATE])[1]} entries but "
                                     f"meta.state_names has {len(state_names)}")
    return n
