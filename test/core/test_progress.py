"""The learning-progress estimator (core/progress.py) and the ``progress`` selector built on it."""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.core.progress import (
    Evaluation,
    ProgressConfig,
    estimate_progress,
    filter_task,
    observation_var,
    predicted_gain,
    progress_score_fn,
)
from amf_ros.core.selectors import make_selector

TASKS = ["a", "b", "c", "d"]


def _rounds(curves: dict[str, list[tuple[int, float]]], episodes: int = 10) -> list[Evaluation]:
    """Evaluations in time order: round k evaluates every task at its k-th (demos, success) point."""
    n = max(len(v) for v in curves.values())
    return [Evaluation(t, d, s, episodes) for k in range(n) for t, pts in curves.items() if k < len(pts)
            for d, s in [pts[k]]]


def test_a_task_whose_success_rises_gets_the_higher_slope():
    hist = _rounds({"rising": [(0, 0.0), (1, 0.3), (2, 0.6)], "flat": [(0, 0.2), (1, 0.2), (2, 0.2)]})
    est = estimate_progress(hist, ProgressConfig(ucb=0.0))
    assert est["rising"].slope > 0.15 and abs(est["flat"].slope) < 0.05, est
    assert est["rising"].slope > est["flat"].slope + 0.1
    assert est["rising"].demos == 2 and est["rising"].evaluations == 3


def test_the_filter_recovers_a_noiseless_trend_and_its_uncertainty_shrinks():
    # exact linear data 0.1 + 0.08 n, many evaluation episodes: the floor dominates the observation noise
    hist = [Evaluation("a", n, 0.1 + 0.08 * n, 1000) for n in range(8)]
    cfg = ProgressConfig(level_process_var=1e-6, slope_process_var=1e-6)
    est = filter_task(hist, cfg)
    assert est.slope == pytest.approx(0.08, abs=0.01) and est.level == pytest.approx(0.66, abs=0.02)
    sds = [filter_task(hist[:k], cfg).slope_sd for k in (2, 4, 8)]
    assert sds[0] > sds[1] > sds[2], sds


def test_noisier_evaluations_move_the_estimate_less():
    # the same jump 0 -> 0.5 after one demonstration, seen through 2 or 200 episodes: the binomial variance of
    # the 2-episode rate is larger, so the filter believes the jump less
    few = filter_task([Evaluation("a", 0, 0.0, 2), Evaluation("a", 1, 0.5, 2)], ProgressConfig(ucb=0.0))
    many = filter_task([Evaluation("a", 0, 0.0, 200), Evaluation("a", 1, 0.5, 200)], ProgressConfig(ucb=0.0))
    assert 0.0 < few.slope < many.slope and few.slope_sd > many.slope_sd
    assert observation_var(0.0, 10, 1e-3) > 1e-3  # Laplace smoothing: 0/10 is not exact
    assert observation_var(0.0, 10_000, 1e-3) == 1e-3  # ... and the floor bounds it below
    assert observation_var(0.5, 10, 1e-6) == pytest.approx(0.25 / 10, rel=0.05)


def test_estimates_are_deterministic_and_order_checked():
    hist = _rounds({"a": [(0, 0.1), (1, 0.4)], "b": [(0, 0.3), (0, 0.5)]})
    one, two = estimate_progress(hist), estimate_progress(list(hist))
    for t in ("a", "b"):
        assert one[t].slope == two[t].slope and np.array_equal(one[t].cov, two[t].cov)
    with pytest.raises(ValueError, match="went down"):
        filter_task([Evaluation("a", 2, 0.1, 5), Evaluation("a", 1, 0.2, 5)])
    with pytest.raises(ValueError, match="success"):
        Evaluation("a", 0, 1.5, 5)
    with pytest.raises(ValueError, match="ucb"):
        ProgressConfig(ucb=-1.0)


def test_gain_is_capped_by_the_headroom_and_walks_up_the_curve():
    est = filter_task([Evaluation("a", 0, 0.5, 1000), Evaluation("a", 1, 0.8, 1000)],
                      ProgressConfig(ucb=0.0, slope_process_var=0.0))
    cfg = ProgressConfig(ucb=0.0)
    g0, g1 = predicted_gain(est, 0, 0, cfg), predicted_gain(est, 0, 1, cfg)
    assert est.slope > 0.2
    assert g0 == pytest.approx(min(est.slope, 1.0 - est.level), abs=1e-9)
    assert g1 < g0 and g1 == pytest.approx(max(0.0, min(est.slope, 1.0 - est.level - est.slope)), abs=1e-9)
    # a demonstration recorded after the last evaluation counts like a pick
    assert predicted_gain(est, 1, 0, cfg) == pytest.approx(g1, abs=1e-12)


def test_the_score_fn_prefers_progress_and_spreads_a_batch():
    hist = _rounds({"a": [(0, 0.0), (1, 0.5)], "b": [(0, 0.1), (1, 0.2)], "c": [(0, 1.0), (1, 1.0)],
                    "d": [(0, 0.0), (1, 0.0)]})
    counts = {t: 1 for t in TASKS}
    fn = progress_score_fn(hist, counts, ProgressConfig(ucb=0.0))
    s = dict(zip(TASKS, fn(TASKS, []), strict=True))
    assert min(s, key=s.get) == "a" and -0.01 < s["c"] <= 0.0  # saturated: (almost) no gain
    assert fn.last_info["progress"]["a"]["slope"] > fn.last_info["progress"]["b"]["slope"]
    sel = make_selector("progress", tasks=TASKS).select(TASKS, counts, np.random.default_rng(0), batch_size=4,
                                                          score_fn=fn)
    assert sel.tasks[0] == "a" and not sel.warm_start
    assert "b" in sel.tasks, sel.tasks  # a's predicted curve reaches 1 within the batch, then b's slope wins
    assert len(sel.info["batch_scores"]) == 4 and "progress" in sel.info


def test_the_selector_warm_starts_and_breaks_exact_ties_at_random():
    sel = make_selector("progress", tasks=TASKS)
    warm = sel.select(TASKS, {"a": 1, "b": 0, "c": 1, "d": 0}, np.random.default_rng(0), batch_size=2)
    assert sorted(warm.tasks) == ["b", "d"] and warm.warm_start
    with pytest.raises(ValueError, match="progress needs a score_fn"):
        sel.select(TASKS, {t: 1 for t in TASKS}, np.random.default_rng(0))
    flat = _rounds({t: [(0, 1.0), (1, 1.0)] for t in TASKS})  # everything solved: every gain 0
    fn = progress_score_fn(flat, {t: 1 for t in TASKS})
    firsts = {sel.select(TASKS, {t: 1 for t in TASKS}, np.random.default_rng(k), score_fn=fn).tasks[0]
              for k in range(20)}
    assert len(firsts) > 1


def test_an_unevaluated_task_is_scored_from_the_prior():
    hist = _rounds({"a": [(0, 0.0), (1, 0.0), (2, 0.0)]})
    fn = progress_score_fn(hist, {"a": 2, "b": 3}, ProgressConfig(ucb=1.0))
    s = dict(zip(["a", "b"], fn(["a", "b"], []), strict=True))
    # b: prior slope 0 +- 0.25 -> optimistic gain 0.25; a: measured flat three times -> far less
    assert s["b"] == pytest.approx(-0.25, abs=1e-9) and s["a"] > s["b"] + 0.05
