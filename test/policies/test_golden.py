"""Golden outputs of a tiny seeded diffusion head (STYLE habit 13): forward, loss, sampler, gradient embeddings.

The .npz stores the head's weights, the inputs, the explicit noise and the expected outputs, so the test does not
depend on torch's initialisation staying the same across versions; it fails when the port's *function* changes.

Runbook, when a change of the head's function is intended (say why in the commit message):
    source scripts/env.sh && python test/policies/test_golden.py   # rewrites test/policies/golden/diffusion_head.npz
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from amf_ros.policies.diffusion_head import DiffusionActionHead, DiffusionDraws, DiffusionHeadConfig
from amf_ros.policies.embeddings import loss_gradient_embeddings

GOLDEN = Path(__file__).parent / "golden" / "diffusion_head.npz"
CFG = DiffusionHeadConfig(embedding_dim=6, action_horizon=2, action_dim=3, hidden_dim=8, num_blocks=2)


def _outputs(head: DiffusionActionHead, g: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    t = {k: torch.from_numpy(v) for k, v in g.items()}
    draws = DiffusionDraws(time=t["time"], noise=t["noise"])
    with torch.no_grad():
        eps = head.diffusion_model(t["emb"], t["x"], t["t"])
        loss = head.per_sample_loss(t["emb"], t["actions"], t["mask"], draws)
        sample = head.predict_action(t["emb"], init_noise=t["init_noise"], step_noise=t["step_noise"])
        phi = loss_gradient_embeddings(head, t["emb"], t["actions"], t["mask"], draws)
    return {"out_eps": eps.numpy(), "out_loss": loss.numpy(), "out_sample": sample.numpy(), "out_phi": phi.numpy()}


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
    arrays.update(_outputs(head, arrays))
    return arrays


def test_tiny_head_matches_golden_outputs():
    g = dict(np.load(GOLDEN))
    head = DiffusionActionHead(CFG)
    head.load_state_dict({k[2:]: torch.from_numpy(v) for k, v in g.items() if k.startswith("w:")})
    got = _outputs(head, {k: v for k, v in g.items() if not k.startswith(("w:", "out_"))})
    for key, value in got.items():
        np.testing.assert_allclose(value, g[key], rtol=1e-5, atol=1e-6, err_msg=key)


if __name__ == "__main__":
    GOLDEN.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(GOLDEN, **_make())
    print(f"wrote {GOLDEN}")
