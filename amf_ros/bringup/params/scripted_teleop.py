"""Parameters of scripted_teleop (declared by amf_ros.ros.nodes.scripted_teleop; set in config/sim.yaml).

scripted_teleop stands in for the human operator of the embedded simulation: when the recorder's latched
status shows a new episode, it puts the simulator on that task if needed (one reset), drives the arm with that
task's scripted expert and ends the episode.
"""

from __future__ import annotations

from dataclasses import dataclass

from amf_ros.bringup.params import action_valid_for_param, param
from amf_ros.envs.suites import TRAINING_SUITES


@dataclass(frozen=True)
class ScriptedTeleopParams:
    """Every ROS parameter of scripted_teleop with its default, description and range (the single source of all three;
    the node declares them from here, `ros2 param describe` shows them)."""

    experts: str = param(
        "metaworld",
        "Scripted experts of the simulated arm (= sim_bridge backend): 'metaworld' (Metaworld's scripted policies "
        "on the 39-D observation) or 'widowx' (the embedded WidowX's grasp-and-place expert on the 14-D "
        "observation: proprio, object and receptacle positions).",
        choices=TRAINING_SUITES,
    )
    tasks_file: str = param(
        "", "Task set YAML of the experts (keys, max_steps); empty = the experts' default task set."
    )
    control_rate_hz: float = param(
        5.0,
        "Rate at which the operator publishes actions, Hz (one action per fresh observation at most; BridgeData: 5).",
        range=(0.1, 1000.0),
    )
    max_steps: int = param(
        0,
        "Actions per episode before the operator gives up and ends it (0 = the task's max_steps from the task set).",
        range=(0, 100000),
    )
    noise_std: float = param(
        0.0,
        "Std of Gaussian noise added to the expert's action (Metaworld: native units; WidowX: metres on the "
        "translation), the paper's noisy experts; 0 = the exact expert.",
        range=(0.0, 10.0),
    )
    seed: int = param(0, "Seed of the action noise.", range=(0, 2147483647))
    end_episode: bool = param(
        True,
        "Call EndEpisode (success from the simulator's task status) when the task is solved or done, or max_steps "
        "actions were sent, like an operator pressing 'done'.",
    )
    start_timeout_s: float = param(
        5.0,
        "Bound on each wait before the first action (a task status newer than the episode start, the reset reply, "
        "the status after the reset, the first observation), s; past it the episode is ended with discard.",
        range=(0.1, 600.0),
    )
    state_topic: str = param("observation/state", "Observation topic (amf_ros/StateVector) the expert reads.")
    action_topic: str = param("action", "Teleop action topic (amf_ros/EefDeltaAction).")
    action_valid_for_s: float = action_valid_for_param()
    stop_topic: str = param(
        "stop",
        "ArmStop topic (amf_ros/ArmStop): a stop from another node ends the current demonstration (discarded).",
    )
    call_timeout_s: float = param(
        5.0,
        "Bound on every service call (EndEpisode, the sim reset): an unanswered call is abandoned with an error "
        "line (the episode's fate is then the recorder's: it recovers what it wrote).",
        range=(0.1, 600.0),
    )
    status_topic: str = param("recorder/status", "Latched recorder status (amf_ros/RecorderStatus).")
    end_episode_service: str = param("recorder/end_episode", "Recorder service (amf_ros/EndEpisode).")
    task_status_topic: str = param(
        "sim/status",
        "Simulator's latched task status (amf_ros/TaskStatus): decides reset, when to end and the success reported.",
    )
    reset_service: str = param(
        "sim/reset",
        "Simulator reset service (amf_ros/ResetTask), called once (seed -1) at an episode start when the simulator "
        "is on another task or its scene was already used.",
    )
