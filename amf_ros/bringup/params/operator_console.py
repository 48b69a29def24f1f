"""Parameters of operator_console (declared by amf_ros.ros.nodes.operator_console; set in config/*.yaml).

operator_console serves one web page beside the robot: which task to demonstrate next and why, the policy, the
recorder and its streams, the camera, and buttons for the whole round (docs/console.md).
"""

from __future__ import annotations

from dataclasses import dataclass

from amf_ros.bringup.params import param


@dataclass(frozen=True)
class OperatorConsoleParams:
    """Every ROS parameter of operator_console with its default, description and range (the single source of all
    three; the node declares them from here, `ros2 param describe` shows them)."""

    host: str = param(
        "127.0.0.1",
        "Address the web server binds to. Anything but a loopback address (127.0.0.1, ::1, localhost) needs 'token'.",
    )
    allowed_hosts: tuple[str, ...] = param(
        (),
        "Further host names (or addresses) the page may be opened as: every HTTP and WebSocket request must carry one "
        "of them in its Host header, else 403 (a guard against DNS rebinding). Always accepted: the bound 'host' "
        "(bound to 0.0.0.0 or ::, this machine's host name and fully qualified name), and localhost, 127.0.0.1, ::1 "
        "when it listens on loopback. Add e.g. the robot PC's address or DNS name when others open the page by it.",
        type="string_array",
    )
    port: int = param(8765, "TCP port of the page (0 = any free port, logged at start).", range=(0, 65535))
    token: str = param(
        "",
        "Access token every request must carry (?token=... in the URL); required for a non-loopback host, optional "
        "on loopback. Keep it out of shared YAML files: pass it with -p token:=... or the launch argument.",
    )
    tasks_file: str = param(
        "", "Task set YAML (keys and instructions shown on the page); empty = the tasks of the first decision."
    )
    target_demos: int = param(
        0, "Demonstrations wanted per task, drawn against the counts (0 = no target).", range=(0, 100000)
    )
    auto_ask: bool = param(
        True,
        "Ask next_task again after every saved episode and every new checkpoint, so the page always explains the "
        "current decision (one call per event, never per browser). Every decision anyone asks for is shown anyway "
        "(task_selector's latched decision topic); `amf run --console` turns this off so that watching never "
        "changes the run (an ask advances the selector's random draws).",
    )
    stale_after_s: float = param(
        1.0, "A recorder input stream not heard for this long is shown as stale.", range=(0.05, 3600.0)
    )
    min_rate_fraction: float = param(
        0.5, "A stream below this fraction of its nominal rate (recorder status) is shown as slow.", range=(0.0, 1.0)
    )
    display_rate_hz: float = param(
        2.0,
        "Camera frames per second sent to browsers (newest frame only; faster frames are dropped, never queued).",
        range=(0.1, 30.0),
    )
    drive_display_rate_hz: float = param(
        15.0,
        "Camera frames per second sent to a browser whose Drive panel is on (newest frame only, encoded once for all "
        "browsers; watching browsers still get display_rate_hz). Bounded by the camera's own rate.",
        range=(0.1, 30.0),
    )
    push_period_s: float = param(
        0.2, "How often changed values are pushed to browsers, s.", range=(0.02, 10.0)
    )
    drive_topic: str = param(
        "teleop/console_joy",
        "Where the Drive panel's input goes (sensor_msgs/Joy, the console mapping of docs/console.md): the teleop "
        "node with input:=console turns it into arm actions. The page never publishes on the arm's action topic.",
    )
    drive_rate_hz: float = param(
        20.0, "The driving browser's newest input is republished at this rate while fresh (and at once on a change).",
        range=(1.0, 100.0),
    )
    drive_silence_s: float = param(
        0.5,
        "Nothing is published once the driving browser has sent nothing for this long (the page sends every 50 ms "
        "while anything is held), so the teleop node's own silence rule stops the arm.",
        range=(0.05, 5.0),
    )
    teleop_state_topic: str = param(
        "teleop/state",
        "The teleop node's latched state (std_msgs/String, a JSON object: who drives, deadman held, speed, input "
        "age), shown in the Drive panel.",
    )
    control_topic: str = param(
        "control",
        "Who commands the arm during a run_policy goal (amf_ros/ControlSource, latched, from policy_server's "
        "take-over arbiter), shown as the Drive panel's control badge.",
    )
    image_topics: tuple[str, ...] = param(
        ("camera/image_raw",),
        "Camera topics (sensor_msgs/Image) shown on the page, subscribed best-effort with depth 1 (off the "
        "recorded path).",
        type="string_array",
    )
    watch_nodes: tuple[str, ...] = param(
        ("policy_server", "task_selector", "demo_recorder"),
        "Nodes of this namespace whose liveness the page shows: down (not in the ROS graph, or `amf up`'s "
        "status.json says it exited), not ready with the reason from its latched status (~/status, demo_recorder's "
        "recorder status), or ready.",
        type="string_array",
    )
    status_workspace: str = param(
        "",
        "Workspace (the other nodes' 'workspace') whose graphs/<namespace>/status.json (written by `amf up`) says "
        "why a node is down; empty = the default workspace ($AMF_WORKSPACE, else $ROS_HOME/amf). Absent file: the "
        "ROS graph alone.",
    )
    idle_quiet_topics: tuple[str, ...] = param(
        ("action", "action/applied"),
        "Recorder inputs that only flow while someone commands the arm (teleop actions and their echo): flagged "
        "stale only while an episode is being recorded.",
        type="string_array",
    )
    call_timeout_s: float = param(
        10.0, "Bound on each service call (start, end, re-record, sim reset), s.", range=(0.1, 600.0)
    )
    next_task_timeout_s: float = param(
        120.0, "Bound on a next_task call (the criterion can take seconds on a large store), s.", range=(0.1, 3600.0)
    )
    fine_tune_timeout_s: float = param(
        3600.0, "Bound on a fine-tune goal; past it the goal is cancelled, s.", range=(1.0, 86400.0)
    )
    evaluate_timeout_s: float = param(
        600.0, "Bound on a run_policy goal started by Evaluate; past it the goal is cancelled, s.", range=(1.0, 86400.0)
    )
    next_task_service: str = param("next_task", "task_selector's service (amf_ros/NextTask).")
    decision_topic: str = param("decision", "task_selector's latched decisions (amf_ros/TaskDecision).")
    start_service: str = param("recorder/start_episode", "Recorder service (amf_ros/StartEpisode).")
    end_service: str = param("recorder/end_episode", "Recorder service (amf_ros/EndEpisode).")
    rerecord_service: str = param("recorder/rerecord", "Recorder re-record service (amf_ros/StartEpisode type).")
    status_topic: str = param("recorder/status", "Latched recorder status (amf_ros/RecorderStatus).")
    episodes_topic: str = param("episodes", "Saved-episode announcements (amf_ros/EpisodeInfo).")
    checkpoint_topic: str = param("checkpoint", "Latched checkpoint announcements (amf_ros/CheckpointInfo).")
    fine_tune_action: str = param("fine_tune", "policy_server's fine-tune action (amf_ros/FineTune).")
    run_policy_action: str = param("run_policy", "policy_server's run action (amf_ros/RunPolicy).")
    outcomes_topic: str = param(
        "policy/outcomes", "policy_server's finished run_policy goals (amf_ros/TaskStatus): the success plot."
    )
    stop_topic: str = param("stop", "ArmStop topic (amf_ros/ArmStop) that Stop all publishes on.")
    sim_status_topic: str = param(
        "sim/status", "Simulator task status (amf_ros/TaskStatus); the simulator panel appears only when it exists."
    )
    sim_reset_service: str = param(
        "sim/reset", "Simulator reset (amf_ros/ResetTask): sim-only buttons appear only while it is offered."
    )
