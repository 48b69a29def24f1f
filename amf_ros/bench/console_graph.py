"""The embedded WidowX graph with the operator console and a rendered camera, and headless Chromium to open it.

One bring-up for everything that drives the console through a real browser: the DDS test of the page
(test/dds/test_console_dds.py) and `amf bench console-load`. The graph is `widowx.launch.py
robot:=sim_widowx` (config/sim_widowx.yaml, every node its own process, the console on a free port) with a tiny
WidowX policy, sim_bridge rendering the primary camera and demo_recorder recording it as ``image_primary``.
Browsers are Debian's ``chromium`` driven by ``/usr/bin/chromedriver`` through selenium (scripts/setup.sh installs
both when run as root).
"""

from __future__ import annotations

import logging
import os
import re
import shutil
import signal
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

log = logging.getLogger(__name__)

CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CAMERA_TOPIC = "/amf/camera/image_raw"


def _ros_value(value: Any) -> str:
    """A value as the right-hand side of ``-p name:=value``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_ros_value(v) for v in value) + "]"
    return str(value)


def start_console_graph(run_dir: Path, env: Mapping[str, str], tasks: Sequence[str], *, selector: str = "amf",
                        params: Mapping[str, Mapping[str, Any]] | None = None) -> Any:
    """Start the embedded WidowX graph with the console; returns the running
    :class:`~amf_ros.bringup.processes.NodeProcesses` (the caller stops it).

    Args:
        run_dir: this run's directory: pre-trained tiny policy, dataset, checkpoints, ``logs/<node>.log``.
        env: ROS environment of the node processes (ROS_DOMAIN_ID, loopback discovery).
        tasks: the policy's and task_selector's tasks (keys of config/tasks/widowx_sim.yaml).
        selector: task_selector's selector (amf | uniform | round_robin).
        params: extra ROS parameters per node, e.g. ``{"scripted_teleop": {"end_episode": False}}``.
    """
    from amf_ros.bench.tiny_checkpoint import tiny_widowx_checkpoint
    from amf_ros.bringup import graph
    from amf_ros.bringup.processes import NodeProcesses
    from amf_ros.loop.nodes import node_overrides
    from amf_ros.loop.run import LoopConfig

    run_dir = Path(run_dir)
    ckpt = tiny_widowx_checkpoint(run_dir / "pretrained", tuple(tasks))
    specs = graph.sim_plan("", checkpoint=str(ckpt), arm="widowx", console=True, console_port=0)
    extra = node_overrides(run_dir, LoopConfig(selector=selector))
    extra["task_selector"] += ["-p", f"tasks:={_ros_value(list(tasks))}"]
    extra["sim_bridge"] += ["-p", "render:=true"]
    extra["demo_recorder"] += ["-p", f"image_topics:=[{CAMERA_TOPIC}]", "-p", "image_keys:=[image_primary]"]
    for node, values in (params or {}).items():
        if node not in extra:
            raise ValueError(f"no node {node!r} in the graph (have {sorted(extra)})")
        for key, value in values.items():
            extra[node] += ["-p", f"{key}:={_ros_value(value)}"]
    return NodeProcesses(specs, log_dir=run_dir / "logs", env={"PYTHONUNBUFFERED": "1", **env},
                         extra_args=extra).start()


def console_url(log_file: Path, timeout: float = 60.0) -> str:
    """The URL operator_console logs at start ("operator console at http://127.0.0.1:PORT/"), read from its log."""
    log_file = Path(log_file)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(r"operator console at (http://\S+)", log_file.read_text() if log_file.exists() else "")
        if m:
            return m.group(1)
        time.sleep(0.2)
    raise TimeoutError(f"operator_console did not log its URL within {timeout:g} s: "
                       f"{log_file.read_text()[-3000:] if log_file.exists() else 'no log at ' + str(log_file)}")


def have_chromium() -> bool:
    """Whether headless Chromium can be driven here (Debian's chromium, chromium-driver and selenium)."""
    try:
        import selenium  # noqa: F401
    except ImportError:
        return False
    return bool(CHROMEDRIVER and CHROMIUM)


def open_chromium(nice: int = 0, window_size: str = "1400,1150", extra_args: Sequence[str] = ()) -> Any:
    """A selenium WebDriver of a new headless Chromium (quit it with ``driver.quit()``).

    Args:
        nice: niceness of chromedriver and so of every Chromium process (19 = yield the CPU to everything else).
        window_size: "W,H" of each window.
        extra_args: more Chromium command-line switches.
    Raises:
        RuntimeError: chromium, chromedriver or selenium is missing.
    """
    if not have_chromium():
        raise RuntimeError("needs Debian's chromium and chromium-driver and the selenium package (scripts/setup.sh "
                           "installs them when run as root)")
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    from amf_ros.bringup.lifetime import die_with_parent

    def child() -> None:  # in chromedriver before exec; Chromium inherits the niceness
        die_with_parent()
        if nice:
            os.nice(nice)

    options = Options()
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                f"--window-size={window_size}", *extra_args):
        options.add_argument(arg)
    options.binary_location = CHROMIUM
    service = Service(CHROMEDRIVER, popen_kw={"preexec_fn": child, "start_new_session": True})
    return webdriver.Chrome(options=options, service=service)


BROWSER_ARGS = ("--disable-background-timer-throttling", "--disable-renderer-backgrounding",
                "--disable-backgrounding-occluded-windows")
"""Chromium throttles timers and rendering of windows it thinks nobody looks at; a real operator looks at the page."""


class ConsoleWindows:
    """``n`` windows of one headless Chromium with the console page open and connected (the console benchmarks
    load and drive them); the first window is current afterwards."""

    def __init__(self, url: str, n: int, nice: int, window_size: str = "1400,1150", wait_camera: bool = False) -> None:
        self.url, self.driver = url, open_chromium(nice=nice, window_size=window_size, extra_args=BROWSER_ARGS)
        self.handles: list[str] = []
        try:
            for i in range(n):
                if i:
                    self.driver.switch_to.new_window("window")
                self.driver.get(url)
                self.handles.append(self.driver.current_window_handle)
            for handle in self.handles:
                self.driver.switch_to.window(handle)
                self.wait(lambda: self.js("return document.getElementById('conn').textContent") == "connected",
                          60, "the page to connect")
                if wait_camera:
                    self.wait(lambda: self.js("return document.querySelector('#cameras img') !== null"), 60,
                              "a camera frame")
            self.driver.switch_to.window(self.handles[0])
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int:
        """chromedriver's pid: the root of the Chromium process tree."""
        return int(self.driver.service.process.pid)

    def js(self, script: str) -> Any:
        """Run ``script`` in the current window and return its value."""
        return self.driver.execute_script(script)

    def wait(self, cond: Callable[[], Any], timeout: float, what: str) -> Any:
        """Poll ``cond`` until it returns something truthy (returned), or TimeoutError naming ``what``."""
        deadline = time.monotonic() + timeout
        while True:
            value = cond()
            if value:
                return value
            if time.monotonic() > deadline:
                raise TimeoutError(f"browser window {self.driver.current_window_handle}: no {what} within "
                                   f"{timeout:g} s ({self.url})")
            time.sleep(0.05)

    def close(self) -> None:
        """Quit Chromium and every window it opened."""
        quit_chromium(self.driver)


def press_keys(driver: Any, down: str = "", up: str = "") -> None:
    """Key downs then key ups in the current window, as one WebDriver action (WebDriver key values: "w",
    ``Keys.SPACE``, ...): how a person holds and lets go of keys on the console page."""
    from selenium.webdriver.common.action_chains import ActionChains

    chain = ActionChains(driver)
    for k in down:
        chain.key_down(k)
    for k in up:
        chain.key_up(k)
    chain.perform()


def quit_chromium(driver: Any) -> None:
    """``driver.quit()``, then SIGKILL whatever is left of chromedriver's process group (a hung renderer)."""
    process = driver.service.process
    try:
        driver.quit()
    finally:
        if process is not None:
            try:
                os.killpg(process.pid, signal.SIGKILL)  # chromedriver was started in a session (and group) of its own
            except ProcessLookupError:
                pass  # every process of the group is gone already
