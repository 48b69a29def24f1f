"""Loading policy checkpoints: one entry point per checkpoint kind, and the one answer to "which policy does a node
start from".

Kinds (where checkpoints live: :mod:`amf_ros.policies.checkpoint_dirs`; their file format:
:mod:`amf_ros.policies.checkpoint`):

- native: a TaskConditionedPolicy directory (``amf pretrain``, every ``round_NNNN`` of the native backend) ->
  :func:`load_native`;
- camera policy: a native directory plus the ``camera_encoder.json`` marker (frozen image encoder, projection) ->
  :func:`amf_ros.policies.camera_policy.load_camera_policy`;
- Octo head: a ``round_NNNN`` of the octo backend (a policy directory plus the ``octo_source.json`` marker) ->
  :func:`amf_ros.policies.octo.policy.load_octo_policy`;
- Octo checkpoint: Octo's own orbax directory, the frozen trunk -> :func:`amf_ros.policies.octo.trunk.load_octo_trunk`.

Why one module: policy_server, its fine-tune worker process and task_selector load the same checkpoints; what they
share lives here, below the runtime, so that no node imports another. The worker process loads by name
(:data:`LOADERS`, ``"module:function"``), since a function does not cross a process boundary.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping, TypeVar

from amf_ros.policies.checkpoint_dirs import no_checkpoint_error, resolve_checkpoint, round_checkpoints

if TYPE_CHECKING:
    from amf_ros.policies.agent import TaskConditionedPolicy
    from amf_ros.policies.base import Policy
    from amf_ros.policies.language import TaskEncoder

log = logging.getLogger(__name__)

T = TypeVar("T")

LOADERS = {"native": "amf_ros.policies.loading:load_native",
           "octo": "amf_ros.policies.octo.policy:load_octo_policy",
           "image_pretrained": "amf_ros.policies.camera_policy:load_camera_policy"}
"""``"module:function"`` (path -> policy) that loads a checkpoint of each backend (and of the native backend's camera
trunk, ``trunk: image_pretrained``: a native checkpoint with its ``camera_encoder.json``), for the fine-tune
worker."""


def load_native(path: str | Path, task_encoder: TaskEncoder | None = None) -> TaskConditionedPolicy:
    """Load a TaskConditionedPolicy checkpoint (verified on load); ``task_encoder`` shares an already loaded
    language model instead of loading another copy."""
    from amf_ros.policies.agent import TaskConditionedPolicy

    return TaskConditionedPolicy.load(path, task_encoder=task_encoder)


def load_sharing_encoder(loader: str, path: str | Path, encoder: TaskEncoder | None,
                         what: str = "checkpoint loader") -> Policy:
    """Load checkpoint ``path`` with ``loader`` ("module:function", e.g. a :data:`LOADERS` value), passing an
    already loaded language model (loading MiniLM takes seconds) to a loader that takes one; the Octo head loader
    takes no ``task_encoder``."""
    from amf_ros._optional import load_object

    load = load_object(loader, what)
    try:
        return load(path, task_encoder=encoder) if encoder is not None else load(path)
    except TypeError:  # a loader without task_encoder
        return load(path)


def learn_tasks(policy: Policy, instructions: Mapping[str, str]) -> list[str]:
    """Add to ``policy`` the tasks of ``instructions`` it does not know yet (:meth:`Policy.set_tasks`); returns
    their keys. What makes a configured task the checkpoint lacks a task with no data: task_selector scores it (warm
    start first), and the fine-tune learns it from its demonstrations. ValueError from a backend that cannot."""
    new = {str(k): str(v) for k, v in instructions.items() if k not in policy.instructions}
    if new:
        policy.set_tasks(new)
    return list(new)


def load_newest_good(checkpoint_dir: str | Path, load: Callable[[Path], T],
                     warn: Callable[[str], None]) -> tuple[T, Path] | None:
    """Load the newest ``round_NNNN`` that loads; a newer one that does not (corrupt, half-copied by hand, from an
    incompatible version) is skipped with a warning saying why, so one bad round never keeps a node down.

    Returns:
        (loaded object, its path), or None when ``checkpoint_dir`` holds no round at all.
    Raises:
        ValueError: rounds exist but none of them loads (each one's error in the message).
    """
    rounds = round_checkpoints(checkpoint_dir)
    errors = []
    for path in reversed(rounds):
        try:
            return load(path), path
        except (ValueError, OSError, KeyError) as exc:  # CheckpointError is a ValueError
            errors.append(f"{path.name}: {exc}")
            warn(f"checkpoint {path} cannot be loaded ({type(exc).__name__}: {exc}); trying the round before it")
    if rounds:
        raise ValueError(f"no checkpoint under {str(checkpoint_dir)!r} loads: " + "; ".join(errors))
    return None


def pretrain_counts(checkpoint: str | Path) -> dict[str, int] | None:
    """``pretrain_counts`` of ``<checkpoint>/pretrain.json`` (written by `amf pretrain`), None if absent."""
    path = Path(checkpoint) / "pretrain.json"
    if not path.is_file():
        return None
    counts = json.loads(path.read_text()).get("pretrain_counts")
    return {str(k): int(v) for k, v in counts.items()} if isinstance(counts, dict) else None


def initial_policy(backend: str, checkpoint: str, checkpoint_dir: str | Path, *,
                   pretrained: Callable[[], Path] | None = None, warn: Callable[[str], None] = log.warning,
                   trunk: Any = None, instructions: Mapping[str, str] | None = None,
                   head_checkpoint: str = "") -> tuple[Policy, Path]:
    """(policy, its checkpoint directory) a node starts serving with.

    Args:
        backend: "native" or "octo" (policy_server's ``backend``).
        checkpoint: native: the checkpoint to start from (that one, or the error); empty = the newest round under
            ``checkpoint_dir`` that loads (a corrupt newer one is skipped with ``warn``), else ``pretrained()``
            if given (the embedded simulation's pre-trained checkpoint, made on first use), else the error.
            octo: the Octo checkpoint directory; the head is ``head_checkpoint`` if given, else the newest round
            made from that Octo checkpoint, else Octo's pretrained head from ``trunk``, saved as ``round_0000`` for
            the task set ``instructions`` (:func:`amf_ros.policies.octo.heads.initial_octo_head`).
        checkpoint_dir: where the rounds of fine-tuned checkpoints live (``round_NNNN``).
        pretrained: native: makes (on first use) and returns the pre-trained checkpoint when none is found; None =
            no fallback.
        warn: told about every corrupt checkpoint that is skipped.
        trunk: octo: the loaded Octo trunk (its pretrained head becomes ``round_0000``).
        instructions: octo: ``{task: instruction}`` of the task set the head is saved for.
        head_checkpoint: octo: a head checkpoint to start from instead of the newest round.
    Raises:
        ValueError: an unknown backend, no checkpoint to start from, or one that does not load.
    """
    if backend == "octo":
        from amf_ros.policies.octo.heads import initial_octo_head

        return initial_octo_head(trunk, checkpoint, checkpoint_dir, instructions or {}, head_checkpoint)
    if backend != "native":
        raise ValueError(f"backend must be 'native' or 'octo', got {backend=}")
    if checkpoint:
        path = resolve_checkpoint(checkpoint, str(checkpoint_dir))
        return load_native(path), path
    found = load_newest_good(checkpoint_dir, load_native, warn)
    if found is not None:
        return found
    if pretrained is None:
        raise no_checkpoint_error(checkpoint_dir)
    path = pretrained()
    return load_native(path), path
