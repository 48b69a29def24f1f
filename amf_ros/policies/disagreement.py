"""Per-state uncertainties of action heads for the peer acquisition rules (policies/peer_scores.py): ensemble
disagreement (SAVE's VFD, Action-L2, GU; learnsyslab/uq_vla) and test-time MC dropout (the AMF paper's Dropout).

Every function takes head inputs ``emb`` (B, E) (``TaskConditionedPolicy.head_inputs``) and returns one value per
row, in normalized action units; randomness comes from an explicit ``torch.Generator`` only.

* :func:`denoiser_kl` (VFD). uq_vla's ``InterVelDiff`` (``src/lerobot/uncertainty/uncertainty_scoring/
  scoring_metrics.py``) integrates ``w(t) ||v_ref(x_t, t) - v_cmp(x_t, t)||^2 dt`` along the sampler's ODE path,
  w = t / (1 - t) for the OT path and 2 / beta(t) for the VP path: the Girsanov rate of the KL divergence between
  the two models' reverse SDEs. Octo's head is a 20-step DDPM with sigma_t^2 = beta_t, so the same quantity is the
  sum over the noisy steps t = T-1 .. 1 of KL(p_ref(x_t-1 | x_t) || p_cmp(x_t-1 | x_t)) along the reference chain:
      ||mu_ref - mu_cmp||^2 / (2 beta_t) = beta_t / (2 alpha_t (1 - alpha_hat_t)) * ||eps_ref - eps_cmp||^2
  (mu = (x - beta_t / sqrt(1 - alpha_hat_t) eps) / sqrt(alpha_t), as ``DiffusionActionHead.predict_action``; the
  sampler's clipping to +-max_action is ignored). The last step (t = 0) adds no noise, so its KL is undefined;
  uq_vla likewise stops at t = 0.95 < 1. Differences: uq_vla follows the deterministic ODE path and evaluates 11
  times (0, 0.1, .., 0.9, 0.95); here the DDPM chain (Octo's sampler) and all 19 noisy steps.
* :func:`action_l2` (Action-L2, ``ActionL2Distance``): mean L2 distance between the sampler's N chunks and each
  scorer's N chunks drawn from independent noise.
* :func:`terminal_log_variance` (GU, ``EnsembleTerminalVariance``): sum over (H, A) of log(var_m + 1e-8), the
  unbiased variance across the members' chunks drawn from the SAME noise.
* :func:`mc_dropout_variance` (Dropout): the variance of the sampled chunk across n last-layer dropout masks at
  fixed noise (the masks as ``embeddings.mc_dropout_embeddings``: rate p at test time only, same masks for all rows).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import nn


@contextmanager
def evaluating(*heads: nn.Module) -> Iterator[None]:
    """Heads in eval mode (no training-time dropout) for the duration, then back to their modes."""
    modes = [h.training for h in heads]
    for h in heads:
        h.eval()
    try:
        yield
    finally:
        for h, mode in zip(heads, modes, strict=True):
            h.train(mode)


def chain_noise(head: nn.Module, shape: tuple[int, ...], generator: torch.Generator | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """(init (*shape), step (T, *shape)) standard-normal noise of a DDPM chain."""
    init = torch.randn(shape, generator=generator)
    steps = torch.randn((head.config.diffusion_steps, *shape), generator=generator)
    return init, steps


def sample_chunks(head: nn.Module, emb: torch.Tensor, samples: int, generator: torch.Generator | None = None,
                  noise: tuple[torch.Tensor, torch.Tensor] | None = None) -> torch.Tensor:
    """(samples, B, H, A) chunks of ``head`` for head inputs (B, E).

    Diffusion heads: ``predict_action`` from ``noise`` = (init (samples, B, H*A), step (T, samples, B, H*A)), drawn
    from ``generator`` when None. Gaussian MLP heads: the mean (what the robot runs), repeated.
    """
    with torch.no_grad():
        if not hasattr(head, "predict_action"):
            return head.sample(emb).unsqueeze(0).expand(samples, *emb.shape[:-1], head.action_horizon,
                                                         head.action_dim)
        init, steps = noise if noise is not None else chain_noise(
            head, (samples, emb.shape[0], head.config.flat_action_dim), generator)
        return head.predict_action(emb.to(init.dtype), sample_shape=(samples,), init_noise=init, step_noise=steps)


def _check_diffusion(heads: Sequence[nn.Module]) -> None:
    ref = heads[0]
    for h in heads:
        if not hasattr(h, "diffusion_model"):
            raise ValueError(f"the denoiser KL (VFD) needs diffusion heads, got {type(h).__name__}")
        if (h.config.diffusion_steps, h.config.flat_action_dim) != (ref.config.diffusion_steps,
                                                                    ref.config.flat_action_dim):
            raise ValueError(f"ensemble members differ in (diffusion_steps, H*A): {h.config.diffusion_steps=}, "
                             f"{h.config.flat_action_dim=} vs {ref.config.diffusion_steps=}, "
                             f"{ref.config.flat_action_dim=}")


def step_kl_weights(head: nn.Module) -> torch.Tensor:
    """(T,) beta_t / (2 alpha_t (1 - alpha_hat_t)) for t = 0 .. T-1, 0 at t = 0 (no noise added there)."""
    w = head.betas / (2 * head.alphas * (1 - head.alpha_hats))
    w[0] = 0.0
    return w


@torch.no_grad()
def ddpm_chain(head: nn.Module, emb: torch.Tensor, init: torch.Tensor, steps: torch.Tensor,
               visit: Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], None] | None = None) -> torch.Tensor:
    """(..., H*A) the end of ``head``'s DDPM chain, step for step ``DiffusionActionHead.predict_action`` (all dims
    valid), calling ``visit(t, x_t, time, eps)`` at every step t = T-1 .. 0 before moving on.

    Args:
        head: the DiffusionActionHead whose chain is run (its config gives T = diffusion_steps).
        emb: (..., E) head inputs, broadcast against ``init``.
        init: (..., H*A) x_T.
        steps: (T, ..., H*A) the step noise in loop order.
        visit: called as ``visit(t, x_t, time, eps)`` at every step (None = no callback).
    """
    c = head.config
    x = init.to(emb.dtype)
    for i, t in enumerate(range(c.diffusion_steps - 1, -1, -1)):
        time = torch.full((*x.shape[:-1], 1), float(t), dtype=x.dtype)
        eps = head.diffusion_model(emb, x, time)
        if visit is not None:
            visit(t, x, time, eps)
        a, ah = head.alphas[t], head.alpha_hats[t]
        x = (x - (1 - a) / torch.sqrt(1 - ah) * eps) / torch.sqrt(a)
        if t > 0:
            x = x + torch.sqrt(head.betas[t]) * steps[i]
        x = torch.clip(x, -c.max_action, c.max_action)
    return x


@torch.no_grad()
def denoiser_kl(ref: nn.Module, others: Sequence[nn.Module], emb: torch.Tensor, samples: int = 5,
                generator: torch.Generator | None = None) -> torch.Tensor:
    """(B,) VFD for a DDPM head: the reverse-chain KL between ``ref`` and each of ``others``, along ``ref``'s chain.

    Mean over the ``samples`` chains of ``ref`` and over ``others`` (see the module docstring for the formula).
    """
    if not others:
        raise ValueError("the denoiser KL needs at least one other ensemble member")
    _check_diffusion([ref, *others])
    init, steps = chain_noise(ref, (samples, emb.shape[0], ref.config.flat_action_dim), generator)
    w = step_kl_weights(ref)
    total = torch.zeros(samples, emb.shape[0], dtype=init.dtype)

    def visit(t: int, x: torch.Tensor, time: torch.Tensor, eps: torch.Tensor) -> None:
        if t > 0:
            for other in others:
                total.add_(w[t] * (eps - other.diffusion_model(emb, x, time)).square().sum(-1))

    with evaluating(ref, *others):
        ddpm_chain(ref, emb.to(init.dtype), init, steps, visit)
    return total.mean(0) / len(others)


@torch.no_grad()
def action_l2(sampler: nn.Module, scorers: Sequence[nn.Module], emb: torch.Tensor, samples: int = 5,
              generator: torch.Generator | None = None) -> torch.Tensor:
    """(B,) mean over ``scorers`` of the mean pairwise L2 distance between ``sampler``'s and the scorer's chunks.

    Each model draws ``samples`` chunks from its own noise. uq_vla's scorers are the whole ensemble, the sampler
    included (its distance to its own independent samples is not 0: pass ``[sampler, *others]`` for that).
    """
    if not scorers:
        raise ValueError("action_l2 needs at least one scorer")
    with evaluating(sampler, *scorers):
        ref = sample_chunks(sampler, emb, samples, generator).flatten(2).transpose(0, 1)  # (B, N, H*A)
        out = []
        for scorer in scorers:
            cmp = sample_chunks(scorer, emb, samples, generator).flatten(2).transpose(0, 1)
            out.append(torch.cdist(ref.float(), cmp.float()).mean(dim=(1, 2)))
    return torch.stack(out).mean(0)


@torch.no_grad()
def terminal_log_variance(members: Sequence[nn.Module], emb: torch.Tensor, samples: int = 5,
                          generator: torch.Generator | None = None) -> torch.Tensor:
    """(B,) GU: mean over ``samples`` shared noises of sum_(h,a) log(Var_members(chunk) + 1e-8).

    uq_vla stacks [sampler, *scorers] = [A, A, B] for a two-model ensemble; the duplicate scales every variance
    by the same factor, i.e. shifts every score by one constant, which GU's task weights (shifted by their
    minimum) cancel: the distinct members are used here.
    """
    if len(members) < 2:
        raise ValueError(f"GU needs at least two ensemble members, got {len(members)}")
    noise = None
    if hasattr(members[0], "predict_action"):
        noise = chain_noise(members[0], (samples, emb.shape[0], members[0].config.flat_action_dim), generator)
    with evaluating(*members):
        chunks = torch.stack([sample_chunks(m, emb, samples, generator, noise) for m in members])  # (M, N, B, H, A)
    return torch.log(chunks.var(dim=0, unbiased=True) + 1e-8).sum(dim=(-2, -1)).mean(0)


@torch.no_grad()
def mc_dropout_variance(head: nn.Module, emb: torch.Tensor, masks: int = 16, rate: float = 0.1, seed: int = 0,
                        generator: torch.Generator | None = None) -> torch.Tensor:
    """(B, H*A) per-dimension variance of the sampled chunk across ``masks`` last-layer dropout masks.

    The masks (rate ``rate``, seed ``seed``, shared by all rows) multiply the inputs of ``head.last_layer`` at
    every denoising step; the chain noise (from ``generator``) is the same for every mask, so the variance is
    the dropout's alone.
    """
    if masks < 2 or not 0.0 < rate < 1.0:
        raise ValueError(f"need masks >= 2 and 0 < rate < 1, got {masks=} {rate=}")
    layer = head.last_layer
    g = torch.Generator().manual_seed(seed + 3)
    keep = (torch.rand(masks, 1, layer.in_features, generator=g) >= rate).float() / (1 - rate)

    def drop(_module: nn.Module, args: tuple[torch.Tensor, ...]) -> tuple[torch.Tensor, ...]:
        return (args[0] * keep.to(args[0].dtype),)

    handle = layer.register_forward_pre_hook(drop)
    try:
        with evaluating(head):
            if hasattr(head, "predict_action"):
                init, steps = chain_noise(head, (1, emb.shape[0], head.config.flat_action_dim), generator)
                noise = (init.expand(masks, *init.shape[1:]), steps.expand(steps.shape[0], masks, *steps.shape[2:]))
                chunks = sample_chunks(head, emb, masks, None, noise)
            else:  # the mean, one row of masks per mask
                chunks = head.sample(emb.unsqueeze(0).expand(masks, *emb.shape))
    finally:
        handle.remove()
    return chunks.flatten(-2).var(dim=0, unbiased=True)
