"""Convert Octo's ``heads_action/diffusion_model`` parameters into :class:`DiffusionActionHead` weights.

Why: only the diffusion action head is fine-tuned (in PyTorch, on cached trunk embeddings); it must start from
Octo's pretrained head, and the adaptive prior needs a frozen copy of the same weights. The one-to-one table
of paths, shapes and transposes is ``amf_ros.policies.diffusion_head.octo_param_map`` (the head's author owns
it); this module walks an Octo parameter tree, checks it against that table (no missing, extra or mis-shaped
leaf passes silently) and builds the state_dict.

Inputs accepted everywhere a "params" argument appears: the full Octo tree (``model.params``, with
``heads_action``), the head's own tree (with ``diffusion_model``), either of them wrapped in flax's
``{"params": ...}`` collection (as ``module.init`` returns it and orbax restores it), or a flat
``{"a/b/c": array}`` dict (as saved by :func:`save_head_npz`). Arrays may be numpy or JAX arrays.

Command line (on the machine with Octo/orbax, to move the head to one without)::

    python -m amf_ros.policies.octo.convert CHECKPOINT_DIR [--step N] --out octo_head.npz
"""

from __future__ import annotations

import argparse
import logging
import os
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from amf_ros._optional import require

log = logging.getLogger(__name__)

HEAD_PREFIX = "heads_action/"
SCORE_NET = "diffusion_model/"


def flatten_params(tree: Mapping[str, Any], sep: str = "/", prefix: str = "") -> dict[str, np.ndarray]:
    """Nested dicts -> ``{"a/b/c": np.ndarray}`` (flax ``traverse_util.flatten_dict`` with '/' joins)."""
    out: dict[str, np.ndarray] = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        if isinstance(value, Mapping):
            out.update(flatten_params(value, sep, path + sep))
        else:
            out[path] = np.asarray(value)
    return out


def head_params(params: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The head's leaves as a flat dict keyed ``diffusion_model/...`` (see module doc for accepted inputs)."""
    flat = flatten_params(params) if any(isinstance(v, Mapping) for v in params.values()) else {
        k: np.asarray(v) for k, v in params.items()}
    for prefix in ("params/" + HEAD_PREFIX, HEAD_PREFIX, "params/", ""):
        sub = {k[len(prefix):]: v for k, v in flat.items() if k.startswith(prefix + SCORE_NET)}
        if sub:
            extra = sorted(k for k in flat if prefix.endswith(HEAD_PREFIX) and k.startswith(prefix)
                           and not k.startswith(prefix + SCORE_NET))
            if extra:  # e.g. a MAP head's leaves: not part of the diffusion score network
                log.info("ignoring %d non-diffusion leaves under %s (e.g. %s)", len(extra), prefix, extra[0])
            return sub
    raise ValueError("no 'heads_action/diffusion_model' (or 'diffusion_model') parameters found; "
                     f"top-level keys: {sorted(params)[:10]}")


def infer_head_config(params: Mapping[str, Any], action_horizon: int = 4, action_dim: int = 7,
                      **overrides: Any) -> Any:
    """The :class:`DiffusionHeadConfig` whose parameter shapes match the given head (E, widths, blocks)."""
    from amf_ros.policies.diffusion_head import DiffusionHeadConfig

    p = head_params(params)
    try:
        time_half = p["diffusion_model/time_preprocess/kernel"].shape[0]
        in_dim, hidden = p["diffusion_model/reverse_network/Dense_0/kernel"].shape
        flat = p["diffusion_model/reverse_network/Dense_1/kernel"].shape[1]
    except KeyError as exc:
        raise ValueError(f"Octo head tree lacks {exc.args[0]!r}") from exc
    if flat != action_horizon * action_dim:
        raise ValueError(f"head outputs {flat} values but action_horizon * action_dim = "
                         f"{action_horizon} * {action_dim}; pass the checkpoint's values")
    blocks = sorted({int(k.split("MLPResNetBlock_")[1].split("/")[0]) for k in p if "MLPResNetBlock_" in k})
    if blocks != list(range(len(blocks))):
        raise ValueError(f"MLPResNetBlock indices are not 0..n-1: {blocks}")
    time_dim = 2 * time_half
    kwargs = dict(embedding_dim=in_dim - time_dim - flat, action_horizon=action_horizon, action_dim=action_dim,
                  time_dim=time_dim, hidden_dim=hidden, num_blocks=len(blocks),
                  use_layer_norm=any("LayerNorm_0" in k for k in p))
    kwargs.update(overrides)
    return DiffusionHeadConfig(**kwargs)


def convert_head_params(params: Mapping[str, Any], config: Any = None, action_horizon: int = 4,
                        action_dim: int = 7) -> tuple[dict[str, Any], Any]:
    """Octo head params -> (torch state_dict for DiffusionActionHead, its config).

    Raises:
        ValueError: a leaf is missing, unexpected, or has the wrong shape (all of them are listed).
    """
    import torch

    from amf_ros.policies.diffusion_head import octo_param_map

    p = head_params(params)
    cfg = config if config is not None else infer_head_config(p, action_horizon, action_dim)
    table = octo_param_map(cfg, prefix="")
    expected = {row.octo_path for row in table}
    problems = [f"missing {k}" for k in sorted(expected - set(p))]
    problems += [f"unexpected {k} {p[k].shape}" for k in sorted(set(p) - expected)]
    state: dict[str, Any] = {}
    for row in table:
        if row.octo_path not in p:
            continue
        arr = np.asarray(p[row.octo_path], dtype=np.float32)
        if tuple(arr.shape) != tuple(row.octo_shape):
            problems.append(f"{row.octo_path}: expected {tuple(row.octo_shape)}, got {tuple(arr.shape)}")
            continue
        # a copy: JAX hands out read-only buffers, which torch.from_numpy warns about and must not alias
        state[row.torch_key] = torch.from_numpy(np.array(arr.T if row.transpose else arr, order="C"))
    if problems:
        raise ValueError("Octo head parameters do not match the head config: " + "; ".join(problems))
    return state, cfg


def load_octo_head(params: Mapping[str, Any], config: Any = None, action_horizon: int = 4,
                   action_dim: int = 7) -> Any:
    """A :class:`DiffusionActionHead` carrying Octo's pretrained weights (strict load)."""
    from amf_ros.policies.diffusion_head import DiffusionActionHead

    state, cfg = convert_head_params(params, config, action_horizon, action_dim)
    head = DiffusionActionHead(cfg)
    head.load_state_dict(state, strict=True)
    return head


def octo_head_pair(params: Mapping[str, Any], config: Any = None, action_horizon: int = 4,
                   action_dim: int = 7) -> tuple[Any, Any]:
    """(fine-tuned copy, frozen prior): two independent heads with Octo's weights; the prior has no gradients."""
    finetuned = load_octo_head(params, config, action_horizon, action_dim)
    prior = load_octo_head(params, finetuned.config, action_horizon, action_dim)
    prior.requires_grad_(False)
    prior.eval()
    return finetuned, prior


# ------------------------------------------------------------------------------------------------ files
def read_orbax_head(checkpoint: str | os.PathLike, step: int | None = None) -> dict[str, np.ndarray]:
    """Restore the params of an Octo checkpoint with orbax and return the flat head leaves (needs orbax/JAX)."""
    from amf_ros.policies.octo.checkpoint import read_checkpoint

    info = read_checkpoint(checkpoint)
    step = info.latest_step if step is None else int(step)
    ocp = require("orbax.checkpoint", feature="reading Octo's orbax parameters")
    step_dir = Path(checkpoint) / str(step)
    target = step_dir / "default" if (step_dir / "default").is_dir() else step_dir
    restored = ocp.PyTreeCheckpointer().restore(str(target.resolve()))
    return {HEAD_PREFIX + k: v for k, v in head_params(restored).items()}


def save_head_npz(params: Mapping[str, Any], path: str | os.PathLike) -> Path:
    """Write the head leaves (flat keys ``heads_action/diffusion_model/...``) to ``path`` (.npz, atomic)."""
    import io

    from amf_ros.atomic import atomic_write_bytes

    flat = {HEAD_PREFIX + k: np.asarray(v, dtype=np.float32) for k, v in head_params(params).items()}
    buf = io.BytesIO()
    np.savez(buf, **flat)
    return atomic_write_bytes(path, buf.getvalue())


def load_head_npz(path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Read a file written by :func:`save_head_npz` (no pickle)."""
    with np.load(path, allow_pickle=False) as data:
        return {k: data[k] for k in data.files}


def main(argv: Sequence[str] | None = None) -> int:
    """Export an Octo checkpoint's diffusion head to .npz (run where Octo's orbax/JAX are installed)."""
    parser = argparse.ArgumentParser(prog="python -m amf_ros.policies.octo.convert", description=main.__doc__)
    parser.add_argument("checkpoint", help="local Octo checkpoint directory")
    parser.add_argument("--step", type=int, default=None, help="orbax step (default: latest)")
    parser.add_argument("--out", required=True, help="output .npz")
    args = parser.parse_args(argv)
    from amf_ros.policies.octo.checkpoint import read_checkpoint

    try:
        info = read_checkpoint(args.checkpoint)
        head = read_orbax_head(args.checkpoint, args.step)
        cfg = infer_head_config(head, info.action_horizon, info.action_dim)
        convert_head_params(head, cfg)  # validate before writing
    except (ImportError, ValueError) as exc:
        print(f"convert: {exc}")
        return 2
    save_head_npz(head, args.out)
    print(f"wrote {args.out}: {len(head)} leaves, embedding_dim={cfg.embedding_dim}, Octo {info.version}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
