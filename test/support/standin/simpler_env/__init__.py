"""Stand-in for SimplerEnv's ``simpler_env`` package, following its interface exactly (tests only).

Same names as simpler-env/SimplerEnv main (4ab7178): ``ENVIRONMENTS``, ``ENVIRONMENT_MAP``, ``make(task_name,
**kwargs)`` returning an env with ``reset(seed=None, options=None) -> (obs, info)`` (``info["episode_id"]``),
``step(a7) -> (obs, reward, terminated, truncated, info)`` (terminated = success, truncated at the time limit),
``get_language_instruction()``, ``is_final_subtask()``, ``robot_uid`` and ManiSkill2's rgbd observation layout.

Physics are a toy: the TCP moves by the action's xyz (base frame, clipped to 5 cm); the task succeeds when the
TCP is within 2 cm (xy) of the episode's target and the gripper command is closed (< 0). The camera is a top-down
orthographic 480x640 picture: target = red square, TCP = green square, so an image policy can solve it.
"""

from __future__ import annotations

import os

import numpy as np

ENVIRONMENTS = ["google_robot_pick_coke_can", "widowx_spoon_on_towel", "widowx_carrot_on_plate",
                "widowx_stack_cube", "widowx_put_eggplant_in_basket"]
ENVIRONMENT_MAP = {
    "google_robot_pick_coke_can": ("GraspSingleOpenedCokeCanInScene-v0", {}),
    "widowx_spoon_on_towel": ("PutSpoonOnTableClothInScene-v0", {}),
    "widowx_carrot_on_plate": ("PutCarrotOnPlateInScene-v0", {}),
    "widowx_stack_cube": ("StackGreenCubeOnYellowCubeBakedTexInScene-v0", {}),
    "widowx_put_eggplant_in_basket": ("PutEggplantInBasketScene-v0", {}),
}
_STEPS = {"PutSpoonOnTableClothInScene-v0": 60, "PutCarrotOnPlateInScene-v0": 60,
          "StackGreenCubeOnYellowCubeBakedTexInScene-v0": 60, "PutEggplantInBasketScene-v0": 120}
_INSTR = {"PutSpoonOnTableClothInScene-v0": "put the spoon on the towel",
          "PutCarrotOnPlateInScene-v0": "put carrot on plate",
          "StackGreenCubeOnYellowCubeBakedTexInScene-v0": "stack the green block on the yellow block",
          "PutEggplantInBasketScene-v0": "put eggplant into yellow basket"}
X_RANGE, Y_RANGE = (0.1, 0.5), (-0.25, 0.25)
made: list = []


def to_pixel(xy):
    """Base-frame xy (m) -> (row, col) in the 480x640 top-down image."""
    row = int(round((xy[0] - X_RANGE[0]) / (X_RANGE[1] - X_RANGE[0]) * 479))
    col = int(round((xy[1] - Y_RANGE[0]) / (Y_RANGE[1] - Y_RANGE[0]) * 639))
    return row, col


def from_pixel(row, col):
    return np.array([X_RANGE[0] + row / 479 * (X_RANGE[1] - X_RANGE[0]),
                     Y_RANGE[0] + col / 639 * (Y_RANGE[1] - Y_RANGE[0])])


class _StandInEnv:
    robot_uid = "widowx"

    def __init__(self, env_id, **kwargs):
        self.env_id = env_id
        self.kwargs = kwargs
        self.max_episode_steps = _STEPS[env_id]
        self._tcp = np.zeros(3)
        self._target = np.zeros(2)
        self._grip = 1.0
        self._steps = 0
        self.closed = False

    def _layout(self, episode_id):
        k = episode_id % 24  # 24 layouts; odd ids put the target at y > 0
        return np.array([0.2 + 0.02 * (k // 2), -0.1 + 0.2 * (k % 2)])

    def _obs(self):
        img = np.full((480, 640, 3), 90, np.uint8)
        r, c = to_pixel(self._target)
        img[max(r - 3, 0): r + 4, max(c - 3, 0): c + 4] = (255, 0, 0)
        r, c = to_pixel(self._tcp[:2])
        img[max(r - 3, 0): r + 4, max(c - 3, 0): c + 4] = (0, 255, 0)
        finger = 0.015 + (self._grip + 1) / 2 * 0.022
        return {"agent": {"qpos": np.array([0, 0, 0, 0, 0, 0, finger, finger]), "qvel": np.zeros(8),
                          "base_pose": np.array([0.0, 0, 0, 1, 0, 0, 0])},
                "extra": {"tcp_pose": np.concatenate([self._tcp, [1, 0, 0, 0]])},
                "camera_param": {},
                "image": {"3rd_view_camera": {"rgb": img, "depth": np.zeros((480, 640, 1), np.float32)}}}

    def reset(self, seed=None, options=None):
        options = dict(options or {})
        rng = np.random.RandomState(seed)
        eid = options.get("obj_init_options", {}).get("episode_id", rng.randint(24))
        self._target = self._layout(eid)
        self._tcp = np.array([0.3, 0.0, 0.15])
        self._grip, self._steps = 1.0, 0
        return self._obs(), {"episode_id": eid}

    def step(self, action):
        a = np.asarray(action, float)
        assert a.shape == (7,), a.shape
        self._tcp = self._tcp + np.clip(a[:3], -0.05, 0.05)
        self._grip = float(np.clip(a[6], -1, 1))
        self._steps += 1
        success = bool(np.linalg.norm(self._tcp[:2] - self._target) < 0.02 and self._grip < 0)
        truncated = self._steps >= self.max_episode_steps
        info = {"elapsed_steps": self._steps, "success": success, "episode_stats": {}}
        return self._obs(), float(success), success, truncated, info

    def get_language_instruction(self, **kwargs):
        return _INSTR[self.env_id]

    def is_final_subtask(self):
        return True

    def close(self):
        self.closed = True


def make(task_name, **kwargs):
    """Creates simulated eval environment from task name."""
    assert task_name in ENVIRONMENTS, f"Task {task_name} is not supported. Environments: \n {ENVIRONMENTS}"
    if os.environ.get("SIMPLER_STANDIN_NO_VULKAN") == "1":  # what SAPIEN raises on a machine without Vulkan
        raise RuntimeError("vk::Instance::enumeratePhysicalDevices: ErrorInitializationFailed")
    env_name, env_kwargs = ENVIRONMENT_MAP[task_name]
    env_kwargs = dict(env_kwargs, obs_mode="rgbd", prepackaged_config=True, **kwargs)
    env = _StandInEnv(env_name, **env_kwargs)
    made.append(env)
    return env
