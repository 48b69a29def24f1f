"""robot:=wxai_sim's simulator (amf_ros/envs/wxai_sim): the embedded WidowX's tabletop and tasks in trossen-arm-sim,
every action through the WidowX AI backend and Trossen's driver over loopback.

Runs in CI (trossen-arm and trossen-arm-sim are pinned requirements). Physics is real time (one action = 0.2 s), so
one scripted episode per test: the grasp-and-place expert solves carrot_on_plate on seed 0 in 18 actions (measured).
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pytest

from amf_ros.envs.widowx_sim.suite import STATE_NAMES, load_tasks
from amf_ros.envs.wxai_sim.suite import WXAISimSuite
from amf_ros.robots.action_gate import ESTOP

OSMESA = os.environ.get("MUJOCO_GL") == "osmesa"  # scripts/env.sh sets it (CI too): rendering is tested through OSMesa


@pytest.fixture(scope="module")
def suite() -> Iterator[WXAISimSuite]:
    s = WXAISimSuite(load_tasks(keys=["carrot_on_plate", "stack_cube"]), camera=OSMESA)
    try:
        yield s
    finally:
        s.close()


def test_the_scripted_expert_solves_a_task_through_the_vendor_driver(suite: WXAISimSuite) -> None:
    obs = suite.reset("carrot_on_plate", 0)
    assert obs.shape == (len(STATE_NAMES),) and np.all(np.isfinite(obs))
    assert suite.task == "carrot_on_plate" and not suite.done and not suite.solved()
    applied = suite.wxai.counts.applied
    while not suite.done:
        obs, success, done = suite.step_eef7(suite.expert_action())
    assert suite.success and success and done
    assert suite.wxai.counts.applied - applied == suite.steps  # every expert action went out through the driver
    assert suite.steps < 60


def test_reset_switches_task_and_places_its_objects(suite: WXAISimSuite) -> None:
    obs = suite.reset("stack_cube", 1)
    assert suite.task == "stack_cube" and suite.steps == 0
    # the green block rests on the table, the other task's carrot waits on the shelf under it
    assert obs[10] == pytest.approx(0.015, abs=0.003)
    assert suite.host.snapshot(["carrot"])["carrot"][0][2] < -0.2
    np.testing.assert_allclose(obs[:3], (0.25, 0.0, 0.12), atol=0.005)  # the start pose


@pytest.mark.skipif(not OSMESA, reason="rendering is tested through OSMesa only")
def test_the_camera_renders_the_simulators_own_scene(suite: WXAISimSuite) -> None:
    suite.reset("carrot_on_plate", 0)
    a = suite.render(64, 48)
    assert a.shape == (48, 64, 3) and a.dtype == np.uint8
    assert a.std() > 5.0  # a scene, not a blank frame
    for _ in range(3):  # the arm moves towards the camera: the image follows the simulator's data
        suite.step_eef7(np.array([0.05, 0.0, 0.05, 0.0, 0.0, 0.0, 1.0]))
    b = suite.render(64, 48)
    assert np.abs(a.astype(int) - b.astype(int)).max() > 30


def test_estop_refuses_and_holds_across_a_reset(suite: WXAISimSuite) -> None:
    suite.reset("carrot_on_plate", 0)
    assert "ENGAGED" in suite.estop(True)
    assert suite.estopped and suite.refusal()
    refused = suite.wxai.counts.refused.get(ESTOP, 0)
    before = suite.observation
    obs, _, _ = suite.step_eef7(np.array([0.05, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]))
    assert suite.wxai.counts.refused[ESTOP] == refused + 1
    np.testing.assert_allclose(obs[:3], before[:3], atol=0.002)
    suite.reset("carrot_on_plate", 1)
    assert suite.estopped  # latched across episodes, as on the real arm
    suite.estop(False)
    assert not suite.estopped and not suite.refusal()
