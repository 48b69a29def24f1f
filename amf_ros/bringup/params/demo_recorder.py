"""Parameters of demo_recorder (declared by amf_ros.ros.nodes.demo_recorder; set in config/*.yaml).

demo_recorder turns teleop/camera/state topics into episodes of the crash-safe store (amf_ros.data), through
the same synchroniser the bag importer uses (amf_ros.data.sync; its pairing rule is documented there).
"""

from __future__ import annotations

from dataclasses import dataclass

from amf_ros.bringup.params import param, workspace_param


@dataclass(frozen=True)
class DemoRecorderParams:
    """Every ROS parameter of demo_recorder with its default, description and range (the single source of all three;
    the node declares them from here, `ros2 param describe` shows them)."""

    workspace: str = workspace_param()
    dataset_dir: str = param("dataset", "Episode store directory (created if missing).")
    tasks_file: str = param(
        "",
        "Task set YAML ({tasks: [{key, instruction}]}): fills an empty StartEpisode instruction and rejects "
        "unknown task keys; empty = accept any task, instruction required.",
    )
    robot: str = param("", "Robot name written into every episode's metadata (e.g. 'metaworld', 'widowx250s').")
    control_rate_hz: float = param(
        5.0,
        "Sampling rate of sync_mode 'tick', Hz (BridgeData: 5); also stored as the episode's control rate.",
        range=(0.1, 1000.0),
    )
    sync_mode: str = param(
        "tick",
        "'tick' = one step per control tick with the newest action of the tick interval; 'on_action' = one "
        "step per action message. Either way each action is stored with the newest observation stamped at or "
        "before it.",
        choices=("tick", "on_action"),
    )
    aggregate: str = param(
        "latest",
        "Tick mode with faster teleop: 'latest' action of the interval, or 'sum_delta' = sum of the xyz/rpy "
        "deltas with the newest gripper.",
        choices=("latest", "sum_delta"),
    )
    max_obs_age_s: float = param(
        1.0,
        "A step whose observation is older than this before its action is skipped (counted in the episode's "
        "sync_stats), s.",
        range=(0.001, 3600.0),
    )
    max_delay_s: float = param(
        0.5,
        "Wait at most this long (stream time) for lagging observation streams before deciding a step, s.",
        range=(0.0, 60.0),
    )
    action_topic: str = param("action", "Teleop action topic.")
    action_type: str = param(
        "eef_delta",
        "Message type of action_topic: 'eef_delta' = amf_ros/EefDeltaAction; 'twist_stamped' = "
        "geometry_msgs/TwistStamped velocities (m/s, rad/s) times the control period, gripper from "
        "twist_gripper.",
        choices=("eef_delta", "twist_stamped"),
    )
    twist_gripper: float = param(1.0, "Gripper value (1 = open) stored with twist_stamped actions.", range=(0.0, 1.0))
    state_topic: str = param("observation/state", "Robot state topic (empty = record no state).")
    state_type: str = param(
        "state_vector",
        "Message type of state_topic: 'state_vector' = amf_ros/StateVector; 'joint_state' = "
        "sensor_msgs/JointState positions (e.g. /wx250s/joint_states); 'widowx_proprio' = JointState converted "
        "to Octo's 8-D WidowX proprio (amf_ros.robots.widowx).",
        choices=("state_vector", "joint_state", "widowx_proprio"),
    )
    image_topics: tuple[str, ...] = param(
        (), "Camera topics (sensor_msgs/Image, reliable QoS); empty = no images.", type="string_array"
    )
    image_keys: tuple[str, ...] = param(
        (),
        "Observation key of each camera topic, e.g. image_primary, image_wrist (empty = image_primary, "
        "image_1, ...).",
        type="string_array",
    )
    image_queue_depth: int = param(
        30,
        "Subscription queue of each camera (reliable, keep-last): images the node may fall behind by before "
        "the oldest is dropped (30 = 1 s of a 30 Hz camera).",
        range=(1, 1000),
    )
    image_codec: str = param(
        "png",
        "How images are stored: png (lossless), jpeg, raw, or video per chunk: h264 (libx264) or av1 (libsvtav1), "
        "encoded on the writer's thread, crash-safe like the others.",
        choices=("png", "jpeg", "raw", "h264", "av1"),
    )
    jpeg_quality: int = param(95, "JPEG quality when image_codec is jpeg.", range=(1, 100))
    video_crf: int = param(
        23, "Constant quality of h264 (0-51) / av1 (0-63) video: lower is better and larger.", range=(0, 63)
    )
    chunk_steps: int = param(25, "Steps per chunk file = the most steps a crash can lose.", range=(1, 100000))
    topic_timeout_s: float = param(
        2.0,
        "StartEpisode fails unless every observation topic delivered a message within this time and the action "
        "topic has a publisher, s.",
        range=(0.01, 3600.0),
    )
    end_quiet_s: float = param(
        0.3,
        "EndEpisode first waits for messages still in flight: a topic is settled when its newest message is "
        "stamped at/after the request or nothing arrived on it for this long since the request, s.",
        range=(0.0, 10.0),
    )
    end_timeout_s: float = param(
        1.0,
        "Longest EndEpisode waits for topics to settle before it commits what has arrived, s (a wait woken by "
        "each message, not a poll; the response follows after this wait plus the commit).",
        range=(0.0, 60.0),
    )
    on_partial: str = param(
        "recover",
        "What to do with episodes left partial by a crash or a failed commit, at start and then every "
        "recover_sweep_period_s: 'recover' = commit their complete chunks (meta.recovered = true; success from "
        "the operator's verdict if the commit got that far and no step it judged was lost, else null), 'ignore' = "
        "leave them (logged at start), "
        "'discard' = delete them. A partial whose writer is alive (writer.lock held) is never touched.",
        choices=("recover", "ignore", "discard"),
    )
    recover_min_age_s: float = param(
        10.0,
        "Partial episodes without a writer.lock (written by an older version) are recovered or discarded only "
        "once untouched for this long (a younger one may belong to a live recorder), s. Those with a free "
        "writer.lock are dead for sure and handled at any age.",
        range=(0.0, 1000000000.0),
    )
    recover_sweep_period_s: float = param(
        30.0,
        "Period of the sweep that applies on_partial to partial episodes other than the open one (e.g. left "
        "by a recorder that died after this one started), s; 0 = only at start. Runs in its own callback "
        "group: a recovery never delays recording.",
        range=(0.0, 86400.0),
    )
    status_period_s: float = param(
        1.0, "Period of the latched status re-publication (topic ages, steps), s.", range=(0.05, 3600.0)
    )
    min_rate_fraction: float = param(
        0.8,
        "A recorded stream whose rate over the last rate_window_s falls below this fraction of its nominal rate "
        "(the rate heard before the episode or over its first rate_window_s, the larger) is reported mid-episode: "
        "a warning in the log and in the status (rate_warnings). Every episode's metadata keeps each stream's "
        "measured rate, gaps, dropped and duplicated samples (extra.streams). 0 = no warnings.",
        range=(0.0, 0.99),
    )
    rate_window_s: float = param(2.0, "Window of the measured stream rates, s.", range=(0.1, 60.0))
    status_topic: str = param("recorder/status", "Latched status topic (amf_ros/RecorderStatus).")
    arm_status_topic: str = param(
        "arm/status",
        "The arm's latched status (amf_ros/ArmStatus, from sim_bridge or widowx_driver): while its e-stop is engaged "
        "StartEpisode is refused, and an episode during which it engaged is discarded at EndEpisode (ok=false, "
        "saying so; an interrupted demonstration is never stored). Empty = not watched.",
    )
    control_topic: str = param(
        "control",
        "policy_server's latched amf_ros/ControlSource (who commands the arm during a run_policy goal): every recorded "
        "step gets the 'actor' column (0 = a person, 1 = the policy, by its action's stamp), so a goal recorded while "
        "a person took over keeps both and fine-tuning trains on the person's steps. Empty = no column (all human).",
    )
    label_hold_s: float = param(
        0.5,
        "A step of a labelled episode is written once a message stamped this long after its action has arrived (or "
        "at EndEpisode), so that a control change taken after the actions it precedes still labels them, s.",
        range=(0.0, 10.0),
    )
    episodes_topic: str = param("episodes", "Topic announcing each committed episode (amf_ros/EpisodeInfo).")
    start_service: str = param("recorder/start_episode", "StartEpisode service name.")
    end_service: str = param("recorder/end_episode", "EndEpisode service name.")
    rerecord_service: str = param(
        "recorder/rerecord",
        "Re-record service (amf_ros/StartEpisode type): discards the episode being recorded and starts a new one "
        "of the same task (or of the request's task) in one call; a request that could not start is refused "
        "before anything is discarded.",
    )
