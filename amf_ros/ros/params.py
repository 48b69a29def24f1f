"""Declare a node's ROS parameters from its schema dataclass and read them back as an instance of it.

Why one helper: every node declares every parameter with a description and its range (STYLE habit 9), from
the same table the launch test and `amf up` read (``amf_ros.bringup.params``); a value outside the range is
rejected by rclpy at declaration, so a bad YAML fails at start with a message naming the parameter.
"""

from __future__ import annotations

from typing import Any

from rcl_interfaces.msg import FloatingPointRange, IntegerRange, ParameterDescriptor
from rclpy.node import Node
from rclpy.parameter import Parameter

from amf_ros.bringup.params import P, Param, load, node_of, schema
from amf_ros.paths import in_data_root

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


def _declare_one(node: Node, p: Param) -> Any:
    """Declare one parameter; return its value after overrides (lists as lists).

    An empty-list default cannot be passed to rclpy as a value (``[]`` has no element type: rclpy would type it
    BYTE_ARRAY and then refuse a string-list override), so it is declared by type and, when nothing overrides it,
    set to a typed empty list: without a value, ``ros2 param dump`` of the node would print nothing at all (one
    unset parameter empties the whole get-parameters reply). Such a parameter cannot be read-only (it is set after
    its declaration); the node still reads it once at start.
    """
    ros_type = _ROS_TYPES[p.type]
    if isinstance(p.default, (list, tuple)) and not p.default:
        d = descriptor(p)
        d.read_only = False
        value = node.declare_parameter(p.name, ros_type, d).value
        if value is None:
            node.set_parameters([Parameter(p.name, ros_type, [])])
            value = []
    else:
        default = list(p.default) if isinstance(p.default, (list, tuple)) else p.default
        value = node.declare_parameter(p.name, float(default) if p.type == "double" else default, descriptor(p)).value
    if isinstance(value, tuple) or (hasattr(value, "tolist") and not isinstance(value, str)):
        value = list(value)
    return value


def declare(node: Node, cls: type[P]) -> P:
    """Declare every parameter of the schema ``cls`` (e.g. ``PolicyServerParams``) on ``node``; return an instance
    of it after overrides, with ``dataset_dir`` / ``checkpoint_dir`` made absolute under the node's workspace
    and namespace (amf_ros.paths.data_root).

    Raises:
        ValueError: ``cls`` is not a node's parameter dataclass, or a value is not one of the allowed choices
            (ranges are enforced by rclpy itself, which raises ``rclpy.exceptions.InvalidParameterValueException``).
    """
    values = {p.name: _declare_one(node, p) for p in schema(node_of(cls))}
    if "workspace" in values:  # relative data folders resolve under the workspace, never the working directory,
        for key in ("dataset_dir", "checkpoint_dir"):  # and under the namespace's folder of it (amf_ros.paths)
            if key in values:
                values[key] = str(in_data_root(values[key], values["workspace"], node.get_namespace()))
    try:
        return load(cls, values)
    except ValueError as exc:
        raise ValueError(f"{node.get_name()}: invalid parameter {exc}") from exc
