"""Declare a node's ROS parameters from its plain-Python schema table and read them back as a dict.

Why one helper: every node declares every parameter with a description and its range (STYLE habit 9), from
the same table the launch test and `amf up` read (``amf_ros.bringup.params``); a value outside the range is
rejected by rclpy at declaration, so a bad YAML fails at start with a message naming the parameter.
"""

from __future__ import annotations

from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node
from rclpy.parameter import Parameter

from amf_ros.bringup.params import Param, schema

_ROS_TYPES = {
    "bool": Parameter.Type.BOOL,
    "int": Parameter.Type.INTEGER,
    "double": Parameter.Type.DOUBLE,
    "string": Parameter.Type.STRING,
    "bool_array": Parameter.Type.BOOL_ARRAY,
    "int_array": Parameter.Type.INTEGER_ARRAY,
    "double_array": Parameter.Type.DOUBLE_ARRAY,
    "string_array": Parameter.Type.STRING_ARRAY,
}
_INT_LIMIT = 2**62


def descriptor(p: Param) -> ParameterDescriptor:
    """The ParameterDescriptor of one table row (description, type, range, read-only)."""
    text = p.description + (f" One of {list(p.choices)}." if p.choices else "")
    d = ParameterDescriptor(name=p.name, type=int(_ROS_TYPES[p.type].value), description=text,
                            read_only=p.read_only)
    if p.range is not None and p.type == "double":
        d.floating_point_range = [FloatingPointRange(from_value=float(p.range[0]), to_value=float(p.range[1]),
                                                     step=0.0)]
    elif p.range is not None and p.type == "int":
        low = int(max(p.range[0], -_INT_LIMIT))
        high = int(min(p.range[1], _INT_LIMIT))
        d.integer_range = [IntegerRange(from_value=low, to_value=high, step=0)]
    return d


def _default(p: Param) -> Any:
    """Default for declare_parameter: an empty list would be typed BYTE_ARRAY/unknown, so pass the type."""
    if isinstance(p.default, (list, tuple)):
        return list(p.default) if p.default else _ROS_TYPES[p.type]
    if p.type == "double":
        return float(p.default)
    return p.default


def declare(node: Node, node_name: str | None = None) -> dict[str, Any]:
    """Declare every parameter of the node's schema on ``node``; return ``{name: value}`` after overrides.

    Args:
        node: the rclpy node.
        node_name: schema to use (default: ``node.get_name()``), e.g. ``"policy_server"``.
    Raises:
        ValueError: a value is not one of the allowed choices (ranges are enforced by rclpy itself, which raises
            ``rclpy.exceptions.InvalidParameterValueException``).
    """
    table = schema(node_name or node.get_name())
    values: dict[str, Any] = {}
    for p in table:
        param = node.declare_parameter(p.name, _default(p), descriptor(p))
        value = param.value
        if value is None and p.type.endswith("_array"):
            value = []
        if isinstance(value, tuple) or (hasattr(value, "tolist") and not isinstance(value, str)):
            value = list(value)
        problem = p.check(value)
        if problem:
            raise ValueError(f"{node.get_name()}: invalid parameter {problem}")
        values[p.name] = value
    return values
