"""Golden outputs of a tiny seeded diffusion head (STYLE habit 13): forward, loss, sampler, gradient embeddings.

The .npz stores the head's weights, the inputs, the explicit noise and the expected outputs, so the test does not
depend on torch's initialisation staying the same across versions; it fails when the port's *function* changes.

Runbook, when a change of the head's function is intended (say why in the commit message):
    source scripts/env.sh && python test/policies/test_golden.py   # rewrites test/policies/golden/diffusion_head.npz

Numerics. The expected outputs are computed in float64 from the float32 weights and inputs (exact in float64).
Every check allows a rounding bound, never one CPU's float32 result: summation order, FMA and vectorised libm
differ between x86-64 CPUs, and a float32 golden at rtol 1e-5 failed on an AMD EPYC by 1.2e-4 in the sample. With
u = eps(dtype) (2^-23 in float32, 2^-52 in float64; one rounded operation errs by at most u/2 relative):
* eps, loss, phi (one pass): K_NET u max|output|, K_NET = 64: a sum over the widest fan-in (64 terms), in any
  order, errs by at most 64 roundings of u/2 = 32 u relative to its terms; doubled for the layers before it.
  Float32 errors, in u max|output|: eps 5.0, loss 1.7, phi 2.8 on an AMD EPYC; eps 5.6 on the machine that made
  the first (float32) golden; at most 10 over 300 exactly equivalent heads with permuted hidden units (other
  summation orders) and 28 with every weight moved by 1 ulp.
* One sampler step x' = clip((x - c_t eps) / sqrt(a_t) + sqrt(b_t) z), c_t = (1 - a_t) / sqrt(1 - ah_t), adds
  (c_t / sqrt(a_t)) K_NET u max|eps|, the network's error (x31.6 at t = 19, where b_t = 0.999), plus
  K_OPS u ((|x| + c_t |eps|) / sqrt(a_t) + sqrt(b_t) |z|) for its own roundings, K_OPS = 4 (in roundings of u/2:
  7.5 on the c_t eps term, 3 on x, 3 on sqrt(b_t) z, all <= 8). test_sampler_steps_are_ddpm_updates checks this.
* The 20-step chain carries each step's error on (_state_bounds): e_0 = 0, p = |J_i| e_i + step bound, e_{i+1} = p,
  or 0 where the float64 state before the clip is beyond +-max_action by more than p (both runs clip: exact).
  J_i = (I - c_t deps/dx) / sqrt(a_t) is the step's Jacobian, from the network in float64 along the trajectory
  (first order in the error). Float32 sample bound: 1.3e-5 .. 9.0e-3 (0 at the 10 of 24 values clipped in both).
  Measured float32 error: 1.3e-4 on the AMD EPYC (<= 0.12 of the bound at every state), 2.6e-4 on the first
  golden's machine (0.04), up to 1.9e-3 with 1-ulp weight jitter (0.21).
Each comparison allows this run's bound plus the golden's float64 one. In float64 the tolerances are <= 2.3e-13 for
one pass and <= 3.4e-11 for the sample, so test_tiny_head_matches_golden_outputs[float64] fails on any change of
the function (a 1e-4 relative change of c_t, LayerNorm eps 1e-6 -> 1e-5, the schedule's s 0.008 -> 0.0081).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from amf_ros.policies.diffusion_head import DiffusionActionHead, DiffusionDraws, DiffusionHeadConfig
from amf_ros.policies.embeddings import loss_gradient_embeddings

GOLDEN = Path(__file__).parent / "golden" / "diffusion_head.npz"
CFG = DiffusionHeadConfig(embedding_dim=6, action_horizon=2, action_dim=3, hidden_dim=8, num_blocks=2)
K_NET = 64
"""Rounding error of one network / loss / embedding pass, in u times the output's largest magnitude."""
K_OPS = 4
"""Rounding error of the sampler step's own arithmetic, in u times the magnitude of each of its terms."""
ONE_PASS = ("out_eps", "out_loss", "out_phi")
U64 = torch.finfo(torch.float64).eps


def _golden() -> dict[str, np.ndarray]:
    return dict(np.load(GOLDEN))


def _head(g: dict[str, np.ndarray], dtype: torch.dtype) -> DiffusionActionHead:
    head = DiffusionActionHead(CFG)
    head.load_state_dict({k[2:]: torch.from_numpy(v) for k, v in g.items() if k.startswith("w:")})
    return head.to(dtype).requires_grad_(False)  # float64: the float32 schedule buffers are cast too (same constants)


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
    """(T + 1, B, H*A) predict_action's states x_T ... x_0 (the last is the sample), (T, B, H*A) the network's eps."""
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


def _step_time(i: int, x: torch.Tensor) -> torch.Tensor:
    return torch.full((*x.shape[:-1], 1), float(CFG.diffusion_steps - 1 - i), dtype=x.dtype)


def _coefficients(head: DiffusionActionHead, i: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """c_t, sqrt(a_t), sqrt(b_t) of loop step i (t = T - 1 - i); sqrt(b_t) is 0 at t = 0, where no noise is added."""
    t = CFG.diffusion_steps - 1 - i
    a, ah = head.alphas[t], head.alpha_hats[t]
    return (1 - a) / torch.sqrt(1 - ah), torch.sqrt(a), torch.sqrt(head.betas[t]) * (t > 0)


def _pre_clip(head: DiffusionActionHead, i: int, x: torch.Tensor, eps: torch.Tensor, z: torch.Tensor
              ) -> torch.Tensor:
    """Octo's DDPM update at loop step i before its clip: (x - c_t eps) / sqrt(a_t) + sqrt(b_t) z."""
    c, sqrt_a, sqrt_b = _coefficients(head, i)
    return (x - c * eps) / sqrt_a + sqrt_b * z


def _step_bound(head: DiffusionActionHead, i: int, x: torch.Tensor, eps: torch.Tensor, z: torch.Tensor,
                u: float) -> torch.Tensor:
    """(B, H*A) bound on the rounding error loop step i adds to the state (module docstring)."""
    c, sqrt_a, sqrt_b = _coefficients(head, i)
    network = K_NET * u * eps.abs().amax(dim=-1, keepdim=True)
    own = K_OPS * u * ((x.abs() + c * eps.abs()) / sqrt_a + sqrt_b * z.abs())
    return c / sqrt_a * network + own


def _state_bounds(head: DiffusionActionHead, t: dict[str, torch.Tensor], u: float) -> torch.Tensor:
    """(T + 1, B, H*A) bounds on the rounding error of each sampler state; head and t in float64 (docstring)."""
    with torch.no_grad():
        states, eps = _trajectory(head, t)
    jacobian = torch.func.vmap(torch.func.jacfwd(head.diffusion_model, argnums=1))  # d eps / d x, (B, D, D)
    eye = torch.eye(states.shape[-1], dtype=states.dtype)
    bounds = [torch.zeros_like(states[0])]  # x_T is the given init_noise
    for i in range(CFG.diffusion_steps):
        x, z = states[i], t["step_noise"][i]
        c, sqrt_a, _ = _coefficients(head, i)
        step_jacobian = (eye - c * jacobian(t["emb"], x, _step_time(i, x))) / sqrt_a
        before_clip = torch.einsum("bjk,bk->bj", step_jacobian.abs(), bounds[-1]) + _step_bound(
            head, i, x, eps[i], z, u)
        both_clip = _pre_clip(head, i, x, eps[i], z).abs() - CFG.max_action > before_clip
        bounds.append(torch.where(both_clip, torch.zeros_like(before_clip), before_clip))
    return torch.stack(bounds)


def _tolerances(g: dict[str, np.ndarray], u: float) -> dict[str, torch.Tensor]:
    """Every output's rounding bound at u: K_NET u max|out| for one pass, the last state bound for the sample."""
    tol = {k: K_NET * u * torch.from_numpy(g[k]).abs().max() for k in ONE_PASS}
    tol["out_sample"] = _state_bounds(_head(g, torch.float64), _inputs(g, torch.float64), u)[-1].reshape(
        -1, CFG.action_horizon, CFG.action_dim)
    return tol


def _assert_within(name: str, got: torch.Tensor, want: torch.Tensor, tol: torch.Tensor) -> None:
    err = (got.double() - want.double()).abs()
    tol = tol.expand_as(err)
    worst = int(torch.argmax(err - tol))
    assert bool((err <= tol).all()), (f"{name}: |error| {err.flatten()[worst]:.3g} > tolerance "
                                      f"{tol.flatten()[worst]:.3g} at flat index {worst} (max error {err.max():.3g})")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_tiny_head_matches_golden_outputs(dtype: torch.dtype):
    """float64: all outputs within ~1e-14 (one pass) / ~1e-11 (sample); float32 (the dtype the head runs in):
    within its rounding bound, ~1e-5 relative for one pass and the propagated bound for the 20-step sample."""
    g = _golden()
    got = _outputs(_head(g, dtype), _inputs(g, dtype))
    tol = _tolerances(g, torch.finfo(dtype).eps + U64)  # this run's rounding plus the golden's
    for key, value in got.items():
        _assert_within(f"{key} ({dtype})", value, torch.from_numpy(g[key]), tol[key])


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=["float64", "float32"])
def test_sampler_steps_are_ddpm_updates(dtype: torch.dtype):
    """Each predict_action step, from its own state, is the float64 DDPM update within that one step's bound."""
    g = _golden()
    head, head64, t = _head(g, dtype), _head(g, torch.float64), _inputs(g, dtype)
    with torch.no_grad():
        states, _ = _trajectory(head, t)
        for i in range(CFG.diffusion_steps):
            x, z = states[i].double(), t["step_noise"][i].double()
            eps = head64.diffusion_model(t["emb"].double(), x, _step_time(i, x))
            want = torch.clip(_pre_clip(head64, i, x, eps, z), -CFG.max_action, CFG.max_action)
            tol = _step_bound(head64, i, x, eps, z, torch.finfo(dtype).eps + U64)
            _assert_within(f"step {i} ({dtype})", states[i + 1], want, tol)


def test_float32_sampler_trajectory_within_propagated_bound():
    """Every float32 sampler state is within its propagated rounding bound of the float64 run's state."""
    g = _golden()
    states32, _ = _trajectory(_head(g, torch.float32), _inputs(g, torch.float32))
    t64 = _inputs(g, torch.float64)
    states64, _ = _trajectory(_head(g, torch.float64), t64)
    bounds = _state_bounds(_head(g, torch.float64), t64, torch.finfo(torch.float32).eps + U64)
    for i in range(1, CFG.diffusion_steps + 1):
        _assert_within(f"state after step {i - 1}", states32[i], states64[i], bounds[i])


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
