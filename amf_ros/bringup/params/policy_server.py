"""Parameters of policy_server (declared by amf_ros.ros.nodes.policy_server; set in config/*.yaml)."""

from amf_ros.bringup.params import Param

OCTO_PARAMS = (
    Param("backend", "native", "Acting policy: 'native' = the package's TaskConditionedPolicy (checkpoint = its "
          "directory); 'octo' = Octo's frozen trunk on camera frames + its diffusion head fine-tuned copy and frozen "
          "prior (checkpoint = an Octo checkpoint directory).", choices=("native", "octo")),
    Param("octo_trunk_factory", "amf_ros.policies.octo.trunk:OctoTrunk", "backend octo: 'module:function' called "
          "as f(checkpoint, t5_path=, dataset_name=) -> trunk with OctoTrunk's API (default: the real Octo loader)."),
    Param("t5_path", "", "backend octo: local t5-base tokenizer/config directory for offline loading (empty = "
          "Hugging Face cache)."),
    Param("octo_dataset", "bridge_dataset", "backend octo: key of the checkpoint's action statistics."),
    Param("head_checkpoint", "", "backend octo: fine-tuned head checkpoint to start from (empty = newest "
          "round_NNNN under checkpoint_dir made from the same Octo checkpoint, else Octo's pretrained head)."),
    Param("tasks_file", "", "backend octo: task set YAML {key: instruction} the head is built for (the native "
          "backend reads its tasks from the checkpoint)."),
    Param("image_key", "image_primary", "backend octo: recorded image stream whose frames are embedded for "
          "fine-tuning (the camera of image_topic)."),
    Param("wrist_image_topic", "", "backend octo: wrist camera topic (sensor_msgs/Image) for a model with a "
          "wrist tokenizer; empty = primary camera only (Octo's Bridge evaluation)."),
    Param("wrist_image_key", "", "backend octo: recorded wrist image stream embedded with image_key for "
          "fine-tuning (empty = none; set together with wrist_image_topic)."),
    Param("embed_batch_size", 16, "backend octo: frames per trunk call when embedding recorded episodes.",
          range=(1, 4096)),
    Param("sticky_gripper_steps", 1, "backend octo: consecutive requests before the gripper switches (Octo's "
          "WidowX evaluation: 1).", range=(1, 100)),
    Param("max_translation", 0.05, "backend octo: per-step translation bound, m (EefDeltaAction).",
          range=(1e-6, 1.0)),
    Param("max_rotation", 0.25, "backend octo: per-step rotation bound, rad (EefDeltaAction).", range=(1e-6, 3.2)),
)

PARAMS = (
    Param("checkpoint", "", "Checkpoint directory to start from (empty = newest under checkpoint_dir); backend "
          "octo: the Octo checkpoint directory."),
    Param("checkpoint_dir", "runs/checkpoints", "Directory where fine-tuned checkpoints are written "
          "(round_NNNN/, each written atomically)."),
    Param("dataset_dir", "runs/dataset", "Episode store that /amf/fine_tune trains on."),
    Param("control_rate_hz", 5.0, "Rate of the run_policy control loop, Hz (BridgeData: 5).", range=(0.1, 200.0)),
    Param("max_steps", 150, "Default step limit of a run_policy goal (goal.max_steps = 0).", range=(1, 100000)),
    Param("fine_tune_steps", 300, "Default gradient steps of a fine_tune goal (goal.steps = 0).", range=(1, 1000000)),
    Param("fine_tune_batch_size", 256, "Minibatch size of fine-tuning.", range=(1, 65536)),
    Param("fine_tune_lr", 1e-3, "Learning rate of the action head during fine-tuning.", range=(1e-7, 1.0)),
    Param("alpha_steps", 100, "Gradient steps of the adaptive-prior alpha(c) fit after each fine-tune "
          "(0 = keep alpha).", range=(0, 100000)),
    Param("seed", 0, "Random seed of fine-tuning and action sampling.", range=(0, 2**31 - 1)),
    Param("ensemble_horizon", 4, "Action chunks averaged by temporal ensembling (Octo/SimplerEnv: 4; "
          "1 = execute the first action of each chunk).", range=(1, 64)),
    Param("ensemble_exp_weight", 0.0, "Exponential weight of temporal ensembling (SimplerEnv: 0 = uniform).",
          range=(-10.0, 10.0)),
    Param("state_topic", "/amf/observation/state", "Observation topic (amf_ros/StateVector) the policy acts on."),
    Param("image_topic", "", "Camera topic (sensor_msgs/Image) for image-based policies, given to the policy as "
          "obs['image'] (RGB uint8); empty = state only."),
    Param("action_topic", "/amf/action", "Topic on which actions (amf_ros/EefDeltaAction) are published."),
    Param("action_space", "metaworld", "How policy actions map to EefDeltaAction: 'metaworld' = the policy "
          "acts in the native 4-D Metaworld space (converted with native_to_eef7), 'eef7' = already 7-D.",
          choices=("metaworld", "eef7")),
    Param("success_service", "/amf/sim/success", "Service (amf_ros/TaskSuccess) asked for success at the end "
          "of run_policy; empty = no success detector (result.success = false)."),
    Param("observation_timeout_s", 2.0, "run_policy fails if no observation arrives within this time, s.",
          range=(0.01, 600.0)),
    Param("checkpoint_topic", "/amf/checkpoint", "Latched topic announcing each new checkpoint."),
    Param("torch_threads", 1, "torch intra-op threads of this process (0 = torch's default). 1 keeps several "
          "nodes on a 2-core machine from oversubscribing the CPU.", range=(0, 256)),
) + OCTO_PARAMS
