"""The operator console against the live embedded WidowX over DDS, driven through the real page in headless Chromium
(issue 16 acceptance): one whole round from the page, the stale-stream warning, bad input from a second client.

The graph is `widowx.launch.py robot:=sim_widowx` (every node a process, the console included) with a tiny WidowX
policy, the camera rendered (so the page shows it and the recorder records it) and the scripted teleop as the human
who demonstrates but leaves Save to the operator (end_episode:=false). Screenshots land in the test's temporary
directory (path printed; AMF_CONSOLE_SCREENSHOTS=DIR keeps them elsewhere).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from amf_ros.bench.console_graph import console_url

pytest.importorskip("mujoco")
pytest.importorskip("aiohttp")
pytestmark = [pytest.mark.ros, pytest.mark.slow]

TASKS = ("carrot_on_plate", "stack_cube")


@pytest.fixture(scope="module")
def console_graph(ros_env, rclpy_context, tmp_path_factory):
    from amf_ros.bench.console_graph import start_console_graph
    from amf_ros.ros.client import AMFClient

    run = tmp_path_factory.mktemp("console")
    procs = start_console_graph(run, ros_env, TASKS, selector="amf", params={
        "scripted_teleop": {"end_episode": False}, "policy_server": {"fine_tune_steps": 60, "max_steps": 30}})
    client = AMFClient(f"amf_test_console_{int(time.time() * 1e3) % 100000}")
    try:
        client.wait_ready(timeout=120)
        url = console_url(run / "logs" / "operator_console.log")
        yield run, url, client, procs
    finally:
        client.close()
        print("node exit codes:", procs.stop())


class Page:
    """What the test reads and presses on the console page (by the element ids of static/index.html)."""

    def __init__(self, driver, url: str) -> None:
        from selenium.webdriver.common.by import By

        self.d, self.By = driver, By
        driver.get(url)
        self.wait(lambda: self.text("conn") == "connected", 30, "the page to connect")

    def el(self, id_: str):
        return self.d.find_element(self.By.ID, id_)

    def text(self, id_: str) -> str:
        return self.el(id_).text

    def press(self, id_: str) -> None:
        self.el(id_).click()

    def wait(self, cond, timeout: float, what: str):
        from selenium.common.exceptions import StaleElementReferenceException

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = cond()
            except StaleElementReferenceException:  # re-rendered while read: read again
                value = None
            if value:
                return value
            time.sleep(0.05)
        raise AssertionError(f"page: timed out after {timeout:g} s waiting for {what}; last result "
                             f"{self.text('last-result')!r}, log {self.text('log')[:600]!r}")

    def result(self, op: str, timeout: float = 30.0) -> tuple[bool, str]:
        """Wait for the answer of ``op`` (the result line leaves 'sent…')."""
        el = self.el("last-result")
        self.wait(lambda: el.get_attribute("data-op") == op and "sent…" not in el.text, timeout, f"{op}'s answer")
        return "ok" in el.get_attribute("class").split(), el.text

    def _fresh(self, read):
        """Read the DOM again if it was re-rendered while being read (every push replaces the table)."""
        from selenium.common.exceptions import StaleElementReferenceException

        for _ in range(50):
            try:
                return read()
            except StaleElementReferenceException:
                time.sleep(0.02)
        return read()

    def counts(self) -> dict[str, int]:
        return self._fresh(self._counts)

    def nodes(self) -> dict[str, str]:
        """The liveness table: node -> down / not ready / ready / unknown."""
        return self._fresh(lambda: {r.get_attribute("data-node"): r.get_attribute("data-state")
                                    for r in self.d.find_elements(self.By.CSS_SELECTOR, "#nodes tbody tr[data-node]")})

    def bars(self) -> dict[str, str]:
        return self._fresh(self._bars)

    def _counts(self) -> dict[str, int]:
        rows = self.d.find_elements(self.By.CSS_SELECTOR, "#why tbody tr")
        return {r.get_attribute("data-task"): int(r.find_element(self.By.CSS_SELECTOR, "td.count")
                                                  .get_attribute("data-count")) for r in rows}

    def _bars(self) -> dict[str, str]:
        rows = self.d.find_elements(self.By.CSS_SELECTOR, "#why tbody tr")
        return {r.get_attribute("data-task"): r.find_element(self.By.CSS_SELECTOR, "td.barcell").text for r in rows}


def _demonstrate(page: Page, procs) -> str:
    """Ask -> Start -> the scripted teleop demonstrates -> Save success, all through the page; returns the task."""
    page.press("btn-ask")
    ok, text = page.result("ask")
    assert ok, text
    task = page.text("next-task")
    assert task in TASKS
    page.press("btn-start")
    ok, text = page.result("start")
    assert ok and f"({task})" in text, text
    page.wait(lambda: page.text("recorder-state") == f"recording {task}", 10, "the recorder to show the episode")
    page.wait(lambda: page.text("sim-success") == "solved" and page.text("sim-task") == task, 60,
              "the scripted teleop to solve the task")
    page.press("btn-save-success")
    ok, text = page.result("save_success")
    assert ok and "saved as success" in text, text
    assert procs.dead() == {}
    return task


def test_one_round_through_the_page(console_graph, browser, shots):
    run, url, client, procs = console_graph
    page = Page(browser, url)
    # the console hears the latched checkpoint asynchronously: the page may connect first
    page.wait(lambda: page.text("checkpoint") != "none yet", 20, "the acting checkpoint in the header")
    # sim-only controls: shown once the console has heard the simulator's status (a loaded machine: after connect)
    page.wait(lambda: not page.el("btn-reset-sim").get_attribute("hidden"), 20, "the sim-only controls")
    page.wait(lambda: page.d.find_elements(page.By.CSS_SELECTOR, "#cameras img"), 20, "a camera frame")
    # liveness (issue 29): one row per node the launch started, each ready (the header badge hidden)
    states = page.wait(lambda: (s := page.nodes()) and set(s.values()) == {"ready"} and s, 60, "every node ready")
    assert set(states) == {"sim_bridge", "scripted_teleop", "policy_server", "task_selector", "demo_recorder"}
    assert page.el("node-warning").get_attribute("hidden")
    before = page.wait(page.counts, 20, "the decision's table")
    first = _demonstrate(page, procs)
    page.wait(lambda: page.counts().get(first) == before[first] + 1, 20, "the count to include the new episode")
    assert first in page.text("episodes")
    browser.save_screenshot(str(shots / "01_demonstration_saved.png"))
    second = _demonstrate(page, procs)  # the warm start asks for the other task next
    assert second != first
    page.wait(lambda: page.counts() == {t: before[t] + 1 for t in TASKS}, 20, "both counts")
    checkpoint_before = page.text("checkpoint")
    page.press("btn-fine-tune")
    page.wait(lambda: page.text("fine-tune-state") == "running" or "fine-tuned" in page.text("last-result"), 60,
              "the fine-tune to start")
    ok, text = page.result("fine_tune", timeout=300)
    assert ok and "fine-tuned" in text, text
    page.wait(lambda: page.text("checkpoint") != checkpoint_before and "round 1" in page.text("round"), 20,
              "the new checkpoint in the header")
    assert page.text("checkpoint") == Path(text.split(": ", 1)[1].split(" ")[0]).name
    page.wait(lambda: page.d.find_elements(page.By.CSS_SELECTOR, "#loss-plot canvas"), 10, "the loss curve")
    # after the warm start, the decision for the new policy is AMF's: every bar carries an expected gain in nats
    page.wait(lambda: all(v.startswith("+") for v in page.bars().values()), 60, "AMF's scored decision")
    assert max(float(v[1:]) for v in page.bars().values()) > 0
    assert page.el("warm-start").get_attribute("hidden")
    # a decision asked by someone else (here: a client restricted to one candidate) is shown without the console
    # asking: task_selector's latched decision topic
    assert client.next_task([TASKS[1]]).ok
    page.wait(lambda: list(page.counts()) == [TASKS[1]], 10, "the other client's decision")
    page.press("btn-evaluate")
    ok, text = page.result("evaluate", timeout=120)
    assert ok and ("success in" in text or "failure in" in text), text
    page.wait(lambda: page.d.find_elements(page.By.CSS_SELECTOR, "#success-plot canvas"), 10, "the success plot")
    browser.save_screenshot(str(shots / "02_after_fine_tune.png"))
    assert procs.dead() == {}


def test_stale_stream_warning_shown_then_cleared(console_graph, browser, shots):
    """The page flags a frozen state stream and clears the flag when it flows again. By design the flag comes
    stale_after_s (1 s) + one push period (0.2 s) after the last message: the latency is printed, not asserted
    (a loaded 2-core machine running chromium beside the graph decides the rest); 10 s bounds a page that never
    shows it."""
    run, url, client, procs = console_graph
    page = Page(browser, url)
    page.wait(lambda: "/amf/observation/state" in page.text("streams"), 20, "the state stream row")
    page.wait(lambda: not page.el("stream-warning").is_displayed(), 10, "no warning while everything flows")
    pid = procs.procs["sim_bridge"].pid
    os.kill(pid, signal.SIGSTOP)  # the arm's state and camera publisher freezes
    t0 = time.monotonic()
    try:
        warning = page.wait(lambda: page.el("stream-warning").is_displayed() and "observation/state: stale" in
                            page.text("stream-warning") and page.text("stream-warning"), 10, "the stale warning")
        latency = time.monotonic() - t0
        browser.save_screenshot(str(shots / "03_stale_stream.png"))
    finally:
        os.kill(pid, signal.SIGCONT)
    print(f"stale warning shown {latency:.2f} s after the state publisher stopped: {warning}")
    # flagged by the age rule, not by anything else: the age shown is past the threshold (1 s, formatted %.1f)
    age = re.search(r"/amf/observation/state: stale: nothing for ([0-9.]+) s", warning)
    assert age and float(age.group(1)) >= 1.0, warning
    page.wait(lambda: not page.el("stream-warning").is_displayed(), 10, "the warning to clear")


def test_bad_input_from_a_second_client_loses_nothing(console_graph, browser):
    import aiohttp

    run, url, client, procs = console_graph
    page = Page(browser, url)
    base = url.split("?")[0].rstrip("/")

    async def second_client(actions):
        async with aiohttp.ClientSession() as session:
            ws = await session.ws_connect(base.replace("http", "ws", 1) + "/ws")
            answers = []
            for raw in actions:
                await ws.send_str(raw)
                while True:
                    doc = json.loads((await ws.receive(timeout=10)).data)
                    if doc["type"] == "result":
                        answers.append(doc)
                        break
            await ws.close()
            return answers

    page.press("btn-ask")
    page.result("ask")
    task = page.text("next-task")
    page.press("btn-start")
    assert page.result("start")[0]
    page.wait(lambda: page.text("recorder-state").startswith("recording"), 10, "the recording")
    episode = page.text("recorder-episode")
    answers = asyncio.run(second_client([
        json.dumps({"op": "start", "task": TASKS[0]}),          # a second operator presses Start while recording
        "{this is not json",                                     # a malformed message
        json.dumps({"op": "start", "task": "fly_to_the_moon"}),  # an unknown task
        json.dumps({"op": "evaluate", "task": task}),            # the policy must not drive during a demonstration
    ]))
    assert [a["ok"] for a in answers] == [False] * 4
    assert f"already recording {episode}" in answers[0]["text"]
    assert "not JSON" in answers[1]["text"]
    assert "unknown task" in answers[2]["text"]
    assert "during a demonstration" in answers[3]["text"]
    assert page.text("recorder-episode") == episode  # still the first operator's episode
    page.wait(lambda: page.text("sim-success") == "solved", 60, "the demonstration to finish")
    page.press("btn-save-success")
    ok, text = page.result("save_success")
    assert ok and episode in text, text
    saved = [m for m in client.seen.episodes if m.episode_id == episode]
    deadline = time.monotonic() + 10
    while not saved and time.monotonic() < deadline:
        time.sleep(0.1)
        saved = [m for m in client.seen.episodes if m.episode_id == episode]
    assert saved and saved[0].num_steps > 5 and Path(saved[0].path).is_dir()
    assert procs.dead() == {}


DOWN_BOUND_S = 60.0
"""A SIGKILLed node says nothing on its way out: the graph drops it when its DDS participant's lease runs out (Fast DDS:
20 s by default), then the console's once-a-second graph check sees it gone."""


def test_a_killed_node_is_shown_down(console_graph, browser, shots):
    """Liveness (issue 29): with one node killed, its row turns "down" (not in the ROS graph), the header badge names
    it, and every other node stays ready. Runs after the tests that need the whole graph: the node stays dead."""
    run, url, client, procs = console_graph
    page = Page(browser, url)
    page.wait(lambda: (s := page.nodes()) and set(s.values()) == {"ready"} and s, 60, "every node ready")
    assert page.el("node-warning").get_attribute("hidden")
    victim = "scripted_teleop"  # the operator stand-in: the rest of the loop does not depend on it
    os.kill(procs.procs[victim].pid, signal.SIGKILL)
    t0 = time.monotonic()
    states = page.wait(lambda: (s := page.nodes()).get(victim) == "down" and s, DOWN_BOUND_S, f"{victim} down")
    print(f"{victim} shown down {time.monotonic() - t0:.1f} s after SIGKILL")
    assert {n: s for n, s in states.items() if n != victim} == {n: "ready" for n in states if n != victim}, states
    row = page.d.find_element(page.By.CSS_SELECTOR, f'#nodes tbody tr[data-node="{victim}"]')
    assert "not in the ROS graph" in row.text, row.text
    page.wait(lambda: page.el("node-warning").is_displayed(), 5, "the header badge")
    assert page.text("node-warning") == f"{victim} down"
    browser.save_screenshot(str(shots / "04_node_down.png"))
    assert procs.dead() == {victim: -signal.SIGKILL}


def test_non_loopback_console_needs_a_token(ros_env, tmp_path):
    """host:=0.0.0.0 without a token: the node refuses to start with the reason; with one, requests need it."""
    import subprocess
    import urllib.error
    import urllib.request

    from amf_ros.bringup.graph import find_executable

    exe = str(find_executable("operator_console"))
    args = ["--ros-args", "-r", "__ns:=/amf_token_test", "-p", "host:=0.0.0.0", "-p", "port:=0"]
    env = {**os.environ, **ros_env}
    res = subprocess.run([exe, *args], env=env, capture_output=True, text=True, timeout=60)
    assert res.returncode == 1 and "set a 'token'" in res.stderr, res.stderr[-2000:]
    log = tmp_path / "console.log"
    with open(log, "w") as fh:
        proc = subprocess.Popen([exe, *args, "-p", "token:=s3cret"], stdout=fh, stderr=subprocess.STDOUT, env=env)
    try:
        url = console_url(log)
        port = int(re.search(r":(\d+)/", url).group(1))
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=10)
        assert err.value.code == 401
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/?token=s3cret", timeout=10) as r:
            assert r.status == 200
    finally:
        proc.send_signal(signal.SIGINT)
        # past spin()'s own deadline (10 s, then faulthandler's stack dump at 15 s), so a stuck clean-up shows where
        # it hangs in the log instead of a bare timeout (seen twice in CI, never locally)
        try:
            code = proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
        assert code == 0, f"exit code {code} after SIGINT; its log:\n{log.read_text(errors='replace')[-6000:]}"
