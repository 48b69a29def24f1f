"""Parameters of task_selector (declared by amf_ros.ros.nodes.task_selector; set in config/*.yaml)."""

from amf_ros.bringup.params import Param

OCTO_PARAMS = (
    Param("backend", "native", "Policy copy: 'native' = TaskConditionedPolicy checkpoints; 'octo' = Octo head "
          "checkpoints (round_NNNN under checkpoint_dir, written by policy_server) on the frozen Octo trunk's cached "
          "frame embeddings; 'checkpoint' is then the Octo checkpoint directory (the trunk is loaded only for "
          "frames policy_server has not embedded yet).", choices=("native", "octo")),
    Param("octo_trunk_factory", "amf_ros.policies.octo.trunk:OctoTrunk", "backend octo: 'module:function' called "
          "as f(checkpoint, t5_path=, dataset_name=) -> trunk (default: the real Octo loader)."),
    Param("t5_path", "", "backend octo: local t5-base tokenizer/config directory (empty = Hugging Face cache)."),
    Param("octo_dataset", "bridge_dataset", "backend octo: key of the checkpoint's action statistics."),
    Param("image_key", "image_primary", "backend octo: recorded image stream that is embedded."),
    Param("wrist_image_key", "", "backend octo: recorded wrist image stream (empty = none; as policy_server)."),
    Param("embed_batch_size", 16, "backend octo: frames per trunk call.", range=(1, 4096)),
)

PARAMS = (
    Param("selector", "amf", "Task selector (amf_ros.core.selectors.make_selector name).",
          choices=("amf", "uniform", "round_robin", "rebalancing")),
    Param("tasks", [], "Candidate task keys (empty = every task of the checkpoint / tasks_file).",
          type="string_array"),
    Param("tasks_file", "", "Task set YAML (keys and instructions); empty = the checkpoint's own task list."),
    Param("checkpoint", "", "Checkpoint directory to load first (empty = newest under checkpoint_dir); backend "
          "octo: the Octo checkpoint directory."),
    Param("checkpoint_dir", "runs/checkpoints", "Where policy_server writes checkpoints (newest is loaded)."),
    Param("dataset_dir", "runs/dataset", "Episode store read for demo counts and embeddings."),
    Param("checkpoint_topic", "/amf/checkpoint", "Latched topic on which new checkpoints are announced."),
    Param("seed", 0, "Random seed of the selector (tie breaks, uniform draws) and of embeddings.",
          range=(0, 2**31 - 1)),
    Param("form", "log_variance", "AMF criterion form (App. E): summed log posterior variance or variance.",
          choices=("log_variance", "variance")),
    Param("noise_var", 1.0, "Observation noise variance of the GP view of the policy.", range=(1e-9, 1e9)),
    Param("prior_var", 1.0, "Prior variance of the GP view (scales the loss-gradient kernel).", range=(1e-9, 1e9)),
    Param("frames_per_episode", 16, "Evenly spaced steps of every recorded episode used as data and target "
          "points of the criterion (the Metaworld benchmark's frames_per_demo; bounds the cost).",
          range=(1, 100000)),
    Param("max_points", 1024, "Cap on the total number of data points of the criterion: with many episodes, "
          "fewer evenly spaced frames per episode are used (at least 1), bounding next_task's latency.",
          range=(1, 1000000)),
    Param("selection_policy", "latest", "Which policy copy feeds the criterion: 'latest' = reloaded on every "
          "/amf/checkpoint; 'frozen' = the checkpoint loaded at start, never reloaded (amf bench metaworld's "
          "selection_copy 'frozen').", choices=("latest", "frozen")),
    Param("targets", "warm", "Validation set of the criterion (App. M.3.4, as amf bench metaworld): 'warm' = the "
          "first episode of each task (targets and hallucinated demonstrations), 'all' = every episode.",
          choices=("warm", "all")),
    Param("condition_on_data", True, "Condition the criterion's posterior on the episodes outside the validation "
          "set (as amf bench metaworld's condition_on_data)."),
    Param("action_space", "metaworld", "Which recorded action labels the loss-gradient embeddings: 'metaworld' = "
          "the native 4-D action (converted back from the recorded EefDeltaAction), 'eef7' = the 7-D "
          "EefDeltaAction.", choices=("metaworld", "eef7")),
    Param("pretrain_counts", True, "Pass the checkpoint's pre-training demonstration counts (its pretrain.json) "
          "to the selector; only the privileged rebalancing baseline uses them."),
    Param("torch_threads", 1, "torch intra-op threads of this process (0 = torch's default). 1 keeps several "
          "nodes on a 2-core machine from oversubscribing the CPU.", range=(0, 256)),
) + OCTO_PARAMS
