"""The one suite registry (amf_ros/envs/suites.py): what every suite provides to sim_bridge, scripted_teleop,
pre-training and the benchmarks, and what a suite without scripted experts refuses."""

from __future__ import annotations

import pytest

from amf_ros.envs.suites import SUITES, TRAINING_SUITES, get_suite


@pytest.mark.parametrize("name", list(SUITES))
def test_every_suite_loads_its_default_tasks_and_names_a_simulator(name: str) -> None:
    suite = get_suite(name)
    specs = suite.load_tasks()
    assert suite.name == name and [s.key for s in specs][: len(suite.default_tasks)]
    assert set(suite.default_tasks) <= {s.key for s in specs}
    assert [s.key for s in suite.load_tasks(list(suite.default_tasks[:2]))] == list(suite.default_tasks[:2])
    assert callable(suite.make_backend) and suite.state_dim > 0 and suite.action_dim > 0 and suite.sources
    # per-task environments make a training suite; every training suite has scripted experts, and so does the
    # WidowX AI's real-time simulator (scripted_teleop demonstrates on it; nothing pre-trains on it)
    assert (suite.make_env is not None) == (name in TRAINING_SUITES)
    assert (suite.experts is not None) == (name in (*TRAINING_SUITES, "wxai_sim"))


def test_training_suites_have_normalisation_and_the_others_are_refused() -> None:
    for name in TRAINING_SUITES:
        suite = get_suite(name, training=True)
        assert len(suite.action_mean) == len(suite.action_std) == suite.action_dim and suite.noise_std > 0
    with pytest.raises(ValueError, match=r"unknown training suite 'simpler'; choose from \['metaworld', 'widowx'\]"):
        get_suite("simpler", training=True)
    with pytest.raises(ValueError, match="suite 'simpler' has no scripted experts"):
        get_suite("simpler").scripted_experts()


def test_the_node_parameters_offer_exactly_the_registry() -> None:
    from amf_ros.bringup.params import schema

    backend = next(p for p in schema("sim_bridge") if p.name == "backend")
    experts = next(p for p in schema("scripted_teleop") if p.name == "experts")
    assert tuple(backend.choices) == tuple(SUITES) and tuple(experts.choices) == TRAINING_SUITES
