"""The names of the camera policy's frozen image encoders and of its default pooling, without torch.

Why a module of its own: :class:`~amf_ros.policies.camera_policy.CameraSpec` (torch-free: markers are read where torch
is not loaded) and :mod:`amf_ros.policies.image_encoders` (the torch models) both name them; here neither imports the
other for it.
"""

from __future__ import annotations

ENCODERS = ("efficientnet-lite0",)
"""Encoder names :func:`amf_ros.policies.image_encoders.load_image_encoder` accepts."""
DEFAULT_POOL = "table_keypoints"
"""The camera policy's encoder pooling (one of :data:`amf_ros.policies.image_encoders.POOLS`): CameraSpec, the
encoder's loader and the pre-training recipe default to it (docs/ros-robot.md, "The camera policy": the ablation)."""
WRIST_POOL = "keypoints"
"""The pooling of the wrist camera in the camera policy's recipe (training/camera.py, `amf bench --trunk
image_pretrained`): spatial soft-argmax keypoints of the whole frame (docs/ros-robot.md, "A wrist camera")."""
