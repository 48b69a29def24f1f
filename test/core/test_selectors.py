"""Selector contract (every selector) and the behaviour specific to each."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.core.criterion import feature_score_fn
from amf_ros.core.selectors import SELECTOR_NAMES, Selection, make_selector

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
