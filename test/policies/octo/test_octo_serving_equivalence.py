"""The package's Octo serving path against Octo's own code, end to end, on a real Octo-format checkpoint.

Runs only where Octo (JAX) is importable and ``AMF_OCTO_CHECKPOINT`` names a checkpoint directory written by Octo's
``save_pretrained`` (docs/policies.md, 'Tried against Octo's own code', says how to make one offline: Octo's
``OctoModel.from_config`` + random init).
Compared, for the same observation window, instruction and random draws:

- actions: OctoTrunk -> converted head (the frozen prior; the served action at alpha = 0) -> un-normalisation with
  the dataset statistics, against Octo's ``sample_actions(..., unnormalization_statistics=...)``. The random draws
  are Octo's: the test draws x_T and every step's z from the same JAX key the way Octo's ``predict_action`` does
  (split, normal over (B, W, H*A), one split per step) and hands the last window position's to the torch sampler.
- embeddings: ``embed_episode`` (what the fine-tune caches) against Octo's ``run_transformer`` readout on the same
  windows.

Tolerance: float32 through a 20-step chained sampler (the head alone agreed to ~2.4e-5 with Octo's
DiffusionActionHead); the trunk adds XLA-vs-XLA noise only (same JAX code on both sides). 1e-3 absolute on
un-normalised actions (Bridge std <= 0.1 m) leaves an order of magnitude above the float32 error while any real
mismatch (a transposed kernel, a wrong time index, a wrong window position) moves actions by >= 1e-2.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

pytest.importorskip("octo.model.octo_model")
jax = pytest.importorskip("jax")

CKPT = os.environ.get("AMF_OCTO_CHECKPOINT", "")
pytestmark = pytest.mark.skipif(not CKPT, reason="set AMF_OCTO_CHECKPOINT to an Octo checkpoint directory")

INSTRUCTION = "put the carrot on the plate"


@pytest.fixture(scope="module")
def trunk():
    from amf_ros.policies.octo.checkpoint import read_checkpoint
    from amf_ros.policies.octo.trunk import OctoTrunk

    stats = read_checkpoint(CKPT).dataset_statistics
    dataset = ("bridge_dataset" if "bridge_dataset" in stats else None if "action" in stats else
               sorted(stats)[0])
    return OctoTrunk(CKPT, dataset_name=dataset)


def _frames(rng: np.random.Generator, t: int, size: tuple[int, int]) -> np.ndarray:
    """(t, H, W, 3) uint8 frames already at the model's size (no resampling on either side)."""
    return rng.integers(0, 256, size=(t, *size, 3), dtype=np.uint8)


def _octo_draws(key, batch: int, window: int, flat: int, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """x_T (B, W, F) and z for t = T-1 ... 0 (T, B, W, F), drawn from ``key`` exactly as Octo's predict_action."""
    rng, k = jax.random.split(key)
    x_t = np.asarray(jax.random.normal(k, (batch, window, flat)))
    zs = []
    for _ in range(steps):
        rng, k = jax.random.split(rng)
        zs.append(np.asarray(jax.random.normal(k, (batch, window, flat))))
    return x_t, np.stack(zs)


def test_served_actions_equal_octo_sample_actions(trunk):
    import torch

    from amf_ros.policies.normalizer import Normalizer
    from amf_ros.policies.octo.convert import octo_head_pair

    stats = trunk.action_statistics()
    keys = trunk.info.image_keys
    rng = np.random.default_rng(0)
    win = trunk.new_window(wrist="image_wrist" in keys)
    primary = _frames(rng, 2, keys["image_primary"])
    wrist = _frames(rng, 2, keys["image_wrist"]) if "image_wrist" in keys else [None, None]
    win.add(primary[0], wrist[0])
    obs = win.add(primary[1], wrist[1])
    _, prior = octo_head_pair(trunk.head_params())
    cfg = prior.config
    emb = torch.from_numpy(np.ascontiguousarray(trunk.embed(obs, [INSTRUCTION])))
    unnormalize = Normalizer(stats["mean"], stats["std"], stats.get("mask"), min_std=1e-6).unnormalize
    octo_stats = {k: np.asarray(v) for k, v in stats.items()}
    diffs, inside = [], []
    for seed in (7, 8, 9):
        key = jax.random.PRNGKey(seed)
        octo = np.asarray(trunk.model.sample_actions(dict(obs), trunk.tasks([INSTRUCTION]),
                                                     unnormalization_statistics=octo_stats, rng=key))
        x_t, zs = _octo_draws(key, 1, trunk.info.window_size, cfg.flat_action_dim, cfg.diffusion_steps)
        with torch.no_grad():
            chunk = prior.predict_action(emb, init_noise=torch.from_numpy(x_t[:, -1]),
                                         step_noise=torch.from_numpy(zs[:, :, -1])).numpy()
        ours = unnormalize(chunk)
        assert ours.shape == octo.shape == (1, cfg.action_horizon, cfg.action_dim)
        diffs.append(np.abs(ours - octo).max(axis=(0, 1)))
        inside.append(np.abs(chunk) < 0.999 * cfg.max_action)  # not on the sampler's clip
    diff, inside = np.max(diffs, axis=0), np.concatenate(inside)
    print(f"max |ours - octo| per action dimension: {np.array2string(diff, precision=2)}; "
          f"{inside.mean():.0%} of normalised values off the clip")
    # A random-init head drives many values onto the +-max_action clip, where any port agrees; the values off
    # the clip carry the comparison, so there must be a fair share of them.
    assert inside.mean() > 0.2, inside.mean()
    assert diff.max() < 1e-3, diff


def test_cached_embeddings_equal_octo_readout(trunk):
    from amf_ros.policies.octo.trunk import readout_embedding

    keys = trunk.info.image_keys
    rng = np.random.default_rng(1)
    images = _frames(rng, 5, keys["image_primary"])
    ours = trunk.embed_episode(images, INSTRUCTION, batch_size=2)
    w = trunk.info.window_size
    pad = trunk.pad_key
    ref = []
    for t in range(len(images)):  # Octo's HistoryWrapper: the first frame repeated, marked as padding
        idx = [max(0, t - (w - 1 - i)) for i in range(w)]
        obs = {"image_primary": images[idx][None], pad: np.array([[t - (w - 1 - i) >= 0 for i in range(w)]])}
        out = trunk.model.run_transformer(obs, trunk.tasks([INSTRUCTION]), obs[pad], train=False)
        ref.append(readout_embedding(out)[0, -1])
    ref = np.stack(ref)
    assert ours.shape == ref.shape
    np.testing.assert_allclose(ours, ref, atol=1e-5, rtol=1e-5)
