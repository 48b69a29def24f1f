"""Selector contract (every selector) and the behaviour specific to each."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.core.criterion import feature_score_fn
from amf_ros.core.selection import Selection
from amf_ros.core.selectors import SELECTOR_NAMES, make_selector

TASKS = ["a", "b", "c", "d"]


def _score_fn(values):
    return lambda cands, chosen: np.array([values[c] + 10.0 * chosen.count(c) for c in cands])


@pytest.mark.parametrize("name", SELECTOR_NAMES)
class TestSelectorContract:
    def _select(self, name, cands=TASKS, batch=1, counts=None, **kw):
        sel = make_selector(name, tasks=TASKS)
        counts = {t: 1 for t in TASKS} if counts is None else counts
        return sel.select(list(cands), counts, np.random.default_rng(0), batch_size=batch,
                          score_fn=_score_fn({"a": 3.0, "b": 1.0, "c": 2.0, "d": 4.0}),
                          pretrain_counts={t: 0 for t in TASKS}, **kw)

    def test_returns_batch_of_candidates_with_finite_scores(self, name):
        sel = self._select(name, batch=3)
        assert isinstance(sel, Selection)
        assert len(sel.tasks) == 3 and set(sel.tasks) <= set(TASKS)
        assert set(sel.scores) == set(TASKS) and all(np.isfinite(v) for v in sel.scores.values())

    def test_unknown_candidate_is_named(self, name):
        with pytest.raises(ValueError, match="'zz'"):
            self._select(name, cands=["a", "zz"])

    def test_empty_and_bad_batch(self, name):
        with pytest.raises(ValueError, match="empty"):
            self._select(name, cands=[])
        with pytest.raises(ValueError, match="batch_size"):
            self._select(name, batch=0)

    def test_deterministic_under_a_fixed_rng(self, name):
        runs = [self._select(name, batch=5) for _ in range(2)]
        assert runs[0].tasks == runs[1].tasks and runs[0].scores == runs[1].scores


def test_unknown_selector_name():
    with pytest.raises(ValueError, match="unknown selector"):
        make_selector("greedy")


def test_amf_warm_start_then_argmin_and_greedy_batch():
    sel = make_selector("amf", tasks=TASKS)
    fn = _score_fn({"a": 3.0, "b": 1.0, "c": 2.0, "d": 4.0})
    rng = np.random.default_rng(0)
    warm = sel.select(TASKS, {"a": 1, "b": 0, "c": 1, "d": 0}, rng, batch_size=3, score_fn=fn)
    assert sorted(warm.tasks[:2]) == ["b", "d"] and warm.warm_start  # the two unseen tasks, in random order
    assert warm.tasks[2] == "c"  # then the criterion (b and d already chosen this batch)
    orders = {tuple(sel.select(TASKS, {t: 0 for t in TASKS}, np.random.default_rng(s), batch_size=4,
                               score_fn=fn).tasks) for s in range(20)}
    assert len(orders) > 1 and all(sorted(o) == TASKS for o in orders)
    after = sel.select(TASKS, {t: 1 for t in TASKS}, rng, batch_size=2, score_fn=fn)
    assert after.tasks == ["b", "c"] and not after.warm_start  # b penalised once chosen -> c next
    assert after.scores == {"a": 3.0, "b": 1.0, "c": 2.0, "d": 4.0}
    assert len(after.info["batch_scores"]) == 2


def test_amf_rejects_nan_scores_naming_task():
    sel = make_selector("amf", warm_start=False)
    with pytest.raises(ValueError, match="'c'"):
        sel.select(TASKS, {}, np.random.default_rng(0),
                   score_fn=lambda c, ch: np.array([1.0, 2.0, np.nan, 0.0]))


def test_round_robin_and_rebalancing_counts():
    rng = np.random.default_rng(0)
    rr = make_selector("round_robin").select(TASKS, {"a": 2, "b": 1, "c": 1, "d": 3}, rng, batch_size=3)
    assert rr.tasks == ["b", "c", "a"]  # b, c -> 2 each, then the first of the ties
    rb = make_selector("rebalancing").select(TASKS, {"a": 0, "b": 0, "c": 0, "d": 0}, rng, batch_size=2,
                                             pretrain_counts={"a": 5, "b": 0, "c": 5, "d": 1})
    assert rb.tasks == ["b", "b"] and rb.scores["b"] == 1.0
    with pytest.raises(ValueError, match="pretrain_counts"):
        make_selector("rebalancing").select(TASKS, {}, rng)


def test_uniform_is_roughly_uniform():
    sel = make_selector("uniform")
    picks = sel.select(TASKS, {}, np.random.default_rng(1), batch_size=4000).tasks
    freq = np.array([picks.count(t) for t in TASKS]) / 4000
    assert np.all(np.abs(freq - 0.25) < 0.03)


def test_feature_score_fn_prefers_uncovered_direction_and_conditions_batch():
    # Data covers feature axis 0 only; targets need axes 0 and 1; candidate "x1" adds axis 1.
    e = np.eye(3)
    data = np.repeat(e[:1], 5, axis=0)
    cands = {"x0": e[[0]], "x1": e[[1]], "x2": e[[2]]}
    fn = feature_score_fn(data, lambda t: cands[t], np.stack([e[0], e[1]]), noise_var=0.1)
    sel = make_selector("amf", warm_start=False).select(list(cands), {}, np.random.default_rng(0),
                                                        batch_size=2, score_fn=fn)
    assert sel.tasks[0] == "x1"
    first, second = sel.info["batch_scores"]
    # x2 is useless (targets have no axis-2 component): its score is the no-new-data baseline. Having
    # hallucinated x1 once, a second x1 gains less than the first did.
    assert second["x1"] - second["x2"] > first["x1"] - first["x2"]
    assert second["x2"] < first["x2"]  # the baseline itself improved by conditioning on the first pick


# ----------------------------------------------------------------------------- peer rules (core/peer_selectors.py)


def _uncertainty_fn(u):
    """ScoreFn of an uncertainty rule: score = -u (lower = chosen first)."""
    return lambda cands, chosen: -np.array([u[c] for c in cands], dtype=float)


def test_weighted_rule_draws_proportionally_to_u_to_the_temperature():
    u = {"a": 1.0, "b": 2.0, "c": 0.0, "d": -1.0}  # u <= 0 weighs 0 (uq_vla: max(u, 0))
    sel = make_selector("vfd")  # T = 2.5
    picks = sel.select(TASKS, {}, np.random.default_rng(0), batch_size=4000, score_fn=_uncertainty_fn(u))
    p = np.array([1.0, 2.0 ** 2.5, 0.0, 0.0]) / (1.0 + 2.0 ** 2.5)
    assert np.allclose([picks.info["pick_probability"][t] for t in TASKS], p)
    freq = np.array([picks.tasks.count(t) for t in TASKS]) / 4000
    assert np.all(np.abs(freq - p) < 0.03) and freq[2] == freq[3] == 0
    assert picks.scores == {t: -v for t, v in u.items()} and not picks.warm_start
    assert make_selector("action_l2").temperature == 1.5 and make_selector("gu").temperature == 1.0


def test_weighted_rule_falls_back_to_uniform_and_gu_shifts_log_variances():
    flat = make_selector("vfd").select(TASKS, {}, np.random.default_rng(0), score_fn=_uncertainty_fn(
        {t: -1.0 for t in TASKS}))
    assert set(flat.info["pick_probability"].values()) == {0.25}  # every u' = 0: uniform, as uq_vla
    u = dict(zip(TASKS, [1, 2, 3, 4], strict=True))
    cold = make_selector("vfd", temperature=0.0).select(TASKS, {}, np.random.default_rng(0),
                                                        score_fn=_uncertainty_fn(u))
    assert set(cold.info["pick_probability"].values()) == {0.25}
    gu = make_selector("gu").select(TASKS[:3], {}, np.random.default_rng(0),
                                    score_fn=_uncertainty_fn({"a": -30.0, "b": -20.0, "c": -10.0}))
    w = np.array([0.2, 10.2, 20.2])  # u - min u + 0.01 (max u - min u)
    assert np.allclose([gu.info["pick_probability"][t] for t in "abc"], w / w.sum())


def test_peer_warm_starts_and_missing_score_fn():
    counts = {"a": 1, "b": 0, "c": 1, "d": 1}
    u = _uncertainty_fn({"a": 3.0, "b": 0.0, "c": 2.0, "d": 1.0})
    # uq_vla's rules score at once (no warm start: the unseen b is not forced); dropout warm-starts as amf
    vfd = make_selector("vfd", batch_rule="top_k").select(TASKS, counts, np.random.default_rng(0), score_fn=u)
    assert vfd.tasks == ["a"] and not vfd.warm_start
    drop = make_selector("dropout").select(TASKS, counts, np.random.default_rng(0), batch_size=2, score_fn=u)
    assert drop.tasks == ["b", "a"] and drop.warm_start
    for name in ("vfd", "diversity"):
        with pytest.raises(ValueError, match=f"{name} needs a score_fn"):
            make_selector(name).select(TASKS, counts, np.random.default_rng(0))
    with pytest.raises(ValueError, match="batch_rule"):
        make_selector("vfd", batch_rule="softmax")
    with pytest.raises(ValueError, match="temperature"):
        make_selector("gu", temperature=-1.0)


def test_top_k_is_distinct_and_cycles_greedy_rescores():
    u = _uncertainty_fn({"a": 3.0, "b": 0.5, "c": 2.0, "d": 1.0})
    rng = np.random.default_rng(0)
    assert make_selector("dropout").select(TASKS, {t: 1 for t in TASKS}, rng, batch_size=3,
                                           score_fn=u).tasks == ["a", "c", "d"]
    assert make_selector("dropout").select(TASKS, {t: 1 for t in TASKS}, rng, batch_size=6,
                                           score_fn=u).tasks == ["a", "c", "d", "b", "a", "c"]
    greedy = make_selector("vfd", batch_rule="greedy").select(
        TASKS, {}, rng, batch_size=2, score_fn=_score_fn({"a": 3.0, "b": 1.0, "c": 2.0, "d": 4.0}))
    assert greedy.tasks == ["b", "c"] and len(greedy.info["batch_scores"]) == 2


def test_diversity_breaks_exact_ties_at_random_and_conditions_on_picks():
    sel = make_selector("diversity")

    def tie(cands, chosen):
        return np.array([0.0 if c not in chosen else 1.0 for c in cands])

    firsts = {sel.select(TASKS, {}, np.random.default_rng(s), score_fn=tie).tasks[0] for s in range(30)}
    assert firsts == set(TASKS)  # k-center greedy's random first pick
    batch = sel.select(TASKS, {}, np.random.default_rng(0), batch_size=4, score_fn=tie)
    assert sorted(batch.tasks) == TASKS and len(batch.info["batch_scores"]) == 4
