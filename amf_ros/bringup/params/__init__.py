"""Parameter schemas of every node: ONE frozen dataclass per node, no rclpy.

Why: the node declares its ROS parameters from the dataclass (``amf_ros.ros.params.declare``) and gets an
instance of it back, so code reads ``params.control_rate_hz`` and each default, description and range lives in
exactly one place; the static launch test, `amf up` and the config consistency test read the same fields, so a
parameter can never be set in YAML or a launch file without being declared (generate_parameter_library's idea,
without code generation).

A schema module ``amf_ros/bringup/params/<node>.py`` defines ``<Node>Params``, a frozen dataclass whose fields
are made with :func:`param` (lists are tuples, so instances stay immutable). Code that reads parameters names that
class (``load(PolicyServerParams, values)``, ``declare(node, PolicyServerParams)`` in ros/params.py) and gets an
instance of it back, typed; code that only has a node's name (YAML sections, launch files) uses
:func:`schema` / :func:`validate`.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any, Mapping, Sequence, TypeVar

from amf_ros._optional import load_object

P = TypeVar("P")
"""A node's parameter dataclass."""

# Python type of a value -> the type name used in the table (and mapped to rclpy's Parameter.Type in _params.py).
_TYPES = ("bool", "int", "double", "string", "bool_array", "int_array", "double_array", "string_array")


@dataclass(frozen=True)
class Param:
    """One ROS parameter of a node.

    Attributes:
        name: parameter name (dots allowed for grouping, e.g. ``"ensemble.horizon"``).
        default: default value; its Python type fixes the ROS type unless ``type`` is given.
        description: what it does, with units; shown by ``ros2 param describe``.
        range: inclusive ``(low, high)`` bounds for int/double parameters (None = unbounded).
        choices: allowed values of a string parameter (None = any).
        type: explicit type name (needed for empty-list defaults), one of ``_TYPES``.
        read_only: True if the node reads it once at start (every parameter here, unless documented otherwise).
    """

    name: str
    default: Any
    description: str
    range: tuple[float, float] | None = None
    choices: tuple[str, ...] | None = None
    type: str = ""
    read_only: bool = True

    def __post_init__(self) -> None:
        if not self.description.strip():
            raise ValueError(f"parameter {self.name!r} needs a description")
        if self.type == "":
            object.__setattr__(self, "type", infer_type(self.default, self.name))
        if self.type not in _TYPES:
            raise ValueError(f"parameter {self.name!r}: unknown type, got {self.type=}; choose from {_TYPES}")
        problem = self.check(self.default)
        if problem:
            raise ValueError(f"default of {problem}")

    def check(self, value: Any) -> str:
        """Return "" if ``value`` is valid for this parameter, else a message naming the parameter."""
        expected = self.type
        try:
            actual = infer_type(value, self.name)
        except ValueError as exc:
            return str(exc)
        # Strict like rclpy: YAML `1` for a double parameter is an INTEGER and is refused at declaration (write 1.0).
        ok_types = {expected}
        if expected.endswith("_array") and isinstance(value, (list, tuple)) and len(value) == 0:
            ok_types.add(actual)
        if actual not in ok_types:
            return f"{self.name!r}: expected {expected}, got {value!r} ({actual})"
        if self.range is not None and expected in ("int", "double"):
            low, high = self.range
            if not (low <= float(value) <= high) or (isinstance(value, float) and math.isnan(value)):
                return f"{self.name!r}: {value!r} outside [{low}, {high}]"
        if self.choices is not None and expected == "string" and value not in self.choices:
            return f"{self.name!r}: {value!r} not one of {list(self.choices)}"
        return ""


def infer_type(value: Any, name: str = "?") -> str:
    """The table type name of a Python value (bool before int: bool is an int subclass)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int"
    if isinstance(value, float):
        return "double"
    if isinstance(value, str):
        return "string"
    if isinstance(value, (list, tuple)):
        if len(value) == 0:
            return "string_array"
        inner = {infer_type(v, name) for v in value}
        if len(inner) != 1 or next(iter(inner)).endswith("_array"):
            raise ValueError(f"parameter {name!r}: mixed or nested list, got {value!r}")
        return next(iter(inner)) + "_array"
    raise ValueError(f"parameter {name!r}: unsupported value type, got {type(value).__name__} {value!r}")


def param(default: Any, description: str, range: tuple[float, float] | None = None,
          choices: tuple[str, ...] | None = None, type: str = "", read_only: bool = True) -> Any:
    """A dataclass field that is also a ROS parameter (arguments as :class:`Param`; list defaults are tuples)."""
    return dataclasses.field(default=default, metadata={"param": {"description": description, "range": range,
                                                                  "choices": choices, "type": type,
                                                                  "read_only": read_only}})


def workspace_param() -> Any:
    """The ``workspace`` parameter of every node that reads or writes data folders (one description for all)."""
    return param(
        "",
        "Root of every relative data path of this node (dataset_dir, checkpoint_dir); empty = $AMF_WORKSPACE, "
        "else $ROS_HOME/amf, else ~/.ros/amf, and in a namespace other than /amf its namespaces/<namespace> "
        "folder (amf_ros.paths). Never the working directory of the launch.",
    )


def action_valid_for_param() -> Any:
    """The ``action_valid_for_s`` parameter of every node that publishes actions (policy_server, scripted_teleop)."""
    return param(
        0.5,
        "Validity horizon stamped on every action (EefDeltaAction.valid_for), s: an arm drops an action older than "
        "this. Keep it at two control periods or more.",
        range=(0.0, 60.0),
    )


def params_class(node: str) -> type:
    """The frozen parameter dataclass of ``node`` (``amf_ros.bringup.params.<node>.<Node>Params``)."""
    name = "".join(w.capitalize() for w in node.split("_")) + "Params"
    try:
        cls = load_object(f"{__name__}.{node}:{name}", "parameter schema")
    except ValueError as exc:
        raise ValueError(f"no parameter schema for node {node!r} (amf_ros/bringup/params/{node}.py defining "
                         f"{name})") from exc
    if not dataclasses.is_dataclass(cls):
        raise ValueError(f"amf_ros/bringup/params/{node}.py must define the dataclass {name}")
    return cls


def node_of(cls: type) -> str:
    """The node whose parameter dataclass ``cls`` is (``amf_ros.bringup.params.<node>.<Node>Params``).

    Raises:
        ValueError: ``cls`` is not the parameter dataclass of a node.
    """
    node = cls.__module__.rsplit(".", 1)[-1]
    if cls.__module__ != f"{__name__}.{node}" or node.startswith("_") or params_class(node) is not cls:
        raise ValueError(f"{cls.__qualname__} is not a node's parameter dataclass (amf_ros/bringup/params/<node>.py: "
                         "<Node>Params)")
    return node


def schema(node: str) -> tuple[Param, ...]:
    """The parameter table of ``node``: one :class:`Param` per field of its dataclass, in field order."""
    rows = []
    for f in dataclasses.fields(params_class(node)):
        meta = f.metadata.get("param")
        if meta is None:
            raise ValueError(f"{node}: field {f.name!r} was not made with param()")
        default = list(f.default) if isinstance(f.default, tuple) else f.default
        rows.append(Param(f.name, default, **meta))
    return tuple(rows)


def load(cls: type[P], values: Mapping[str, Any]) -> P:
    """An instance of the node parameter dataclass ``cls`` (e.g. ``PolicyServerParams``) from ``{name: value}``
    (defaults for missing names; YAML nesting and lists accepted).

    Raises:
        ValueError: ``cls`` is not a node's parameter dataclass, an unknown name, or a value of the wrong type or
            outside its range/choices.
    """
    problems = validate(node_of(cls), values)
    if problems:
        raise ValueError("; ".join(problems))
    flat = {k: tuple(v) if isinstance(v, list) else v for k, v in _flatten(values).items() if k != "use_sim_time"}
    return cls(**flat)


def defaults(node: str) -> dict[str, Any]:
    """``{name: default}`` for every parameter of ``node``."""
    return {p.name: p.default for p in schema(node)}


def validate(node: str, values: Mapping[str, Any]) -> list[str]:
    """Problems with ``values`` (e.g. one node's ``ros__parameters`` from YAML): unknown names, wrong types/ranges.

    Returns an empty list when every key is declared by the node's schema and every value is valid.
    """
    table = {p.name: p for p in schema(node)}
    problems = []
    for key, value in _flatten(values).items():
        if key in ("use_sim_time",):
            continue  # declared by rclpy itself on every node
        if key not in table:
            problems.append(f"{node}: parameter {key!r} is not declared (known: {sorted(table)})")
            continue
        msg = table[key].check(value)
        if msg:
            problems.append(f"{node}: {msg}")
    return problems


def _flatten(values: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """ROS YAML nests dotted names (``ensemble: {horizon: 4}`` = ``ensemble.horizon``); flatten them."""
    out: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(_flatten(value, prefix=name + "."))
        else:
            out[name] = value
    return out


def flatten(values: Mapping[str, Any]) -> dict[str, Any]:
    """Public form of the YAML flattening (dotted names)."""
    return _flatten(values)


def describe(params: Sequence[Param]) -> str:
    """Markdown table of a schema, for docs."""
    rows = ["| name | type | default | description |", "|---|---|---|---|"]
    for p in params:
        extra = f" Range {list(p.range)}." if p.range else ""
        extra += f" One of {list(p.choices)}." if p.choices else ""
        rows.append(f"| `{p.name}` | {p.type} | `{p.default!r}` | {p.description}{extra} |")
    return "\n".join(rows)
