"""Parameters of demo_recorder (declared by amf_ros.ros.nodes.demo_recorder; set in config/*.yaml).

demo_recorder turns teleop/camera/state topics into episodes of the crash-safe store (amf_ros.data), through
the same synchroniser the bag importer uses (amf_ros.data.sync; its pairing rule is documented there).
"""

from amf_ros.bringup.params import Param

PARAMS = (
    Param("dataset_dir", "runs/dataset", "Episode store directory (created if missing)."),
    Param("tasks_file", "", "Task set YAML ({tasks: [{key, instruction}]}): fills an empty StartEpisode "
          "instruction and rejects unknown task keys; empty = accept any task, instruction required."),
    Param("robot", "", "Robot name written into every episode's metadata (e.g. 'metaworld', 'widowx250s')."),
    Param("control_rate_hz", 5.0, "Sampling rate of sync_mode 'tick', Hz (BridgeData: 5); also stored as the "
          "episode's control rate.", range=(0.1, 1000.0)),
    Param("sync_mode", "tick", "'tick' = one step per control tick with the newest action of the tick "
          "interval; 'on_action' = one step per action message. Either way each action is stored with the "
          "newest observation stamped at or before it.", choices=("tick", "on_action")),
    Param("aggregate", "latest", "Tick mode with faster teleop: 'latest' action of the interval, or "
          "'sum_delta' = sum of the xyz/rpy deltas with the newest gripper.", choices=("latest", "sum_delta")),
    Param("max_obs_age_s", 1.0, "A step whose observation is older than this before its action is skipped "
          "(counted in the episode's sync_stats), s.", range=(0.001, 3600.0)),
    Param("max_delay_s", 0.5, "Wait at most this long (stream time) for lagging observation streams before "
          "deciding a step, s.", range=(0.0, 60.0)),
    Param("action_topic", "/amf/action", "Teleop action topic."),
    Param("action_type", "eef_delta", "Message type of action_topic: 'eef_delta' = amf_ros/EefDeltaAction; "
          "'twist_stamped' = geometry_msgs/TwistStamped velocities (m/s, rad/s) times the control period, "
          "gripper from twist_gripper.", choices=("eef_delta", "twist_stamped")),
    Param("twist_gripper", 1.0, "Gripper value (1 = open) stored with twist_stamped actions.",
          range=(0.0, 1.0)),
    Param("state_topic", "/amf/observation/state", "Robot state topic (empty = record no state)."),
    Param("state_type", "state_vector", "Message type of state_topic: 'state_vector' = amf_ros/StateVector; "
          "'joint_state' = sensor_msgs/JointState positions (e.g. /wx250s/joint_states); 'widowx_proprio' = "
          "JointState converted to Octo's 8-D WidowX proprio (amf_ros.robots.widowx).",
          choices=("state_vector", "joint_state", "widowx_proprio")),
    Param("image_topics", [], "Camera topics (sensor_msgs/Image, reliable QoS); empty = no images.",
          type="string_array"),
    Param("image_keys", [], "Observation key of each camera topic, e.g. image_primary, image_wrist (empty = "
          "image_primary, image_1, ...).", type="string_array"),
    Param("image_queue_depth", 30, "Subscription queue of each camera (reliable, keep-last): images the node "
          "may fall behind by before the oldest is dropped (30 = 1 s of a 30 Hz camera).", range=(1, 1000)),
    Param("image_codec", "png", "How images are stored: png (lossless), jpeg or raw.",
          choices=("png", "jpeg", "raw")),
    Param("jpeg_quality", 95, "JPEG quality when image_codec is jpeg.", range=(1, 100)),
    Param("chunk_steps", 25, "Steps per chunk file = the most steps a crash can lose.", range=(1, 100000)),
    Param("topic_timeout_s", 2.0, "StartEpisode fails unless every observation topic delivered a message within "
          "this time and the action topic has a publisher, s.", range=(0.01, 3600.0)),
    Param("end_quiet_s", 0.3, "EndEpisode first waits for messages still in flight: a topic is settled when its "
          "newest message is stamped after the request or nothing arrived on it for this long, s.",
          range=(0.0, 10.0)),
    Param("end_timeout_s", 1.0, "Longest EndEpisode waits for topics to settle before it commits, s.",
          range=(0.0, 60.0)),
    Param("on_partial", "recover", "At start, what to do with episodes left partial by a crash: 'recover' = "
          "commit their complete chunks (meta.recovered = true, success = null), 'ignore' = leave them and log "
          "them, 'discard' = delete them.", choices=("recover", "ignore", "discard")),
    Param("recover_min_age_s", 10.0, "Only partial episodes untouched for this long are recovered or discarded "
          "(a younger one may belong to a live recorder), s.", range=(0.0, 1e9)),
    Param("status_period_s", 1.0, "Period of the latched status re-publication (topic ages, steps), s.",
          range=(0.05, 3600.0)),
    Param("status_topic", "/amf/recorder/status", "Latched status topic (amf_ros/RecorderStatus)."),
    Param("episodes_topic", "/amf/episodes", "Topic announcing each committed episode (amf_ros/EpisodeInfo)."),
    Param("start_service", "/amf/recorder/start_episode", "StartEpisode service name."),
    Param("end_service", "/amf/recorder/end_episode", "EndEpisode service name."),
)
