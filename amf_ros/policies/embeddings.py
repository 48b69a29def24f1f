"""Per-example embeddings phi(x) for the AMF criterion (paper Sec. 4.2 "Kernel approximations", Fig. 4 ablation).

kind="grad" (default, AMF-NN): the loss gradient w.r.t. the head's LAST Linear layer (W (O, F), b (O)), per example,
    phi = [vec(sum_k g_k h_k^T), sum_k g_k]   (O * (F + 1),  row-major W then b, as torch.func would flatten it)
    in closed form from ``head.last_layer_terms`` (h = the layer's inputs, g = dLoss/d(output)), at K FIXED draws of
    diffusion step and noise shared by all examples, so phi is deterministic and independent of batching.
    Labels: the demonstrated chunk (``label="demo"``) or, for states relabelled with another task, an action
    sampled from the policy at a fixed seed (``label="sample"``); never the model's own mean prediction, whose
    squared-error gradient is 0 (DESIGN.md pitfall). Optional Gaussian random projection to ``projection_dim``.
kind="last_layer": the last layer's inputs h, averaged over the K draws, (F,).
kind="dropout": MC-dropout at the last layer: n dropout masks (rate p, fixed seed) on h, outputs centered over the
    masks and scaled by 1/sqrt(n), flattened (n * O,), so <phi(x), phi(x')> is the empirical dropout covariance.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import torch
from torch import nn
from torch.func import functional_call, grad, vmap


@dataclass
class EmbeddingConfig:
    """How :func:`compute_embeddings` builds phi."""

    kind: str = "grad"
    """"grad" (loss-gradient, AMF-NN), "last_layer" or "dropout" (the paper's ablations)."""
    draws: int = 4
    """K fixed diffusion (step, noise) draws per example (Gaussian head: 1)."""
    label: str = "demo"
    """"demo" = the transition's action chunk; "sample" = an action sampled from the policy (fixed seed)."""
    projection_dim: int = 0
    """> 0: Gaussian random projection of "grad" embeddings to this width (0 = full O * (F + 1))."""
    dropout_samples: int = 16
    """n, dropout masks for kind="dropout"."""
    dropout_rate: float = 0.1
    """p, dropout rate for kind="dropout"."""
    seed: int = 0
    """Seed of the fixed draws, the sampled labels, the projection and the dropout masks."""
    batch_size: int = 1024
    """Examples per chunk of computation (memory bound)."""

    def __post_init__(self) -> None:
        if self.kind not in ("grad", "last_layer", "dropout"):
            raise ValueError(f"kind must be 'grad', 'last_layer' or 'dropout', got {self.kind=}")
        if self.label not in ("demo", "sample"):
            raise ValueError(f"label must be 'demo' or 'sample', got {self.label=}")
        if self.draws < 1 or self.dropout_samples < 2 or self.batch_size < 1 or self.projection_dim < 0:
            raise ValueError(f"invalid sizes: {self.draws=} {self.dropout_samples=} {self.batch_size=} "
                             f"{self.projection_dim=}")
        if not 0.0 < self.dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must be in (0, 1), got {self.dropout_rate=}")


def fixed_draws(head: nn.Module, k: int, seed: int) -> Any:
    """K draws with a leading batch axis of 1 (shared by every example), from ``seed``."""
    return head.draw(k, 1, torch.Generator().manual_seed(seed))


def sampled_labels(head: nn.Module, emb: torch.Tensor, seed: int) -> torch.Tensor:
    """(B, H, A) labels sampled from the head at a fixed seed (Gaussian head: mu + sigma z, never mu alone)."""
    g = torch.Generator().manual_seed(seed + 1)
    if hasattr(head, "predict_action"):
        return head.predict_action(emb, generator=g)
    return head.sample(emb, generator=g, noise_scale=1.0)


def gradient_dim(head: nn.Module) -> int:
    """O * (F + 1), the width of unprojected gradient embeddings."""
    layer = head.last_layer
    return layer.out_features * (layer.in_features + 1)


def random_projection(dim_in: int, dim_out: int, seed: int) -> torch.Tensor:
    """(dim_out, dim_in) Gaussian matrix with N(0, 1/dim_out) entries (preserves inner products in expectation)."""
    g = torch.Generator().manual_seed(seed + 2)
    return torch.randn(dim_out, dim_in, generator=g) / dim_out ** 0.5


def loss_gradient_embeddings(head: nn.Module, emb: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None,
                             draws: Any, projection: torch.Tensor | None = None) -> torch.Tensor:
    """(B, O * (F + 1)) or (B, P) closed-form per-example last-layer loss gradients (see module docstring)."""
    with torch.no_grad():
        h, g = head.last_layer_terms(emb, actions, mask, draws)  # (K, B, F), (K, B, O)
        if h.shape[1] != g.shape[1]:
            h = h.expand(h.shape[0], g.shape[1], h.shape[2])
        if projection is None:
            gw = torch.einsum("kbo,kbf->bof", g, h).reshape(g.shape[1], -1)
            return torch.cat([gw, g.sum(0)], dim=1)
        o, f = g.shape[2], h.shape[2]
        r_w = projection[:, :o * f].reshape(projection.shape[0], o, f)
        r_b = projection[:, o * f:]
        return torch.einsum("kbo,kbf,pof->bp", g, h, r_w) + torch.einsum("kbo,po->bp", g, r_b)


def autograd_per_sample_gradients(head: nn.Module, emb: torch.Tensor, actions: torch.Tensor,
                                  mask: torch.Tensor | None, draws: Any) -> torch.Tensor:
    """(B, O * (F + 1)) the same gradients with torch.func (vmap over examples of grad of per_sample_loss).

    Reference implementation for tests and for heads without ``last_layer_terms``; slower.
    """
    name = next(n for n, m in head.named_modules() if m is head.last_layer)
    params = {f"{name}.weight": head.last_layer.weight.detach(), f"{name}.bias": head.last_layer.bias.detach()}
    if mask is None:
        mask = torch.ones_like(actions, dtype=torch.bool)

    wrapper = _PerSampleLoss(head)
    fields = {k: v for k, v in vars(draws).items()} if draws is not None else {}
    per_example = {k: v for k, v in fields.items() if v.shape[1] > 1}  # (K, B, ...) draws are vmapped over B
    shared = {k: v for k, v in fields.items() if k not in per_example}

    def one(p: dict[str, torch.Tensor], e: torch.Tensor, a: torch.Tensor, m: torch.Tensor,
            mine: dict[str, torch.Tensor]) -> torch.Tensor:
        d = None if draws is None else type(draws)(**shared, **{k: v.unsqueeze(1) for k, v in mine.items()})
        wrapped = {f"head.{k}": v for k, v in p.items()}
        return functional_call(wrapper, wrapped, (e[None], a[None], m[None], d), strict=False).squeeze(0)

    grads = vmap(grad(one), in_dims=(None, 0, 0, 0, 1))(params, emb, actions, mask, per_example)
    return torch.cat([grads[f"{name}.weight"].reshape(emb.shape[0], -1), grads[f"{name}.bias"]], dim=1)


class _PerSampleLoss(nn.Module):
    """Wraps ``head.per_sample_loss`` as ``forward`` so torch.func.functional_call can substitute parameters."""

    def __init__(self, head: nn.Module) -> None:
        super().__init__()
        self.head = head

    def forward(self, *args: Any) -> torch.Tensor:
        return self.head.per_sample_loss(*args)


def last_layer_embeddings(head: nn.Module, emb: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None,
                          draws: Any) -> torch.Tensor:
    """(B, F) inputs of the last layer, averaged over the K draws."""
    with torch.no_grad():
        h, _ = head.last_layer_terms(emb, actions, mask, draws)
        return h.mean(0)


def mc_dropout_embeddings(head: nn.Module, emb: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None,
                          draws: Any, n: int, rate: float, seed: int) -> torch.Tensor:
    """(B, n * O) centered last-layer MC-dropout outputs / sqrt(n) (first draw's h; see module docstring)."""
    with torch.no_grad():
        h, _ = head.last_layer_terms(emb, actions, mask, draws)
        h = h[0]  # (B, F)
        g = torch.Generator().manual_seed(seed + 3)
        keep = (torch.rand(n, 1, h.shape[1], generator=g) >= rate).to(h.dtype) / (1 - rate)  # same masks for all x
        out = head.last_layer(h.unsqueeze(0) * keep)  # (n, B, O)
        out = (out - out.mean(0, keepdim=True)) / n ** 0.5
        return out.permute(1, 0, 2).reshape(h.shape[0], -1)


def compute_embeddings(head: nn.Module, emb: torch.Tensor, actions: torch.Tensor | None, mask: torch.Tensor | None,
                       config: EmbeddingConfig, sample_fn: Callable[[torch.Tensor, int], torch.Tensor] | None = None
                       ) -> torch.Tensor:
    """(B, P) embeddings of ``config.kind`` for trunk embeddings (B, E) and labels (B, H, A) in batches.

    Args:
        head: an action head (``policies/base.py: ActionHead``).
        emb: (B, E) trunk embeddings.
        actions: (B, H, A) normalized demonstrated chunks; ignored (may be None) when ``config.label == "sample"``.
        mask: (B, H, A) validity of ``actions`` (None = all valid; forced to all valid for sampled labels).
        config: kind, draws, label, projection and seed.
        sample_fn: ``(emb, seed) -> (B, H, A)`` labels for ``label="sample"`` (default: :func:`sampled_labels`,
            i.e. from ``head`` itself; the policy passes its mixed prior/fine-tuned sampler).
    """
    k = 1 if not hasattr(head, "predict_action") else config.draws
    draws = fixed_draws(head, k, config.seed)
    proj = None
    if config.kind == "grad" and config.projection_dim:
        proj = random_projection(gradient_dim(head), config.projection_dim, config.seed)
    was_training = head.training
    head.eval()
    try:
        outs = []
        for i in range(0, emb.shape[0], config.batch_size):
            e = emb[i:i + config.batch_size]
            if config.label == "sample" or actions is None:
                a = (sample_fn or (lambda x, s: sampled_labels(head, x, s)))(e, config.seed)
                m = None
            else:
                a = actions[i:i + config.batch_size]
                m = None if mask is None else mask[i:i + config.batch_size]
            if config.kind == "grad":
                outs.append(loss_gradient_embeddings(head, e, a, m, draws, proj))
            elif config.kind == "last_layer":
                outs.append(last_layer_embeddings(head, e, a, m, draws))
            else:
                outs.append(mc_dropout_embeddings(head, e, a, m, draws, config.dropout_samples,
                                                  config.dropout_rate, config.seed))
        return torch.cat(outs) if outs else torch.zeros(0, 0)
    finally:
        head.train(was_training)
