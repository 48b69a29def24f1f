"""The embedded WidowX's task family (config/tasks/widowx_family.yaml): 16 tasks on the Bridge-style tabletop, a
pre-training / new split, the four SIMPLER tasks kept as named tasks, one observation layout for all; every task's
scripted expert solves its scenes with and without a noisy hand, and neither doing nothing nor flailing does."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("mujoco")

from amf_ros.envs.widowx_sim.expert import PUSHER
from amf_ros.envs.widowx_sim.objects import BODIES
from amf_ros.envs.widowx_sim.suite import (
    PUSH_DISTANCE,
    PUSH_START_BOX,
    REGION,
    WidowXTaskSpec,
    load_tasks,
    sample_poses,
    splits,
)
from amf_ros.envs.widowx_sim.task_env import WidowXTaskEnv

FAMILY = "config/tasks/widowx_family.yaml"
SPECS = load_tasks(FAMILY)
KEYS = [s.key for s in SPECS]


def _simpler_rows() -> set[tuple[str, str]]:
    import yaml

    from amf_ros.paths import resolve_config

    with open(resolve_config("config/tasks/simpler_widowx.yaml"), encoding="utf-8") as fh:
        return {(t["key"], t["instruction"]) for t in yaml.safe_load(fh)["tasks"]}


def test_the_family_has_a_split_verbs_beyond_put_on_and_simplers_four_tasks_unchanged() -> None:
    assert len(SPECS) >= 12
    by_split = splits(SPECS)
    assert by_split["pretrain"] and by_split["new"]
    assert sorted(by_split["pretrain"] + by_split["new"]) == sorted(KEYS)  # every task in exactly one split
    simpler = _simpler_rows()
    assert simpler <= {(s.key, s.instruction) for s in SPECS}  # the SIMPLER four, same keys and instructions
    # SIMPLER's four split as the four-task mismatched allocation: the first half known, the second half new
    four_keys = [s.key for s in load_tasks()]
    assert set(four_keys[:2]) <= set(by_split["pretrain"]) and set(four_keys[2:]) <= set(by_split["new"])
    # the new tasks are new to the generalist: every one moves an object or uses a receptacle no pre-training task has
    seen = {x for s in SPECS if s.split == "pretrain" for x in (s.source, s.target)}
    assert all({s.source, s.target} - seen for s in SPECS if s.split == "new")
    # the earlier four-task file is unchanged: same keys, instructions, objects and cut-offs as the family's rows
    four = load_tasks()
    assert {(s.key, s.instruction) for s in four} == simpler
    family = {s.key: s for s in SPECS}
    for s in four:
        f = family[s.key]
        assert (s.source, s.target, s.max_steps, s.skill) == (f.source, f.target, f.max_steps, f.skill)
    verbs = {s.instruction.split()[0] for s in SPECS}
    assert {"put", "stack", "push", "slide"} <= verbs
    assert {s.skill for s in SPECS} == {"place", "push"}
    assert any(" in the " in s.instruction or " into " in s.instruction for s in SPECS)
    assert len({s.source for s in SPECS}) >= 6 and len({s.target for s in SPECS}) >= 7


def test_specs_refuse_what_the_scene_cannot_do() -> None:
    with pytest.raises(ValueError, match="only end on a mark"):
        WidowXTaskSpec("x", "push the carrot onto the plate", "carrot", "plate", skill="push")
    with pytest.raises(ValueError, match="split"):
        WidowXTaskSpec("x", "put carrot on plate", "carrot", "plate", split="later")
    with pytest.raises(ValueError, match="skill"):
        WidowXTaskSpec("x", "put carrot on plate", "carrot", "plate", skill="throw")
    with pytest.raises(ValueError, match="movable"):
        WidowXTaskSpec("x", "put the plate on the carrot", "plate", "towel")


def test_every_task_observes_the_same_14_values() -> None:
    for spec in SPECS:
        env = WidowXTaskEnv(spec)
        obs = env.reset(0)
        assert obs.shape == (14,) and obs.dtype == np.float32
        src, tgt = env._suite.arm.position(spec.source), env._suite.arm.position(spec.target)
        np.testing.assert_allclose(obs[8:14], np.r_[src, tgt], atol=1e-6)


def test_push_layouts_leave_the_mark_in_reach_and_room_for_the_pusher() -> None:
    (x0, x1), (y0, y1) = REGION
    (bx0, bx1), (by0, by1) = PUSH_START_BOX
    for spec in (s for s in SPECS if s.skill == "push"):
        layouts = [sample_poses(spec, seed) for seed in range(100)]
        assert len({p[spec.source] for p in layouts}) == 100
        for p in layouts:
            src, tgt = np.array(p[spec.source][:2]), np.array(p[spec.target][:2])
            dist = np.linalg.norm(tgt - src)
            assert PUSH_DISTANCE[0] <= dist <= PUSH_DISTANCE[1]
            assert x0 <= tgt[0] <= x1 and y0 <= tgt[1] <= y1 and x0 <= src[0] <= x1 and y0 <= src[1] <= y1
            start = src - (tgt - src) / dist * (BODIES[spec.source].radius + PUSHER + 0.01)  # behind the object
            assert bx0 <= start[0] <= bx1 and by0 <= start[1] <= by1


def _expert_successes(spec: WidowXTaskSpec, seeds: range, noise_std: float) -> int:
    env = WidowXTaskEnv(spec)
    rng = np.random.default_rng([7, KEYS.index(spec.key)])
    wins = 0
    for seed in seeds:
        env.reset(seed)
        while not env.done:
            env.step(env.perturb(env.expert_action(), noise_std, rng))
        wins += env.success
    return wins


@pytest.mark.parametrize("task", KEYS)
def test_the_scripted_expert_solves_the_task_with_and_without_a_noisy_hand(task: str) -> None:
    """Noise-free: 3 scenes of 3; 10 mm of translation noise per step and axis: at least 3 scenes of 5 (measured
    over 30 scenes: at least 29/30 for every task, docs/results/widowx_expert; before the forgiving grasp and the
    closed-loop expert, carrot_on_plate solved 16/30)."""
    spec = SPECS[KEYS.index(task)]
    assert _expert_successes(spec, range(3), 0.0) == 3
    assert _expert_successes(spec, range(100, 105), 0.01) >= 3


@pytest.mark.parametrize("task", KEYS)
def test_doing_nothing_or_flailing_never_solves_the_task(task: str) -> None:
    env = WidowXTaskEnv(SPECS[KEYS.index(task)])
    rng = np.random.default_rng(3)
    for policy in (lambda: np.r_[np.zeros(6), 1.0], lambda: env.random_action(rng)):
        env.reset(5)
        while not env.done:
            env.step(policy())
        assert not env.success and env.steps == env.spec.max_steps
