"""amf_ros.runtime.sim_bridge without rclpy: stepping, refusals, reset seeds, task status and idle re-publish, on a
small fake backend (Metaworld and the embedded WidowX only in a few tests of the real backend factory)."""

from __future__ import annotations

import itertools
import os
import threading

import numpy as np
import pytest

from amf_ros.envs.suites import get_suite
from amf_ros.runtime.sim_bridge import (
    Frame,
    RenderSpec,
    SimBridge,
    TaskState,
)


class FakeSim:
    """A 1-D arm: the state is [x, seed]; the task is solved when x >= goal; done when solved or max_steps."""

    state_names = ("x", "seed")

    def __init__(self, goal: float = 0.3, max_steps: int = 5, fail_render: bool = False,
                 done_on_success: bool = True) -> None:
        self.task_keys = ["reach", "push"]
        self.task = None
        self.goal, self.max_steps, self.fail_render = goal, max_steps, fail_render
        self.done_on_success = done_on_success
        self.x, self.steps, self.seed = 0.0, 0, None
        self.calls: list = []
        self.render_calls = 0

    def instruction(self, task: str) -> str:
        return f"do {task}"

    def reset(self, task: str, seed: int) -> np.ndarray:
        self.calls.append(("reset", task, seed))
        self.task, self.seed, self.x, self.steps = task, seed, 0.0, 0
        return np.array([self.x, seed], dtype=np.float32)

    def step_eef7(self, a7: np.ndarray) -> tuple[np.ndarray, bool, bool]:
        self.calls.append(("step", a7.tolist()))
        if a7[6] < 0:
            raise RuntimeError("gripper exploded")
        self.x += float(a7[0])
        self.steps += 1
        success = self.x >= self.goal
        done = (success and self.done_on_success) or self.steps >= self.max_steps
        return np.array([self.x, self.seed]), success, done

    def render(self, width: int, height: int, camera: str) -> np.ndarray:
        self.render_calls += 1
        if self.fail_render:
            raise RuntimeError("no GL")
        return np.full((height, width, 3), self.steps, dtype=np.uint8)


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def a(x: float, gripper: float = 1.0) -> list[float]:
    return [x, 0, 0, 0, 0, 0, gripper]


def make(**kw) -> tuple[SimBridge, FakeSim, list[Frame], Clock]:
    sim, frames, clock = kw.pop("sim", FakeSim()), [], Clock()
    bridge = SimBridge(sim, frames.append, clock=clock, **kw)
    return bridge, sim, frames, clock


def test_construction_resets_to_the_initial_task_and_emits_its_first_frame():
    bridge, sim, frames, _ = make(initial_task="push", seed=7)
    assert sim.calls == [("reset", "push", 7)]
    assert len(frames) == 1 and frames[0].status == TaskState("push", resets=1, steps=0, success=False, done=False)
    np.testing.assert_array_equal(frames[0].state, [0.0, 7.0])
    assert frames[0].image is None and bridge.state_names == ["x", "seed"]
    with pytest.raises(ValueError, match="initial_task.*nope"):
        make(initial_task="nope")
    assert make()[1].task == "reach", "empty initial_task = the first task of the backend"


def test_one_frame_per_step_with_status_counting_steps_and_success_since_reset():
    bridge, sim, frames, _ = make(seed=0)
    for x in (0.2, 0.2):
        assert bridge.step(a(x)) == ""
    assert [f.status.steps for f in frames] == [0, 1, 2]
    assert frames[-1].status.success and frames[-1].status.done
    np.testing.assert_allclose(frames[-1].state, [0.4, 0.0])
    # Done: further actions are refused, nothing steps, nothing is emitted.
    refused = bridge.step(a(0.1))
    assert "over after 2 steps" in refused and len(frames) == 3 and sim.steps == 2
    assert bridge.status() == TaskState("reach", resets=1, steps=2, success=True, done=True)


def test_success_is_sticky_until_reset():
    bridge, _, frames, _ = make(sim=FakeSim(goal=0.3, max_steps=10, done_on_success=False))
    assert bridge.step(a(0.4)) == "" and frames[-1].status.success  # solved ...
    assert bridge.step(a(-0.4)) == "" and not frames[-1].status.done  # ... and no longer solved at this step
    assert frames[-1].status.success, "success = solved at any step since the reset"
    bridge.reset("reach", 0)
    assert not frames[-1].status.success


def test_bad_actions_are_refused_without_stepping():
    bridge, sim, frames, _ = make()
    assert bridge.step([float("nan")] * 7).startswith("refused action: not 7 finite")
    assert bridge.step([0.1] * 6).startswith("refused action: not 7 finite")
    assert "gripper exploded" in bridge.step(a(0.1, gripper=-1.0))  # a backend error is reported, not raised
    assert bridge.status().steps == 0 and len(frames) == 1
    assert [c[0] for c in sim.calls] == ["reset", "step"]


def test_reset_seed_sequence_unknown_task_and_resets_counter():
    bridge, sim, frames, _ = make(seed=3)
    bridge.step(a(0.1))
    assert bridge.reset("push", -1) == 4 and bridge.reset("push", 42) == 42 and bridge.reset("reach") == 5
    assert [c[2] for c in sim.calls if c[0] == "reset"] == [3, 4, 42, 5]
    assert frames[-1].status == TaskState("reach", resets=4, steps=0, success=False, done=False)
    with pytest.raises(ValueError, match="unknown task 'nope'"):
        bridge.reset("nope", 0)
    assert bridge.status().resets == 4 and sim.task == "reach", "a refused reset changes nothing"
    with pytest.raises(ValueError, match=r"task key of 1000000 characters \(at most 128\)") as info:
        bridge.reset("x" * 1_000_000, 0)  # a request's task of any size: the answer quotes 40 characters of it
    assert len(str(info.value)) < 200 and bridge.status().resets == 4


def test_idle_republishes_only_after_the_period_and_not_when_disabled():
    bridge, _, frames, clock = make(idle_publish_period_s=0.5)
    clock.t += 0.4
    assert not bridge.idle() and len(frames) == 1
    clock.t += 0.1
    assert bridge.idle() and len(frames) == 2 and frames[1].status == frames[0].status
    bridge.step(a(0.1))
    clock.t += 0.3
    assert not bridge.idle(), "a step counts as activity"
    off, _, off_frames, off_clock = make(idle_publish_period_s=0.0)
    off_clock.t += 1e6
    assert not off.idle() and len(off_frames) == 1


def test_a_frame_is_stamped_when_its_state_is_taken_before_its_cameras_render():
    """An idle re-publish renders for 100-200 ms; an action the policy sent meanwhile is applied after it. Stamped
    when sent, that frame of the state before the action carried a stamp after the action's, and the policy took it
    for the action's result. Stamped when its state is taken, it is older than the action, and the control loop
    skips it (test_control_loop: an observation measured before the previous action)."""
    order: list[str] = []

    class OrderSim(FakeSim):
        def render(self, width: int, height: int, camera: str) -> np.ndarray:
            order.append("render")
            return super().render(width, height, camera)

    stamps = itertools.count(1000, 1000)

    def stamp_clock() -> int:
        order.append("stamp")
        return next(stamps)

    bridge, _, frames, clock = make(sim=OrderSim(), render=RenderSpec(width=4, height=3), idle_publish_period_s=0.5,
                                    stamp_clock=stamp_clock)
    bridge.step(a(0.1))
    clock.t += 1.0
    assert bridge.idle()
    assert order == ["stamp", "render"] * 3, "each frame's stamp is read before its camera renders"
    assert [f.stamp_ns for f in frames] == [1000, 2000, 3000]
    unstamped, _, plain, _ = make()
    assert unstamped.step(a(0.1)) == "" and [f.stamp_ns for f in plain] == [0, 0], "no stamp clock: no stamp"


def test_an_action_the_gate_drops_is_counted_and_steps_nothing():
    bridge, sim, frames, _ = make()
    assert bridge.step(a(0.1), admit=lambda: ("stale", "stale action dropped: 900 ms old")) == \
        "stale action dropped: 900 ms old"
    assert len(frames) == 1 and not [c for c in sim.calls if c[0] == "step"]
    assert bridge.arm_counts().refused == {"stale": 1} and bridge.arm_counts().applied == 0
    assert bridge.step(a(0.1), admit=lambda: ("", "")) == "" and bridge.arm_counts().applied == 1


def test_render_with_every_frame_and_render_errors_do_not_stop_the_state():
    bridge, _, frames, _ = make(render=RenderSpec(width=4, height=3))
    bridge.step(a(0.1))
    assert frames[-1].image.shape == (3, 4, 3) and frames[-1].image.dtype == np.uint8
    assert int(frames[-1].image[0, 0, 0]) == 1 and not frames[-1].render_error
    sim = FakeSim(fail_render=True)
    bad, _, bad_frames, _ = make(sim=sim, render=RenderSpec())
    assert bad_frames[0].image is None and "no GL" in bad_frames[0].render_error
    assert bad.step(a(0.1)) == "" and bad_frames[-1].status.steps == 1
    # a failed GL context is not tried again (MuJoCo's retry from another thread hung the node): the camera is off
    # and every frame says why
    assert sim.render_calls == 1 and bad_frames[-1].image is None and "camera off" in bad_frames[-1].render_error


class WristFailSim(FakeSim):
    """Renders the primary camera; the ``wrist`` camera raises (as a camera missing from the model does)."""

    def __init__(self) -> None:
        super().__init__()
        self.cameras: list[str] = []

    def render(self, width: int, height: int, camera: str) -> np.ndarray:
        self.cameras.append(camera)
        if camera == "wrist":
            raise ValueError("no camera named 'wrist'")
        return super().render(width, height, camera)


def test_a_failing_wrist_camera_turns_both_cameras_off():
    sim = WristFailSim()
    bridge, _, frames, _ = make(sim=sim, render=RenderSpec(width=4, height=3, camera="corner", wrist_camera="wrist"))
    assert frames[0].image is None and frames[0].wrist_image is None
    assert "camera off" in frames[0].render_error and "'wrist'" in frames[0].render_error
    assert bridge.step(a(0.1)) == "" and frames[-1].status.steps == 1
    assert frames[-1].image is None and frames[-1].wrist_image is None and frames[-1].render_error
    assert sim.cameras == ["corner", "wrist"]  # not tried again


@pytest.mark.skipif(os.environ.get("MUJOCO_GL") != "osmesa", reason="rendering is tested through OSMesa only")
def test_embedded_widowx_renders_the_wrist_camera_beside_the_primary_one() -> None:
    """backend widowx with wrist_camera="wrist": every frame carries both images, same size; without it, none."""
    pytest.importorskip("mujoco")
    frames: list[Frame] = []
    render = RenderSpec(width=32, height=24, camera="primary", wrist_camera="wrist")
    bridge = SimBridge(get_suite("widowx").backend(), frames.append, initial_task="carrot_on_plate", seed=3,
                       render=render)
    assert bridge.step([0.02, 0, 0, 0, 0, 0, 1.0]) == "" and len(frames) == 2
    for frame in frames:
        assert not frame.render_error
        assert frame.image.shape == frame.wrist_image.shape == (24, 32, 3)
        assert frame.image.dtype == frame.wrist_image.dtype == np.uint8
        assert np.abs(frame.image.astype(int) - frame.wrist_image.astype(int)).mean() > 10  # another viewpoint
        assert frame.wrist_image.std() > 0  # not a blank frame
    primary_only: list[Frame] = []
    SimBridge(get_suite("widowx").backend(), primary_only.append, initial_task="carrot_on_plate", seed=3,
              render=RenderSpec(width=32, height=24, camera="primary"))
    assert primary_only[0].image.shape == (24, 32, 3) and primary_only[0].wrist_image is None
    assert np.array_equal(primary_only[0].image, frames[0].image)


def test_frames_hold_a_copy_of_the_state():
    bridge, _, frames, _ = make()
    frames[0].state[0] = 123.0
    bridge.step(a(0.0))
    assert frames[-1].state[0] == 0.0


def test_reset_never_interleaves_with_a_step():
    """Many threads stepping and resetting: every emitted frame has a status consistent with the order of calls."""
    sim = FakeSim(goal=1e9, max_steps=10**9)
    bridge, _, frames, _ = make(sim=sim)
    threads = [threading.Thread(target=lambda: [bridge.step(a(0.001)) for _ in range(200)]) for _ in range(3)]
    threads.append(threading.Thread(target=lambda: [bridge.reset("reach", 0) for _ in range(50)]))
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for prev, cur in itertools.pairwise(frames):
        if cur.status.resets == prev.status.resets:
            assert cur.status.steps == prev.status.steps + 1
        else:
            assert cur.status.resets == prev.status.resets + 1 and cur.status.steps == 0
    assert len(frames) == 1 + 600 + 50


def test_the_suite_registry_rejects_unknown_backends():
    with pytest.raises(ValueError, match="unknown suite 'mujoco'.*'metaworld', 'simpler', 'widowx'"):
        get_suite("mujoco")


def test_metaworld_backend_behind_the_runtime():
    pytest.importorskip("metaworld")
    frames: list[Frame] = []
    bridge = SimBridge(get_suite("metaworld").backend("config/tasks/metaworld.yaml"), frames.append,
                       initial_task="reach", seed=1)
    assert frames[0].state.shape == (39,) and frames[0].status.task == "reach"
    assert bridge.step(a(0.01)) == "" and frames[-1].status.steps == 1
    assert "reach" in bridge.task_keys and bridge.instruction("reach")


def test_estop_of_the_embedded_widowx_refuses_actions_without_stepping_or_echoing() -> None:
    """backend widowx: while widowx_driver's e-stop is engaged an action neither steps, counts nor is echoed (the
    recorder never stores it); the stop survives a reset (latched, as on the real arm); release lets it step."""
    pytest.importorskip("mujoco")
    frames: list[Frame] = []
    echoed: list[int] = []
    bridge = SimBridge(get_suite("widowx").backend(), frames.append, initial_task="carrot_on_plate", seed=3)
    assert bridge.has_estop and bridge.step([0.02, 0, 0, 0, 0, 0, 1.0], applied=lambda: echoed.append(1)) == ""
    assert "ENGAGED" in bridge.estop(True)
    n = len(frames)
    refused = bridge.step([0.02, 0, 0, 0, 0, 0, 1.0], applied=lambda: echoed.append(1))
    assert "e-stop engaged" in refused and len(frames) == n and echoed == [1] and bridge.status().steps == 1
    bridge.reset("stack_cube", 4)
    assert "e-stop engaged" in bridge.step([0.02, 0, 0, 0, 0, 0, 1.0])
    bridge.estop(False)
    assert bridge.step([0.02, 0, 0, 0, 0, 0, 1.0]) == "" and bridge.status().steps == 1
    with pytest.raises(ValueError, match="no emergency stop"):
        SimBridge(FakeSim(), frames.append).estop(True)


def test_actions_refused_soon_after_the_episode_end_count_as_late_not_as_errors():
    """The action in flight when an episode ends is expected (the node logs the first at info, not as an error)."""
    from amf_ros.runtime.sim_bridge import LATE_ACTION_S

    bridge, _, _, clock = make(seed=0)
    assert bridge.step(a(0.2)) == "" and bridge.step(a(0.2)) == ""  # solved: done
    assert bridge.late_refusals() == 0
    assert "is over" in bridge.step(a(0.1)) and bridge.late_refusals() == 1
    assert "is over" in bridge.step(a(0.1)) and bridge.late_refusals() == 2
    assert bridge.step([float("nan")] * 7) and bridge.late_refusals() == 0, "an invalid action is an error"
    clock.t += LATE_ACTION_S + 0.1
    assert "is over" in bridge.step(a(0.1)) and bridge.late_refusals() == 0, "long after the end: the sender ignores it"
    bridge.reset("reach", 0)
    assert bridge.step(a(0.4)) == "" and "is over" in bridge.step(a(0.1)) and bridge.late_refusals() == 1
