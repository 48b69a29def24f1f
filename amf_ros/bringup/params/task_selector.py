"""Parameters of task_selector (declared by amf_ros.ros.nodes.task_selector; set in config/*.yaml)."""

from __future__ import annotations

from dataclasses import dataclass

from amf_ros.bringup.params import param, workspace_param
from amf_ros.bringup.params._octo_trunk import OctoTrunkParams
from amf_ros.core.selection import BATCH_CONDITIONING
from amf_ros.core.selectors import SELECTOR_NAMES


@dataclass(frozen=True)
class TaskSelectorParams(OctoTrunkParams):
    """Every ROS parameter of task_selector with its default, description and range (the single source of all three;
    the node declares them from here, `ros2 param describe` shows them)."""

    workspace: str = workspace_param()
    selector: str = param(
        "amf",
        "Task selector (amf_ros.core.selectors.make_selector name). The peer rules (amf_ros.core.peer_selectors) "
        "start with a warm start (each task once), then score every task on states of its recorded episodes: "
        "diversity (k-center greedy) and dropout (MC-dropout prior entropy) with the loaded policy; vfd, action_l2 "
        "and gu (SAVE's ensemble disagreement) with the loaded checkpoint's ensemble members, which policy_server "
        "writes with ensemble_members >= 2 (a checkpoint without them: ok=false saying so; use selection_policy "
        "'latest'). progress (a learning-progress rival, amf_ros/core/progress.py) needs no policy: after the warm "
        "start it picks the task with the largest predicted success gain per demonstration, from the run_policy "
        "outcomes on outcomes_topic grouped by announced checkpoint (without outcomes every task scores the "
        "prior's gain and ties are drawn at random).",
        choices=SELECTOR_NAMES,
    )
    tasks: tuple[str, ...] = param(
        (), "Candidate task keys (empty = every task of tasks_file, else of the checkpoint). A task the policy does "
        "not know is scored as a task without data and learned at the next fine-tune.", type="string_array"
    )
    tasks_file: str = param("", "Task set YAML (keys and instructions): the candidates when 'tasks' is empty; empty "
                            "= the checkpoint's own task list.")
    checkpoint: str = param(
        "",
        "Checkpoint directory to load first (empty = newest under checkpoint_dir); backend octo: the Octo "
        "checkpoint directory.",
    )
    checkpoint_dir: str = param("checkpoints", "Where policy_server writes checkpoints (newest is loaded).")
    dataset_dir: str = param("dataset", "Episode store read for demo counts and embeddings.")
    checkpoint_topic: str = param("checkpoint", "Latched topic on which new checkpoints are announced.")
    assignment_timeout_s: float = param(
        300.0,
        "Fleet (several robots, each asking with its name in NextTask.robot): a task given to a robot counts as a "
        "demonstration about to exist for the other robots' requests (AMF conditions on it, as on a batch pick) "
        "until the robot saves an episode of it (episode_topics), asks again, or this many seconds pass; 0 = "
        "independent per-robot selection.",
        range=(0.0, 86400.0),
    )
    episode_topics: tuple[str, ...] = param(
        ("episodes",),
        "EpisodeInfo topics of the robots' recorders; the robot of a topic is its namespace's last part "
        "(/robot1/episodes -> robot1, the NextTask.robot it asks with). A saved episode ends that robot's "
        "assignment of the task.",
        type="string_array",
    )
    decision_topic: str = param(
        "decision",
        "Latched topic (amf_ros/TaskDecision) announcing every next_task answer, whoever asked: the operator "
        "console shows decisions from it without asking (an ask advances the selector's random draws).",
    )
    seed: int = param(
        0, "Random seed of the selector (tie breaks, uniform draws) and of embeddings.", range=(0, 2147483647)
    )
    max_batch_size: int = param(
        16,
        "Largest NextTask batch_size answered; a request above it, or above the number of candidate tasks, gets "
        "ok=false (each batch member costs one criterion pass: unbounded batches would stall the node).",
        range=(1, 1024),
    )
    form: str = param(
        "log_variance",
        "AMF criterion form (App. E): summed log posterior variance or variance.",
        choices=("log_variance", "variance"),
    )
    noise_var: float = param(
        1.0, "Observation noise variance of the GP view of the policy.", range=(1e-09, 1000000000.0)
    )
    prior_var: float = param(
        1.0, "Prior variance of the GP view (scales the loss-gradient kernel).", range=(1e-09, 1000000000.0)
    )
    replay_dir: str = param(
        "",
        "selector amf: the pre-training demonstrations policy_server replays (its replay_dir: an episode store, or "
        "a camera policy's stored states); empty = none.",
    )
    replay_fraction: float = param(
        0.0,
        "selector amf: policy_server's replay_fraction. > 0 = replay-aware AMF (core/amf_nn.py): the criterion "
        "conditions on the replayed episodes at their share of the fine-tuning minibatches and weighs the recorded "
        "ones by the rest, as the fine-tune does; 0 = the paper's criterion. Needs replay_dir and backend native "
        "(the state or the camera policy).",
        range=(0.0, 0.99),
    )
    batch_conditioning: str = param(
        "hallucinated",
        "selector amf: what a task picked earlier in the same request (batch_size > 1), or assigned to another "
        "robot and not recorded yet, counts as while the next pick is scored: 'hallucinated' = its validation "
        "demonstration, the target states themselves (Algorithm 1, the paper's); 'recorded' = its latest recorded "
        "demonstration outside the validation set (the hallucination while it has none), which settles the task "
        "less, so a batch divides like one-at-a-time selection (docs/metaworld.md, 'A batch that conditions on "
        "what a demonstration will be').",
        choices=BATCH_CONDITIONING,
    )
    frames_per_episode: int = param(
        16,
        "Evenly spaced steps of every recorded episode used as data and target points of the criterion (the "
        "Metaworld benchmark's frames_per_demo; bounds the cost).",
        range=(1, 100000),
    )
    max_points: int = param(
        0,
        "Cap on the total number of data points of the criterion (0 = none, exact): with many episodes, fewer "
        "evenly spaced frames per episode are used (at least 1). Without a cap the criterion is kept between "
        "requests and each new episode is conditioned on once (a rank-m update, core/incremental.py), so a "
        "request costs milliseconds at any store size; a new selection policy rebuilds it.",
        range=(0, 1000000),
    )
    selection_policy: str = param(
        "latest",
        "Which policy copy feeds the criterion: 'latest' = reloaded on every /amf/checkpoint; 'frozen' = the first "
        "checkpoint loaded on this checkpoint_dir (the newest at the first start, else the first announced), never "
        "reloaded and kept across restarts in <checkpoint_dir>/selection_frozen.json (delete it to freeze the "
        "newest again; amf bench metaworld's selection_copy 'frozen').",
        choices=("latest", "frozen"),
    )
    targets: str = param(
        "warm",
        "Validation set of the criterion (App. M.3.4, as amf bench metaworld): 'warm' = the first episode of "
        "each task (targets and hallucinated demonstrations), 'all' = every episode.",
        choices=("warm", "all"),
    )
    condition_on_data: bool = param(
        True,
        "Condition the criterion's posterior on the episodes outside the validation set (as amf bench "
        "metaworld's condition_on_data).",
    )
    action_space: str = param(
        "metaworld",
        "Which recorded action labels the loss-gradient embeddings: 'metaworld' = the native 4-D action "
        "(converted back from the recorded EefDeltaAction), 'eef7' = the 7-D EefDeltaAction.",
        choices=("metaworld", "eef7"),
    )
    pretrain_counts: bool = param(
        True,
        "Pass the checkpoint's pre-training demonstration counts (its pretrain.json) to the selector; only the "
        "privileged rebalancing baseline uses them.",
    )
    outcomes_topic: str = param(
        "policy/outcomes",
        "policy_server's finished run_policy goals (amf_ros/TaskStatus): with the checkpoint announcements, the "
        "evaluation history of selector 'progress' (each goal is one evaluation episode of the checkpoint acting "
        "at its stamp; kept in <checkpoint_dir>/progress_history.jsonl, so a restart keeps it).",
    )
    progress_ucb: float = param(
        1.0,
        "Selector 'progress': the slope it scores is mean + progress_ucb x sd of the Kalman-filtered improvement "
        "per demonstration (0 = the mean; amf_ros/core/progress.py).",
        range=(0.0, 100.0),
    )
    progress_slope_prior_sd: float = param(
        0.25, "Selector 'progress': prior sd of a task's improvement in success per demonstration.",
        range=(1e-06, 10.0),
    )
    progress_level_process_var: float = param(
        0.0025, "Selector 'progress': drift variance of a task's success level per evaluated checkpoint.",
        range=(0.0, 1.0),
    )
    progress_slope_process_var: float = param(
        0.001, "Selector 'progress': drift variance of a task's slope per demonstration of that task.",
        range=(0.0, 1.0),
    )
    progress_obs_var_floor: float = param(
        0.001,
        "Selector 'progress': floor of the observation variance p(1-p)/n of a success rate over n episodes.",
        range=(1e-09, 1.0),
    )
    torch_threads: int = param(
        1,
        "torch intra-op threads of this process (0 = torch's default). 1 keeps several nodes on a 2-core "
        "machine from oversubscribing the CPU.",
        range=(0, 256),
    )
    # --- backend octo ---------------------------------------------------------------------------
    backend: str = param(
        "native",
        "Policy copy: 'native' = TaskConditionedPolicy checkpoints; 'octo' = Octo head checkpoints (round_NNNN "
        "under checkpoint_dir, written by policy_server) on the frozen Octo trunk's cached frame embeddings; "
        "'checkpoint' is then the Octo checkpoint directory (the trunk is loaded only for frames policy_server "
        "has not embedded yet).",
        choices=("native", "octo"),
    )
