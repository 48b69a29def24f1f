"""The not-ready state of policy_server and task_selector without ROS (issue 29, "Degrade, don't die"): backend octo
with no Octo checkpoint starts, answers every request with "not ready: <reason>", and becomes ready once the
checkpoint appears; task_selector answers next_task meanwhile where no policy is needed; configuration errors that no
restart fixes are named (runtime/readiness.py)."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from fake_octo import fake_checkpoint
from octo_episodes import TASKS
from octo_episodes import octo_episodes as _episodes

from amf_ros.bringup.params import load, node_of, schema
from amf_ros.bringup.params.policy_server import PolicyServerParams
from amf_ros.bringup.params.task_selector import TaskSelectorParams
from amf_ros.runtime.readiness import Readiness, config_problem, octo_inputs

pytest.importorskip("torch")


def _typed(cls, values):
    names = {p.name for p in schema(node_of(cls))}
    return load(cls, {k: v for k, v in values.items() if k in names})


def _params(tmp_path, ckpt: str, **over):
    tasks_file = tmp_path / "tasks.yaml"
    tasks_file.write_text("tasks:\n" + "".join(f"  - key: {k}\n    instruction: {v}\n" for k, v in TASKS.items()))
    return {"backend": "octo", "checkpoint": ckpt, "octo_trunk_factory": "fake_octo:fake_trunk", "t5_path": "",
            "tasks_file": str(tasks_file), "image_key": "image_primary", "embed_batch_size": 4,
            "checkpoint_dir": str(tmp_path / "ckpts"), "dataset_dir": str(tmp_path / "data"),
            "fine_tune_steps": 4, "fine_tune_batch_size": 8, "alpha_steps": 2, "action_space": "eef7",
            "frames_per_episode": 4, "selector": "amf", **over}


# -- the state machine ---------------------------------------------------------------------------------------------
def test_readiness_reports_once_builds_on_a_thread_and_retries_only_new_inputs():
    inputs = {"reason": "no checkpoint", "sig": 1, "fail": True}
    builds, changes = [], []

    def build():
        builds.append(inputs["sig"])
        if inputs["fail"]:
            raise ValueError("broken\ncheckpoint")

    r = Readiness(lambda: (inputs["reason"], inputs["sig"]), build, changes.append)
    assert not r.check() and not r.check()
    assert changes == ["no checkpoint"] and r.not_ready() == "not ready: no checkpoint" and builds == []
    inputs["reason"] = ""  # the input appears, but is broken: built once on a thread, the error is the reason
    assert r.check()
    r.thread.join(30)
    assert builds == [1] and changes[-1] == "ValueError: broken checkpoint" and not r.ready
    assert not r.check() and builds == [1]  # the same inputs are not tried again
    inputs.update(sig=2, fail=False)  # they change (a file rewritten): tried again, ready
    assert r.check()
    r.thread.join(30)
    assert builds == [1, 2] and r.ready and changes[-1] == "" and r.not_ready() == ""
    assert not r.check() and builds == [1, 2]  # ready: nothing more to do


def test_octo_inputs_name_the_parameter_and_what_to_do(tmp_path):
    reason, _ = octo_inputs("", "fake_octo:fake_trunk")
    assert "'checkpoint' is not set" in reason and "Deploying with Octo" in reason
    reason, _ = octo_inputs(str(tmp_path / "nope"), "fake_octo:fake_trunk")
    assert "does not exist" in reason and "nope" in reason
    (tmp_path / "empty").mkdir()
    reason, _ = octo_inputs(str(tmp_path / "empty"), "fake_octo:fake_trunk")
    assert "is not an Octo checkpoint: missing" in reason
    ckpt = fake_checkpoint(tmp_path / "octo")
    assert octo_inputs(str(ckpt), "fake_octo:fake_trunk")[0] == ""
    from amf_ros._optional import HAS_OCTO

    if not HAS_OCTO:  # the real trunk needs the package octo: its install hint, one line
        reason, _ = octo_inputs(str(ckpt))
        assert "`octo` is required" in reason and "\n" not in reason
        assert octo_inputs(str(ckpt), need_octo=False)[0] == ""


def test_config_problem_names_the_parameter(tmp_path):
    assert config_problem("") == ""
    assert config_problem(str(tmp_path / "missing.yaml")).startswith("parameter 'tasks_file'")
    tasks_file = tmp_path / "tasks.yaml"
    tasks_file.write_text("tasks:\n  - key: a\n    instruction: do a\n")
    assert config_problem(str(tasks_file), ["a"]) == ""
    assert config_problem(str(tasks_file), ["a", "zz"]).startswith("parameter 'tasks': unknown task(s) ['zz']")


# -- policy_server ---------------------------------------------------------------------------------------------------
def test_policy_server_without_its_octo_checkpoint_refuses_goals_then_becomes_ready(tmp_path):
    from amf_ros.runtime.policy_server import PolicyServer

    ckpt = tmp_path / "octo"  # configured, not there yet
    server = PolicyServer(_typed(PolicyServerParams, _params(tmp_path, str(ckpt))), lambda a: None)
    try:
        reason = server.not_ready()
        assert reason.startswith("not ready: the Octo checkpoint directory") and server.runtime is None
        assert server.reserve_run()
        res = server.run("carrot_on_plate")
        assert not res.ok and res.message == reason and res.steps == 0
        assert server.reserve_run()  # the slot was released
        server.run("carrot_on_plate")
        with pytest.raises(ValueError, match="^not ready: "):
            server.fine_tune()
        assert not server.fine_tuning
        assert not server.readiness.check()  # still missing: nothing started
        fake_checkpoint(ckpt)
        assert server.readiness.check()
        server.readiness.thread.join(120)
        assert server.not_ready() == "" and server.runtime is not None and server.octo is not None
    finally:
        server.close()


def test_policy_server_with_checkpoint_unset_is_not_ready_not_dead(tmp_path):
    from amf_ros.runtime.policy_server import PolicyServer

    server = PolicyServer(_typed(PolicyServerParams, _params(tmp_path, "")), lambda a: None)
    assert "'checkpoint' is not set" in server.not_ready()
    server.close()



def test_native_policy_server_with_nothing_to_start_from_exits_for_good_with_one_line(tmp_path):
    """A native backend with no checkpoint, no round under checkpoint_dir and no pre-trained fallback: a restart
    cannot find one either, so the node ends with NO_RESPAWN_EXIT (NoRespawnError) naming what to set."""
    from amf_ros.bringup.lifetime import NoRespawnError
    from amf_ros.runtime.policy_server import PolicyServer

    params = _typed(PolicyServerParams, _params(tmp_path, "", backend="native", pretrain_if_missing=False))
    with pytest.raises(NoRespawnError, match="native backend.*set `checkpoint`"):
        PolicyServer(params, lambda a: None)

# -- task_selector ---------------------------------------------------------------------------------------------------
def test_task_selector_answers_warm_start_without_policy_refuses_amf_then_becomes_ready(tmp_path):
    from amf_ros.runtime.policy_server import OctoServing
    from amf_ros.runtime.task_selector import TaskSelectorRuntime

    ckpt = tmp_path / "octo"
    p = _params(tmp_path, str(ckpt))
    _episodes(tmp_path / "data", n_eps=1)  # one task has a demonstration, the other not: warm start
    rt = TaskSelectorRuntime(_typed(TaskSelectorParams, p))
    assert rt.not_ready().startswith("not ready: the Octo checkpoint directory")
    d = rt.next_task()
    assert d.warm_start and d.task == "spoon_on_towel" and "answered without a policy" in d.message
    assert rt.not_ready() in d.message
    uniform = TaskSelectorRuntime(_typed(TaskSelectorParams, {**p, "selector": "uniform"}))
    assert uniform.next_task().task in TASKS
    _episodes(tmp_path / "data", n_eps=4)  # every task demonstrated: AMF needs its policy now
    with pytest.raises(ValueError, match="^not ready: the Octo checkpoint directory .*warm start"):
        rt.next_task()
    fake_checkpoint(ckpt)  # the checkpoint appears; policy_server makes a first head
    serving = OctoServing(_typed(PolicyServerParams, p))
    try:
        serving.runtime.fine_tune()
    finally:
        serving.runtime.close()
    done = threading.Event()
    rt.readiness.on_change = lambda reason: done.set()
    assert rt.readiness.check()
    rt.readiness.thread.join(120)
    assert done.is_set() and rt.not_ready() == "" and rt.checkpoint.endswith("round_0001")
    d = rt.next_task()
    assert not d.warm_start and np.all(np.isfinite(d.scores)) and "not ready" not in d.message


def test_task_selector_loads_an_announced_head_once_its_checkpoint_exists(tmp_path):
    from amf_ros.runtime.task_selector import TaskSelectorRuntime

    ckpt = tmp_path / "octo"
    rt = TaskSelectorRuntime(_typed(TaskSelectorParams, _params(tmp_path, str(ckpt))))
    reloaded, note = rt.on_checkpoint(str(tmp_path / "ckpts" / "round_0001"))
    assert not reloaded and "not ready" in note
    fake_checkpoint(ckpt)
    with pytest.raises(ValueError, match="is not an Octo head checkpoint"):  # announced, never written here
        rt.on_checkpoint(str(tmp_path / "ckpts" / "round_0001"))
    assert rt.not_ready() == ""  # became ready in the announcement's own (reload) thread first
