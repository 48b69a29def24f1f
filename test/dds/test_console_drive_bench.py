"""`amf bench console-drive --smoke` end to end (about 45 s): the console's camera to headless Chromium while
watching and driving, key -> Joy, and the operator's loop on the embedded WidowX (key -> applied action -> frame).

Structure and counts only: the benchmark reports rates, latencies and CPU, it never asserts them (neither does this
test); what could fail here is a setting that shows no frame, a key press that never reached the arm, a node that
did not stop cleanly.
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


def test_console_drive_smoke(ros_env, tmp_path):
    if not have_chromium():
        pytest.skip("needs Debian's chromium and chromium-driver and selenium")
    out = tmp_path / "out"
    env = {**os.environ, **ros_env, "ROS_DOMAIN_ID": str(free_domain_id())}  # a graph of its own
    res = subprocess.run([sys.executable, "-m", "amf_ros.cli", "bench", "console-drive", "--smoke", "--out", str(out)],
                         cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert res.returncode == 0, res.stderr[-4000:]
    log = res.stderr + res.stdout
    assert "embedded graph exit codes: {'sim_bridge': 0, 'operator_console': 0, 'teleop': 0}" in log, log[-4000:]
    doc = json.loads((out / "results.json").read_text())
    assert doc["benchmark"] == "console-drive"
    joy = doc["key_to_joy_ms"]
    assert joy["key_events"] > 0 and joy["missed"] == 0 and len(joy["latencies_ms"]) == joy["key_events"], joy
    loop = doc["operator_loop"]
    assert loop["presses"] > 0 and loop["missed"] == 0, loop
    assert len(loop["key_to_applied_s"]) == len(loop["key_to_frame_s"]) == loop["presses"], loop
    # the frame showing an action comes after the action was applied (one clock: this machine's)
    assert all(f >= a for a, f in zip(loop["key_to_applied_s"], loop["key_to_frame_s"], strict=True)), loop
    names = [s["name"] for s in doc["settings"]]
    assert any("embedded WidowX" in n for n in names) and any("synthetic" in n for n in names), names
    for setting in doc["settings"]:
        assert setting["windows"], setting["name"]
        for w in setting["windows"]:  # every window showed camera frames in every setting
            assert w["frames"] > 0, (setting["name"], w)
        driving = [w for w in setting["windows"] if w["driving"]]
        assert len(driving) == int(setting["driving"]), setting["name"]
