"""Stand-in for simpler_env.utils.env.observation_utils (same function name and arguments)."""

_CAMERA_BY_ROBOT = (("google_robot", "overhead_camera"), ("widowx", "3rd_view_camera"))


def get_image_from_maniskill2_obs_dict(env, obs, camera_name=None):
    """RGB image of the robot's evaluation camera from a ManiSkill2 rgbd observation dict."""
    if camera_name is None:
        matches = [cam for robot, cam in _CAMERA_BY_ROBOT if robot in env.robot_uid]
        if not matches:
            raise NotImplementedError(env.robot_uid)
        camera_name = matches[0]
    return obs["image"][camera_name]["rgb"]
