"""Parameters of the frozen Octo trunk shared by policy_server and task_selector (backend octo).

Why one class: both nodes must load the same trunk and embed the same recorded streams (they share the embedding
cache on disk, amf_ros.data.octo_embeddings.EmbeddingCache), so these settings have one default and one description.
"""

from __future__ import annotations

from dataclasses import dataclass

from amf_ros.bringup.params import param


@dataclass(frozen=True)
class OctoTrunkParams:
    """Base of PolicyServerParams and TaskSelectorParams (its fields come first in both)."""

    octo_trunk_factory: str = param(
        "amf_ros.policies.octo.trunk:OctoTrunk",
        "backend octo: 'module:function' called as f(checkpoint, t5_path=, dataset_name=) -> trunk with "
        "OctoTrunk's API (default: the real Octo loader).",
    )
    t5_path: str = param(
        "", "backend octo: local t5-base tokenizer/config directory for offline loading (empty = Hugging Face cache)."
    )
    octo_dataset: str = param("bridge_dataset", "backend octo: key of the checkpoint's action statistics.")
    image_key: str = param(
        "image_primary",
        "backend octo: recorded image stream whose frames are embedded (policy_server: the camera of image_topic).",
    )
    wrist_image_key: str = param(
        "",
        "backend octo: recorded wrist image stream embedded with image_key (empty = none; policy_server: set "
        "together with wrist_image_topic).",
    )
    embed_batch_size: int = param(
        16, "backend octo: frames per trunk call when embedding recorded episodes.", range=(1, 4096)
    )
