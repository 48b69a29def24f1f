"""Equivalence with Octo's own DiffusionActionHead: runs only where Octo (JAX/flax) is importable."""

import numpy as np
import pytest
import torch

action_heads = pytest.importorskip("octo.model.components.action_heads")
jax = pytest.importorskip("jax")


@pytest.mark.parametrize("E", [384, 768])
def test_converted_head_matches_octo_diffusion_action_head(E):
    import jax.numpy as jnp
    from octo.model.components.base import TokenGroup

    from amf_ros.policies.octo.convert import load_octo_head

    head = action_heads.DiffusionActionHead(readout_key="readout_action", use_map=False, action_horizon=4,
                                            action_dim=7, n_diffusion_samples=1, dropout_rate=0.0)
    rng = np.random.default_rng(0)
    tokens = jnp.asarray(rng.normal(size=(3, 2, 1, E)), jnp.float32)
    outputs = {"readout_action": TokenGroup(tokens, jnp.ones((3, 2, 1), bool))}
    variables = head.init(jax.random.PRNGKey(0), outputs, train=False)
    time = jnp.asarray(rng.integers(0, 20, size=(3, 2, 1)), jnp.float32)
    noisy = jnp.asarray(rng.normal(size=(3, 2, 28)), jnp.float32)
    eps_octo = np.asarray(head.apply(variables, outputs, time=time, noisy_actions=noisy, train=False))

    ours = load_octo_head(jax.device_get(variables["params"]))
    emb = torch.from_numpy(np.asarray(tokens).mean(axis=-2))
    with torch.no_grad():
        eps_ours = ours.diffusion_model(emb, torch.from_numpy(np.asarray(noisy)),
                                        torch.from_numpy(np.asarray(time))).numpy()
    np.testing.assert_allclose(eps_ours, eps_octo, rtol=1e-4, atol=1e-5)
