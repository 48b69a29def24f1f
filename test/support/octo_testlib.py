"""Test helpers for the Octo backend, written from /work/shared/reference/octo-head-params.md only.

- ``synthetic_octo_params``: a parameter tree with exactly Octo's structure, names and shapes (Small E=384,
  Base E=768), built from the reference table, NOT from the package's own mapping.
- ``np_score`` / ``np_loss`` / ``np_sample``: an independent numpy (float64) re-implementation of Octo's
  DiffusionActionHead forward pass, loss and DDPM sampler (reference sections 3-6).
- ``make_checkpoint``: a fake Octo checkpoint directory (1.5 or 1.0 key names) for the parser.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import msgpack
import numpy as np

T_STEPS, TIME_DIM, HIDDEN, BLOCKS, H, A = 20, 32, 256, 3, 4, 7


def _dense(rng, fan_in, fan_out, scale=None):
    std = scale if scale is not None else 1.0 / math.sqrt(fan_in)
    return {"kernel": rng.normal(0, std, (fan_in, fan_out)).astype(np.float32),
            "bias": rng.normal(0, 0.02, (fan_out,)).astype(np.float32)}


def synthetic_head_tree(embedding_dim: int, seed: int = 0) -> dict:
    """{"diffusion_model": {...}} with Octo's exact leaf names and shapes (kernels (in, out))."""
    rng = np.random.default_rng(seed)
    reverse = {"Dense_0": _dense(rng, TIME_DIM + embedding_dim + H * A, HIDDEN)}
    for i in range(BLOCKS):
        reverse[f"MLPResNetBlock_{i}"] = {
            "LayerNorm_0": {"scale": (1 + 0.1 * rng.normal(size=HIDDEN)).astype(np.float32),
                            "bias": (0.1 * rng.normal(size=HIDDEN)).astype(np.float32)},
            "Dense_0": _dense(rng, HIDDEN, 4 * HIDDEN), "Dense_1": _dense(rng, 4 * HIDDEN, HIDDEN)}
    reverse["Dense_1"] = _dense(rng, HIDDEN, H * A)
    return {"diffusion_model": {
        "time_preprocess": {"kernel": rng.normal(0, 0.2, (TIME_DIM // 2, 1)).astype(np.float32)},
        "cond_encoder": {"Dense_0": _dense(rng, TIME_DIM, 2 * TIME_DIM),
                         "Dense_1": _dense(rng, 2 * TIME_DIM, TIME_DIM)},
        "reverse_network": reverse}}


def synthetic_octo_params(embedding_dim: int, seed: int = 0) -> dict:
    """A full model.params-like tree: a (tiny) trunk subtree plus ``heads_action``."""
    rng = np.random.default_rng(seed + 1)
    trunk = {"BlockTransformer_0": {"Transformer_0": {"encoderblock_0": {"MlpBlock_0": {
        "Dense_0": _dense(rng, embedding_dim, 8)}}}},
        "task_tokenizers_language": {"hf_model": {"shared": {"embedding": np.zeros((4, 8), np.float32)}}}}
    return {"octo_transformer": trunk, "heads_action": synthetic_head_tree(embedding_dim, seed)}


def count_leaves(tree) -> int:
    return sum(count_leaves(v) if isinstance(v, dict) else int(np.asarray(v).size) for v in tree.values())


# ------------------------------------------------------------------------------------------------ numpy head
def _swish(x):
    return x / (1.0 + np.exp(-x))


def _lin(p, x):
    return x @ np.asarray(p["kernel"], np.float64) + np.asarray(p["bias"], np.float64)


def _layer_norm(p, x, eps=1e-6):
    mean = x.mean(-1, keepdims=True)
    var = np.maximum((x * x).mean(-1, keepdims=True) - mean ** 2, 0.0)  # flax: E[x^2] - E[x]^2
    return (x - mean) / np.sqrt(var + eps) * np.asarray(p["scale"], np.float64) + np.asarray(p["bias"], np.float64)


def np_score(head: dict, obs_enc, actions, time):
    """epsilon-hat (..., 28) of ScoreActor: obs_enc (..., E), actions (..., 28), time (..., 1) integer steps."""
    d = head["diffusion_model"]
    W = np.asarray(d["time_preprocess"]["kernel"], np.float64)           # (16, 1)
    f = 2 * np.pi * np.asarray(time, np.float64) @ W.T                   # (..., 16)
    t_ff = np.concatenate([np.cos(f), np.sin(f)], -1)                    # cos first
    c = _lin(d["cond_encoder"]["Dense_1"], _swish(_lin(d["cond_encoder"]["Dense_0"], t_ff)))
    lead = np.broadcast_shapes(c.shape[:-1], np.shape(obs_enc)[:-1], np.shape(actions)[:-1])
    parts = [np.broadcast_to(np.asarray(x, np.float64), (*lead, np.shape(x)[-1])) for x in (c, obs_enc, actions)]
    u = np.concatenate(parts, -1)
    r = d["reverse_network"]
    h = _lin(r["Dense_0"], u)
    for i in range(BLOCKS):
        b = r[f"MLPResNetBlock_{i}"]
        h = h + _lin(b["Dense_1"], _swish(_lin(b["Dense_0"], _layer_norm(b["LayerNorm_0"], h))))
    return _lin(r["Dense_1"], _swish(h))


def np_schedule(steps: int = T_STEPS, s: float = 0.008):
    """betas, alphas, alpha_hats of cosine_beta_schedule (betas clipped to 0.999, cumprod of clipped)."""
    x = np.linspace(0, steps, steps + 1)
    ac = np.cos(((x / steps) + s) / (1 + s) * np.pi * 0.5) ** 2
    ac = ac / ac[0]
    betas = np.clip(1 - ac[1:] / ac[:-1], 0, 0.999)
    alphas = 1 - betas
    return betas, alphas, np.cumprod(alphas)


def np_loss(head: dict, emb, actions, time, noise, mask=None, max_action=5.0):
    """Octo's loss with explicit draws: emb (B, E), actions (B, 4, 7), time (1, B, 1), noise (1, B, 28)."""
    _, _, ah = np_schedule()
    a = np.clip(np.asarray(actions, np.float64).reshape(len(emb), H * A), -max_action, max_action)[None]
    at = ah[np.asarray(time)]
    x_t = np.sqrt(at) * a + np.sqrt(1 - at) * noise
    eps = np_score(head, np.asarray(emb, np.float64)[None], x_t, time)
    m = np.ones_like(a) if mask is None else np.asarray(mask, np.float64).reshape(a.shape)
    m = np.broadcast_to(m, eps.shape)
    return A * ((eps - noise) ** 2 * m).mean() / max(m.mean(), 1e-5)


def np_sample(head: dict, emb, init_noise, step_noise, max_action=5.0):
    """DDPM ancestral sampling, t = 19..0: emb (B, E), init (B, 28), step_noise (20, B, 28) -> (B, 4, 7)."""
    betas, alphas, ah = np_schedule()
    x = np.asarray(init_noise, np.float64)
    for i, t in enumerate(range(T_STEPS - 1, -1, -1)):
        eps = np_score(head, emb, x, np.full((*x.shape[:-1], 1), float(t)))
        x = (x - (1 - alphas[t]) / np.sqrt(1 - ah[t]) * eps) / np.sqrt(alphas[t])
        if t > 0:
            x = x + np.sqrt(betas[t]) * step_noise[i]
        x = np.clip(x, -max_action, max_action)
    return x.reshape(*x.shape[:-1], H, A)


# ------------------------------------------------------------------------------------------------ checkpoints
def _pack(tree) -> bytes:
    """flax.serialization.msgpack_serialize's format, written here with msgpack directly."""
    def default(x):
        if isinstance(x, np.ndarray):
            return msgpack.ExtType(1, msgpack.packb((x.shape, x.dtype.name, x.tobytes("C")), use_bin_type=True))
        raise TypeError(type(x))
    return msgpack.packb(tree, default=default, strict_types=True)


def octo_config(version: str = "1.5", embedding_dim: int = 384) -> dict:
    horizon_key = "action_horizon" if version == "1.5" else "pred_horizon"
    return {
        "window_size": 2,
        "model": {
            "observation_tokenizers": {"primary": {"module": "octo.model.components.tokenizers",
                                                   "name": "ImageTokenizer", "args": [], "kwargs": {}}},
            "task_tokenizers": {"language": {"module": "octo.model.components.tokenizers",
                                             "name": "LanguageTokenizer", "args": [],
                                             "kwargs": {"encoder": "t5-base", "finetune_encoder": False}}},
            "heads": {"action": {"module": "octo.model.components.action_heads", "name": "DiffusionActionHead",
                                 "args": [], "kwargs": {"readout_key": "readout_action", "use_map": False,
                                                        horizon_key: 4, "action_dim": 7}}},
            "readouts": {"action": 1}, "token_embedding_size": embedding_dim, "max_horizon": 10,
            "transformer_kwargs": {"num_layers": 12}},
        "text_processor": {"module": "octo.data.utils.text_processing", "name": "HFTokenizer", "args": [],
                           "kwargs": {"tokenizer_name": "t5-base", "encode_with_model": False}},
    }


BRIDGE_STATS = {"mean": [0.0002, 0.0001, -0.0001, 0.0, 0.0, 0.0, 0.58],
                "std": [0.0096, 0.0135, 0.0125, 0.028, 0.030, 0.076, 0.49],
                "p01": [-0.03] * 6 + [0.0], "p99": [0.03] * 6 + [1.0], "mask": [True] * 6 + [False]}


def make_checkpoint(root: Path, version: str = "1.5", wrist: bool = True, flat_stats: bool = False,
                    steps=(300000,)) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps(octo_config(version)))
    pad = "timestep_pad_mask" if version == "1.5" else "pad_mask"
    obs = {"image_primary": np.zeros((1, 2, 256, 256, 3), np.uint8), pad: np.ones((1, 2), bool)}
    if wrist:
        obs["image_wrist"] = np.zeros((1, 2, 128, 128, 3), np.uint8)
    task = {"language_instruction": {"input_ids": np.zeros((1, 16), np.int32),
                                     "attention_mask": np.zeros((1, 16), np.int32)},
            "pad_mask_dict": {"language_instruction": np.ones((1,), bool)}}
    batch = {"observation": obs, ("task" if version == "1.5" else "tasks"): task}
    (root / "example_batch.msgpack").write_bytes(_pack(batch))
    stats = {"action": BRIDGE_STATS} if flat_stats else {"bridge_dataset": {"action": BRIDGE_STATS},
                                                          "fractal20220817_data": {"action": BRIDGE_STATS}}
    (root / "dataset_statistics.json").write_text(json.dumps(stats))
    for s in steps:
        (root / str(s) / "default").mkdir(parents=True, exist_ok=True)
    (root / "300001.orbax-checkpoint-tmp-123").mkdir(exist_ok=True)  # half-written: must be ignored
    return root


# ------------------------------------------------------------------------------------------------ SIMPLER policies
def _find(image, rgb):
    """Centre (row, col) of the pixels close to colour ``rgb`` (tolerant to resizing), or None."""
    diff = np.abs(image.astype(np.int16) - np.array(rgb, np.int16)).max(axis=-1)
    rows, cols = np.nonzero(diff < 90)
    return (rows.mean(), cols.mean()) if len(rows) else None


def scripted_chunk_fn(obs, instruction, give_up_if_y_positive=False):
    """Reads the stand-in's top-down image: steer the green TCP to the red target, close when there (raw chunk)."""
    from simpler_env import from_pixel

    img = obs["image_primary"][0, -1]  # (256, 256, 3): rescale pixel coordinates back to 480x640
    tgt, tcp = _find(img, (255, 0, 0)), _find(img, (0, 255, 0))
    act = np.zeros(7)
    act[6] = 1.0
    if tgt is not None and tcp is not None:
        t = from_pixel(tgt[0] * 479 / 255, tgt[1] * 639 / 255)
        p = from_pixel(tcp[0] * 479 / 255, tcp[1] * 639 / 255)
        if not (give_up_if_y_positive and t[1] > 0):
            act[:2] = np.clip(t - p, -0.03, 0.03)
            act[6] = 0.0 if np.linalg.norm(t - p) < 0.012 else 1.0
    return np.repeat(act[None], 4, axis=0)


def make_scripted(config):
    from amf_ros.policies.octo.simpler_policy import ChunkSimplerPolicy

    return ChunkSimplerPolicy(scripted_chunk_fn)


def make_half(config):
    from amf_ros.policies.octo.simpler_policy import ChunkSimplerPolicy

    return ChunkSimplerPolicy(lambda obs, instr: scripted_chunk_fn(obs, instr, give_up_if_y_positive=True))
