"""Golden outputs of a tiny seeded diffusion head (STYLE habit 13): forward, loss, sampler, gradient embeddings.

The .npz stores the head's weights, the inputs, the explicit noise and the expected outputs, so the test does not
depend on torch's initialisation staying the same across versions; it fails when the port's *function* changes.

Runbook, when a change of the head's function is intended (say why in the commit message):
    source scripts/env.sh && python test/policies/test_golden.py   # rewrites test/policies/golden/diffusion_head.npz

Numerics. The expected outputs are computed in float64 from the stored float32 weights and inputs (exact in
float64), and the head is checked in both precisions against a rounding bound, never against one CPU's float32
result (summation order, FMA and vectorised libm differ between CPUs: a float32 golden at rtol 1e-5 failed on an
AMD EPYC by 1.2e-4 in the sample). With u = eps(dtype) (2^-23 in float32, 2^-52 in float64):
* eps, loss, phi are one pass through a few layers (fan-in <= 64, ~10 rounded ops on any path). Their error is a
  few u times the output's scale (up to 3.8 u measured); the bound is K_NET * u * max|output|, K_NET = 16.
* One sampler step x' = clip((x - c_t * eps) / sqrt(a_t) + sqrt(b_t) * z), c_t = (1 - a_t) / sqrt(1 - ah_t), makes
  the error (c_t / sqrt(a_t)) * K_NET * u * max|eps| (the network's, amplified 31.6x at t = 19 where b_t = 0.999)
  plus K_OPS * u * ((|x| + c_t |eps|) / sqrt(a_t) + sqrt(b_t) |z|) for its own 6 roundings (coefficients included),
  K_OPS = 4. test_float32_sampler_steps checks every float32 step against this bound.
* The 20-step chain carries each step's error to the output through the later steps. _chain_bound takes that
  amplification from the sampler itself: forward-mode derivatives, in float64 along the golden trajectory, of the
  sample with respect to each step's noise z (which enters each step's state before the clip, as its rounding
  error does), and sums |sensitivity| x step bound. In float32 that is <= 1.3e-3 at this fixture, while the
  float32 sample is 1.3e-4 off on an AMD EPYC and was 2.6e-4 off on the machine that first made the golden.
Each comparison allows the bound of the run plus that of the float64 golden (made on another machine). In float64
the sample's tolerance is ~3e-12, so any change of the head's function fails test_tiny_head_matches_golden_outputs.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from amf_ros.policies.diffusion_head import DiffusionActionHead, DiffusionDraws, DiffusionHeadConfig
from amf_ros.policies.embeddings import loss_gradient_embeddings

GOLDEN = Path(__file__).parent / "golden" / "diffusion_head.npz"
CFG = DiffusionHeadConfig(embedding_dim=6, action_horizon=2, action_dim=3, hidden_dim=8, num_blocks=2)
K_NET = 16
"""Rounding error of one network / loss / embedding pass, in units of eps(dtype) * max|output| (module docstring)."""
K_OPS = 4
"""Rounding error of the sampler step's own arithmetic, in eps(dtype) times the size of its terms."""
ONE_PASS = ("out_eps", "out_loss", "out_phi")


def _head(g: dict[str, np.ndarray], dtype: torch.dtype) -> DiffusionActionHead:
    head = DiffusionActionHead(CFG)
    head.load_state_dict({k[2:]: torch.from_numpy(v) for k, v in g.items() if k.startswith("w:")})
    return head.to(dtype)  # the float32 noise schedule buffers become float64 too, so both dtypes share constants


def _inputs(g: dict[str, np.ndarray], dtype: torch.dtype) -> dict[str, torch.Tensor]:
    t = {k: torch.from_numpy(v) for k, v in g.items() if not k.startswith(("w:", "out_"))}
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in t.items()}


def _outputs(head: DiffusionActionHead, t: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    draws = DiffusionDraws(time=t["time"], noise=t["noise"])
    with torch.no_grad():
        eps = head.diffusion_model(t["emb"], t["x"], t["t"])
        loss = head.per_sample_loss(t["emb"], t["actions"], t["mask"], draws)
        sample = head.predict_action(t["emb"], init_noise=t["init_noise"], step_noise=t["step_noise"])
        phi = loss_gradient_embeddings(head, t["emb"], t["actions"], t["mask"], draws)
    return {"out_eps": eps, "out_loss": loss, "out_sample": sample, "out_phi": phi}


def _trajectory(head: DiffusionActionHead, t: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """(T + 1, B, H*A) sampler states x_T ... x_0 (the last is the sample) and (T, B, H*A) the network's eps."""
    states, eps = [], []

    def record(module: torch.nn.Module, args: tuple[torch.Tensor, ...], out: torch.Tensor) -> None:
        states.append(args[1])
        eps.append(out)

    handle = head.diffusion_model.register_forward_hook(record)
    try:
        sample = head.predict_action(t["emb"], init_noise=t["init_noise"], step_noise=t["step_noise"])
    finally:
        handle.remove()
    return torch.stack([*states, sample.reshape(states[0].shape)]), torch.stack(eps)


def _coefficients(head: DiffusionActionHead, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """c_t, sqrt(a_t), sqrt(b_t) of loop step i (t = T - 1 - i); sqrt(b_t) is 0 at t = 0 (no noise added)."""
    t = CFG.diffusion_steps - 1 - i
    a, ah = head.alphas[t], head.alpha_hats[t]
    return (1 - a) / torch.sqrt(1 - ah), torch.sqrt(a), torch.sqrt(head.betas[t]) * (t > 0)


def _ddpm_step(head: DiffusionActionHead, i: int, x: torch.Tensor, eps: torch.Tensor, z: torch.Tensor
               ) -> torch.Tensor:
    """Octo's predict_action update at loop step i, all dims valid: clip((x - c eps) / sqrt(a) + sqrt(b) z)."""
    c, sqrt_a, sqrt_b = _coefficients(head, i)
    return torch.clip((x - c * eps) / sqrt_a + sqrt_b * z, -CFG.max_action, CFG.max_action)


def _step_bound(head: DiffusionActionHead, i: int, x: torch.Tensor, eps: torch.Tensor, z: torch.Tensor,
                u: float) -> torch.Tensor:
    """(B, H*A) bound on the rounding error loop step i adds to the state at unit roundoff u (module docstring)."""
    c, sqrt_a, sqrt_b = _coefficients(head, i)
    network = K_NET * u * eps.abs().amax(dim=-1, keepdim=True)
    own = K_OPS * u * ((x.abs() + c * eps.abs()) / sqrt_a + sqrt_b * z.abs())
    return c / sqrt_a * network + own


def _chain_bound(head: DiffusionActionHead, t: dict[str, torch.Tensor], u: float) -> torch.Tensor:
    """(B, H, A) first-order bound on the sample's rounding error at unit roundoff u; head and t in float64.

    An error d in step i's state (before its clip) reaches the sample as d * dsample/dz_i / sqrt(b_t), since z_i
    enters that state as sqrt(b_t) z_i; the derivatives come from one batched forward-mode pass, a direction per
    (step, dim) along a sample axis (the examples are independent rows). The last step's error only meets a clip.
    """
    states, eps = _trajectory(head, t)
    steps, (batch, dim) = CFG.diffusion_steps, states.shape[1:]
    n = (steps - 1) * dim
    direction = torch.arange(n)
    tangent = torch.zeros(steps, n, batch, dim, dtype=states.dtype)
    tangent[direction // dim, direction, :, direction % dim] = 1.0
    noise = t["step_noise"].unsqueeze(1).expand(steps, n, batch, dim).contiguous()
    init = t["init_noise"].expand(n, batch, dim).contiguous()

    def sample(z: torch.Tensor) -> torch.Tensor:
        return head.predict_action(t["emb"], sample_shape=(n,), init_noise=init, step_noise=z)

    _, d_sample = torch.func.jvp(sample, (noise,), (tangent,))  # (n, B, H, A)
    sqrt_b = torch.stack([_coefficients(head, i)[2] for i in range(steps - 1)])
    sens = d_sample.reshape(steps - 1, dim, batch, dim).permute(0, 2, 3, 1) / sqrt_b[:, None, None, None]
    local = torch.stack([_step_bound(head, i, states[i], eps[i], t["step_noise"][i], u) for i in range(steps)])
    bound = torch.einsum("ibjk,ibk->bj", sens.abs(), local[:-1]) + local[-1]
    return bound.reshape(batch, CFG.action_horizon, CFG.action_dim)


def _unit_bounds(g: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    """Every output's rounding bound per unit roundoff (the bounds are linear in u): K_NET max|out| or the chain's."""
    out = {k: K_NET * torch.from_numpy(g[k]).abs().max() for k in ONE_PASS}
    out["out_sample"] = _chain_bound(_head(g, torch.float64), _inputs(g, torch.float64), 1.0)
    return out


def _check(got: dict[str, torch.Tensor], g: dict[str, np.ndarray], dtype: torch.dtype, keys: tuple[str, ...]
           ) -> None:
    """|got - golden| <= (u(dtype) + u(float64)) * unit bound: this run's rounding plus the golden's."""
    u = torch.finfo(dtype).eps + torch.finfo(torch.float64).eps
    bounds = _unit_bounds(g)
    for key in keys:
        err = (got[key].double() - torch.from_numpy(g[key])).abs()
        tol = (u * bounds[key]).expand_as(err)
        worst = int(torch.argmax(err / tol))
        assert bool((err <= tol).all()), (
            f"{key} ({dtype}): |got - golden| = {err.flatten()[worst]:.3g} > tolerance {tol.flatten()[worst]:.3g} "
            f"at flat index {worst}; max error {err.max():.3g}")


def test_tiny_head_matches_golden_outputs():
    """float64: every output within ~1e-14 (one pass) or ~3e-12 (20-step sampler) of the golden."""
    g = dict(np.load(GOLDEN))
    got = _outputs(_head(g, torch.float64), _inputs(g, torch.float64))
    _check(got, g, torch.float64, (*ONE_PASS, "out_sample"))


def test_float32_one_pass_outputs_within_rounding():
    """float32 (the dtype the head runs in): eps, loss, phi within K_NET * 2^-23 * scale of the float64 golden."""
    g = dict(np.load(GOLDEN))
    got = _outputs(_head(g, torch.float32), _inputs(g, torch.float32))
    _check(got, g, torch.float32, ONE_PASS)


def test_float32_sampler_steps():
    """Every float32 sampler step equals the DDPM update, done in float64 from the same float32 state, within bound."""
    g = dict(np.load(GOLDEN))
    head32, head64, t = _head(g, torch.float32), _head(g, torch.float64), _inputs(g, torch.float32)
    with torch.no_grad():
        states, _ = _trajectory(head32, t)
        for i in range(CFG.diffusion_steps):
            x, z = states[i].double(), t["step_noise"][i].double()
            time = torch.full((*x.shape[:-1], 1), float(CFG.diffusion_steps - 1 - i), dtype=torch.float64)
            eps = head64.diffusion_model(t["emb"].double(), x, time)
            err = (states[i + 1].double() - _ddpm_step(head64, i, x, eps, z)).abs()
            tol = _step_bound(head64, i, x, eps, z, torch.finfo(torch.float32).eps)
            assert bool((err <= tol).all()), f"step {i}: error {err.max():.3g}, bound {tol.min():.3g}..{tol.max():.3g}"


def test_float32_sample_within_chain_bound():
    """The float32 20-step sample is within the propagated float32 rounding bound of the float64 golden."""
    g = dict(np.load(GOLDEN))
    got = _outputs(_head(g, torch.float32), _inputs(g, torch.float32))
    _check(got, g, torch.float32, ("out_sample",))


def _make() -> dict[str, np.ndarray]:
    torch.manual_seed(0)
    head = DiffusionActionHead(CFG)
    g = torch.Generator().manual_seed(0)
    d = CFG.flat_action_dim
    data = {"emb": torch.randn(4, 6, generator=g), "x": torch.randn(4, d, generator=g),
            "t": torch.randint(0, 20, (4, 1), generator=g).float(), "actions": torch.randn(4, 2, 3, generator=g),
            "mask": torch.rand(4, 2, 3, generator=g) > 0.2, "time": torch.randint(0, 20, (2, 4, 1), generator=g),
            "noise": torch.randn(2, 4, d, generator=g), "init_noise": torch.randn(4, d, generator=g),
            "step_noise": torch.randn(20, 4, d, generator=g)}
    arrays = {k: v.numpy() for k, v in data.items()}
    arrays.update({f"w:{k}": v.numpy() for k, v in head.state_dict().items()})
    outputs = _outputs(_head(arrays, torch.float64), _inputs(arrays, torch.float64))  # the golden is float64
    arrays.update({k: v.numpy() for k, v in outputs.items()})
    return arrays


if __name__ == "__main__":
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(GOLDEN, **_make())
    print(f"wrote {GOLDEN}")
