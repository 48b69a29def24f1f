"""`amf bench console-load --smoke` end to end (about 40 s): the embedded WidowX graph records with and without
two headless Chromium windows on the console; every action the simulator applied is a recorded step with a camera
frame of its own, in both phases.

Structure and counts only: the benchmark reports timings and CPU, it never asserts them (neither does this test).
Nor does this test require each (task, seed) to repeat its no-client step count: scripted_teleop's closed loop is not
deterministic on a loaded machine, with or without browsers (the benchmark's docstring says why; it reports it).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from ros_system_util import REPO

from amf_ros.bench.console_graph import have_chromium
from amf_ros.bringup.ros_env import free_domain_id

pytest.importorskip("mujoco")
pytest.importorskip("aiohttp")
pytestmark = [pytest.mark.ros, pytest.mark.slow]


def test_console_load_smoke(ros_env, tmp_path):
    if not have_chromium():
        pytest.skip("needs Debian's chromium and chromium-driver and selenium")
    out = tmp_path / "out"
    env = {**os.environ, **ros_env, "ROS_DOMAIN_ID": str(free_domain_id())}  # a graph of its own
    res = subprocess.run([sys.executable, "-m", "amf_ros.cli", "bench", "console-load", "--smoke", "--out", str(out)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "every applied action recorded with its own camera frame: yes" in res.stdout, res.stdout
    doc = json.loads((out / "results.json").read_text())
    assert doc["benchmark"] == "console-load" and doc["config"]["clients"] == 2
    phases = doc["settings"]
    assert [p["clients"] for p in phases] == [0, 2]
    summary = doc["summary"]
    assert summary["every_frame_kept"] and summary["lost_steps"] == 0 and summary["lost_frames"] == 0, summary
    assert summary["client_episodes_compared"] >= 1 and summary["nodes_died"] == {}
    none, clients = phases
    for phase in phases:
        assert phase["kept"] and phase["errors"] == [], (phase["name"], phase["errors"])
        assert phase["episodes"] and phase["run_policy"]["goals"] >= 1
        assert set(phase["cpu_percent_of_one_core"]) >= {"operator_console", "chromium", "demo_recorder"}
        for e in phase["episodes"]:  # every applied action is a stored step with its own camera frame
            assert e["actions_applied"] == e["steps"] == e["steps_stored"] == e["frames"] == e["fresh_frames"] > 0, e
    # the schedule starts over in every phase: the same first scene
    assert (none["episodes"][0]["task"], none["episodes"][0]["seed"]) == \
        (clients["episodes"][0]["task"], clients["episodes"][0]["seed"])
    assert none["windows"] == [] and none["cpu_percent_of_one_core"]["chromium"] == 0.0
    assert len(clients["windows"]) == 2
    for w in clients["windows"]:  # each browser stayed connected and received camera frames during the phase
        assert w["connection"] == "connected" and w["frames"] > 0, w
