"""core/incremental.py: the exact criterion from a cached Sigma_U against the brute force (feature_criterion on all
rows), incremental == from scratch, greedy batch picks == the former copy-the-posterior path, and bad input.

Tolerances follow from float64 round-off on well-conditioned problems (noise_var 0.3, |phi|^2 ~ d): a few hundred
operations of relative error 1e-16 each, amplified by condition numbers < 1e3, stay far below 1e-9.
"""

from __future__ import annotations

import numpy as np
import pytest

from amf_ros.core.criterion import feature_criterion, feature_score_fn, kernel_score_fn, posterior_criterion
from amf_ros.core.incremental import IncrementalFeatureCriterion, make_layout, sample_space_limit
from amf_ros.core.kernels import RBFKernel
from amf_ros.core.posterior import FeaturePosterior, KernelPosterior
from amf_ros.core.selectors import make_selector

RTOL = 1e-9
NOISE, PRIOR = 0.3, 1.5


def _close(got, want, rtol=RTOL):
    want = np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * float(np.max(np.abs(want))))


def _problem(seed, d=10, n=24, q=7):
    """Data, candidates (plain, alternatives with weights, a (J, M, d) block), targets partly equal to candidate rows
    (as in AMF-NN, where both are the validation demonstrations), target weights and candidate weights."""
    rng = np.random.default_rng(seed)
    data = rng.normal(size=(n, d))
    cands = [rng.normal(size=(3, d)), [rng.normal(size=(2, d)), rng.normal(size=(4, d))], rng.normal(size=(2, 3, d)),
             rng.normal(size=(3, d))]
    cw = [None, np.array([0.3, 0.7]), np.array([1.0, 2.0]), None]
    tgt = np.concatenate([rng.normal(size=(q, d)), cands[0][:2], cands[2][1]])  # shared rows are stored once
    tw = rng.uniform(0.1, 1.0, size=len(tgt))
    tw[1] = 0.0  # zero-weight targets are dropped, as in posterior_criterion
    return data, cands, tgt, tw, cw


def _heaviest(entry, weights):
    blocks = list(entry) if isinstance(entry, list) or np.ndim(entry) == 3 else [entry]
    return blocks[0 if weights is None else int(np.argmax(weights))]


def _brute(data, cands, tgt, tw, cw, form, chosen=()):
    """The former path: the data plus each chosen candidate's heaviest alternative, then the criterion on all rows."""
    rows = np.concatenate([data, *[_heaviest(cands[c], cw[c]) for c in chosen]])
    return feature_criterion(rows, cands, tgt, tw, NOISE, PRIOR, form, cw)


def _cw(cands, cw):
    """Uniform weights for multi-alternative candidates without weights (None stays None for single blocks)."""
    return [np.full(len(c), 1.0 / len(c)) if w is None and (np.ndim(c) == 3 or isinstance(c, list)) else w
            for c, w in zip(cands, cw, strict=True)]


@pytest.mark.parametrize("form", ["log_variance", "variance"])
@pytest.mark.parametrize("space, n", [("sample", 6), ("feature", 30), ("auto", 3), ("auto", 40)])
def test_matches_brute_force(form, space, n):
    data, cands, tgt, tw, cw = _problem(n, n=n)
    cw = _cw(cands, cw)
    want = feature_criterion(data, cands, tgt, tw, NOISE, PRIOR, form, cw)
    eng = IncrementalFeatureCriterion(data, cands, tgt, tw, NOISE, PRIOR, form, cw, space=space)
    assert eng.space == (space if space != "auto" else "sample" if n <= eng.limit else "feature")
    _close(eng.scores(), want)
    # 18 candidate rows + 11 targets of positive weight, 5 of them candidate rows: stored once
    assert eng.layout.rows.shape[0] == 24 and len(eng.layout.q_idx) == 11


@pytest.mark.parametrize("space", ["sample", "feature", "auto"])
def test_incremental_add_equals_build_from_scratch(space):
    data, cands, tgt, tw, cw = _problem(3, n=40)
    cw = _cw(cands, cw)
    eng = IncrementalFeatureCriterion(data[:2], cands, tgt, tw, NOISE, PRIOR, "log_variance", cw, space=space)
    spaces = [eng.space]
    for start in range(2, 40, 7):  # episodes of 7 rows (the last one shorter)
        eng.add_data(data[start:start + 7])
        spaces.append(eng.space)
    eng.add_data(np.zeros((0, 10)))  # no-op
    assert eng.num_rows == 40
    scratch = IncrementalFeatureCriterion(data, cands, tgt, tw, NOISE, PRIOR, "log_variance", cw, space=space)
    _close(eng.scores(), scratch.scores(), rtol=1e-10)
    _close(eng.scores(), feature_criterion(data, cands, tgt, tw, NOISE, PRIOR, "log_variance", cw))
    if space == "auto":  # limit ~ 3 d^2 / (4 d + 2 U): the engine starts in sample space and switches once
        assert sample_space_limit(10, eng.layout.rows.shape[0]) < 40
        assert spaces[0] == "sample" and spaces[-1] == "feature"
    else:
        assert set(spaces) == {space}
    assert eng.nbytes > eng.cov.sigma.nbytes


def test_starts_from_the_prior():
    _, cands, tgt, tw, cw = _problem(4)
    cw = _cw(cands, cw)
    eng = IncrementalFeatureCriterion(np.zeros((0, 10)), cands, tgt, tw, NOISE, PRIOR, "variance", cw)
    _close(eng.scores(), feature_criterion(np.zeros((0, 10)), cands, tgt, tw, NOISE, PRIOR, "variance", cw))


@pytest.mark.parametrize("space", ["sample", "feature"])
def test_batch_picks_equal_the_former_greedy_path(space):
    data, cands, tgt, tw, cw = _problem(5)
    cw = _cw(cands, cw)
    eng = IncrementalFeatureCriterion(data, cands, tgt, tw, NOISE, PRIOR, "log_variance", cw, space=space)
    for chosen in ([1], [1, 3], [2, 2, 0]):
        _close(eng.scores(chosen), _brute(data, cands, tgt, tw, cw, "log_variance", chosen))
    # the score function of the selector: a B = 3 greedy batch, each pick conditioned on the previous ones
    keys = ["a", "b", "c", "d"]
    sel = make_selector("amf", warm_start=False).select(keys, {}, np.random.default_rng(0), batch_size=3,
                                                        score_fn=eng.score_fn(keys))
    picks: list[int] = []
    for step in sel.info["batch_scores"]:
        _close([step[k] for k in keys], _brute(data, cands, tgt, tw, cw, "log_variance", picks))
        picks.append(int(np.argmin([step[k] for k in keys])))
    assert sel.tasks == [keys[p] for p in picks]


def test_score_fn_cache_follows_prefixes_and_new_data():
    data, cands, tgt, tw, cw = _problem(6)
    cw = _cw(cands, cw)
    eng = IncrementalFeatureCriterion(data[:10], cands, tgt, tw, NOISE, PRIOR, "variance", cw)
    keys = ["a", "b", "c", "d"]
    fn = eng.score_fn(keys)
    for chosen in (["b"], ["b", "a"], ["c"], ["b", "a", "d"], [], ["b"]):
        idx = [keys.index(c) for c in chosen]
        _close(fn(["d", "a"], chosen), eng.scores(idx)[[3, 0]], rtol=1e-12)
    before = fn(keys, ["b"])
    eng.add_data(data[10:])  # the score function sees the new data (its batch cache is dropped)
    after = fn(keys, ["b"])
    assert not np.allclose(before, after)
    _close(after, _brute(data, cands, tgt, tw, cw, "variance", [1]))


@pytest.mark.parametrize("space", ["sample", "feature"])
def test_a_pick_can_condition_on_rows_that_are_no_candidates(space):
    """batch_conditioning "recorded" over ROS: a pick of b conditions on extra rows (its latest recording), a pick
    of d on its hallucination; == the brute force with those rows added to the data, before and after new data."""
    data, cands, tgt, tw, cw = _problem(7, n=30)
    cw = _cw(cands, cw)
    extra = np.random.default_rng(8).normal(size=(5, data.shape[1]))
    extra_c = np.random.default_rng(9).normal(size=(3, data.shape[1]))
    eng = IncrementalFeatureCriterion(data[:20], cands, tgt, tw, NOISE, PRIOR, "log_variance", cw, space=space)
    keys = ["a", "b", "c", "d"]
    fn = eng.score_fn(keys, pick_rows_of={"b": extra, "c": extra_c}.get)
    _close(fn(keys, []), eng.scores())  # the first pick is unchanged
    for n in (20, 30):
        for chosen, rows in ((["b"], [extra]), (["b", "d"], [extra, cands[3]]), (["d", "b"], [cands[3], extra]),
                             (["b", "c", "d"], [extra, extra_c, cands[3]]), (["c"], [extra_c])):
            want = feature_criterion(np.concatenate([data[:n], *rows]), cands, tgt, tw, NOISE, PRIOR, "log_variance",
                                     cw)
            _close(fn(keys, chosen), want)
        eng.add_data(data[20:])  # the function re-reads the rows for the new data version
    assert not np.allclose(fn(keys, ["b"]), eng.score_fn(keys)(keys, ["b"]))  # not the hallucination's scores
    with pytest.raises(ValueError, match="candidate indices must be in"):
        eng.with_pick_rows({4: eng.pick_block(extra)})


@pytest.mark.parametrize("form", ["log_variance", "variance"])
def test_posterior_score_fn_batch_path_equals_copying_the_posterior(form):
    """feature_score_fn / kernel_score_fn: picks after the first use Sigma_U downdates; same scores as before."""
    data, cands, tgt, tw, cw = _problem(7)
    cw = _cw(cands, cw)
    entry = {k: (c, w) for k, c, w in zip("abcd", cands, cw, strict=True)}
    fn = feature_score_fn(data, lambda t: entry[t], tgt, tw, noise_var=NOISE, prior_var=PRIOR, form=form)
    for chosen in (["b"], ["b", "d"], ["a", "a"]):
        want = _brute(data, cands, tgt, tw, cw, form, ["abcd".index(c) for c in chosen])
        _close(fn(list("abcd"), chosen), want)
    _close(fn(["c", "a"], ["b"]), _brute(data, cands, tgt, tw, cw, form, [1])[[2, 0]])

    kernel = RBFKernel((1.3,) * 10, amplitude=0.9)
    kfn = kernel_score_fn(kernel, data, lambda t: entry[t], tgt, tw, noise_var=NOISE, form=form)
    for chosen in (["c"], ["c", "a"]):
        post = KernelPosterior(kernel, data, NOISE)
        for c in chosen:
            post.add(_heaviest(cands["abcd".index(c)], cw["abcd".index(c)]))
        want = posterior_criterion(post, tgt, tw, cands, cw, form)
        _close(kfn(list("abcd"), chosen), want)


def test_posterior_score_fn_first_pick_is_unchanged():
    data, cands, tgt, tw, cw = _problem(8)
    cw = _cw(cands, cw)
    entry = {k: (c, w) for k, c, w in zip("abcd", cands, cw, strict=True)}
    fn = feature_score_fn(data, lambda t: entry[t], tgt, tw, noise_var=NOISE, prior_var=PRIOR)
    post = FeaturePosterior(data, NOISE, PRIOR)
    np.testing.assert_array_equal(fn(list("abcd"), []), posterior_criterion(post, tgt, tw, cands, cw))


def test_invalid_input():
    data, cands, tgt, tw, cw = _problem(9)
    cw = _cw(cands, cw)
    ok = {"noise_var": NOISE, "prior_var": PRIOR, "candidate_weights": cw}
    with pytest.raises(ValueError, match="space must be"):
        IncrementalFeatureCriterion(data, cands, tgt, tw, space="gpu", **ok)
    with pytest.raises(ValueError, match="noise_var"):
        IncrementalFeatureCriterion(data, cands, tgt, tw, noise_var=-1.0, prior_var=PRIOR, candidate_weights=cw)
    with pytest.raises(ValueError, match="needs noise_var > 0"):
        IncrementalFeatureCriterion(data, cands, tgt, tw, noise_var=0.0, prior_var=PRIOR, candidate_weights=cw,
                                    space="feature")
    with pytest.raises(ValueError, match="prior_var"):
        IncrementalFeatureCriterion(data, cands, tgt, tw, noise_var=NOISE, prior_var=0.0, candidate_weights=cw)
    with pytest.raises(ValueError, match="unknown criterion form"):
        IncrementalFeatureCriterion(data, cands, tgt, tw, form="entropy", **ok)
    with pytest.raises(ValueError, match="empty candidate set"):
        IncrementalFeatureCriterion(data, [], tgt, tw, noise_var=NOISE)
    with pytest.raises(ValueError, match="data_phi must have 10 columns"):
        IncrementalFeatureCriterion(data[:, :4], cands, tgt, tw, **ok)
    with pytest.raises(ValueError, match="target_weights are all zero"):
        IncrementalFeatureCriterion(data, cands, tgt, np.zeros(len(tgt)), **ok)
    eng = IncrementalFeatureCriterion(data, cands, tgt, tw, **ok)
    with pytest.raises(ValueError, match="rows must have 10 columns"):
        eng.add_data(np.ones((2, 3)))
    with pytest.raises(ValueError, match="NaN or inf"):
        eng.add_data(np.full((2, 10), np.nan))
    with pytest.raises(ValueError, match="candidate index must be in"):
        eng.scores([4])
    with pytest.raises(ValueError, match="need 4 distinct keys"):
        eng.score_fn(["a", "a", "b", "c"])
    with pytest.raises(ValueError, match=r"unknown task\(s\) \['z'\]"):
        eng.score_fn(list("abcd"))(["a", "z"], [])
    with pytest.raises(ValueError, match="candidate 1 contains an empty trajectory"):
        make_layout(tgt, tw, [cands[0], np.zeros((0, 10))], None, 10)
