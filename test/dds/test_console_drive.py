"""Driving from the console page over DDS (issue 30, "Drive from the console"): headless Chromium holds keys on the
real page, and what arrives on /amf/teleop/console_joy is the console mapping's sensor_msgs/Joy; letting go of the
deadman key, losing focus or closing the page gives deadman 0, then silence (docs/console.md, "Drive").

The graph is operator_console alone, as a process (the teleop node is another helper's: the page never reaches the
arm's action topic, so the Joy stream is the whole contract here). The test publishes the teleop node's latched state
itself and checks that the page shows it. Screenshots land in the test's temporary directory
(AMF_CONSOLE_SCREENSHOTS=DIR keeps them elsewhere).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from amf_ros.bench.console_graph import console_url, press_keys

pytest.importorskip("aiohttp")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

JOY_TOPIC = "/amf/teleop/console_joy"
NEUTRAL = [0.0] * 7
SILENCE_S = 0.5
"""operator_console's drive_silence_s (its default): nothing is published once the page has been quiet this long."""


@pytest.fixture
def console(start_nodes, tmp_path):
    """operator_console alone, on a free port; its URL."""
    start_nodes({"operator_console": {"port": 0, "watch_nodes": ["operator_console"], "auto_ask": False}})
    return console_url(tmp_path / "logs_nodes" / "operator_console.log")


class JoyLog:
    """Every Joy on /amf/teleop/console_joy with its arrival time (wall clock, as the page's key times)."""

    def __init__(self, node) -> None:
        from sensor_msgs.msg import Joy

        from amf_ros.ros import qos

        self.lock = threading.Lock()
        self.msgs: list[tuple[float, list[float], list[int]]] = []
        self.sub = node.create_subscription(Joy, JOY_TOPIC, self._on, qos.EVENTS)

    def _on(self, msg) -> None:
        with self.lock:
            self.msgs.append((time.time(), [round(float(a), 3) for a in msg.axes], [int(b) for b in msg.buttons]))

    def all(self) -> list[tuple[float, list[float], list[int]]]:
        with self.lock:
            return list(self.msgs)

    def wait(self, axes: list[float], buttons: list[int], timeout: float = 10.0, since: int = 0) -> int:
        """Index of the first Joy from ``since`` on with exactly these axes and buttons."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for i, (_, a, b) in enumerate(self.all()[since:], start=since):
                if a == axes and b == buttons:
                    return i
            time.sleep(0.02)
        raise AssertionError(f"no Joy {axes} {buttons} within {timeout:g} s; last ones: {self.all()[-5:]}")

    def wait_silence(self, quiet_s: float = 4 * SILENCE_S, timeout: float = 15.0) -> int:
        """Wait until nothing has arrived for ``quiet_s``; returns how many arrived in all."""
        deadline = time.monotonic() + timeout
        count = len(self.all())
        quiet_since = time.monotonic()
        while time.monotonic() < deadline:
            time.sleep(0.05)
            n = len(self.all())
            if n != count:
                count, quiet_since = n, time.monotonic()
            elif time.monotonic() - quiet_since >= quiet_s:
                return count
        raise AssertionError(f"Joy never went silent within {timeout:g} s ({count} messages)")


class DrivePage:
    """The console page with Drive switched on; keys are held with the WebDriver's key actions."""

    def __init__(self, driver, url: str) -> None:
        from selenium.webdriver.common.by import By

        self.d, self.By = driver, By
        driver.get(url)
        self.wait(lambda: self.text("conn") == "connected", 30, "the page to connect")
        self.d.find_element(By.ID, "btn-drive").click()
        self.wait(lambda: "on" in self.text("btn-drive"), 5, "Drive on")

    def text(self, id_: str) -> str:
        return self.d.find_element(self.By.ID, id_).text

    def js(self, script: str):
        return self.d.execute_script(script)

    def wait(self, cond, timeout: float, what: str):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            value = cond()
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"page: timed out after {timeout:g} s waiting for {what}; result line "
                             f"{self.text('last-result')!r}")

    def keys(self, down: str = "", up: str = "") -> None:
        """Press the keys of ``down`` and let go of those of ``up`` (WebDriver key values: "w", Keys.SPACE, ...)."""
        press_keys(self.d, down, up)


def test_held_keys_arrive_as_joy_then_deadman_release_then_silence(console, browser, client_node, shots):
    from selenium.webdriver.common.keys import Keys
    from std_msgs.msg import String

    from amf_ros.ros import qos

    joys = JoyLog(client_node)
    state_pub = client_node.create_publisher(String, "/amf/teleop/state", qos.LATCHED)
    state_pub.publish(String(data=json.dumps({"input": "console", "deadman": True, "speed": "coarse"})))
    page = DrivePage(browser, console)
    assert joys.all() == []  # Drive on, nothing held: the page sends nothing, the console publishes nothing
    page.wait(lambda: page.js("const b = document.querySelector('#teleop-state b[data-key=speed]'); "
                              "return b && b.textContent") == "coarse", 10, "the teleop node's state in the panel")

    page.keys(down=Keys.SPACE + "wa")  # deadman, forward, left
    first = joys.wait([1.0, 1.0, 0, 0, 0, 0, 0], [1, 0, 0, 0])
    # republished while held (the page re-sends every 50 ms, the console every 1/drive_rate_hz): more identical ones
    joys.wait([1.0, 1.0, 0, 0, 0, 0, 0], [1, 0, 0, 0], since=first + 3)
    page.wait(lambda: page.text("drive-who") == "you drive", 5, "the panel to say who drives")
    assert page.text("drive-deadman") == "deadman held"

    page.keys(down=Keys.SHIFT + "j", up="a")  # rotation enable + yaw left; y let go
    i = joys.wait([1.0, 0, 0, 0, 0, 1.0, 0], [1, 0, 0, 1])
    page.keys(down="q", up="j" + Keys.SHIFT)  # gripper close, rotation off
    i = joys.wait([1.0, 0, 0, 0, 0, 0, -1.0], [1, 0, 0, 0], since=i)
    page.keys(down="z", up="q")  # fine speed (a toggle)
    i = joys.wait([1.0, 0, 0, 0, 0, 0, 0], [1, 1, 0, 0], since=i)
    page.keys(down="gr", up="w")  # gripper toggle held, up
    i = joys.wait([0, 0, 1.0, 0, 0, 0, 0], [1, 1, 1, 0], since=i)
    page.keys(down="ku", up="g")  # pitch / roll keys without Shift: no rotation
    i = joys.wait([0, 0, 1.0, 0, 0, 0, 0], [1, 1, 0, 0], since=i)
    browser.save_screenshot(str(shots / "05_drive_keys_held.png"))

    page.keys(up=Keys.SPACE)  # deadman let go, r still held: deadman 0 with the motion the page still holds
    release = joys.wait([0, 0, 1.0, 0, 0, 0, 0], [0, 1, 0, 0], since=i)
    page.keys(up="rku")  # nothing held: one last input with everything released, then the page is quiet
    last = joys.wait(NEUTRAL, [0, 1, 0, 0], since=release)
    total = joys.wait_silence()
    msgs = joys.all()
    assert all(b[0] == 0 for _, _, b in msgs[release:]), "a deadman after its release"
    assert all(a == NEUTRAL for _, a, _ in msgs[last:total]), "motion after everything was let go"
    page.wait(lambda: page.text("drive-who") == "nobody drives", 5, "the panel to say nobody drives")
    print(f"{len(msgs)} Joy messages; the last input republished for {msgs[total - 1][0] - msgs[last][0]:.2f} s "
          f"after the page's last message (drive_silence_s {SILENCE_S} s)")


def test_losing_focus_releases_everything_then_silence(console, browser, client_node):
    from selenium.webdriver.common.keys import Keys

    joys = JoyLog(client_node)
    page = DrivePage(browser, console)
    page.keys(down=Keys.SPACE + "s")
    i = joys.wait([-1.0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0])
    key_at = page.js("return drive.keyAt") / 1e3
    print(f"key down -> Joy: {1e3 * (joys.all()[i][0] - key_at):.1f} ms (page's key event to this subscriber)")
    page.js("window.dispatchEvent(new Event('blur'))")  # the operator clicked another window
    released = joys.wait(NEUTRAL, [0, 0, 0, 0], since=i)
    total = joys.wait_silence()
    assert all(b[0] == 0 and a == NEUTRAL for _, a, b in joys.all()[released:total])
    assert page.text("drive-deadman") == "deadman released"
    # the keys the page thought held are forgotten: their key-up never came, and nothing moves without a new press
    page.keys(up=Keys.SPACE + "s")
    assert len(joys.all()) == total


def test_closing_the_page_while_driving_releases_everything(console, browser, client_node):
    from selenium.webdriver.common.keys import Keys

    joys = JoyLog(client_node)
    page = DrivePage(browser, console)
    page.keys(down=Keys.SPACE + "d")
    i = joys.wait([0, -1.0, 0, 0, 0, 0, 0], [1, 0, 0, 0])
    browser.get("about:blank")  # the page goes away with keys held: pagehide, then the socket closes
    released = joys.wait(NEUTRAL, [0, 0, 0, 0], since=i)
    total = joys.wait_silence()
    assert all(b[0] == 0 for _, _, b in joys.all()[released:total])
    page.keys(up=Keys.SPACE + "d")


FAKE_PAD_JS = """
const pad = {id: "test pad (standard)", connected: true, mapping: "standard", axes: [0, 0, 0, 0],
             buttons: Array.from({length: 17}, () => ({pressed: false, value: 0}))};
window.__pad = pad;
Object.defineProperty(navigator, "getGamepads", {value: () => [pad], configurable: true});
window.__press = (i, value) => { pad.buttons[i] = {pressed: value > 0.5, value: value}; };
"""


def test_a_standard_gamepad_arrives_as_the_same_joy(console, browser, client_node):
    """The browser Gamepad API (a standard-mapping pad, stubbed in the page: headless Chromium has none) becomes the
    same console mapping: left stick x/y, right stick z and (LB) yaw, RB deadman, triggers the gripper, A the
    gripper toggle, X fine; a neutral pad ends in deadman 0 and silence."""
    joys = JoyLog(client_node)
    page = DrivePage(browser, console)
    page.js(FAKE_PAD_JS)
    page.js("__pad.axes = [0, -1, 0, 0]; __press(5, 1)")  # left stick up (forward), RB (deadman)
    i = joys.wait([1.0, 0, 0, 0, 0, 0, 0], [1, 0, 0, 0])
    page.wait(lambda: "test pad" in page.text("gamepad-status"), 5, "the pad named in the panel")
    page.js("__pad.axes = [-1, 0, -1, -1]; __press(4, 1); __press(7, 1)")  # left, LB + right stick up-left, RT
    i = joys.wait([0, 1.0, 1.0, 0, 0, 1.0, -1.0], [1, 0, 0, 1], since=i)
    page.js("__pad.axes = [0, 0, 0, 0.5]; __press(4, 0); __press(7, 0); __press(6, 0.5); __press(0, 1); "
            "__press(2, 1)")  # right stick half down, LT half, A held, X pressed (fine on)
    i = joys.wait([0, 0, -0.5, 0, 0, 0, 0.5], [1, 1, 1, 0], since=i)
    page.js("__pad.axes = [0, 0, 0, 0]; for (const b of [0, 2, 5, 6]) __press(b, 0)")  # all let go
    last = joys.wait(NEUTRAL, [0, 1, 0, 0], since=i)
    total = joys.wait_silence()
    assert all(b[0] == 0 for _, _, b in joys.all()[last:total])
    page.js("setDrive(false)")

# -- the acceptance test: a person drives the embedded WidowX to success through the page ----------------------
DRIVE_TASK = "carrot_on_plate"
MAX_T, COARSE, FINE = 0.05, 0.4, 0.1
"""widowx_driver's max_translation and the teleop node's default coarse / fine speeds (amf_ros/bringup/params/
teleop.py): a held key moves MAX_T * COARSE (or * FINE) per action."""
AXIS_KEYS = (("w", "s"), ("a", "d"), ("r", "f"))


def person(action, gripper_now: float) -> tuple[set[str], bool]:
    """The keys a person holds for the scripted expert's ``action`` (7,): each translation axis rounded to a held
    key or none at the speed that fits (fine when the largest step is under 3/4 of a coarse one), Q / E when the
    gripper must change (rotation left alone: the expert only corrects small drifts). Returns (keys, fine)."""
    import numpy as np

    t = np.asarray(action[:3], dtype=float)
    fine = float(np.max(np.abs(t))) < 0.75 * MAX_T * COARSE
    step = MAX_T * (FINE if fine else COARSE)
    keys = {plus if v / step >= 0.5 else minus for v, (plus, minus) in zip(t, AXIS_KEYS, strict=True)
            if abs(v / step) >= 0.5}
    if action[6] < 0.5 <= gripper_now:
        keys.add("q")  # close
    elif action[6] >= 0.5 > gripper_now:
        keys.add("e")  # open
    return keys, fine


class ArmLog:
    """The embedded arm as the test sees it: the newest state, every applied action (the arm's echo), the status."""

    def __init__(self, node) -> None:
        from amf_ros.msg import EefDeltaAction, StateVector, TaskStatus
        from amf_ros.ros import qos

        self.lock = threading.Lock()
        self.state: tuple[int, list[float]] | None = None  # (applied actions before it, values)
        self.applied: list[list[float]] = []
        self.status = None
        node.create_subscription(StateVector, "/amf/observation/state", self._on_state, qos.EVENTS)
        node.create_subscription(EefDeltaAction, "/amf/action/applied", self._on_applied, qos.STREAM)
        node.create_subscription(TaskStatus, "/amf/sim/status", self._on_status, qos.LATCHED)

    def _on_state(self, msg) -> None:
        with self.lock:
            self.state = (len(self.applied), list(msg.values))

    def _on_applied(self, msg) -> None:
        with self.lock:
            self.applied.append([*msg.translation, *msg.rotation, msg.gripper])

    def _on_status(self, msg) -> None:
        with self.lock:
            self.status = (msg.task, int(msg.steps), bool(msg.success), bool(msg.done))

    def snapshot(self):
        with self.lock:
            return self.state, len(self.applied), self.status


def _result(page: DrivePage, op: str, timeout: float = 30.0) -> tuple[bool, str]:
    el = page.d.find_element(page.By.ID, "last-result")
    page.wait(lambda: el.get_attribute("data-op") == op and "sent…" not in el.text, timeout, f"{op}'s answer")
    return "ok" in el.get_attribute("class").split(), el.text


@pytest.fixture
def drive_graph(ros_env, tmp_path):
    """The embedded WidowX (sim_bridge rendering its camera, demo_recorder) with the console, the teleop node
    reading the console's Joy, and policy_server on a tiny checkpoint (the fine-tune round); every node a process."""
    from amf_ros.bringup import graph
    from amf_ros.bringup.processes import NodeProcesses

    try:
        graph.find_executable("teleop")
    except FileNotFoundError as exc:
        pytest.skip(f"needs the teleop node: {exc}")
    from amf_ros.bench.tiny_checkpoint import tiny_widowx_checkpoint

    specs = [s for s in graph.sim_plan("", arm="widowx", console=True, console_port=0)
             if s.name in ("sim_bridge", "demo_recorder", "operator_console", "policy_server")]
    ckpt = tiny_widowx_checkpoint(tmp_path / "pretrained", (DRIVE_TASK, "stack_cube"))
    teleop = graph.NodeSpec(name="teleop", executable="teleop", params_file=specs[0].params_file,
                            overrides={"input": "console"})
    procs = NodeProcesses([*specs, teleop], log_dir=tmp_path / "logs", env={"PYTHONUNBUFFERED": "1", **ros_env},
                          extra_args={"sim_bridge": ["-p", "render:=true"],
                                      "demo_recorder": ["-p", f"dataset_dir:={tmp_path / 'dataset'}"],
                                      "policy_server": ["-p", f"checkpoint:={ckpt}", "-p", "pretrain_if_missing:=false",
                                                        "-p", f"checkpoint_dir:={tmp_path / 'checkpoints'}",
                                                        "-p", f"dataset_dir:={tmp_path / 'dataset'}",
                                                        "-p", "fine_tune_steps:=30"],
                                      "operator_console": ["-p", "port:=0", "-p", "auto_ask:=false", "-p",
                                                           "watch_nodes:=[sim_bridge, demo_recorder, teleop, "
                                                           "policy_server]"]})
    procs.start()
    try:
        yield tmp_path, console_url(tmp_path / "logs" / "operator_console.log"), procs
    finally:
        print("node exit codes:", procs.stop())
        for name in procs.procs:
            print(f"----- log of {name} -----\n{procs.log_tail(name, 3000)}")


def test_drive_the_embedded_widowx_to_success_with_held_keys(drive_graph, browser, client_node, shots):
    """Issue 30's acceptance, keyboard only: the test's person turns the scripted expert's action on the newest
    observation into held keys (quantised: a key per axis at coarse or fine speed, Q / E for the gripper), holds Space
    through the page, completes the task, saves it from the page; the saved episode's actions are exactly the arm's
    echo of what it applied, and each is a held-key action of the teleop node; then Fine-tune on the page trains a
    new round on that demonstration."""
    import numpy as np
    from selenium.webdriver.common.keys import Keys
    from selenium.webdriver.support.ui import Select

    from amf_ros.data.store import EpisodeStore
    from amf_ros.envs.widowx_sim.suite import load_tasks, scripted_action

    run, url, procs = drive_graph
    spec = {s.key: s for s in load_tasks()}[DRIVE_TASK]
    arm = ArmLog(client_node)
    page = DrivePage(browser, url)
    page.wait(lambda: page.js("return !document.getElementById('btn-reset-sim').hidden"), 60, "the simulator")
    page.wait(lambda: page.js("const b = document.querySelector('#teleop-state b[data-key=input]'); "
                              "return b && b.textContent") == "console", 60, "the teleop node's state")
    Select(page.d.find_element(page.By.ID, "task-select")).select_by_value(DRIVE_TASK)
    page.d.find_element(page.By.ID, "btn-reset-sim").click()
    ok, text = _result(page, "reset_sim")
    assert ok, text
    page.wait(lambda: (s := arm.snapshot()[2]) and s[0] == DRIVE_TASK and s[1] == 0 and not s[3], 10, "the new scene")
    # as a person would: Start once the page says the recorder is ready (it may not have discovered the arm's topics
    # yet on a loaded machine; CI once pressed Start before it had, and the recorder refused, saying so)
    page.wait(lambda: page.text("recorder-ready") == "yes", 60, "the recorder to be ready")
    page.d.find_element(page.By.ID, "btn-start").click()
    ok, text = _result(page, "start")
    assert ok and f"({DRIVE_TASK})" in text, text
    episode = page.wait(lambda: page.text("recorder-episode").strip("–"), 10, "the episode id")
    start = arm.snapshot()[1]

    held: set[str] = set()
    fine = False
    decisions = 0
    try:
        while True:
            state, n_applied, status = arm.snapshot()
            if status[2]:
                break
            assert status[1] < spec.max_steps and not status[3], f"not solved in {status[1]} steps: {status}"
            gripper = arm.applied[-1][6] if n_applied > start else 1.0
            keys, want_fine = person(scripted_action(np.asarray(state[1]), spec, MAX_T), gripper)
            down, up = "".join(sorted(keys - held)), "".join(sorted(held - keys))
            if want_fine != fine:
                down += "z"  # the fine / coarse toggle: pressed and let go
                up += "z"
                fine = want_fine
            if not decisions:
                down += Keys.SPACE  # the deadman last: the first action already moves
            page.keys(down=down, up=up)
            held, decisions = keys, decisions + 1
            if decisions == 20:  # carrying the object (the page may show a frame or two earlier)
                browser.save_screenshot(str(shots / "06_driving_the_embedded_widowx.png"))
            # the next decision on the state the next applied action produced
            page.wait(lambda n=n_applied: (s := arm.snapshot())[2][2] or (s[1] > n and s[0][0] > n), 10,
                      "the next applied action and its state")
    finally:
        page.keys(up="".join(held) + Keys.SPACE)
    status = arm.snapshot()[2]
    page.d.find_element(page.By.ID, "btn-save-success").click()
    ok, text = _result(page, "save_success")
    assert ok and "saved as success" in text and episode in text, text
    with arm.lock:  # everything the arm applied since Start (the solved simulator refuses any later action)
        applied = np.asarray(arm.applied[start:], dtype=np.float32)
    ep = EpisodeStore(run / "dataset", create=False).load(episode, images=False)
    actions = np.asarray(ep.steps["action"])
    print(f"{DRIVE_TASK} solved in {len(applied)} steps with {decisions} key decisions; episode {episode}")
    assert ep.meta.success and len(ep) == len(applied) == status[1]
    assert actions.shape == applied.shape and np.array_equal(actions.astype(np.float32), applied)
    # every action is a held-key action: translation 0 or +-one coarse or fine step per axis, no rotation
    steps = np.float32([0.0, MAX_T * COARSE, MAX_T * FINE])
    tol = 4 * np.finfo(np.float32).eps * MAX_T
    assert np.all(np.min(np.abs(np.abs(applied[:, :3, None]) - steps), axis=-1) <= tol)
    assert np.all(applied[:, 3:6] == 0) and set(np.unique(applied[:, 6])) <= {0.0, 1.0}
    # then a fine-tune round from the page on the demonstration just driven (the only episode of the dataset)
    page.d.find_element(page.By.ID, "btn-fine-tune").click()
    ok, text = _result(page, "fine_tune", timeout=300)
    assert ok and "fine-tuned" in text, text
    round_dir = Path(text.split(": ", 1)[1].split(" ")[0])
    assert round_dir.parent == run / "checkpoints" and round_dir.is_dir(), text
    assert procs.dead() == {}
