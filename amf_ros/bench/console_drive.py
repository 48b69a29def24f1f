"""`amf bench console-drive`: is the console's camera usable for driving, and how fast do keys act?

    amf bench console-drive [--out runs/bench/console-drive] [--seconds 20] [--presses 40] [--smoke]

Issue 30's measurement of the Drive panel (docs/console.md, "Driving"). One headless Chromium window (nice 19, as in
console-load: in deployment the browser runs elsewhere) opens the console page; every rate is what that page showed,
counted in the page itself (a MutationObserver on the camera image).

Settings, ``seconds`` each:

* a synthetic 256x256 RGB camera at ``camera_hz`` (30 Hz, a USB camera's rate; changing content) published by the
  benchmark to operator_console alone: the page watching (Drive off: ``display_rate_hz``), the page driving (Drive
  on: ``drive_display_rate_hz``), and driving with ``clients`` - 1 more windows watching;
* the embedded WidowX's own camera (sim_bridge rendering, config/sim_widowx.yaml) with operator_console, the page
  driving: the simulator idle (it re-renders every ``idle_publish_period_s``), then, when the teleop node is
  installed, with Space held (the teleop node steps the arm at 5 Hz without moving it; at most 10 s, the task's
  step limit).

Per setting: frames/s shown, the age of each frame when the page had it (page clock minus the image's header stamp:
camera -> console -> JPEG -> browser; one machine, one clock), the camera's rate as the benchmark published it
(synthetic) or received it on the same topic (embedded), and CPU % of one core from /proc over the setting:
operator_console, sim_bridge, Chromium's process tree, the whole machine.

Latency, from the page's own key event time (``Date.now()`` in console.js, ``drive.keyAt``):

* key -> Joy (synthetic setting): with Space held, W pressed and let go ``presses`` times; to the arrival of the first
  sensor_msgs/Joy with the new state at the benchmark's subscriber on /amf/teleop/console_joy (key down and key up
  both count);
* the operator's loop (embedded WidowX with the teleop node, ``input: console``): with Space held, W and S in turn
  pressed ``presses`` times at random phases of the 5 Hz control tick; key -> the first applied action moving along
  x (the arm's ``action/applied`` echo; timed by the stamp of the state it produced, the simulator's clock: this
  process, loaded, can hear the echo after the page has shown its frame) -> the first frame the page shows with a
  stamp at least that of that state. The scene is reset every 5 presses.

Output: results.json + a table; numbers only, nothing asserted.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import os
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from amf_ros.bench.console_graph import ConsoleWindows, press_keys
from amf_ros.bench.console_load import machine_busy_s, process_cpu_s, tree_cpu_s
from amf_ros.bench.results import write_results
from amf_ros.bringup.ros_env import isolated_ros_env
from amf_ros.config_file import load_config
from amf_ros.outputs import format_table

log = logging.getLogger("amf.bench.console_drive")

CAMERA = "camera/image_raw"
JOY = "teleop/console_joy"
# each frame the page shows: [header stamp (s), page clock when shown (ms)] (console.js sets data-stamp, then data-at)
FRAME_LOG_JS = """
window.__amfFrames = [];
if (!window.__amfObserving) {  // one observer per page, however often counting restarts
  window.__amfObserving = true;
  new MutationObserver((ms) => { for (const m of ms) if (m.attributeName === 'data-at')
    window.__amfFrames.push([Number(m.target.dataset.stamp) || 0, Date.now()]); })
    .observe(document.getElementById('cameras'), {subtree: true, attributes: true, attributeFilter: ['data-at']});
}
"""


@dataclass
class ConsoleDriveConfig:
    """Settings of the benchmark (recorded in results.json)."""

    seconds: float = 20.0
    """Length of each setting, s."""
    camera_hz: float = 30.0
    """Rate of the synthetic camera, Hz."""
    display_rate_hz: float = 2.0
    """operator_console's display_rate_hz (watching; the shipped configs' value)."""
    drive_display_rate_hz: float = 15.0
    """operator_console's drive_display_rate_hz (driving; its default)."""
    clients: int = 3
    """Windows in the setting with several browsers (one driving, the others watching)."""
    presses: int = 40
    """W presses (each a key down and a key up) for the key -> Joy latency."""
    embedded: bool = True
    """Also measure the embedded WidowX's own camera (sim_bridge rendering)."""
    sim_idle_publish_period_s: float = 0.0
    """sim_bridge's idle_publish_period_s in the embedded settings (0 = config/sim_widowx.yaml's, 0.1 s): how often
    the idle simulator re-renders its camera."""
    nice: int = 19
    """Niceness of Chromium (0 = as the nodes)."""

    def __post_init__(self) -> None:
        if self.seconds <= 0 or self.camera_hz <= 0 or self.clients < 1 or self.presses < 1:
            raise ValueError(f"invalid ConsoleDriveConfig: {self.seconds=} {self.camera_hz=} {self.clients=} "
                             f"{self.presses=}")
        if not 0 < self.display_rate_hz <= 30 or not 0 < self.drive_display_rate_hz <= 30:
            raise ValueError(f"display rates must be in (0, 30] Hz, got {self.display_rate_hz=} "
                             f"{self.drive_display_rate_hz=}")
        if self.sim_idle_publish_period_s < 0:
            raise ValueError(f"sim_idle_publish_period_s must be >= 0, got {self.sim_idle_publish_period_s=}")
        if not 0 <= self.nice <= 19:
            raise ValueError(f"nice must be in [0, 19], got {self.nice=}")


def synthetic_frames(n: int = 30, size: int = 256, seed: int = 0) -> list[bytes]:
    """``n`` distinct 256x256 RGB frames (a gradient, a moving square, mild noise): JPEG sizes like a camera's, and
    no two frames equal (an encoder cannot skip work)."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size]
    base = np.stack([xx * 255 // size, yy * 255 // size, (xx + yy) * 127 // size], axis=-1).astype(np.int16)
    frames = []
    for i in range(n):
        img = base + rng.integers(-12, 13, base.shape, dtype=np.int16)
        x0 = (i * size // n) % (size - 48)
        img[96:144, x0:x0 + 48] = (230, 40, 40)
        frames.append(np.clip(img, 0, 255).astype(np.uint8).tobytes())
    return frames


class Ros:
    """The benchmark's ROS side, on an AMFClient node: the synthetic camera publisher, a Joy log, a camera counter."""

    def __init__(self, client: Any) -> None:
        from sensor_msgs.msg import Image, Joy

        from amf_ros.msg import EefDeltaAction, StateVector
        from amf_ros.ros import qos

        self.client, self.node, self._Image = client, client.node, Image
        self.lock = threading.Lock()
        self.joys: list[tuple[float, tuple[float, ...], tuple[int, ...]]] = []
        self.camera_seen = 0
        self.published = 0
        self._frames: list[bytes] = []
        self._timer: Any = None
        self.applied: list[tuple[float, float]] = []  # (arrival, translation x) of each applied action
        self.states: list[tuple[int, float]] = []  # (applied actions before it, header stamp s)
        self.node.create_subscription(Joy, JOY, self._on_joy, qos.EVENTS)
        self.node.create_subscription(Image, CAMERA, self._on_image, qos.LATEST, raw=True)
        self.node.create_subscription(EefDeltaAction, "action/applied", self._on_applied, qos.STREAM)
        self.node.create_subscription(StateVector, "observation/state", self._on_state, qos.EVENTS)
        self._pub = self.node.create_publisher(Image, CAMERA, qos.images(2))

    def _on_joy(self, msg: Any) -> None:
        with self.lock:
            self.joys.append((time.time(), tuple(round(float(a), 3) for a in msg.axes),
                              tuple(int(b) for b in msg.buttons)))

    def _on_applied(self, msg: Any) -> None:
        with self.lock:
            self.applied.append((time.time(), float(msg.translation[0])))

    def _on_state(self, msg: Any) -> None:
        stamp = msg.header.stamp.sec + 1e-9 * msg.header.stamp.nanosec
        with self.lock:
            self.states.append((len(self.applied), stamp))

    def _on_image(self, _raw: Any) -> None:
        with self.lock:
            self.camera_seen += 1

    def start_camera(self, hz: float) -> None:
        """Publish the synthetic camera at ``hz`` (each frame stamped when published)."""
        self._frames = synthetic_frames()
        self._timer = self.node.create_timer(1.0 / hz, self._publish)

    def stop_camera(self) -> None:
        """Stop publishing the synthetic camera."""
        if self._timer is not None:
            self._timer.cancel()
            self.node.destroy_timer(self._timer)
            self._timer = None

    def _publish(self) -> None:
        msg = self._Image(height=256, width=256, encoding="rgb8", step=256 * 3)
        msg.header.stamp = self.node.get_clock().now().to_msg()
        msg.header.frame_id = "bench_camera"
        msg.data = self._frames[self.published % len(self._frames)]
        self._pub.publish(msg)
        self.published += 1

    def counts(self) -> tuple[int, int]:
        """(frames published here, camera messages received here)."""
        with self.lock:
            return self.published, self.camera_seen


class Windows(ConsoleWindows):
    """``n`` windows of one headless Chromium with the console page; the first one's Drive can be switched on."""

    def __init__(self, url: str, n: int, nice: int) -> None:
        super().__init__(url, n, nice, window_size="1400,1300")

    def drive(self, on: bool) -> None:
        """Switch the first window's Drive panel on or off (its button)."""
        from selenium.webdriver.common.by import By

        self.driver.switch_to.window(self.handles[0])
        if ("on" in self.driver.find_element(By.ID, "btn-drive").text) != on:
            self.driver.find_element(By.ID, "btn-drive").click()
        self.wait(lambda: ("on" in self.driver.find_element(By.ID, "btn-drive").text) == on, 5, "the Drive button")

    def start_counting(self) -> None:
        """Log every frame shown, in every window, from now."""
        for h in self.handles:
            self.driver.switch_to.window(h)
            self.js(FRAME_LOG_JS)
        self.driver.switch_to.window(self.handles[0])

    def frame_logs(self) -> list[list[list[float]]]:
        """Per window: [stamp s, shown at ms] of each frame since :meth:`start_counting`."""
        logs = []
        for h in self.handles:
            self.driver.switch_to.window(h)
            logs.append(self.js("return window.__amfFrames || []"))
        self.driver.switch_to.window(self.handles[0])
        return logs

    def keys(self, down: str = "", up: str = "") -> None:
        """Key downs then key ups in the current window (WebDriver key values)."""
        press_keys(self.driver, down, up)


def _pcts(xs: Sequence[float]) -> dict[str, float | None]:
    if not len(xs):
        return {"p50": None, "p95": None, "max": None}
    a = np.asarray(xs, dtype=np.float64)
    return {"p50": float(np.percentile(a, 50)), "p95": float(np.percentile(a, 95)), "max": float(a.max())}


def measure(name: str, ros: Ros, windows: Windows, procs: Any, seconds: float, driving: bool) -> dict[str, Any]:
    """One setting: frames shown per window, their age, CPU of the console, Chromium, the simulator, the machine."""
    log.info("%s (%g s)", name, seconds)
    windows.drive(driving)
    time.sleep(1.0)  # the console switches its encoding rate at the view message; let it settle
    windows.start_counting()
    pids = {n: p.pid for n, p in procs.procs.items()}
    cpu0 = {n: process_cpu_s(pid) for n, pid in pids.items()}
    chrome0, (busy0, total0), t0, counts0 = tree_cpu_s(windows.pid), machine_busy_s(), time.monotonic(), ros.counts()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    cpu = {n: round(100.0 * (process_cpu_s(pid) - cpu0[n]) / wall, 2) for n, pid in pids.items()}
    chrome = round(100.0 * (tree_cpu_s(windows.pid) - chrome0) / wall, 2)
    busy1, total1 = machine_busy_s()
    counts1 = ros.counts()
    logs = windows.frame_logs()
    per_window = []
    for i, frames in enumerate(logs):
        ages = [shown / 1e3 - stamp for stamp, shown in frames if stamp > 0]
        per_window.append({"window": i, "driving": driving and i == 0, "frames": len(frames),
                           "frames_per_s": round(len(frames) / wall, 2), "frame_age_ms": {
                               k: (round(v * 1e3, 1) if v is not None else None) for k, v in _pcts(ages).items()}})
    return {"name": name, "driving": driving, "wall_s": round(wall, 2), "windows": per_window,
            "camera_published_per_s": round((counts1[0] - counts0[0]) / wall, 2),
            "camera_received_here_per_s": round((counts1[1] - counts0[1]) / wall, 2),
            "cpu_percent_of_one_core": {**cpu, "chromium": chrome},
            "machine_busy_percent_of_one_core": round(100.0 * (busy1 - busy0) / (total1 - total0)
                                                      * (os.cpu_count() or 1), 1)}


def key_to_joy(ros: Ros, windows: Windows, presses: int) -> dict[str, Any]:
    """Hold Space; press and let go of W ``presses`` times; page key time -> Joy arrival, per key event."""
    from selenium.webdriver.common.keys import Keys

    windows.drive(True)
    latencies, missed = [], 0

    def wait_joy(x: float, since: int, timeout: float = 3.0) -> float | None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with ros.lock:
                hit = next((t for t, a, b in ros.joys[since:] if a[0] == x and b[0] == 1), None)
            if hit is not None:
                return hit
            time.sleep(0.005)
        return None

    windows.keys(down=Keys.SPACE)
    try:
        for _ in range(presses):
            for x, action in ((1.0, "down"), (0.0, "up")):
                with ros.lock:
                    since = len(ros.joys)
                windows.keys(**{action: "w"})
                key_at = windows.js("return drive.keyAt") / 1e3
                arrived = wait_joy(x, since)
                if arrived is None:
                    missed += 1
                else:
                    latencies.append(arrived - key_at)
                time.sleep(0.15)  # a person's key rhythm; several republished Joys in between
    finally:
        windows.keys(up=Keys.SPACE + "w")
    ms = [1e3 * x for x in latencies]
    return {"key_events": 2 * presses, "missed": missed,
            **{k: (round(v, 1) if v is not None else None) for k, v in _pcts(ms).items()},
            "latencies_ms": [round(x, 2) for x in ms]}


def key_to_arm(ros: Ros, windows: Windows, client: Any, presses: int) -> dict[str, Any]:
    """The operator's loop on the embedded WidowX with the teleop node: with Space held, W (then S, alternately)
    pressed ``presses`` times; per press, the page's key time -> the first applied action that moves along x (the
    arm's echo), timed by the stamp of the state it produced -> the first frame the page shows whose stamp is at
    least that of that state. The scene is reset every 5 presses (the task's step limit)."""
    from selenium.webdriver.common.keys import Keys

    windows.drive(True)
    windows.start_counting()
    to_applied, to_frame, missed = [], [], 0
    rng = np.random.default_rng(0)  # presses at random phases of the teleop node's 5 Hz tick

    def first(pred: Any, timeout: float = 3.0) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with ros.lock:
                hit = pred()
            if hit is not None:
                return hit
            time.sleep(0.005)
        return None

    try:
        for i in range(presses):
            if i % 5 == 0:
                windows.keys(up=Keys.SPACE)
                client.reset("carrot_on_plate", i)
                time.sleep(0.5)
                windows.keys(down=Keys.SPACE)
                time.sleep(0.5)
            key, sign = ("w", 1.0) if i % 2 == 0 else ("s", -1.0)
            time.sleep(float(rng.uniform(0.0, 0.2)))
            with ros.lock:
                n0 = len(ros.applied)
            windows.keys(down=key)
            key_at = windows.js("return drive.keyAt") / 1e3
            echo = first(lambda n0=n0, sign=sign: next(((j, t) for j, (t, x) in enumerate(ros.applied[n0:], start=n0)
                                                        if sign * x > 0), None))
            state = None if echo is None else first(lambda k=echo[0]: next(
                (stamp for before, stamp in ros.states if before > k), None))
            time.sleep(0.25)
            windows.keys(up=key)
            time.sleep(0.35)
            if echo is None or state is None:
                missed += 1
                continue
            to_applied.append(state - key_at)
            shown = [at / 1e3 for stamp, at in windows.frame_logs()[0] if stamp >= state - 1e-6]
            if shown:
                to_frame.append(shown[0] - key_at)
            else:
                missed += 1
    finally:
        windows.keys(up=Keys.SPACE + "ws")

    def ms(xs: list[float]) -> dict[str, float | None]:
        return {k: (round(1e3 * v, 1) if v is not None else None) for k, v in _pcts(xs).items()}

    return {"presses": presses, "missed": missed, "key_to_applied_ms": ms(to_applied), "key_to_frame_ms": ms(to_frame),
            "key_to_applied_s": [round(x, 4) for x in to_applied], "key_to_frame_s": [round(x, 4) for x in to_frame]}


def _console_params(cfg: ConsoleDriveConfig) -> list[str]:
    return ["-p", "port:=0", "-p", f"display_rate_hz:={cfg.display_rate_hz}", "-p",
            f"drive_display_rate_hz:={cfg.drive_display_rate_hz}", "-p", "auto_ask:=false",
            "-p", "watch_nodes:=[operator_console]"]


def _graph(cfg: ConsoleDriveConfig, nodes: Sequence[str], log_dir: Path, env: dict[str, str]) -> Any:
    """``nodes`` of the embedded WidowX's plan (config/sim_widowx.yaml), the console on a free port with the
    benchmark's display rates; returns the running NodeProcesses."""
    from amf_ros.bringup import graph
    from amf_ros.bringup.processes import NodeProcesses

    specs = [dataclasses.replace(s, respawn=False) for s in graph.sim_plan("", arm="widowx", console=True,
                                                                          console_port=0) if s.name in nodes]
    if "teleop" in nodes:
        specs.append(graph.NodeSpec(name="teleop", executable="teleop", params_file=specs[0].params_file,
                                    overrides={"input": "console"}, respawn=False))
    sim = ["-p", "render:=true"]
    if cfg.sim_idle_publish_period_s:
        sim += ["-p", f"idle_publish_period_s:={cfg.sim_idle_publish_period_s}"]
    return NodeProcesses(specs, log_dir=log_dir, env={"PYTHONUNBUFFERED": "1", **env},
                         extra_args={"operator_console": _console_params(cfg), "sim_bridge": sim}).start()


def have_teleop() -> bool:
    """Whether the teleop node is installed (the operator's loop needs it)."""
    from amf_ros.bringup.graph import find_executable

    try:
        find_executable("teleop")
    except FileNotFoundError:
        return False
    return True


def _synthetic(cfg: ConsoleDriveConfig, ros: Ros, work: Path, env: dict[str, str]) -> tuple[list[dict[str, Any]],
                                                                                               Any]:
    from amf_ros.bench.console_graph import console_url

    procs = _graph(cfg, ["operator_console"], work / "logs_synthetic", env)
    windows = None
    try:
        url = console_url(work / "logs_synthetic" / "operator_console.log")
        ros.start_camera(cfg.camera_hz)
        windows = Windows(url, 1, cfg.nice)
        settings = [measure(f"synthetic {cfg.camera_hz:g} Hz camera, watching", ros, windows, procs, cfg.seconds,
                            False),
                    measure(f"synthetic {cfg.camera_hz:g} Hz camera, driving", ros, windows, procs, cfg.seconds,
                            True)]
        latency = key_to_joy(ros, windows, cfg.presses)
        log.info("key -> Joy: p50 %s ms, p95 %s ms, max %s ms (%d missed)", latency["p50"], latency["p95"],
                 latency["max"], latency["missed"])
        if cfg.clients > 1:
            windows.close()
            windows = Windows(url, cfg.clients, cfg.nice)
            settings.append(measure(f"synthetic {cfg.camera_hz:g} Hz camera, driving + {cfg.clients - 1} watching",
                                    ros, windows, procs, cfg.seconds, True))
        return settings, latency
    finally:
        ros.stop_camera()
        if windows is not None:
            windows.close()
        log.info("operator_console exit codes: %s", procs.stop())


def _embedded(cfg: ConsoleDriveConfig, ros: Ros, client: Any, work: Path,
              env: dict[str, str]) -> tuple[dict[str, Any], dict[str, Any] | None]:
    from amf_ros.bench.console_graph import console_url

    teleop = have_teleop()
    procs = _graph(cfg, ["sim_bridge", "operator_console", *(["teleop"] if teleop else [])], work / "logs_embedded",
                   env)
    windows = None
    try:
        url = console_url(work / "logs_embedded" / "operator_console.log")
        windows = Windows(url, 1, cfg.nice)
        windows.wait(lambda: windows.js("return document.querySelector('#cameras img') !== null"), 120,
                      "a camera frame from sim_bridge")
        idle = cfg.sim_idle_publish_period_s or "0.1 (config)"
        setting = measure(f"embedded WidowX camera (sim_bridge idle, re-render every {idle} s), driving", ros,
                          windows, procs, cfg.seconds, True)
        loop = None
        if teleop:
            from selenium.webdriver.common.keys import Keys

            client.reset("carrot_on_plate", 0)
            windows.keys(down=Keys.SPACE)  # the deadman alone: the teleop node steps the arm at 5 Hz, not moving it
            try:
                moving = measure("embedded WidowX camera, Space held (5 Hz actions)", ros, windows, procs,
                                 min(cfg.seconds, 10.0), True)  # the task's 60-step limit: 12 s of actions
            finally:
                windows.keys(up=Keys.SPACE)
            loop = key_to_arm(ros, windows, client, cfg.presses)
            loop["camera_setting"] = moving
            log.info("key -> applied action p50 %s / p95 %s ms; key -> frame p50 %s / p95 %s ms (%d missed)",
                     loop["key_to_applied_ms"]["p50"], loop["key_to_applied_ms"]["p95"],
                     loop["key_to_frame_ms"]["p50"], loop["key_to_frame_ms"]["p95"], loop["missed"])
        else:
            log.warning("no teleop node installed: the operator's loop (key -> applied action -> frame) is not "
                        "measured")
        return setting, loop
    finally:
        if windows is not None:
            windows.close()
        log.info("embedded graph exit codes: %s", procs.stop())


def run(cfg: ConsoleDriveConfig, out: Path) -> dict[str, Any]:
    """Run every setting; write ``out/results.json``; returns the results dict."""
    from amf_ros.ros.client import session

    t0 = time.monotonic()
    env = isolated_ros_env()
    with tempfile.TemporaryDirectory(prefix="amf_console_drive_") as tmp, \
            session(f"amf_bench_console_drive_{os.getpid()}") as client:
        ros = Ros(client)
        settings, latency = _synthetic(cfg, ros, Path(tmp), env)
        loop = None
        if cfg.embedded:
            setting, loop = _embedded(cfg, ros, client, Path(tmp), env)
            settings.append(setting)
            if loop is not None:
                settings.append(loop.pop("camera_setting"))
    results = {"benchmark": "console-drive", "config": dataclasses.asdict(cfg),
               "metric": "frames/s shown by the page, frame age ms, CPU % of one core, key -> Joy ms",
               "wall_time_s": time.monotonic() - t0, "machine": {"cpus": os.cpu_count()},
               "key_to_joy_ms": latency, "operator_loop": loop, "settings": settings}
    write_results(out, results)
    return results


def table(results: dict[str, Any]) -> str:
    """One row per setting and window, then the key -> Joy latency."""
    rows = []
    for s in results["settings"]:
        cpu = s["cpu_percent_of_one_core"]
        for w in s["windows"]:
            rows.append([s["name"] if w["window"] == 0 else "", w["window"], "drive" if w["driving"] else "watch",
                         s["camera_published_per_s"] or s["camera_received_here_per_s"], w["frames_per_s"],
                         w["frame_age_ms"]["p50"], w["frame_age_ms"]["p95"],
                         cpu.get("operator_console", float("nan")) if w["window"] == 0 else "",
                         cpu.get("sim_bridge", "-") if w["window"] == 0 else "",
                         cpu["chromium"] if w["window"] == 0 else "",
                         s["machine_busy_percent_of_one_core"] if w["window"] == 0 else ""])
    text = format_table(["setting", "window", "panel", "camera Hz", "frames/s shown", "age p50 ms", "age p95 ms",
                         "console CPU %", "sim_bridge CPU %", "chromium CPU %", "machine %"], rows, floatfmt=".1f")
    k = results["key_to_joy_ms"]
    text += (f"\n\nkey -> Joy (page key event -> Joy at a subscriber, {k['key_events']} key events, "
             f"{k['missed']} missed): p50 {k['p50']} ms, p95 {k['p95']} ms, max {k['max']} ms")
    loop = results.get("operator_loop")
    if loop:
        a, f = loop["key_to_applied_ms"], loop["key_to_frame_ms"]
        text += (f"\nembedded WidowX + teleop node ({loop['presses']} presses, {loop['missed']} missed): key -> "
                 f"applied action p50 {a['p50']} / p95 {a['p95']} / max {a['max']} ms; key -> frame showing it "
                 f"p50 {f['p50']} / p95 {f['p95']} / max {f['max']} ms")
    return text


def main(argv: Sequence[str]) -> int:
    """Entry point of `amf bench console-drive`."""
    p = argparse.ArgumentParser(prog="amf bench console-drive", description=__doc__.split("\n")[0])
    p.add_argument("--out", default="runs/bench/console-drive", help="output directory")
    p.add_argument("--config", default=None, help="YAML with ConsoleDriveConfig fields")
    p.add_argument("--seconds", type=float, default=None, help="seconds per setting (default 20)")
    p.add_argument("--presses", type=int, default=None, help="W presses for the key -> Joy latency (default 40)")
    p.add_argument("--clients", type=int, default=None, help="windows in the several-browsers setting (default 3)")
    p.add_argument("--no-embedded", action="store_true", help="leave out the embedded WidowX's camera")
    p.add_argument("--sim-idle-period", type=float, default=None,
                   help="sim_bridge's idle_publish_period_s in the embedded settings (default: the config's 0.1 s)")
    p.add_argument("--smoke", action="store_true", help="a quick check: 4 s settings, 5 presses, 2 windows")
    args = p.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="[console-drive] %(message)s")
    smoke = {"seconds": 4.0, "presses": 5, "clients": 2} if args.smoke else {}
    cfg = load_config(ConsoleDriveConfig, args.config, defaults=smoke, seconds=args.seconds, presses=args.presses,
                      clients=args.clients, embedded=False if args.no_embedded else None,
                      sim_idle_publish_period_s=args.sim_idle_period)
    results = run(cfg, Path(args.out))
    sys.stdout.write(table(results) + f"\n\nwrote {Path(args.out) / 'results.json'} in "
                     f"{results['wall_time_s']:.0f} s\n")
    return 0
