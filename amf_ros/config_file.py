"""A typed config dataclass from its defaults, a YAML file and overrides: how every `amf` command reads its config.

One home for "YAML -> dataclass" so that a benchmark, `amf pretrain` and `amf run` reject a typo the same way.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from typing import Any, TypeVar

T = TypeVar("T")


def load_config(cls: type[T], path: str | os.PathLike | None, *, defaults: Mapping[str, Any] | None = None,
                **overrides: Any) -> T:
    """Build dataclass ``cls`` from its defaults, then ``defaults`` (e.g. one suite's budget), a YAML file, then
    non-None ``overrides``.

    Unknown keys in the YAML raise ValueError naming them (a typo must not be silently ignored).
    """
    values: dict[str, Any] = dict(defaults or {})
    if path is not None:
        import yaml

        with open(path, encoding="utf-8") as fh:
            loaded = yaml.safe_load(fh) or {}
        if not isinstance(loaded, dict):
            raise ValueError(f"{path}: expected a mapping at the top level, got {type(loaded).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(loaded) - known)
        if unknown:
            raise ValueError(f"{path}: unknown config keys {unknown}; known: {sorted(known)}")
        values.update(loaded)
    values.update({k: v for k, v in overrides.items() if v is not None})
    return cls(**values)
