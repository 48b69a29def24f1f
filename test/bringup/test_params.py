"""Parameter schemas: ``load`` returns the node's own dataclass, typed by the class it is given."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from amf_ros.bringup import params
from amf_ros.bringup.params import Param, load, node_of, params_class, schema
from amf_ros.bringup.params.policy_server import PolicyServerParams
from amf_ros.bringup.params.task_selector import TaskSelectorParams

NODES = sorted(p.stem for p in Path(params.__file__).parent.glob("[!_]*.py"))


@pytest.mark.parametrize("node", NODES)
def test_every_schema_class_names_its_node(node):
    cls = params_class(node)
    assert node_of(cls) == node
    p = load(cls, {})
    assert type(p) is cls and dataclasses.asdict(p) == {r.name: _tupled(r.default) for r in schema(node)}


def _tupled(value):
    return tuple(value) if isinstance(value, list) else value


def test_load_returns_the_given_class_with_values():
    p = load(TaskSelectorParams, {"selector": "uniform", "tasks": ["a", "b"]})
    assert isinstance(p, TaskSelectorParams) and p.selector == "uniform" and p.tasks == ("a", "b")
    with pytest.raises(ValueError, match="not declared"):
        load(PolicyServerParams, {"no_such_parameter": 1})
    with pytest.raises(ValueError, match="expected double"):
        load(PolicyServerParams, {"control_rate_hz": 10})


def test_load_refuses_a_class_that_is_not_a_node_schema():
    with pytest.raises(ValueError, match="not a node's parameter dataclass"):
        load(Param, {})
    from amf_ros.bringup.params._octo_trunk import OctoTrunkParams

    with pytest.raises(ValueError, match="not a node's parameter dataclass"):
        node_of(OctoTrunkParams)
