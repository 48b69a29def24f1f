"""The action policy_server publishes for an Octo checkpoint against Octo's own code, end to end.

Runs only where Octo (JAX) is importable and ``AMF_OCTO_CHECKPOINT`` names a checkpoint directory written by Octo's
``save_pretrained`` (docs/policies.md, 'Tried against Octo's own code', says how to make one offline: Octo's
``OctoModel.from_config`` + random init). In CI Octo is not installed and the module skips with that reason.

Served side: what policy_server runs for a run_policy goal, unmodified: :class:`OctoServing` built from its
parameters (real ``OctoTrunk``, the first head = Octo's ``heads_action`` as fine-tuned copy + frozen prior, saved as
round_0000), and ``OctoServing.actor`` (policies/octo/actor.py) stepped once per camera frame: observation window
-> trunk -> adaptive-prior mixture -> un-normalisation -> temporal ensembling -> sticky gripper -> per-step bounds ->
the EefDeltaAction vector (cast to float32 as the message is). Only the noise source is replaced: the heads'
``sample`` draws x_T and every step's z from the JAX key Octo's ``predict_action`` would use (same split order, last
window position), keyed by the seed the actor passes (the step number).

Octo side: Octo's own WidowX evaluation (examples/04_eval_finetuned_on_robot.py): ``WidowXGym`` from
examples/envs/widowx_env.py (its sticky gripper; the robot client is a recorder) inside ``HistoryWrapper`` and
``TemporalEnsembleWrapper`` from octo/utils/gym_wrappers.py, acting with ``model.sample_actions(...,
unnormalization_statistics=model.dataset_statistics[<dataset>]["action"])`` as the example does, with the key of
step t. Frames are fed at the model's 256x256 (no resize on either side: TF's and OpenCV's Lanczos differ).

Tolerance (float32, derived; the method of test/support/fp_bounds.py): both sides compute one function in float32
along two paths (two XLA programs for the trunk, XLA vs torch for the head). A sum of n terms in any order errs by at
most gamma_n sum|terms|, so two paths differ by at most 2 gamma_n * scale, with n = the terms summed along the path:
the trunk (each dense/conv kernel's fan-in, 2 x each norm's width, per attention layer the head width + 2 x the
tokens; the T5 encoder included), plus 20 denoising steps x (fan_in_sum of the head's score network + 4 for the
update and clip), plus 2 (un-normalisation) and 1 (the float32 EefDeltaAction). For a random-init Octo-Small that is
n = 356,187, gamma_n = 0.0217. The scale is the sampler's clip, max_action = 5 (the largest normalised value either
side can produce): 2 gamma_n 5 = 0.217 normalised; in robot units dimension d gets that x std_d where the statistics'
mask un-normalises it, x 1 where it stays raw (the gripper). First-order, like every bound in fp_bounds (it assumes
no step amplifies rounding far beyond the output's scale); the measured differences (printed) are <= 1.4e-5 of it. It
still catches what matters: another noise key and a window without the pad mask each move some dimension by more
than 10 tolerances (checked). The gripper after the sticky rule is 0 or 1 on both sides and is compared exactly
wherever the ensembled raw gripper is farther than the tolerance from the 0.5 threshold.

Temporal ensembling: Octo's wrapper ensembles the last 4 chunks, one chunk per step. policy_server does the same when
inference keeps up (execution_horizon 1); with execution_horizon > 1 it skips chunks by design, where Octo's
wrapper has no counterpart (its RHCWrapper executes a chunk open-loop instead), so that case is not compared.

Where the embedding pass runs (docs/ros-system.md, "Serving Octo"): in the policy_server process, on the fine_tune
goal's thread, with the node's one trunk; only the gradient steps run in the spawned worker. The fine-tune test
checks both (the episodes are embedded by this process's trunk; the worker has another pid).
"""

from __future__ import annotations

import importlib.util
import math
import os
import sys
import types
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("octo.model.octo_model")  # CI: "could not import 'octo.model.octo_model'" (.ci/expected_skips.txt)
jax = pytest.importorskip("jax")
torch = pytest.importorskip("torch")
from fp_bounds import fan_in_sum, two_path_tolerance  # noqa: E402

CKPT = os.environ.get("AMF_OCTO_CHECKPOINT", "")
pytestmark = pytest.mark.skipif(not CKPT, reason="set AMF_OCTO_CHECKPOINT to an Octo checkpoint directory")

TASK, INSTRUCTION = "carrot_on_plate", "put the carrot on the plate"
OTHER = ("spoon_on_towel", "put the spoon on the towel")
STEPS = 8
KEY_BASE = 1000


# ------------------------------------------------------------------------------------------------ set-up
def _dataset(stats: dict) -> str | None:
    return "bridge_dataset" if "bridge_dataset" in stats else None if "action" in stats else sorted(stats)[0]


def _params(tmp_path: Path, **over):
    from amf_ros.bringup.params import load, node_of, schema
    from amf_ros.bringup.params.policy_server import PolicyServerParams
    from amf_ros.policies.octo.checkpoint import read_checkpoint

    tasks = tmp_path / "tasks.yaml"
    tasks.write_text("tasks:\n" + "".join(f"  - key: {k}\n    instruction: {v}\n"
                                          for k, v in ((TASK, INSTRUCTION), OTHER)))
    values = {"backend": "octo", "checkpoint": CKPT, "t5_path": "",
              "octo_dataset": _dataset(read_checkpoint(CKPT).dataset_statistics) or "",
              "head_checkpoint": "", "tasks_file": str(tasks), "image_key": "image_primary", "wrist_image_key": "",
              "wrist_image_topic": "", "embed_batch_size": 4, "checkpoint_dir": str(tmp_path / "ckpts"),
              "dataset_dir": str(tmp_path / "data"), "fine_tune_steps": 300, "fine_tune_batch_size": 16,
              "fine_tune_lr": 1e-3, "alpha_steps": 0, "seed": 0, "ensemble_horizon": 4, "ensemble_exp_weight": 0.0,
              "sticky_gripper_steps": 2, "max_translation": 1.0, "max_rotation": 3.2, "torch_threads": 1, **over}
    names = {p.name for p in schema(node_of(PolicyServerParams))}
    return load(PolicyServerParams, {k: v for k, v in values.items() if k in names})


@pytest.fixture(scope="module")
def serving(tmp_path_factory):
    from amf_ros.runtime.policy_server import OctoServing

    torch.set_num_threads(1)
    s = OctoServing(_params(tmp_path_factory.mktemp("serve")))
    yield s
    s.runtime.close()


def _octo_draws(key, window: int, flat: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """x_T (1, W, F) and z for t = T-1 ... 0 (T, 1, W, F), drawn from ``key`` exactly as Octo's predict_action."""
    rng, k = jax.random.split(key)
    x_t = np.asarray(jax.random.normal(k, (1, window, flat)))
    zs = []
    for _ in range(steps):
        rng, k = jax.random.split(rng)
        zs.append(np.asarray(jax.random.normal(k, (1, window, flat))))
    return x_t, np.stack(zs)


def _octo_noise(policy, window: int, monkeypatch) -> None:
    """The served heads draw Octo's noise: seed s (the actor's step; the prior gets s + 1) -> key KEY_BASE + s."""
    for module, offset in ((policy.head, 0), (policy.prior, 1)):
        cfg = module.config

        def sample(emb, generator=None, module=module, offset=offset, cfg=cfg):
            key = jax.random.PRNGKey(KEY_BASE + generator.initial_seed() - offset)
            x_t, zs = _octo_draws(key, window, cfg.flat_action_dim, cfg.diffusion_steps)
            return module.predict_action(emb, init_noise=torch.from_numpy(x_t[:, -1]),
                                         step_noise=torch.from_numpy(zs[:, :, -1]))

        monkeypatch.setattr(module, "sample", sample)


def _set_alpha(policy, alpha: float) -> None:
    """alpha(c) of every task: exactly 0 or 1 through logits -inf / +inf (the mixture is then one head's sample)."""
    logit = math.inf if alpha == 1.0 else -math.inf if alpha == 0.0 else math.log(alpha / (1 - alpha))
    with torch.no_grad():
        policy.adaptive.logits.fill_(logit)


def _frames(seed: int, n: int, size: tuple[int, int]) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, size=(n, *size, 3), dtype=np.uint8)


# ------------------------------------------------------------------------------------------------ tolerance
def _trunk_terms(params: dict, tokens: int) -> int:
    """Upper bound on the terms summed along any path through Octo's transformer (module doc)."""
    n = 0

    def walk(tree, path):
        nonlocal n
        for name, v in tree.items():
            if isinstance(v, dict):
                walk(v, path + (name,))
                continue
            shape = np.shape(v)
            if name == "kernel" and len(shape) >= 2:
                parent = path[-1] if path else ""
                n += shape[0] if (len(shape) == 3 and parent in ("query", "key", "value")) else int(
                    np.prod(shape[:-1]))
                if parent in ("query", "q"):  # one attention layer: scores over the head width, 2 sums over tokens
                    n += (shape[-1] if len(shape) == 3 else 64) + 2 * tokens  # 2-D: T5-base, d_kv 64
            elif name in ("scale", "weight") and len(shape) == 1:  # LayerNorm / T5's RMS norm
                n += 2 * shape[0]

    walk(params, ())
    return n


def _tolerances(serving) -> tuple[float, np.ndarray, int]:
    """(normalised tolerance, per-dimension tolerance in robot units (7,), n) (module doc)."""
    trunk, prior = serving.trunk, serving.runtime.policy.prior
    cfg = prior.config
    obs = trunk.info.example_batch["observation"]
    tokens = sum(int(np.prod(v.shape[2:4])) // 256 for k, v in obs.items() if k.startswith("image_")) * \
        trunk.info.window_size + 16 + 2 * trunk.info.window_size  # 16x16 patches, 16 language tokens, readouts
    n_trunk = _trunk_terms(jax.device_get(trunk.model.params), tokens)
    n = n_trunk + cfg.diffusion_steps * (fan_in_sum(prior.diffusion_model) + 4) + 2 + 1
    tol = two_path_tolerance(n, cfg.max_action)
    stats = trunk.action_statistics()
    per_dim = np.where(stats["mask"], tol * stats["std"], tol)
    return tol, per_dim, n


# ------------------------------------------------------------------------------------------------ Octo's evaluation
def _octo_widowx_eval(model, frames: np.ndarray, instruction: str, dataset: str | None, sticky_steps: int,
                      pad_all: bool = False, key_base: int = KEY_BASE):
    """Octo's own WidowX evaluation loop on ``frames`` (robot client = recorder): (published (T, 7), ensembled
    before the sticky gripper (T, 7), normalised chunks (T, H, A))."""
    import gym
    import octo
    from octo.utils.gym_wrappers import HistoryWrapper, TemporalEnsembleWrapper

    path = Path(octo.__file__).resolve().parents[1] / "examples" / "envs" / "widowx_env.py"
    if not path.is_file():
        pytest.skip(f"Octo's WidowX env (sticky gripper) is not at {path}: install Octo from a source checkout")
    sent: list[np.ndarray] = []
    size = frames.shape[1]

    class Client:  # widowx_envs' WidowXClient, as far as WidowXGym uses it
        def __init__(self):
            self.t = 0

        def get_observation(self):
            img = (frames[min(self.t, len(frames) - 1)].transpose(2, 0, 1).reshape(-1) + 0.5) / 255.0
            return {"image": img, "state": np.zeros(7)}

        def step_action(self, action, blocking=True):
            sent.append(np.array(action, dtype=np.float64))
            self.t += 1

        def reset(self):
            self.t = 0

    service = types.ModuleType("widowx_envs.widowx_env_service")
    service.WidowXClient = Client
    stubs = {"widowx_envs": types.ModuleType("widowx_envs"), "widowx_envs.widowx_env_service": service}
    if importlib.util.find_spec("pyquaternion") is None:
        stubs["pyquaternion"] = types.SimpleNamespace(Quaternion=None)
    saved = {k: sys.modules.get(k) for k in stubs}
    sys.modules.update(stubs)
    try:
        spec = importlib.util.spec_from_file_location("octo_widowx_env", path)
        widowx_env = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(widowx_env)
    finally:
        for k, v in saved.items():
            if v is None:
                sys.modules.pop(k, None)
            else:
                sys.modules[k] = v

    ensembled: list[np.ndarray] = []

    class Before(gym.Wrapper):  # records what TemporalEnsembleWrapper hands on, before WidowXGym's sticky gripper
        def step(self, action):
            ensembled.append(np.array(action, dtype=np.float64))
            return self.env.step(action)

    env = widowx_env.WidowXGym(Client(), im_size=size, blocking=True, sticky_gripper_num_steps=sticky_steps)
    env = TemporalEnsembleWrapper(Before(HistoryWrapper(env, model.example_batch["observation"][
        "timestep_pad_mask"].shape[1])), 4)
    stats = model.dataset_statistics[dataset]["action"] if dataset else model.dataset_statistics["action"]
    task = model.create_tasks(texts=[instruction])
    chunks = []
    obs, _ = env.reset()
    for t in range(len(frames)):
        batch = jax.tree_map(lambda x: x[None], obs)  # the example's sample_actions: add the batch dim
        if pad_all:
            batch["timestep_pad_mask"] = np.ones_like(batch["timestep_pad_mask"])
        actions = model.sample_actions(batch, task, rng=jax.random.PRNGKey(key_base + t),
                                       unnormalization_statistics=stats)[0]
        mask = np.asarray(stats.get("mask", np.ones(len(stats["mean"]), bool)), bool)
        chunks.append(np.where(mask, (np.asarray(actions) - stats["mean"]) / stats["std"], actions))  # normalised
        obs, *_ = env.step(np.asarray(actions))
    return np.stack(sent), np.stack(ensembled), np.stack(chunks)


def _served(serving, policy, frames: np.ndarray, task: str):
    """policy_server's actor on ``frames``: (published float32 (T, 7), ensembled before finishing (T, 7))."""
    actor = serving.actor(policy)
    actor.reset(task)
    out, ens = [], []
    for frame in frames:
        out.append(np.asarray(actor({"image": frame}), np.float32))  # EefDeltaAction carries float32
        ens.append(actor.ensembler.at(actor.newest_step))
    return np.stack(out).astype(np.float64), np.stack(ens)


def _compare(got, got_ens, want, want_ens, per_dim, what):
    diff = np.abs(got[:, :6] - want[:, :6]).max(axis=0)
    ens_diff = np.abs(got_ens - want_ens).max(axis=0)
    fmt = {"float_kind": lambda x: f"{x:.2g}"}
    print(f"{what}: max |served - Octo| per dimension (published xyz rpy, ensembled gripper): "
          f"{np.array2string(np.r_[diff, ens_diff[6]], formatter=fmt)}; tolerance "
          f"{np.array2string(per_dim, formatter=fmt)}; published gripper served {got[:, 6].astype(int).tolist()}, "
          f"Octo {want[:, 6].astype(int).tolist()} (raw ensembled {np.array2string(want_ens[:, 6], formatter=fmt)})")
    assert np.all(diff <= per_dim[:6]), (what, diff, per_dim)
    assert ens_diff[6] <= per_dim[6], (what, ens_diff, per_dim)
    decided = np.abs(want_ens[:, 6] - 0.5) > per_dim[6]  # the threshold cannot flip between the two paths
    assert decided.sum() >= len(decided) // 2, want_ens[:, 6]
    np.testing.assert_array_equal(got[decided, 6], want[decided, 6])  # 0.0 / 1.0 after the sticky rule


# ------------------------------------------------------------------------------------------------ tests
@pytest.mark.parametrize("alpha", [1.0, 0.0], ids=["alpha1-finetuned-copy", "alpha0-frozen-prior"])
def test_published_actions_equal_octo_widowx_evaluation(serving, alpha, monkeypatch):
    """Not fine-tuned, so the fine-tuned copy (alpha = 1) and the frozen prior (alpha = 0) both hold Octo's head:
    either way the published EefDeltaAction is Octo's sample_actions + its WidowX post-processing."""
    trunk, policy = serving.trunk, serving.runtime.policy
    assert serving.runtime.checkpoint.name == "round_0000"  # Octo's own head, not fine-tuned
    _octo_noise(policy, trunk.info.window_size, monkeypatch)
    _set_alpha(policy, alpha)
    frames = _frames(0, STEPS, trunk.info.image_keys["image_primary"])
    got, got_ens = _served(serving, policy, frames, TASK)
    want, want_ens, chunks = _octo_widowx_eval(trunk.model, frames, INSTRUCTION, trunk.dataset_name,
                                               serving.p.sticky_gripper_steps)
    tol, per_dim, n = _tolerances(serving)
    print(f"n = {n} terms, normalised tolerance 2 gamma_n * 5 = {tol:.3g}")
    inside = np.abs(chunks) < 0.999 * policy.prior.config.max_action
    print(f"{inside.mean():.0%} of Octo's normalised chunk values are off the +-5 clip")
    assert inside.mean() > 0.2, inside.mean()  # enough values not pinned to the clip carry the comparison
    _compare(got, got_ens, want, want_ens, per_dim, f"alpha = {alpha:g}")
    # the tolerance discriminates: another noise key, or a window without the padding mask, is far outside it
    other, other_ens, _ = _octo_widowx_eval(trunk.model, frames, INSTRUCTION, trunk.dataset_name,
                                            serving.p.sticky_gripper_steps, key_base=KEY_BASE + 500)
    nopad, nopad_ens, _ = _octo_widowx_eval(trunk.model, frames[:2], INSTRUCTION, trunk.dataset_name,
                                            serving.p.sticky_gripper_steps, pad_all=True)
    wrong_key = float((np.abs(other_ens - want_ens) / per_dim).max())
    wrong_mask = float((np.abs(nopad_ens[0] - want_ens[0]) / per_dim).max())
    print(f"largest difference / tolerance: another key {wrong_key:.3g}, no padding mask {wrong_mask:.3g}")
    assert wrong_key > 10 and wrong_mask > 10


def test_cached_embeddings_equal_octo_readout(serving):
    """What fine_tune caches (``embed_episode``) is Octo's run_transformer readout of HistoryWrapper's windows."""
    from amf_ros.policies.octo.trunk import readout_embedding

    trunk = serving.trunk
    images = _frames(1, 5, trunk.info.image_keys["image_primary"])
    ours = trunk.embed_episode(images, INSTRUCTION, batch_size=2)
    w, pad = trunk.info.window_size, trunk.pad_key
    ref = []
    for t in range(len(images)):  # Octo's HistoryWrapper: the first frame repeated, marked as padding
        idx = [max(0, t - (w - 1 - i)) for i in range(w)]
        obs = {"image_primary": images[idx][None], pad: np.array([[t - (w - 1 - i) >= 0 for i in range(w)]])}
        out = trunk.model.run_transformer(obs, trunk.tasks([INSTRUCTION]), obs[pad], train=False)
        ref.append(readout_embedding(out)[0, -1])
    ref = np.stack(ref)
    assert ours.shape == ref.shape
    obs0 = trunk.info.example_batch["observation"]
    tokens = sum(int(np.prod(v.shape[2:4])) // 256 for k, v in obs0.items() if k.startswith("image_")) * w + 16 + 2 * w
    n = _trunk_terms(jax.device_get(trunk.model.params), tokens)
    tol = two_path_tolerance(n, float(np.abs(ref).max()))
    err = float(np.abs(ours - ref).max())
    print(f"embed_episode vs run_transformer: max |difference| {err:.3g}, tolerance {tol:.3g} ({n} terms)")
    assert err <= tol


def test_fine_tune_on_cached_embeddings_moves_the_head_and_keeps_the_prior(serving, tmp_path, monkeypatch):
    """fine_tune through policy_server's runtime: the embedding pass runs in this (the node's) process, the gradient
    steps in the worker. Afterwards, as expected: the fine-tuned head fits the demonstrations better than Octo's (its
    loss on them, at fixed draws, is lower), alpha = 1 acts differently from Octo, alpha = 0 (the frozen prior) is
    still exactly Octo's evaluation, and alpha = 1/2 publishes the mean of the two heads' chunks."""
    from amf_ros.data.store import EpisodeStore

    trunk = serving.trunk
    size = trunk.info.image_keys["image_primary"]
    stats = trunk.action_statistics()
    target_norm = np.array([1.0, -1.0, 0.5, -0.5, 1.0, -1.0, 1.0])  # gripper raw (mask False): open
    target = np.where(stats["mask"], target_norm * stats["std"] + stats["mean"], target_norm)
    store = EpisodeStore(serving.p.dataset_dir)
    frames = _frames(2, 3 * 5, size)
    for e in range(3):
        store.write_episode(TASK, INSTRUCTION, [{
            "observation": {"state": np.zeros(8, np.float32), "image_primary": frames[5 * e + i]},
            "action": target.astype(np.float32), "stamp_ns": 1000 + i * 200_000_000} for i in range(5)])
    octo_head = serving.runtime.policy
    before = _chunks_at_alpha(serving, octo_head, frames[:4], 1.0, monkeypatch)
    embedded = serving.cache.computed
    res = serving.runtime.fine_tune()
    assert res.round == 1 and serving.cache.computed == embedded + 3  # this process's trunk embedded all 3
    assert serving.runtime.worker.pid not in (None, os.getpid())  # the gradient steps ran in the worker
    tuned = serving.runtime.policy
    data = serving.cache.transitions([TASK])  # read back from the cache files: the trunk does not run again
    assert serving.cache.computed == embedded + 3
    loss_octo, loss_tuned = octo_head.loss(data), tuned.loss(data)
    after = _chunks_at_alpha(serving, tuned, frames[:4], 1.0, monkeypatch)
    dist = [float(np.abs(np.where(stats["mask"], (c - stats["mean"]) / stats["std"], c) - target_norm).mean())
            for c in (before, after)]
    tol, per_dim, _ = _tolerances(serving)
    moved = float((np.abs(after - before) / per_dim).max())
    print(f"fine-tune: {len(res.losses)} steps in {res.wall_time_s:.1f} s, training loss {res.losses[0]:.3f} -> "
          f"{res.final_loss:.3f}; loss on the demonstrations at fixed draws: Octo's head {loss_octo:.3f}, fine-tuned "
          f"{loss_tuned:.3f}; alpha = 1 chunks moved by up to {moved:.3g} tolerances; mean |normalised action - "
          f"demonstrated| {dist[0]:.3f} -> {dist[1]:.3f}")
    assert loss_tuned < 0.5 * loss_octo
    assert moved > 10
    # alpha = 1/2: the mixture of the two heads' chunks (both draw Octo's key of the step), un-normalised
    half = _chunks_at_alpha(serving, tuned, frames[:4], 0.5, monkeypatch)
    prior = _chunks_at_alpha(serving, tuned, frames[:4], 0.0, monkeypatch)
    mean = 0.5 * after + 0.5 * prior
    err = np.abs(half - mean).max()
    bound = two_path_tolerance(3 + 2, float(np.abs(mean).max()))  # mix (3 operations) + un-normalisation (2)
    print(f"alpha = 1/2 vs the mean of alpha = 1 and alpha = 0: max |difference| {err:.3g}, bound {bound:.3g}")
    assert err <= bound
    # the frozen prior did not move: at alpha = 0 the tuned policy still publishes Octo's actions
    _octo_noise(tuned, trunk.info.window_size, monkeypatch)
    _set_alpha(tuned, 0.0)
    probe = _frames(0, STEPS, size)
    got, got_ens = _served(serving, tuned, probe, TASK)
    want, want_ens, _ = _octo_widowx_eval(trunk.model, probe, INSTRUCTION, trunk.dataset_name,
                                          serving.p.sticky_gripper_steps)
    _compare(got, got_ens, want, want_ens, per_dim, "after fine-tuning, alpha = 0")


def _chunks_at_alpha(serving, policy, frames, alpha, monkeypatch) -> np.ndarray:
    """(T, H, A) un-normalised chunks the served actor infers for ``frames`` at ``alpha``."""
    _octo_noise(policy, serving.trunk.info.window_size, monkeypatch)
    _set_alpha(policy, alpha)
    actor = serving.actor(policy)
    actor.reset(TASK)
    return np.stack([actor._infer({"image": f}) for f in frames])
