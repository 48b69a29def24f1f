"""core/amf_nn.py: the one AMF-NN score function.

* bit-identity with the benchmark's former copy (bench/metaworld.py ``amf_score_fn`` before issue #11, kept below
  verbatim up to reading a transitions dict instead of a Demo), given the same embeddings: the same float64
  operations in one process;
* the label-window embedding equals the whole-episode embedding of the kept frames (H > 1) within the float32
  rounding bound of the head (another batch: the BLAS may take another kernel), and differs from embedding the
  subsampled frames alone (what task_selector did before: a wrong label) by more than that bound;
* the frame cap, the weights and the errors.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from fp_bounds import assert_two_paths_close, fan_in_sum, two_path_tolerance  # noqa: E402

from amf_ros.core.amf_nn import (  # noqa: E402
    amf_nn_score_fn,
    episode_features,
    evenly_spaced_rows,
    frames_under_cap,
    warm_start_validation,
)
from amf_ros.core.criterion import feature_score_fn  # noqa: E402
from amf_ros.threads import limit_threads  # noqa: E402

TASKS = ["faucet-open", "drawer-close", "push", "drawer-open"]


def _episode(task: str, steps: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"state": rng.normal(size=(steps, 39)).astype(np.float32),
            "action": rng.uniform(-1, 1, (steps, 4)).astype(np.float32),
            "episode_index": np.zeros(steps, np.int64), "step": np.arange(steps, dtype=np.int64),
            "task": np.full(steps, task).astype(str)}


@pytest.fixture(scope="module", params=[1, 4], ids=["H1", "H4"])
def policy_and_episodes(request):
    """A small trained state policy (hash task encoder) and 7 episodes of 4 tasks, the first 4 the warm start."""
    from amf_ros.envs.metaworld_suite import load_tasks
    from amf_ros.training.pretrain import make_policy

    limit_threads(1)
    rng = np.random.default_rng(0)
    episodes = [_episode(t, int(rng.integers(20, 60)), rng) for t in TASKS + ["push", "faucet-open", "push"]]
    policy = make_policy(load_tasks(keys=TASKS), task_encoder="hash", action_horizon=request.param, seed=0)
    data = {k: np.concatenate([ep[k] if k != "episode_index" else np.full(len(ep["task"]), i)
                               for i, ep in enumerate(episodes)]) for k in episodes[0]}
    policy.fit(data, 20, batch_size=64)
    return policy, episodes


def _old_bench_score_fn(policy, episodes, warm, tasks, *, targets="warm", condition_on_data=True,
                        frames_per_demo=16, noise_var=1.0, form="log_variance"):
    """bench/metaworld.py amf_score_fn as of commit 3115cc6 (``demos[i]`` -> transitions dict)."""
    def spaced(length, n):
        return np.unique(np.linspace(0, length - 1, num=min(n, length)).round().astype(int))

    task_of = [str(ep["task"][0]) for ep in episodes]
    val = [i for i, w in enumerate(warm) if w]
    if targets == "all":
        val = list(range(len(episodes)))
    phi = {i: policy.embed(episodes[i])[spaced(len(episodes[i]["task"]), frames_per_demo)]
           for i in range(len(episodes)) if i in val or condition_on_data}
    per_task = {t: [i for i in val if task_of[i] == t] for t in tasks}
    target_phi = np.concatenate([phi[i] for i in val])
    weights = np.concatenate([np.full(len(phi[i]), 1.0 / (len(tasks) * len(per_task[task_of[i]]) * len(phi[i])))
                              for i in val])
    rest = [phi[i] for i in phi if i not in val]
    data_phi = np.concatenate(rest) if rest else np.zeros((0, target_phi.shape[1]))

    def candidate(task):
        idx = per_task[task]
        return [phi[i] for i in idx], np.full(len(idx), 1.0 / len(idx))

    norms = {t: float(np.mean([np.square(phi[i]).sum(1).mean() for i in idx])) for t, idx in per_task.items()}
    return feature_score_fn(data_phi, candidate, target_phi, weights, noise_var=noise_var, form=form,
                            info={"mean_sq_norm_phi": norms})


@pytest.mark.parametrize("targets,condition_on_data,form,frames", [
    ("warm", True, "log_variance", 16), ("warm", False, "log_variance", 16), ("all", True, "variance", 16),
    ("warm", True, "variance", 5)])
def test_bit_identical_to_the_former_benchmark_formula(policy_and_episodes, targets, condition_on_data, form,
                                                       frames):
    policy, episodes = policy_and_episodes
    warm = [True] * 4 + [False] * (len(episodes) - 4)
    old = _old_bench_score_fn(policy, episodes, warm, TASKS, targets=targets, condition_on_data=condition_on_data,
                              frames_per_demo=frames, form=form)
    val = list(range(len(episodes))) if targets == "all" else [i for i, w in enumerate(warm) if w]
    # policy.embed, a bare function: whole episodes embedded, the rows the former formula embedded, so both sides
    # run the same float64 operations on the same float32 rows (the label window: test_label_window_...).
    new = amf_nn_score_fn(policy.embed, episodes, val, tasks=TASKS, condition_on_data=condition_on_data,
                          frames_per_episode=frames, form=form)
    for chosen in ([], ["push"]):  # plain scores and the greedy batch step
        np.testing.assert_array_equal(new(TASKS, chosen), old(TASKS, chosen))
    assert new.last_info["mean_sq_norm_phi"] == old.last_info["mean_sq_norm_phi"]
    assert new.last_info["effective_sample_size"] == {t: float(1 + 2 * (targets == "all") * (t == "push")
                                                               + (targets == "all") * (t == "faucet-open"))
                                                      for t in TASKS}


def test_label_window_equals_whole_episode(policy_and_episodes):
    policy, episodes = policy_and_episodes
    h = policy.config.action_horizon
    ep = episodes[2]
    keep = evenly_spaced_rows(len(ep["task"]), 8)
    whole = episode_features(policy.embed, ep, 8, horizon=None)
    np.testing.assert_array_equal(whole, policy.embed(ep)[keep])  # the same call on the same batch
    # The window is another batch (fewer rows): the same float32 sums, maybe in another kernel's order
    # (test/support/fp_bounds.py), so equal within the head's two-path bound, not bit for bit.
    n = fan_in_sum(policy.head, policy.trunk)
    assert_two_paths_close(episode_features(policy.embed, ep, 8, horizon=h), whole, n, what="label window")
    alone = policy.embed({k: v[keep] for k, v in ep.items()})  # the subsampled frames alone
    if h > 1:  # their chunks read actions of frames far apart: not the demonstrated labels
        assert np.abs(alone - whole).max() > 100 * two_path_tolerance(n, np.abs(whole).max())
    else:
        assert_two_paths_close(alone, whole, n, what="subsampled frames, H = 1")


def test_frames_cap_and_cache():
    assert frames_under_cap(16, 60, 1024) == 16  # the benchmark's largest settings never hit the default cap
    assert frames_under_cap(16, 100, 1024) == 10 and frames_under_cap(16, 5000, 1024) == 1
    assert frames_under_cap(16, 5000, None) == 16
    calls = []

    def embed(tr):
        calls.append(len(tr["task"]))
        return np.tanh(tr["state"][:, :3] * np.arange(1, 4))

    rng = np.random.default_rng(1)
    eps = [_episode(t, 30, rng) for t in ["a", "b", "a"]]
    cache: dict = {}
    fn = amf_nn_score_fn(embed, eps, warm_start_validation(["a", "b", "a"]), max_points=20, cache=cache,
                         keys=["e0", "e1", "e2"])
    assert fn.last_info["frames_per_episode"] == 6 and set(cache) == {("e0", 6), ("e1", 6), ("e2", 6)}
    assert calls == [30, 30, 30]  # a bare function: whole episodes
    again = amf_nn_score_fn(embed, eps, [0, 1], max_points=20, cache=cache, keys=["e0", "e1", "e2"])
    assert calls == [30, 30, 30]  # served from the cache
    np.testing.assert_array_equal(again(["a", "b"], []), fn(["a", "b"], []))


def test_errors():
    rng = np.random.default_rng(2)
    eps = [_episode("a", 10, rng), _episode("b", 10, rng)]

    def embed(tr):
        return tr["state"][:, :4]

    with pytest.raises(ValueError, match="missing \\['c'\\]"):
        amf_nn_score_fn(embed, eps, [0, 1], tasks=["a", "b", "c"])
    with pytest.raises(ValueError, match="validation must be"):
        amf_nn_score_fn(embed, eps, [2])
    with pytest.raises(ValueError, match="needs recorded episodes"):
        amf_nn_score_fn(embed, [], [0])
    with pytest.raises(ValueError, match="no recorded episode of candidate 'c'"):
        amf_nn_score_fn(embed, eps, [0, 1])(["a", "c"], [])
    with pytest.raises(ValueError, match="one key per episode"):
        amf_nn_score_fn(embed, eps, [0, 1], cache={})


def test_criterion_cache_is_exact_and_conditions_only_on_new_episodes(policy_and_episodes):
    """task_selector's criterion_cache: the same scores as the uncached criterion (float64 round-off of the rank-m
    updates, rtol 1e-9 on scores of order 10), updated in place when episodes are added, rebuilt when the
    validation set changes."""
    policy, episodes = policy_and_episodes
    tasks = TASKS
    keys = [f"ep{i}" for i in range(len(episodes))]
    val = warm_start_validation([str(ep["task"][0]) for ep in episodes])
    phi: dict = {}
    store: dict = {}
    picks = [["push"], ["push", "drawer-open"]]

    def both(n: int, validation: list[int]):
        kw = dict(tasks=tasks, noise_var=1.0, frames_per_episode=8, max_points=None, cache=phi, keys=keys[:n])
        cached = amf_nn_score_fn(policy, episodes[:n], validation, criterion_cache=store, **kw)
        fresh = amf_nn_score_fn(policy, episodes[:n], validation, **kw)
        for chosen in ([], *picks):
            np.testing.assert_allclose(cached(tasks, chosen), fresh(tasks, chosen), rtol=1e-9, atol=0)
        return cached.last_info["criterion"]

    assert both(5, val) == "built"
    engine = store["entry"]["engine"]
    assert both(5, val) == "reused"
    assert both(7, val) == "updated" and store["entry"]["engine"] is engine  # two more episodes, same engine
    assert store["entry"]["data_keys"] == ["ep4", "ep5", "ep6"]
    assert both(7, list(range(7))) == "built"  # every episode a target now: another criterion
    with pytest.raises(ValueError, match="keys"):
        amf_nn_score_fn(policy, episodes, val, criterion_cache={})


def _blocks(tr):
    """Task-separated float64 features: a task's rows live in its own block, so tasks share no information."""
    x = np.tanh(tr["state"][:, :3].astype(np.float64) * np.arange(1, 4))
    out = np.zeros((len(x), 6))
    col = 0 if str(tr["task"][0]) == "a" else 3
    out[:, col:col + 3] = x
    return out


def test_replay_aware_is_the_paper_criterion_with_the_replay_as_data_at_its_weight():
    """Replay-aware AMF's weights (module docstring): new points 1 - r, replayed points r * n / n_replay. At
    r = n_replay / (n + n_replay) the two weights are equal (1 - r), so the criterion must equal the paper's with the
    replayed episodes as recorded (non-validation) data and noise_var / (1 - r). The two compute in float64 in
    another order (scaled rows vs a scaled noise): rtol 1e-9 of the largest score."""
    rng = np.random.default_rng(5)
    eps = [_episode(t, 25, rng) for t in ["a", "b", "a", "b", "a"]]
    replay = [_episode("a", 25, rng) for _ in range(3)]
    r = 3 / 8
    kw = dict(tasks=["a", "b"], frames_per_episode=6, max_points=None)
    aware = amf_nn_score_fn(_blocks, eps, [0, 1], noise_var=2.0, replay=replay, replay_fraction=r, **kw)
    paper = amf_nn_score_fn(_blocks, eps + replay, [0, 1], noise_var=2.0 / (1 - r), **kw)
    for chosen in ([], ["a"], ["b", "b"]):
        want = paper(["a", "b"], chosen)
        np.testing.assert_allclose(aware(["a", "b"], chosen), want, rtol=0, atol=1e-9 * np.abs(want).max())
    assert aware.last_info["replayed_episodes"] == 3
    # r = 0 is the paper's criterion whatever is passed as replay
    plain = amf_nn_score_fn(_blocks, eps, [0, 1], noise_var=2.0, **kw)
    zero = amf_nn_score_fn(_blocks, eps, [0, 1], noise_var=2.0, replay=replay, replay_fraction=0.0, **kw)
    np.testing.assert_array_equal(zero(["a", "b"], []), plain(["a", "b"], []))


def test_replaying_a_task_makes_its_demonstrations_less_informative():
    """Scores are the targets' posterior uncertainty after the candidate (lower = asked first), so score(a) -
    score(b) = gain(b) - gain(a). Replayed episodes of task a condition a's targets, so a's demonstration gains
    less; b shares no features with a, so b's gain changes only through the new points' weight 1 - r, which the
    paper's criterion reproduces with noise_var / (1 - r)."""
    rng = np.random.default_rng(6)
    eps = [_episode(t, 25, rng) for t in ["a", "b", "a", "b"]]
    replay = [_episode("a", 25, rng) for _ in range(8)]
    kw = dict(tasks=["a", "b"], frames_per_episode=6, max_points=None)
    r = 0.5
    aware = amf_nn_score_fn(_blocks, eps, [0, 1], replay=replay, replay_fraction=r, **kw)(["a", "b"], [])
    scaled = amf_nn_score_fn(_blocks, eps, [0, 1], noise_var=1.0 / (1 - r), **kw)(["a", "b"], [])
    gap_aware, gap_scaled = aware[0] - aware[1], scaled[0] - scaled[1]
    assert gap_aware > gap_scaled + 0.1 * abs(gap_scaled), (aware, scaled)  # a is now asked for later than b


def test_replay_errors():
    rng = np.random.default_rng(7)
    eps = [_episode("a", 10, rng), _episode("b", 10, rng)]
    with pytest.raises(ValueError, match="replay_fraction must be in"):
        amf_nn_score_fn(_blocks, eps, [0, 1], replay=[eps[0]], replay_fraction=1.0)
    with pytest.raises(ValueError, match="needs the replayed episodes"):
        amf_nn_score_fn(_blocks, eps, [0, 1], replay_fraction=0.5)
    with pytest.raises(ValueError, match="no criterion_cache"):
        amf_nn_score_fn(_blocks, eps, [0, 1], replay=[eps[0]], replay_fraction=0.5, criterion_cache={},
                        keys=["x", "y"])


def test_replayed_embeddings_are_cached_under_their_keys_and_score_the_same():
    """task_selector keeps the replayed episodes' embeddings between requests (``replay_keys``): the second call
    embeds no replayed episode, and the scores equal the uncached ones exactly (same rows, same float64 sums)."""
    rng = np.random.default_rng(8)
    eps = [_episode(t, 25, rng) for t in ["a", "b", "a"]]
    replay = [_episode("a", 25, rng) for _ in range(3)]
    calls = []

    def counting(tr):
        calls.append(len(tr["state"]))
        return _blocks(tr)

    kw = dict(tasks=["a", "b"], frames_per_episode=6, max_points=None, replay=replay, replay_fraction=0.5)
    want = amf_nn_score_fn(_blocks, eps, [0, 1], **kw)(["a", "b"], [])
    cache: dict = {}
    keys, replay_keys = ["e0", "e1", "e2"], [("replay", i) for i in range(3)]
    first = amf_nn_score_fn(counting, eps, [0, 1], cache=cache, keys=keys, replay_keys=replay_keys, **kw)
    np.testing.assert_array_equal(first(["a", "b"], []), want)
    assert {k for k, _ in cache} == {*keys, *replay_keys} and len(calls) == 6
    second = amf_nn_score_fn(counting, eps, [0, 1], cache=cache, keys=keys, replay_keys=replay_keys, **kw)
    np.testing.assert_array_equal(second(["a", "b"], []), want)
    assert len(calls) == 6  # nothing embedded again
    with pytest.raises(ValueError, match="replay_keys need a cache and one key per replayed episode"):
        amf_nn_score_fn(_blocks, eps, [0, 1], replay_keys=replay_keys[:2], cache={}, keys=keys, **kw)


def test_a_lighter_hallucination_settles_its_task_less_and_caches_the_same():
    """hallucination_weight w_h scales a candidate's rows by sqrt(w_h): 1 is the paper's criterion exactly; below 1
    every candidate leaves more uncertainty (a monotone effect: less information conditioned on); the incremental
    criterion (criterion_cache) scores it as the direct one does."""
    rng = np.random.default_rng(9)
    eps = [_episode(t, 25, rng) for t in ["a", "b", "a", "b", "a"]]
    kw = dict(tasks=["a", "b"], frames_per_episode=6, max_points=None)
    paper = amf_nn_score_fn(_blocks, eps, [0, 1], **kw)(["a", "b"], [])
    np.testing.assert_array_equal(amf_nn_score_fn(_blocks, eps, [0, 1], hallucination_weight=1.0, **kw)(
        ["a", "b"], []), paper)
    light = amf_nn_score_fn(_blocks, eps, [0, 1], hallucination_weight=0.1, **kw)
    assert np.all(light(["a", "b"], []) > paper + 1e-6), (light(["a", "b"], []), paper)
    keys = [f"e{i}" for i in range(len(eps))]
    cached = amf_nn_score_fn(_blocks, eps, [0, 1], hallucination_weight=0.1, criterion_cache={}, keys=keys, **kw)
    for chosen in ([], ["a"], ["a", "b", "a"]):
        want = light(["a", "b"], chosen)
        # exact incremental updates vs a direct solve: float64 round-off of a few-term criterion
        np.testing.assert_allclose(cached(["a", "b"], chosen), want, rtol=0, atol=1e-9 * np.abs(want).max())
    for bad in (0.0, 1.5):
        with pytest.raises(ValueError, match="hallucination_weight must be in"):
            amf_nn_score_fn(_blocks, eps, [0, 1], hallucination_weight=bad, **kw)


HALLUCINATION_KW = dict(tasks=["a", "b"], frames_per_episode=6, max_points=None)
"""The hallucination tests' criterion: both tasks targeted, 6 frames per episode, no cap."""


def _hallucination_case(seed: int, hallucinate: str, alternatives: Callable[[list[np.ndarray]], dict]):
    """Episodes a, b, a, a (validation: the first a and b), the criterion with ``hallucinate``, and the same criterion
    built by hand with feature_score_fn from the same features (data: the two later a's; targets: the validation
    episodes, mu uniform), whose candidates are ``alternatives(phi)``: (episodes, amf_nn ScoreFn, hand-built
    ScoreFn). Both sides run the same float64 operations, so they agree to rtol 1e-12."""
    rng = np.random.default_rng(seed)
    eps = [_episode(t, 25, rng) for t in ["a", "b", "a", "a"]]
    got = amf_nn_score_fn(_blocks, eps, [0, 1], hallucinate=hallucinate, **HALLUCINATION_KW)
    phi = [episode_features(_blocks, ep, 6) for ep in eps]
    target = np.concatenate([phi[0], phi[1]])
    weights = np.full(12, 1.0 / (2 * 6))
    want = feature_score_fn(np.concatenate([phi[2], phi[3]]), alternatives(phi).__getitem__, target, weights)
    return eps, got, want


def test_hallucinating_every_recorded_episode():
    """hallucinate="recorded": a candidate's alternatives are all its recorded episodes the criterion reads, with
    uniform weights; targets and data unchanged. Checked against feature_score_fn built by hand from the same
    features (the same float64 operations: rtol 1e-12)."""
    eps, got, want = _hallucination_case(8, "recorded", lambda phi: {
        "a": ([phi[0], phi[2], phi[3]], np.full(3, 1 / 3)), "b": ([phi[1]], np.ones(1))})
    for chosen in ([], ["a"]):
        np.testing.assert_allclose(got(["a", "b"], chosen), want(["a", "b"], chosen), rtol=1e-12)
    paper = amf_nn_score_fn(_blocks, eps, [0, 1], **HALLUCINATION_KW)(["a", "b"], [])
    assert not np.allclose(paper[0], got(["a", "b"], [])[0])  # a's hallucination now includes other scenes
    with pytest.raises(ValueError, match="hallucinate must be"):
        amf_nn_score_fn(_blocks, eps, [0, 1], hallucinate="all")
    with pytest.raises(ValueError, match="criterion_cache"):
        amf_nn_score_fn(_blocks, eps, [0, 1], hallucinate="recorded", criterion_cache={}, keys=list("wxyz"))


def test_hallucinating_the_data_episodes_not_the_targets():
    """hallucinate="data": a candidate's alternatives are its recorded non-validation episodes (never the target
    states themselves), its validation episode while it has none; checked against feature_score_fn built by hand."""
    eps, got, want = _hallucination_case(9, "data", lambda phi: {
        "a": ([phi[2], phi[3]], np.full(2, 1 / 2)), "b": ([phi[1]], np.ones(1))})  # b has no data: its target
    for chosen in ([], ["a"], ["a", "b"]):
        np.testing.assert_allclose(got(["a", "b"], chosen), want(["a", "b"], chosen), rtol=1e-12)
    recorded = amf_nn_score_fn(_blocks, eps, [0, 1], hallucinate="recorded", **HALLUCINATION_KW)(["a", "b"], [])
    assert not np.allclose(recorded[0], got(["a", "b"], [])[0])  # a's target episode is no longer among them
    assert np.allclose(recorded[1], got(["a", "b"], [])[1], rtol=1e-12)  # b: the same single validation episode
    with pytest.raises(ValueError, match="criterion_cache"):
        amf_nn_score_fn(_blocks, eps, [0, 1], hallucinate="data", criterion_cache={}, keys=list("wxyz"))


def test_a_batch_pick_counts_as_its_tasks_latest_recorded_demonstration():
    """batch_conditioning="recorded": scoring the next pick of a greedy batch after a pick of a is scoring with a's
    latest recorded non-validation episode added to the data (checked against that criterion built directly; the
    greedy path downdates a cached covariance instead: float64 round-off apart); a task without one counts as its
    hallucination; the first pick (B = 1) is the paper's exactly; the pick settles its task less than the target
    states do."""
    rng = np.random.default_rng(10)
    eps = [_episode(t, 25, rng) for t in ["a", "b", "a", "a"]]
    paper = amf_nn_score_fn(_blocks, eps, [0, 1], **HALLUCINATION_KW)
    got = amf_nn_score_fn(_blocks, eps, [0, 1], batch_conditioning="recorded", **HALLUCINATION_KW)
    np.testing.assert_allclose(got(["a", "b"], []), paper(["a", "b"], []), rtol=1e-12)  # the same computation
    phi = [episode_features(_blocks, ep, 6) for ep in eps]
    target, weights = np.concatenate([phi[0], phi[1]]), np.full(12, 1.0 / (2 * 6))
    direct = feature_score_fn(np.concatenate([phi[2], phi[3], phi[3]]), {"a": phi[0], "b": phi[1]}.__getitem__,
                              target, weights)
    want = direct(["a", "b"], [])
    np.testing.assert_allclose(got(["a", "b"], ["a"]), want, rtol=0, atol=1e-9 * np.abs(want).max())
    # b has nothing recorded: its candidate entry, as the paper's (checked round-off apart, as the other scores)
    want_b = paper(["a", "b"], ["b"])
    np.testing.assert_allclose(got(["a", "b"], ["b"]), want_b, rtol=0, atol=1e-9 * np.abs(want_b).max())
    assert got(["a"], ["a"])[0] > paper(["a"], ["a"])[0] + 1e-6  # a recorded episode is not a's target states
    with pytest.raises(ValueError, match="batch_conditioning must be"):
        amf_nn_score_fn(_blocks, eps, [0, 1], batch_conditioning="real")
    # task_selector's exact incremental criterion (criterion_cache): the same scores, also after a new episode
    store: dict = {}
    for m in (4, 5):
        eps_m = eps if m == 4 else [*eps, _episode("b", 25, rng)]
        cached = amf_nn_score_fn(_blocks, eps_m, [0, 1], batch_conditioning="recorded", criterion_cache=store,
                                 keys=list("wxyzv")[:m], **HALLUCINATION_KW)
        plain = amf_nn_score_fn(_blocks, eps_m, [0, 1], batch_conditioning="recorded", **HALLUCINATION_KW)
        assert cached.last_info["criterion"] == ("built" if m == 4 else "updated")
        for chosen in ([], ["a"], ["b"], ["a", "b"]):
            want = plain(["a", "b"], chosen)
            np.testing.assert_allclose(cached(["a", "b"], chosen), want, rtol=0, atol=1e-9 * np.abs(want).max())
