"""Parameters of scripted_teleop (declared by amf_ros.ros.nodes.scripted_teleop; set in config/sim.yaml).

scripted_teleop stands in for the human operator of the embedded simulation: when the recorder's latched
status shows a new episode, it drives the arm with that task's scripted expert and ends the episode.
"""

from amf_ros.bringup.params import Param

PARAMS = (
    Param("tasks_file", "", "Metaworld task set YAML (keys, env names, max_steps); empty = "
          "config/tasks/metaworld.yaml."),
    Param("control_rate_hz", 5.0, "Rate at which the operator publishes actions, Hz (one action per fresh "
          "observation at most; BridgeData: 5).", range=(0.1, 1000.0)),
    Param("max_steps", 0, "Actions per episode before the operator gives up and ends it (0 = the task's "
          "max_steps from the task set).", range=(0, 100000)),
    Param("noise_std", 0.0, "Std of Gaussian noise added to the expert's native action (the paper's noisy "
          "experts); 0 = the exact expert.", range=(0.0, 10.0)),
    Param("seed", 0, "Seed of the action noise.", range=(0, 2**31 - 1)),
    Param("end_episode", True, "Call EndEpisode (success from the simulator) when the task is solved or "
          "max_steps actions were sent, like an operator pressing 'done'."),
    Param("start_timeout_s", 5.0, "Give up an episode (EndEpisode with discard) when no fresh observation "
          "arrives within this time after it started, s.", range=(0.1, 600.0)),
    Param("state_topic", "/amf/observation/state", "Observation topic (amf_ros/StateVector) the expert reads."),
    Param("action_topic", "/amf/action", "Teleop action topic (amf_ros/EefDeltaAction)."),
    Param("status_topic", "/amf/recorder/status", "Latched recorder status (amf_ros/RecorderStatus)."),
    Param("end_episode_service", "/amf/recorder/end_episode", "Recorder service (amf_ros/EndEpisode)."),
    Param("success_service", "/amf/sim/success", "Simulator success service (amf_ros/TaskSuccess), asked "
          "before every action."),
)
