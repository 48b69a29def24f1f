"""SIMPLER suite and `amf bench simpler` against a stand-in that follows simpler_env's interface exactly."""

import json
import sys

import numpy as np
import pytest
from testpaths import STANDIN

from amf_ros._optional import HAS_SIMPLER


@pytest.fixture
def standin(monkeypatch):
    monkeypatch.syspath_prepend(str(STANDIN))
    for name in [m for m in sys.modules if m == "simpler_env" or m.startswith("simpler_env.")]:
        monkeypatch.delitem(sys.modules, name)
    import simpler_env

    assert str(STANDIN) in simpler_env.__file__
    simpler_env.made.clear()
    return simpler_env


def test_task_file_matches_simpler_instructions(standin):
    from amf_ros.envs.simpler import SIMPLER_WIDOWX_TASKS, load_tasks

    specs = load_tasks()
    assert [s.env_name for s in specs] == list(SIMPLER_WIDOWX_TASKS)
    for s in specs:
        env = standin.make(s.env_name)
        assert env.get_language_instruction() == s.instruction
        assert s.max_steps == SIMPLER_WIDOWX_TASKS[s.env_name][1] == env.max_episode_steps
    with pytest.raises(ValueError, match="unknown SIMPLER task keys"):
        load_tasks(keys=["nope"])


def test_suite_step_api_and_eef7_conversion(standin):
    from amf_ros.envs.simpler import SimplerSuite, load_tasks
    from amf_ros.envs.suites import get_suite

    assert get_suite("simpler").backend().task_keys == ["spoon_on_towel", "carrot_on_plate", "stack_cube",
                                                        "eggplant_in_basket"]
    suite = SimplerSuite(load_tasks(keys=["carrot_on_plate", "eggplant_in_basket"]))
    state = suite.reset("carrot_on_plate", seed=3)
    np.testing.assert_allclose(state[:3], [0.3, 0.0, 0.15])
    assert len(suite.state_names) == state.shape[0] == 8
    img = suite.render()
    assert img.shape == (480, 640, 3) and img.dtype == np.uint8
    assert suite.render(128, 96).shape == (96, 128, 3)
    assert suite.current.episode_id == 3 and suite.current.instruction == "put carrot on plate"
    env = standin.made[-1]
    assert env.kwargs["obs_mode"] == "rgbd" and env.kwargs["prepackaged_config"] is True
    obs = suite.observation
    np.testing.assert_allclose(obs["state"][:3], [0.3, 0.0, 0.15])
    assert obs["state"][7] == pytest.approx(1.0)  # fingers open
    state, success, done = suite.step_eef7(np.array([0.01, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]))
    np.testing.assert_allclose(suite.observation["state"][:3], [0.31, 0.0, 0.15])
    assert suite.observation["state"][7] == pytest.approx(0.0)  # gripper 0 -> SIMPLER -1 -> closed fingers
    assert not done
    with pytest.raises(ValueError, match="shape \\(7,\\)"):
        suite.step(np.zeros(4))
    for _ in range(59):
        _, _, done = suite.step(np.zeros(7))
    assert done and suite.current.steps == 60
    with pytest.raises(RuntimeError, match="episode is over"):
        suite.step(np.zeros(7))
    suite.reset("eggplant_in_basket", seed=0)
    assert suite.task == "eggplant_in_basket" and suite.current.spec.max_steps == 120
    with pytest.raises(ValueError, match="unknown task"):
        suite.reset("widowx_stack_cube", seed=0)
    suite.close()
    assert all(e.closed for e in standin.made)


def test_bench_scripted_policy_and_half_policy(standin, tmp_path):
    from amf_ros.bench.simpler import main

    out = tmp_path / "full"
    rc = main(["--policy", "octo_testlib:make_scripted", "--tasks", "carrot_on_plate,stack_cube",
               "--episodes", "1", "--seeds", "2", "--out", str(out)])
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert res["benchmark"] == "simpler" and [s["name"] for s in res["settings"]] == ["carrot_on_plate", "stack_cube"]
    for s in res["settings"]:
        assert s["episodes"] == 2
        assert s["methods"]["make_scripted"]["mean"] == [1.0]
    assert res["settings"][0]["published_success"]["octo-small"] == pytest.approx(0.097)
    assert (out / "simpler_success.png").stat().st_size > 1000
    assert "Octo-Small (pub.)" in (out / "table.txt").read_text()

    out = tmp_path / "half"
    assert main(["--policy", "octo_testlib:make_half", "--tasks", "spoon_on_towel", "--episodes", "4",
                 "--seeds", "1", "--out", str(out)]) == 0
    s = json.loads((out / "results.json").read_text())["settings"][0]
    m = s["methods"]["make_half"]
    assert m["mean"] == [0.5]  # odd layouts have the target at y > 0, where this policy gives up
    assert m["per_seed"] == [[1.0], [0.0], [1.0], [0.0]]
    assert m["ci_low"][0] < 0.5 < m["ci_high"][0]


def test_bench_reports_missing_pieces(standin, tmp_path, capsys):
    from amf_ros.bench.simpler import main

    assert main(["--out", str(tmp_path)]) == 2
    assert "needs --checkpoint" in capsys.readouterr().out
    assert main(["--checkpoint", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 2
    assert "not found" in capsys.readouterr().out


@pytest.mark.skipif(HAS_SIMPLER, reason="simpler_env is installed here")
def test_bench_without_simpler_env_says_what_to_install(tmp_path, capsys, monkeypatch):
    from amf_ros.bench.simpler import main

    for name in [m for m in sys.modules if m == "simpler_env" or m.startswith("simpler_env.")]:
        monkeypatch.delitem(sys.modules, name)
    assert main(["--checkpoint", str(tmp_path), "--out", str(tmp_path)]) == 2
    assert "simpler-env" in capsys.readouterr().out


def test_a_machine_without_vulkan_gets_a_clear_error_not_a_sapien_traceback(standin, monkeypatch):
    """SAPIEN's own words on a machine without a usable Vulkan device become one message saying what is needed."""
    from amf_ros.envs.simpler import is_vulkan_error
    from amf_ros.envs.suites import get_suite

    monkeypatch.setenv("SIMPLER_STANDIN_NO_VULKAN", "1")
    with pytest.raises(RuntimeError) as info:
        get_suite("simpler").backend().reset("carrot_on_plate", 0)
    text = str(info.value)
    assert "SIMPLER cannot render" in text and "NVIDIA GPU" in text and "vulkaninfo" in text and "robot:=sim" in text
    assert "ErrorInitializationFailed" in text and info.value.__cause__ is None
    assert is_vulkan_error(RuntimeError("failed to find a rendering device"))
    assert not is_vulkan_error(RuntimeError("episode_id out of range"))
