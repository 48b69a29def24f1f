"""Octo's DiffusionActionHead in PyTorch, with a parameter tree that maps one-to-one onto Octo's.

Ported from octo-models/octo (commit 241fb35): ``octo/model/components/action_heads.py`` (DiffusionActionHead:
loss, predict_action) and ``octo/model/components/diffusion.py`` (cosine_beta_schedule, ScoreActor,
FourierFeatures, MLP, MLPResNetBlock, MLPResNet); facts in /work/shared/reference/octo-head-params.md.

Forward (score network, any leading batch shape ``...``):
    t_ff = [cos(2 pi t W^T), sin(2 pi t W^T)]           time features, W (time_dim/2, 1), t = integer step as float
    c    = Dense_1(swish(Dense_0(t_ff)))                cond_encoder, time_dim -> 2 time_dim -> time_dim
    u    = concat(c, obs_enc (..., E), x_t (..., H*A))  in this order
    h    = Dense_0(u); per block: h = h + Dense_1(swish(Dense_0(LayerNorm(Dropout(h)))))
    eps  = Dense_1(swish(h))                            (..., H*A), flat (h a) layout, horizon index outer
Loss: masked epsilon-MSE on clipped (+-max_action) actions at uniform steps 0..T-1, times action_dim.
Sampler: 20-step DDPM, sigma_t^2 = beta_t, clip after every step, masked dims overwritten by noise.

Parameter mapping (Octo path under ``heads_action/diffusion_model/`` -> ``DiffusionActionHead.state_dict()`` key;
Dense kernels (in, out) are TRANSPOSED into ``nn.Linear.weight`` (out, in); ``time_preprocess/kernel`` is NOT):

| Octo (flax) path                                        | torch key (prefix ``diffusion_model.``)     |
|---------------------------------------------------------|---------------------------------------------|
| time_preprocess/kernel (16, 1)                          | time_preprocess.kernel (16, 1), as is       |
| cond_encoder/Dense_{0,1}/kernel, bias                   | cond_encoder.dense{0,1}.weight (T), bias    |
| reverse_network/Dense_0/kernel (32+E+H*A, hidden), bias | reverse_network.dense0.weight (T), bias     |
| reverse_network/MLPResNetBlock_i/LayerNorm_0/scale,bias | reverse_network.blocks.i.norm.weight, bias  |
| reverse_network/MLPResNetBlock_i/Dense_{0,1}/kernel,bias| reverse_network.blocks.i.dense{0,1}.weight (T), bias |
| reverse_network/Dense_1/kernel (hidden, H*A), bias      | reverse_network.dense1.weight (T), bias     |

:func:`octo_param_map` returns this table for a given config (with shapes), for the Octo weight converter.
The noise schedule is a non-persistent buffer (recomputed, like Octo's ``setup``), so ``state_dict()`` holds
exactly the 27 leaves of Octo's tree for 3 blocks (1,703,564 parameters for Octo-Small, E = 384).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Sequence

import torch
import torch.nn.functional as F  # noqa: N812
from torch import nn

from amf_ros.policies.base import check_shape


@dataclass
class DiffusionHeadConfig:
    """Hyper-parameters of :class:`DiffusionActionHead` (defaults = Octo 1.5's, except the embedding width)."""

    embedding_dim: int = 384
    """E, width of the trunk embedding (Octo-Small 384, Octo-Base 768)."""
    action_horizon: int = 4
    """H, actions per predicted chunk."""
    action_dim: int = 7
    """A, action dimensions (7 for the WidowX EefDeltaAction)."""
    time_dim: int = 32
    """Width of the Fourier time features and of the cond_encoder output."""
    num_blocks: int = 3
    """Residual MLP blocks in the reverse network."""
    hidden_dim: int = 256
    """Residual stream width (blocks expand to 4x inside)."""
    use_layer_norm: bool = True
    """Pre-LayerNorm in every block (eps 1e-6, as flax)."""
    dropout_rate: float = 0.0
    """Dropout at the block input (Octo 1.5: 0; > 0 enables MC-dropout embeddings at train time)."""
    diffusion_steps: int = 20
    """T, DDPM steps of the cosine schedule."""
    max_action: float = 5.0
    """Actions are clipped to +-max_action (normalized units) in the loss and after every sampler step."""
    loss_type: str = "mse"
    """"mse" or "l1" on the noise prediction."""
    n_diffusion_samples: int = 1
    """Noise/time draws per example in the training loss."""

    def __post_init__(self) -> None:
        for name in ("embedding_dim", "action_horizon", "action_dim", "num_blocks", "hidden_dim",
                     "diffusion_steps", "n_diffusion_samples"):
            if int(getattr(self, name)) < 1:
                raise ValueError(f"DiffusionHeadConfig.{name} must be >= 1, got {getattr(self, name)=}")
        if self.time_dim < 2 or self.time_dim % 2:
            raise ValueError(f"time_dim must be even and >= 2, got {self.time_dim=}")
        if not 0.0 <= self.dropout_rate < 1.0:
            raise ValueError(f"dropout_rate must be in [0, 1), got {self.dropout_rate=}")
        if self.loss_type not in ("mse", "l1"):
            raise ValueError(f"loss_type must be 'mse' or 'l1', got {self.loss_type=}")
        if self.max_action <= 0:
            raise ValueError(f"max_action must be > 0, got {self.max_action=}")

    @property
    def flat_action_dim(self) -> int:
        """H * A, the width of the flattened action chunk."""
        return self.action_horizon * self.action_dim

    @classmethod
    def octo_small(cls, **overrides: object) -> "DiffusionHeadConfig":
        """Octo-Small 1.5's head (E = 384)."""
        return dataclasses.replace(cls(embedding_dim=384), **overrides)

    @classmethod
    def octo_base(cls, **overrides: object) -> "DiffusionHeadConfig":
        """Octo-Base 1.5's head (E = 768)."""
        return dataclasses.replace(cls(embedding_dim=768), **overrides)


def cosine_beta_schedule(steps: int, s: float = 0.008) -> torch.Tensor:
    """(steps,) betas of Octo's ``cosine_beta_schedule`` (clipped to [0, 0.999]), float64."""
    t = torch.linspace(0, steps, steps + 1, dtype=torch.float64) / steps
    alphas_cumprod = torch.cos((t + s) / (1 + s) * math.pi * 0.5) ** 2
    alphas_cumprod = alphas_cumprod / alphas_cumprod[0]
    betas = 1 - alphas_cumprod[1:] / alphas_cumprod[:-1]
    return torch.clip(betas, 0, 0.999)


def _xavier(layer: nn.Linear) -> nn.Linear:
    nn.init.xavier_uniform_(layer.weight)
    nn.init.zeros_(layer.bias)
    return layer


def _lecun(layer: nn.Linear) -> nn.Linear:
    # flax lecun_normal: truncated normal at +-2 sigma with std sqrt(1/fan_in)/0.8796 (effective std 1/sqrt(fan_in)).
    std = math.sqrt(1.0 / layer.in_features) / 0.87962566103423978
    nn.init.trunc_normal_(layer.weight, std=std, a=-2 * std, b=2 * std)
    nn.init.zeros_(layer.bias)
    return layer


class FourierFeatures(nn.Module):
    """Learnable Fourier time features: (..., 1) -> (..., time_dim), cos first (Octo ``FourierFeatures``)."""

    def __init__(self, time_dim: int) -> None:
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(time_dim // 2, 1) * 0.2)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        """(..., 1) integer steps as float -> (..., time_dim) [cos, sin]."""
        f = 2 * math.pi * t @ self.kernel.T
        return torch.cat([torch.cos(f), torch.sin(f)], dim=-1)


class CondEncoder(nn.Module):
    """Octo ``MLP((2 time_dim, time_dim), activate_final=False)``: time_dim -> 2 time_dim -> time_dim."""

    def __init__(self, time_dim: int) -> None:
        super().__init__()
        self.dense0 = _xavier(nn.Linear(time_dim, 2 * time_dim))
        self.dense1 = _xavier(nn.Linear(2 * time_dim, time_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """(..., time_dim) -> (..., time_dim)."""
        return self.dense1(F.silu(self.dense0(x)))


class MLPResNetBlock(nn.Module):
    """Pre-LN residual block: h + Dense_1(swish(Dense_0(LN(Dropout(h))))), width hidden -> 4 hidden -> hidden."""

    def __init__(self, hidden_dim: int, use_layer_norm: bool, dropout_rate: float) -> None:
        super().__init__()
        self.dropout_rate = dropout_rate
        self.norm = nn.LayerNorm(hidden_dim, eps=1e-6) if use_layer_norm else None
        self.dense0 = _lecun(nn.Linear(hidden_dim, 4 * hidden_dim))
        self.dense1 = _lecun(nn.Linear(4 * hidden_dim, hidden_dim))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """(..., hidden) -> (..., hidden)."""
        y = F.dropout(h, self.dropout_rate, self.training) if self.dropout_rate > 0 else h
        if self.norm is not None:
            y = self.norm(y)
        return h + self.dense1(F.silu(self.dense0(y)))


class MLPResNet(nn.Module):
    """Octo ``MLPResNet``: Dense_0, blocks, then Dense_1(swish(h)); ``features`` exposes swish(h)."""

    def __init__(self, in_dim: int, out_dim: int, cfg: DiffusionHeadConfig) -> None:
        super().__init__()
        self.dense0 = _xavier(nn.Linear(in_dim, cfg.hidden_dim))
        self.blocks = nn.ModuleList(
            MLPResNetBlock(cfg.hidden_dim, cfg.use_layer_norm, cfg.dropout_rate) for _ in range(cfg.num_blocks))
        self.dense1 = _xavier(nn.Linear(cfg.hidden_dim, out_dim))

    def features(self, u: torch.Tensor) -> torch.Tensor:
        """(..., hidden) penultimate features: swish of the residual stream (input of the last layer)."""
        h = self.dense0(u)
        for block in self.blocks:
            h = block(h)
        return F.silu(h)

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        """(..., in) -> (..., out)."""
        return self.dense1(self.features(u))


class ScoreActor(nn.Module):
    """Octo ``ScoreActor``: predicts the noise from (obs_enc (..., E), noisy actions (..., H*A), time (..., 1))."""

    def __init__(self, cfg: DiffusionHeadConfig) -> None:
        super().__init__()
        self.time_preprocess = FourierFeatures(cfg.time_dim)
        self.cond_encoder = CondEncoder(cfg.time_dim)
        in_dim = cfg.time_dim + cfg.embedding_dim + cfg.flat_action_dim
        self.reverse_network = MLPResNet(in_dim, cfg.flat_action_dim, cfg)

    def _inputs(self, obs_enc: torch.Tensor, actions: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        cond = self.cond_encoder(self.time_preprocess(time))
        lead = torch.broadcast_shapes(cond.shape[:-1], obs_enc.shape[:-1], actions.shape[:-1])
        parts = [x.expand(*lead, x.shape[-1]) for x in (cond, obs_enc, actions)]
        return torch.cat(parts, dim=-1)

    def features(self, obs_enc: torch.Tensor, actions: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        """(..., hidden) input of the last layer ``reverse_network.dense1``."""
        return self.reverse_network.features(self._inputs(obs_enc, actions, time))

    def forward(self, obs_enc: torch.Tensor, actions: torch.Tensor, time: torch.Tensor) -> torch.Tensor:
        """(..., H*A) predicted noise."""
        return self.reverse_network(self._inputs(obs_enc, actions, time))


@dataclass
class DiffusionDraws:
    """Fixed randomness of the diffusion loss: step indices ``time`` (K, B|1, 1) int64, ``noise`` (K, B|1, H*A).

    A leading size-1 batch axis broadcasts the same K draws to every example (deterministic embeddings).
    """

    time: torch.Tensor
    noise: torch.Tensor


class DiffusionActionHead(nn.Module):
    """Octo's DiffusionActionHead on pooled trunk embeddings (B, E) (see the module docstring).

    The head does not know about Octo's observation window: pass the embedding of the step to act on (Octo
    denoises each window position independently and returns the last one, so this is the same function).
    """

    def __init__(self, config: DiffusionHeadConfig) -> None:
        super().__init__()
        self.config = config
        self.action_horizon = config.action_horizon
        self.action_dim = config.action_dim
        self.diffusion_model = ScoreActor(config)
        betas = cosine_beta_schedule(config.diffusion_steps).to(torch.float32)
        alphas = 1 - betas
        self.register_buffer("betas", betas, persistent=False)
        self.register_buffer("alphas", alphas, persistent=False)
        self.register_buffer("alpha_hats", torch.cumprod(alphas, dim=0), persistent=False)

    @property
    def last_layer(self) -> nn.Linear:
        """The Linear layer whose per-sample loss gradients are the AMF embeddings."""
        return self.diffusion_model.reverse_network.dense1

    # ------------------------------------------------------------------ randomness
    def draw(self, k: int, batch: int = 1, generator: torch.Generator | None = None) -> DiffusionDraws:
        """K uniform step indices in [0, T) and K standard-normal noises, shapes (K, batch, 1) and (K, batch, H*A)."""
        time = torch.randint(0, self.config.diffusion_steps, (k, batch, 1), generator=generator)
        noise = torch.randn(k, batch, self.config.flat_action_dim, generator=generator)
        return DiffusionDraws(time=time, noise=noise)

    def _flatten(self, emb: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None
                 ) -> tuple[torch.Tensor, torch.Tensor]:
        c = self.config
        if actions.shape[-2:] != (c.action_horizon, c.action_dim):
            raise ValueError(f"actions: expected shape (..., {c.action_horizon}, {c.action_dim}), "
                             f"got {tuple(actions.shape)}")
        if emb.shape[-1] != c.embedding_dim:
            raise ValueError(f"embeddings: expected shape (..., {c.embedding_dim}), got {tuple(emb.shape)}")
        flat = torch.clip(actions.reshape(*actions.shape[:-2], c.flat_action_dim), -c.max_action, c.max_action)
        if mask is None:
            m = torch.ones_like(flat)
        else:
            if mask.shape != actions.shape:
                raise ValueError(f"mask: expected shape {tuple(actions.shape)}, got {tuple(mask.shape)}")
            m = mask.reshape(flat.shape).to(flat.dtype)
        return flat, m

    def _noised(self, flat: torch.Tensor, draws: DiffusionDraws) -> tuple[torch.Tensor, torch.Tensor]:
        ah = self.alpha_hats[draws.time]  # (K, B|1, 1)
        x_t = torch.sqrt(ah) * flat.unsqueeze(0) + torch.sqrt(1 - ah) * draws.noise
        return x_t, draws.time.to(flat.dtype)

    # ------------------------------------------------------------------ loss
    def per_sample_loss(self, emb: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None,
                        draws: DiffusionDraws | None = None, generator: torch.Generator | None = None
                        ) -> torch.Tensor:
        """(B,) Octo's masked loss per example, averaged over the K draws.

        Args:
            emb: (B, E) trunk embeddings.
            actions: (B, H, A) normalized action chunks.
            mask: (B, H, A) bool, False for padding (timestep pad AND action pad), or None = all valid.
            draws: fixed (time, noise); None draws ``n_diffusion_samples`` per example from ``generator``.
            generator: torch RNG used when ``draws`` is None.
        """
        flat, m = self._flatten(emb, actions, mask)
        if draws is None:
            draws = self.draw(self.config.n_diffusion_samples, flat.shape[0], generator)
        x_t, t = self._noised(flat, draws)
        eps_hat = self.diffusion_model(emb.unsqueeze(0), x_t, t)
        err = eps_hat - draws.noise
        v = err.square() if self.config.loss_type == "mse" else err.abs()
        num = (v * m.unsqueeze(0)).mean(dim=(0, -1))
        return self.config.action_dim * num / torch.clamp(m.mean(dim=-1), min=1e-5)

    def loss(self, emb: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None = None,
             draws: DiffusionDraws | None = None, generator: torch.Generator | None = None) -> torch.Tensor:
        """Scalar loss exactly as Octo's ``DiffusionActionHead.loss``: masked_mean over the whole batch x action_dim.

        Shapes as :meth:`per_sample_loss`; leading dims may include a window axis (B, W, ...).
        """
        flat, m = self._flatten(emb, actions, mask)
        if draws is None:
            n = self.config.n_diffusion_samples
            draws = DiffusionDraws(
                time=torch.randint(0, self.config.diffusion_steps, (n, *flat.shape[:-1], 1), generator=generator),
                noise=torch.randn(n, *flat.shape, generator=generator))
        x_t, t = self._noised(flat, draws)
        eps_hat = self.diffusion_model(emb.unsqueeze(0), x_t, t)
        err = eps_hat - draws.noise
        v = err.square() if self.config.loss_type == "mse" else err.abs()
        m = m.unsqueeze(0).expand_as(v)
        return self.config.action_dim * (v * m).mean() / torch.clamp(m.mean(), min=1e-5)

    def last_layer_terms(self, emb: torch.Tensor, actions: torch.Tensor, mask: torch.Tensor | None,
                         draws: DiffusionDraws) -> tuple[torch.Tensor, torch.Tensor]:
        """Closed-form pieces of the per-sample last-layer gradient of :meth:`per_sample_loss` ("mse" only).

        Returns:
            h: (K, B, hidden) inputs of ``last_layer`` at each draw.
            g: (K, B, H*A) dLoss_b/d(output) at each draw, so that dLoss_b/dW = sum_k g[k, b] h[k, b]^T and
               dLoss_b/db = sum_k g[k, b].
        """
        if self.config.loss_type != "mse":
            raise ValueError(f"closed-form gradients need loss_type='mse', got {self.config.loss_type=}")
        flat, m = self._flatten(emb, actions, mask)
        x_t, t = self._noised(flat, draws)
        h = self.diffusion_model.features(emb.unsqueeze(0), x_t, t)
        err = self.last_layer(h) - draws.noise
        k, d = err.shape[0], err.shape[-1]
        scale = 2.0 * self.config.action_dim / (k * d * torch.clamp(m.mean(dim=-1), min=1e-5))  # (B,)
        g = err * m.unsqueeze(0) * scale[None, :, None]
        return h, g

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def sample(self, emb: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
        """(B, H, A) DDPM samples (see :meth:`predict_action`)."""
        return self.predict_action(emb, generator=generator)

    @torch.no_grad()
    def predict_action(self, emb: torch.Tensor, generator: torch.Generator | None = None,
                       sample_shape: Sequence[int] = (), embodiment_action_dim: int | None = None,
                       init_noise: torch.Tensor | None = None, step_noise: torch.Tensor | None = None
                       ) -> torch.Tensor:
        """Octo's ``predict_action``: 20-step DDPM from (..., E) embeddings to (*sample_shape, ..., H, A).

        Args:
            emb: (..., E) trunk embeddings.
            generator: torch RNG for the initial and per-step noise (ignored where explicit noise is given).
            sample_shape: extra leading sample axes.
            embodiment_action_dim: d; action dims >= d are padding, overwritten by noise at every step.
            init_noise: (*sample_shape, ..., H*A) x_T, for bit-level comparisons with Octo.
            step_noise: (T, *sample_shape, ..., H*A) z for t = T-1 ... 0 in loop order.
        """
        c = self.config
        if emb.shape[-1] != c.embedding_dim:
            raise ValueError(f"embeddings: expected shape (..., {c.embedding_dim}), got {tuple(emb.shape)}")
        shape = (*sample_shape, *emb.shape[:-1], c.flat_action_dim)
        mask = torch.ones(*shape[:-1], c.action_horizon, c.action_dim, dtype=torch.bool, device=emb.device)
        if embodiment_action_dim is not None:
            mask[..., embodiment_action_dim:] = False
        mask = mask.reshape(shape)
        if init_noise is not None:
            check_shape("init_noise", init_noise.shape, shape)
        if step_noise is not None:
            check_shape("step_noise", step_noise.shape, (c.diffusion_steps, *shape))
        x = init_noise.clone() if init_noise is not None else torch.randn(shape, generator=generator)
        x = x.to(emb.dtype)
        for i, t in enumerate(range(c.diffusion_steps - 1, -1, -1)):
            time = torch.full((*shape[:-1], 1), float(t), dtype=emb.dtype)
            eps = self.diffusion_model(emb, x, time)
            a, ah = self.alphas[t], self.alpha_hats[t]
            x = (x - (1 - a) / torch.sqrt(1 - ah) * eps) / torch.sqrt(a)
            z = step_noise[i] if step_noise is not None else torch.randn(shape, generator=generator)
            if t > 0:
                x = x + torch.sqrt(self.betas[t]) * z
            x = torch.clip(x, -c.max_action, c.max_action)
            x = torch.where(mask, x, torch.sqrt(1 - ah) * z)
        return x.reshape(*shape[:-1], c.action_horizon, c.action_dim)


@dataclass(frozen=True)
class OctoParam:
    """One leaf of Octo's head tree and where it lives in :class:`DiffusionActionHead`."""

    octo_path: str
    """Full flax path, e.g. ``heads_action/diffusion_model/reverse_network/Dense_0/kernel``."""
    torch_key: str
    """``DiffusionActionHead.state_dict()`` key."""
    octo_shape: tuple[int, ...]
    """Shape in Octo's tree (Dense kernels are (in, out))."""
    transpose: bool
    """True for Dense kernels: torch weight = octo kernel.T."""


def octo_param_map(config: DiffusionHeadConfig, prefix: str = "heads_action/") -> list[OctoParam]:
    """The one-to-one table Octo ``heads_action/diffusion_model/...`` <-> torch state_dict (see module docstring)."""
    c, rows = config, []

    def dense(octo: str, torch_name: str, fan_in: int, fan_out: int) -> None:
        rows.append(OctoParam(f"{prefix}diffusion_model/{octo}/kernel", f"diffusion_model.{torch_name}.weight",
                              (fan_in, fan_out), True))
        rows.append(OctoParam(f"{prefix}diffusion_model/{octo}/bias", f"diffusion_model.{torch_name}.bias",
                              (fan_out,), False))

    rows.append(OctoParam(f"{prefix}diffusion_model/time_preprocess/kernel", "diffusion_model.time_preprocess.kernel",
                          (c.time_dim // 2, 1), False))
    dense("cond_encoder/Dense_0", "cond_encoder.dense0", c.time_dim, 2 * c.time_dim)
    dense("cond_encoder/Dense_1", "cond_encoder.dense1", 2 * c.time_dim, c.time_dim)
    dense("reverse_network/Dense_0", "reverse_network.dense0",
          c.time_dim + c.embedding_dim + c.flat_action_dim, c.hidden_dim)
    for i in range(c.num_blocks):
        octo_b, torch_b = f"reverse_network/MLPResNetBlock_{i}", f"reverse_network.blocks.{i}"
        if c.use_layer_norm:
            rows.append(OctoParam(f"{prefix}diffusion_model/{octo_b}/LayerNorm_0/scale",
                                  f"diffusion_model.{torch_b}.norm.weight", (c.hidden_dim,), False))
            rows.append(OctoParam(f"{prefix}diffusion_model/{octo_b}/LayerNorm_0/bias",
                                  f"diffusion_model.{torch_b}.norm.bias", (c.hidden_dim,), False))
        dense(f"{octo_b}/Dense_0", f"{torch_b}.dense0", c.hidden_dim, 4 * c.hidden_dim)
        dense(f"{octo_b}/Dense_1", f"{torch_b}.dense1", 4 * c.hidden_dim, c.hidden_dim)
    dense("reverse_network/Dense_1", "reverse_network.dense1", c.hidden_dim, c.flat_action_dim)
    return rows
