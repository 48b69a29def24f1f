"""Score functions of the peer rules (core/acquisition.py, policies/peer_scores.py, policies/disagreement.py) on tiny
problems whose answer is known: the denoiser KL in closed form, and the out-of-distribution task found by every
uncertainty rule."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from amf_ros.core.acquisition import diversity_score_fn
from amf_ros.core.selectors import make_selector
from amf_ros.policies import disagreement as dis
from amf_ros.policies.agent import TaskConditionedPolicy
from amf_ros.policies.config import PolicyConfig
from amf_ros.policies.diffusion_head import DiffusionActionHead, DiffusionHeadConfig
from amf_ros.policies.mlp_head import MLPHeadConfig
from amf_ros.policies.peer_scores import dropout_score_fn, ensemble_score_fn

TASKS = {"a": "task a", "b": "task b", "ood": "task ood"}


@pytest.fixture(autouse=True, scope="module")
def _one_thread():
    """Tiny models: one intra-op thread (a thread pool on a loaded machine makes small ops much slower)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _demos(task: str, episodes: int, sign: float, offset: int, seed: int) -> dict[str, np.ndarray]:
    """Episodes of a toy task, states ~ N(0, 1) drifting slowly, action = tanh(sign * state[:2])."""
    rng = np.random.default_rng(seed)
    st = np.concatenate([rng.normal(size=5) + 0.1 * np.cumsum(rng.normal(size=(12, 5)), 0) for _ in range(episodes)])
    return {"state": st.astype(np.float32), "action": np.tanh(sign * st[:, :2]).astype(np.float32),
            "episode_index": np.repeat(np.arange(episodes) + offset, 12), "step": np.tile(np.arange(12), episodes),
            "task": np.full(len(st), task)}


def _policy(seed: int, head: str = "diffusion") -> TaskConditionedPolicy:
    cfg = PolicyConfig(head=head, task_encoder="hash", action_horizon=2, diffusion_hidden_dim=32,
                       diffusion_num_blocks=1, mlp_hidden_dims=(32,), batch_size=64, lr=3e-3, seed=seed,
                       use_prior=False)
    return TaskConditionedPolicy(cfg, state_dim=5, action_dim=2, tasks=TASKS)


@pytest.fixture(scope="module")
def problem():
    """Two members pre-trained from different seeds on tasks a and b (uq_vla's independently pre-trained pair);
    candidate "ood": states 6 standard deviations away from every training state."""
    a, b = _demos("a", 6, 1.0, 0, 0), _demos("b", 6, -1.0, 10, 1)
    data = {k: np.concatenate([a[k], b[k]]) for k in a}
    members = [_policy(0), _policy(1)]
    for m in members:
        m.fit(data, 200)
    far = (np.random.default_rng(5).normal(size=(12, 5)) + 6.0).astype(np.float32)
    cands = {"a": {"state": a["state"][::6]}, "b": {"state": b["state"][::6]}, "ood": {"state": far}}
    return members, cands


def _head(seed: int = 0) -> DiffusionActionHead:
    torch.manual_seed(seed)
    return DiffusionActionHead(DiffusionHeadConfig(embedding_dim=6, action_horizon=3, action_dim=2, hidden_dim=16,
                                                   num_blocks=1)).eval()


def test_ddpm_chain_is_predict_action():
    head, emb = _head(), torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    init, steps = dis.chain_noise(head, (2, 4, 6), torch.Generator().manual_seed(1))
    want = head.predict_action(emb, sample_shape=(2,), init_noise=init, step_noise=steps)
    assert torch.equal(dis.ddpm_chain(head, emb, init, steps).reshape(want.shape), want)


def test_denoiser_kl_is_zero_for_equal_heads_and_closed_form_for_a_shifted_one():
    head, emb = _head(), torch.randn(4, 6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(dis.denoiser_kl(head, [copy.deepcopy(head)], emb, 3, torch.Generator().manual_seed(0)),
                       torch.zeros(4))
    shifted = copy.deepcopy(head)
    delta = torch.tensor([0.1, -0.2, 0.0, 0.0, 0.3, 0.0])
    with torch.no_grad():
        shifted.last_layer.bias += delta  # eps differs by delta at every (x, t): KL = sum_t w_t ||delta||^2
    kl = dis.denoiser_kl(head, [shifted], emb, 3, torch.Generator().manual_seed(0))
    w = head.betas[1:] / (2 * head.alphas[1:] * (1 - head.alpha_hats[1:]))
    assert torch.allclose(kl, (w.sum() * delta.square().sum()).expand(4), rtol=1e-5)


@pytest.mark.parametrize("metric", ["vfd", "action_l2", "gu"])
def test_ensemble_rules_find_the_out_of_distribution_task(problem, metric):
    members, cands = problem
    fn = ensemble_score_fn(members, cands, metric=metric)
    u = -fn(["a", "b", "ood"], [])
    assert u[2] > max(u[:2]) and fn.last_info["uncertainty"]["ood"] == u[2]
    sel = make_selector(metric).select(["a", "b", "ood"], {}, np.random.default_rng(0), batch_size=5, score_fn=fn)
    p = sel.info["pick_probability"]
    assert p["ood"] == max(p.values()) and sel.tasks.count("ood") >= 3
    again = ensemble_score_fn(members, cands, metric=metric)(["ood", "a"], [])
    assert np.array_equal(again, -u[[2, 0]])  # deterministic, independent of the candidate order


def test_dropout_prior_entropy_picks_the_out_of_distribution_task(problem):
    """Known answer on an MLP without LayerNorm: under last-layer dropout Var(mu) = p / (1 - p) sum_f W_f^2 h_f^2,
    and ReLU features h grow with the distance of the input. (With LayerNorm, as the paper's MLP and Octo's head
    blocks, that link is gone: on 8 seeds of this problem test-time dropout did not single out the far states.)"""
    _, cands = problem
    a, b = _demos("a", 6, 1.0, 0, 0), _demos("b", 6, -1.0, 10, 1)
    cfg = PolicyConfig(head="mlp", task_encoder="hash", action_horizon=2, batch_size=64, lr=3e-3, use_prior=False)
    mlp = TaskConditionedPolicy(cfg, state_dim=5, action_dim=2, tasks=TASKS,
                                head_config=MLPHeadConfig(hidden_dims=(32, 32), use_layer_norm=False))
    mlp.fit({k: np.concatenate([a[k], b[k]]) for k in a}, 200)
    for form in ("log_variance", "variance"):
        fn = dropout_score_fn(mlp, cands, form=form)
        sel = make_selector("dropout").select(["a", "b", "ood"], {"a": 1, "b": 1, "ood": 1},
                                              np.random.default_rng(0), score_fn=fn)
        assert sel.tasks == ["ood"], (form, sel.info["uncertainty"])


def test_dropout_variance_of_the_diffusion_head_comes_from_the_masks_alone(problem):
    members, cands = problem
    emb = members[0].head_inputs({"state": cands["a"]["state"], "task": ["a"] * len(cands["a"]["state"])})
    var = dis.mc_dropout_variance(members[0].head, emb, 8, 0.1, 0, torch.Generator().manual_seed(0))
    assert var.shape == (len(emb), 4) and bool((var > 0).all())
    same = dis.mc_dropout_variance(members[0].head, emb, 8, 1e-9, 0, torch.Generator().manual_seed(0))
    assert torch.equal(same, torch.zeros_like(same))  # every mask keeps every unit: one shared chain, no spread
    assert np.isfinite(dropout_score_fn(members[0], cands)(["a", "ood"], [])).all()


def test_diversity_picks_the_far_task_then_covers_it():
    pts = {"near": np.array([[0.1, 0.0]]), "left": np.array([[-5.0, 0.0], [0.0, 0.2]]), "right": np.array([[4.0, 0.0]])}
    fn = diversity_score_fn(lambda tr: tr["state"], {t: {"state": p} for t, p in pts.items()},
                            covered={"state": np.zeros((1, 2))})
    sel = make_selector("diversity").select(list(pts), {}, np.random.default_rng(0), batch_size=3, score_fn=fn)
    # left's farthest point first; it covers (-5, 0) only, so right (4 away) comes next, then left again for its
    # other point (0.2 from the origin, near is 0.1): a task is scored by its farthest uncovered point
    assert sel.tasks == ["left", "right", "left"]
    assert sel.info["batch_scores"][2] == {"near": -0.1, "left": -0.2, "right": 0.0}
    assert sel.scores == {"near": -0.1, "left": -5.0, "right": -4.0}
    empty = diversity_score_fn(lambda tr: tr["state"], {t: {"state": p} for t, p in pts.items()})
    assert list(empty(list(pts), [])) == [0.0, 0.0, 0.0]  # nothing covered: ties, the selector picks at random


def test_diversity_on_policy_inputs_and_errors(problem):
    members, cands = problem
    covered = {"state": cands["a"]["state"], "task": np.full(len(cands["a"]["state"]), "a")}
    fn = diversity_score_fn(members[0], cands, covered=covered)
    sel = make_selector("diversity").select(["a", "b", "ood"], {}, np.random.default_rng(0), score_fn=fn)
    x = fn.points["a"]
    assert np.array_equal(x, fn.covered)  # one float32 embedding computed twice in one process: equal rows
    # a's candidate states are all covered: its score -max_i min_j ||x_i - y_j|| is 0 in real arithmetic, but
    # CoverageScores computes d2 = |x|^2 + |y|^2 - 2 x.y in float64. The row norm (numpy's sum) and the dot product
    # (BLAS dgemm: its summation order depends on the CPU's kernel) each carry at most gamma_D |x|^2 of rounding error
    # (gamma_D = D u / (1 - D u), u = 2^-53, D = embedding width); doubling and the final subtraction are exact
    # (Sterbenz), so |d2_ii| <= 4 gamma_D |x_i|^2 and 0 >= score >= -2 sqrt(gamma_D) max_i |x_i| (~5e-7 here).
    # Seen: exactly 0 with OpenBLAS's SkylakeX dgemm, -4.2e-8 with its Haswell (AVX2) and SSE kernels.
    u = np.finfo(np.float64).eps / 2
    gamma = x.shape[1] * u / (1 - x.shape[1] * u)
    bound = 2.0 * np.sqrt(gamma * float((x * x).sum(1).max()))
    assert sel.tasks == ["ood"] and -bound <= sel.scores["a"] <= 0.0, (sel.scores, bound)
    assert sel.scores["b"] < -1e3 * bound  # the bound is far below a real distance (b's states are not covered)
    with pytest.raises(ValueError, match="'zz'"):
        fn(["a", "zz"], [])
    with pytest.raises(ValueError, match="'zz'"):
        ensemble_score_fn(members, cands)(["zz"], [])
    with pytest.raises(ValueError, match="at least two"):
        ensemble_score_fn(members[:1], cands)
    with pytest.raises(ValueError, match="states of every candidate"):
        dropout_score_fn(members[0], {"a": {"state": np.zeros((0, 5), np.float32)}})


def test_mlp_heads_work_with_action_l2_gu_and_dropout(problem):
    _, cands = problem
    mlps = [_policy(0, "mlp"), _policy(1, "mlp")]
    for m in mlps:
        m.fit_normalizers(_demos("a", 1, 1.0, 0, 0))
    for metric in ("action_l2", "gu"):
        assert np.all(np.isfinite(ensemble_score_fn(mlps, cands, metric=metric)(["a", "ood"], [])))
    assert np.all(np.isfinite(dropout_score_fn(mlps[0], cands)(["a", "ood"], [])))
    with pytest.raises(ValueError, match="diffusion heads"):
        ensemble_score_fn(mlps, cands, metric="vfd")(["a"], [])
