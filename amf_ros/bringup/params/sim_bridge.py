"""Parameters of sim_bridge (declared by amf_ros.ros.nodes.sim_bridge; set in config/*.yaml).

sim_bridge hosts a simulated arm behind the topics a real robot uses. Stepping semantics: every EefDeltaAction
received on ``action_topic`` is one environment step; the resulting observation is published at once.
"""

from amf_ros.bringup.params import Param

PARAMS = (
    Param("backend", "metaworld", "Simulator hosted by the bridge: 'metaworld' = the embedded Metaworld suite "
          "(amf_ros.envs.metaworld_suite), 'simpler' = SIMPLER WidowX scenes (amf_ros.envs.simpler, needs "
          "simpler_env).", choices=("metaworld", "simpler")),
    Param("tasks_file", "", "Task set YAML of the backend (keys, instructions, max_steps); empty = the "
          "backend's default (config/tasks/metaworld.yaml for metaworld)."),
    Param("initial_task", "", "Task the arm is reset to at start (empty = the first task of the set)."),
    Param("seed", 0, "First scene seed; a ResetTask request with a negative seed takes the next one of the "
          "sequence seed, seed+1, ...", range=(0, 2**31 - 1)),
    Param("render", False, "Publish a rendered camera image after every reset and step (Metaworld: OSMesa, "
          "about 0.3 s per 128x128 frame on one core, so stepping slows down accordingly)."),
    Param("image_width", 128, "Width of the rendered camera image, pixels.", range=(16, 4096)),
    Param("image_height", 128, "Height of the rendered camera image, pixels.", range=(16, 4096)),
    Param("camera_name", "corner", "Simulator camera to render (Metaworld: corner, corner2, corner3, topview, "
          "behindGripper, gripperPOV)."),
    Param("frame_id", "sim", "header.frame_id of published observations."),
    Param("state_topic", "/amf/observation/state", "Observation state topic (amf_ros/StateVector)."),
    Param("image_topic", "/amf/camera/image_raw", "Camera topic (sensor_msgs/Image rgb8, reliable QoS); "
          "used only when render is true."),
    Param("action_topic", "/amf/action", "Action topic (amf_ros/EefDeltaAction); each message = one step."),
    Param("reset_service", "/amf/sim/reset", "Service (amf_ros/ResetTask) resetting the arm to a task."),
    Param("success_service", "/amf/sim/success", "Service (amf_ros/TaskSuccess) reporting task success."),
    Param("idle_publish_period_s", 0.5, "When no observation was published for this long (no actions "
          "arriving), re-publish the current state stamped with the current time, as a real arm keeps "
          "publishing its joint states; lets late subscribers and the recorder see the topic alive. "
          "0 = never.", range=(0.0, 3600.0)),
)
