"""AMF-NN: the criterion's ScoreFn from loss-gradient embeddings of recorded episodes -- the ONE implementation,
used by ``amf bench metaworld`` (bench/metaworld.py) and by task_selector (runtime/task_selector.py).

Paper: Sec. 4.2 (eq. ``criterion_nn``: the policy as a GP with kernel <phi(x), phi(x')>), App. E (the practical
estimate of eq. 3 that :mod:`amf_ros.core.criterion` computes) and App. M ("Importance sampling weights", "AMF").
Given the recorded episodes (one transitions dict per demonstration) and which of them form the validation set:

* features: phi = ``embed(transitions)``, the loss-gradient embeddings of the selection copy of the policy (label =
  the demonstrated action chunk), at ``frames_per_episode`` evenly spaced steps of every episode used (first and last
  kept; :func:`evenly_spaced_rows`). With many episodes each gets fewer frames (at least 1), so that the total stays
  within ``max_points``: the criterion factorises a matrix over the data points. The label chunk of step t is the
  demonstrated actions t..t+H-1 of the whole episode (not of the subsampled frames): only the rows those chunks read
  are embedded (:func:`episode_features`);
* validation set (App. M "AMF": a copy of the policy not trained on the warm-start demonstrations, which thus act as
  a small validation set): ``validation`` = indices of those episodes (:func:`warm_start_validation` = the first
  episode of every task; every index = all episodes);
* targets x_q = (s_t, c): the validation states with the task they were demonstrated for. The importance weight
  w(tau, c) of eq. 4 is the indicator "tau was demonstrated for c" (deterministic / diffusion policies, App. M), so
  every other pairing has weight 0 and is dropped. mu_c is uniform over ``tasks``: a target state of episode i of
  task c weighs 1 / (|C| * #validation episodes of c * #frames of i);
* candidate c': its validation episode(s) as hallucinated demonstration(s) tau' (App. E's outer sum, omega uniform);
  ``hallucinate="recorded"``: every recorded episode of c the criterion reads (validation and data), so that where a
  task has demonstrations of other scenes the hallucination is not only its own target states (a diagnostic of why
  greedy batches divide the new tasks otherwise than one-at-a-time selection; docs/metaworld.md);
  ``hallucinate="data"``: the task's recorded episodes other than its validation ones (its validation episodes while
  it has none), so that a hallucinated demonstration is never the target states themselves, as a real one of a new
  scene is not;
* greedy batch (B > 1, Algorithm 1): a task picked earlier in the batch is conditioned on as its candidate
  hallucination (the paper's), or with ``batch_conditioning="recorded"`` as its latest recorded non-validation
  episode: the target states settle their task at once, which a real demonstration of a new scene does not, so the
  paper's batch moves on from a slow task that one-at-a-time selection keeps asking for (docs/metaworld.md);
* data conditioned on: every non-validation episode (``condition_on_data``; else none, and the other episodes enter
  only by fine-tuning the selection copy, Sec. 4.2);
* replay-aware (issue 32; ``replay_fraction`` r > 0 with the ``replay`` episodes): fine-tuning then minimises
  (1 - r) x the mean loss over the recorded episodes + r x the mean loss over the replayed pre-training episodes, at
  a fixed number of steps. Read as a weighted likelihood (each point's noise sigma^2 / w, the weights normalised so
  that r = 0 is the paper's criterion exactly), a recorded or hallucinated episode's points get w = 1 - r and a
  replayed episode's points w = r * n / n_replay (n recorded episodes, n_replay replayed; every episode gives the
  same number of frames). Replay thus conditions the posterior where the pre-training data is (the pre-trained
  tasks' targets grow certain, so their demonstrations gain less) and halves what a new demonstration teaches at
  r = 0.5. Implemented exactly by scaling the feature rows by sqrt(w) (the linear-Gaussian posterior depends on
  the data only through sum w phi phi^T / sigma^2);
* effective sample size of task c's target weights: with 0/1 importance weights, its number of validation episodes.

Reconciled semantics (issue #11; before, the benchmark and task_selector each had a copy): ``prior_var`` 1.0 (the
benchmark used feature_score_fn's default 1.0, task_selector its parameter, default 1.0); ``max_points`` 1024 in both
(the benchmark never hits it: 16 frames x at most 64 episodes fit, its configurations have at most 30 demonstrations);
frames are chosen, then embedded with their full-episode label chunks (task_selector used to embed the subsampled
frames alone, so a chunk of H > 1 actions spanned frames far apart: a wrong label); the benchmark's scores are
unchanged bit for bit (test/core/test_amf_nn.py).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping, MutableMapping, Sequence
from typing import Any

import numpy as np

from amf_ros.core.criterion import feature_score_fn
from amf_ros.core.selection import BATCH_CONDITIONING, ScoreFn

Transitions = Mapping[str, np.ndarray]
EmbedFn = Callable[[Transitions], np.ndarray]

HALLUCINATE: tuple[str, ...] = ("validation", "recorded", "data")
"""What a candidate's hallucinated demonstrations are (``amf_nn_score_fn``'s ``hallucinate``; the paper's first)."""

DEFAULT_MAX_POINTS = 1024
"""Default cap on the criterion's data points (task_selector's ``max_points``; the benchmark's too)."""


def evenly_spaced_rows(length: int, frames: int) -> np.ndarray:
    """Up to ``frames`` evenly spaced, increasing row indices of an episode of ``length`` steps (first, last kept)."""
    if length < 1 or frames < 1:
        raise ValueError(f"need length >= 1 and frames >= 1, got {length=} {frames=}")
    return np.unique(np.linspace(0, length - 1, num=min(frames, length)).round().astype(int))


def frames_under_cap(frames_per_episode: int, episodes: int, max_points: int | None) -> int:
    """Frames per episode so that ``episodes`` of them hold at most ``max_points`` points (>= 1; None = no cap)."""
    if max_points is None:
        return int(frames_per_episode)
    return max(1, min(int(frames_per_episode), int(max_points) // max(1, episodes)))


def label_horizon(policy: Any) -> int | None:
    """H, the action-chunk length a policy's embedding labels read (``config.action_horizon``); None if unknown."""
    horizon = getattr(getattr(policy, "config", None), "action_horizon", None)
    return int(horizon) if isinstance(horizon, (int, np.integer)) and horizon >= 1 else None


def episode_features(embed: EmbedFn, episode: Transitions, frames: int, horizon: int | None = None) -> np.ndarray:
    """(F, P) embeddings of ``frames`` evenly spaced steps of one episode, each with its full-episode label.

    Args:
        embed: ``transitions -> (N, P)`` loss-gradient embeddings, one row per transition, each row depending on
            its own state and its label chunk (the next ``horizon`` rows of its episode) only.
        episode: transitions of ONE episode, rows in step order.
        frames: how many evenly spaced steps of the episode to return (F).
        horizon: H of the label chunks; None = embed the whole episode (always right, slower).
    Returns:
        the rows of the chosen steps, in the dtype ``embed`` returns (the criterion casts to float64 exactly).
    """
    n = len(episode["task"])
    keep = evenly_spaced_rows(n, frames)
    if horizon is None:
        rows = np.arange(n)
    else:  # each kept step with the steps its label chunk reads: chunks are built from consecutive rows
        rows = np.unique(np.minimum((keep[:, None] + np.arange(horizon)[None, :]).reshape(-1), n - 1))
    part = episode if len(rows) == n else {k: np.asarray(v)[rows] for k, v in episode.items()}
    phi = np.asarray(embed(part))
    if phi.ndim != 2 or phi.shape[0] != len(rows):
        raise ValueError(f"embed must return ({len(rows)}, P) for {len(rows)} transitions, got shape {phi.shape}")
    return phi[np.searchsorted(rows, keep)]


def warm_start_validation(tasks_of: Sequence[str]) -> list[int]:
    """Indices of the first episode of every task (the warm start's demonstrations), in episode order."""
    seen: set[str] = set()
    out = []
    for i, t in enumerate(tasks_of):
        if t not in seen:
            seen.add(t)
            out.append(i)
    return out


def amf_nn_score_fn(embed: EmbedFn | Any, episodes: Sequence[Transitions], validation: Sequence[int], *,
                    tasks: Sequence[str] | None = None, noise_var: float = 1.0, prior_var: float = 1.0,
                    form: str = "log_variance", condition_on_data: bool = True, frames_per_episode: int = 16,
                    max_points: int | None = DEFAULT_MAX_POINTS,
                    cache: MutableMapping[tuple[Hashable, int], np.ndarray] | None = None,
                    keys: Sequence[Hashable] | None = None,
                    criterion_cache: MutableMapping[str, Any] | None = None,
                    replay: Sequence[Transitions] = (), replay_fraction: float = 0.0,
                    replay_keys: Sequence[Hashable] | None = None, hallucinate: str = "validation",
                    hallucination_weight: float = 1.0, batch_conditioning: str = "hallucinated") -> ScoreFn:
    """The AMF-NN ScoreFn of the selector (see the module docstring for what enters it, with the paper's equations).

    Args:
        embed: the selection copy of the policy (its ``embed`` is used, and its action horizon so that only the
            rows the label chunks read are embedded) or a bare ``transitions -> (N, P)`` function (then every
            episode is embedded whole).
        episodes: per demonstration, its transitions (``task`` (N,) column constant; the policy's ``embed`` keys).
        validation: indices into ``episodes`` of the validation set (targets and hallucinated demonstrations).
        tasks: the target tasks, mu_c uniform over them; every one needs a validation episode. None = the tasks of
            the validation episodes.
        noise_var: observation noise sigma^2 of the linear-Gaussian model (App. E).
        prior_var: weight prior variance of the linear-Gaussian model (App. E).
        form: "log_variance" (entropy, eq. 3) or "variance".
        condition_on_data: condition the posterior on the non-validation episodes.
        frames_per_episode: evenly spaced steps per episode.
        max_points: cap on the total of those steps over all episodes (None = no cap).
        cache: ``{(key, frames): (F, P) phi}`` reused across calls; valid for ONE policy (the caller drops it when
            the policy changes).
        keys: per episode, its cache key (required with ``cache``).
        criterion_cache: an empty dict the caller keeps for ONE policy, like ``cache`` (needs ``keys``): the exact
            incremental criterion (core/incremental.py) lives there between calls, so a call after new episodes
            only conditions on those (a rank-m update) instead of rebuilding the posterior from every data row;
            rebuilt when the validation set, the frames or the model settings change. Scores equal the uncached
            ones up to float round-off.
        replay: the replayed pre-training episodes fine-tuning mixes in (replay-aware AMF; see the module
            docstring); not with ``criterion_cache`` (their weight changes with every recorded episode).
        replay_fraction: r, their share of every fine-tuning minibatch, in [0, 1); 0 = the paper's criterion.
        replay_keys: per replayed episode, its key in ``cache`` (then their embeddings are reused across calls like
            the recorded ones'; keep them distinct from ``keys``); None = embedded on every call.
        hallucinate: a candidate's hallucinated demonstrations: "validation" (its validation episodes, the paper's)
            "recorded" (every episode of the task the criterion reads) or "data" (the task's non-validation episodes
            the criterion conditions on, else its validation ones); the last two not with ``criterion_cache``,
            whose candidates are fixed when it is built.
        hallucination_weight: w_h, the likelihood weight of a hallucinated demonstration's points (their rows scaled
            by sqrt(w_h), as replay scales its rows); 1 = the paper's. Below 1 a hallucinated demonstration, which
            is its task's own target states, settles its task less than it would: a diagnostic of why a greedy batch
            divides the new tasks otherwise than one-at-a-time selection (docs/metaworld.md).
        batch_conditioning: what a task picked earlier in the same batch counts as while the next pick is scored
            (Algorithm 1's greedy batch): "hallucinated" (its candidate hallucination, the paper's) or "recorded"
            (its most recent recorded demonstration other than its validation one, the criterion's best guess of
            the real one to come; its candidate hallucination while it has none). Candidates are scored as before;
            only the batch's conditioning changes, so B = 1 is unaffected. With ``criterion_cache`` the cached
            covariance is extended by those recorded rows on a request's first batch pick.
    Returns:
        ScoreFn; ``last_info`` holds ``effective_sample_size`` and ``mean_sq_norm_phi`` per target task.
    Raises:
        ValueError: no episodes, a bad validation index, a target task without a validation episode, a replay
            fraction outside [0, 1) or without replayed episodes (or with a criterion_cache).
    """
    n = len(episodes)
    if n == 0:
        raise ValueError("the AMF criterion needs recorded episodes; there are none")
    if not 0.0 <= replay_fraction < 1.0:
        raise ValueError(f"replay_fraction must be in [0, 1), got {replay_fraction=}")
    if not 0.0 < hallucination_weight <= 1.0:
        raise ValueError(f"hallucination_weight must be in (0, 1], got {hallucination_weight=}")
    if replay_fraction > 0 and (not replay or criterion_cache is not None):
        raise ValueError("replay_fraction > 0 needs the replayed episodes (replay) and no criterion_cache, got "
                         f"{len(replay)} replayed episodes and criterion_cache={criterion_cache is not None}")
    replay = list(replay) if replay_fraction > 0 else []
    if replay and replay_keys is not None and (cache is None or len(replay_keys) != len(replay)):
        raise ValueError(f"replay_keys need a cache and one key per replayed episode, got "
                         f"{len(replay_keys)} keys for {len(replay)} episodes (cache={cache is not None})")
    if hallucinate not in HALLUCINATE:
        raise ValueError(f"hallucinate must be one of {HALLUCINATE}, got {hallucinate!r}")
    if batch_conditioning not in BATCH_CONDITIONING:
        raise ValueError(f"batch_conditioning must be one of {BATCH_CONDITIONING}, got {batch_conditioning!r}")
    if hallucinate != "validation" and criterion_cache is not None:
        raise ValueError(f"hallucinate={hallucinate!r} cannot use a criterion_cache (its candidates are fixed when "
                         "built)")
    val = [int(i) for i in validation]
    if not val or any(not 0 <= i < n for i in val) or len(set(val)) != len(val):
        raise ValueError(f"validation must be distinct indices in [0, {n}), got {list(validation)}")
    if cache is not None and (keys is None or len(keys) != n):
        raise ValueError(f"a cache needs one key per episode, got {None if keys is None else len(keys)} for {n}")
    embed_fn = embed.embed if hasattr(embed, "embed") else embed
    horizon = label_horizon(embed)
    task_of = [str(np.asarray(ep["task"])[0]) for ep in episodes]
    in_val = set(val)
    use = [i for i in range(n) if i in in_val or condition_on_data]
    frames = frames_under_cap(frames_per_episode, len(use) + len(replay), max_points)

    def features(ep: Transitions, key: Hashable | None) -> np.ndarray:
        """One episode's phi at ``frames``, from ``cache`` under ``key`` when both are given."""
        if cache is None or key is None:
            return episode_features(embed_fn, ep, frames, horizon)
        if (key, frames) not in cache:
            cache[(key, frames)] = episode_features(embed_fn, ep, frames, horizon)
        return cache[(key, frames)]

    phi = {i: features(episodes[i], None if keys is None else keys[i]) for i in use}
    target_tasks = list(dict.fromkeys(task_of[i] for i in val)) if tasks is None else list(tasks)
    per_task = {t: [i for i in val if task_of[i] == t] for t in target_tasks}
    missing = [t for t, idx in per_task.items() if not idx]
    if missing:
        raise ValueError(f"the criterion needs a validation demonstration of every task, missing {missing}")
    targets = [i for i in val if task_of[i] in per_task]
    # Targets: validation states with their own task (w = 1, eq. 4 for a deterministic policy), mu_c uniform.
    target_phi = np.concatenate([phi[i] for i in targets])
    weights = np.concatenate([np.full(len(phi[i]), 1.0 / (len(target_tasks) * len(per_task[task_of[i]])
                                                            * len(phi[i]))) for i in targets])
    # Replay-aware: sqrt of each point's likelihood weight on its rows (1 and nothing replayed at r = 0).
    scale_new = np.sqrt(1.0 - replay_fraction)
    rest = [phi[i] * scale_new if replay else phi[i] for i in use if i not in in_val]
    if replay:
        scale_replay = np.sqrt(replay_fraction * n / len(replay))
        rest += [features(ep, None if replay_keys is None else replay_keys[j]) * scale_replay
                 for j, ep in enumerate(replay)]
    data_phi = np.concatenate(rest) if rest else np.zeros((0, target_phi.shape[1]))

    def candidate(task: str) -> tuple[list[np.ndarray], np.ndarray]:
        idx = per_task.get(task)
        if not idx:
            raise ValueError(f"no recorded episode of candidate {task!r} to hallucinate from (warm start "
                             "demonstrates every candidate once first)")
        if hallucinate == "recorded":
            idx = [i for i in use if task_of[i] == task]
        elif hallucinate == "data":
            idx = [i for i in use if task_of[i] == task and i not in in_val] or idx
        scale = (scale_new if replay else 1.0) * np.sqrt(hallucination_weight)
        return [phi[i] * scale if scale != 1.0 else phi[i] for i in idx], np.full(len(idx), 1.0 / len(idx))

    def recorded(task: str) -> tuple[list[np.ndarray], np.ndarray] | None:
        """A batch pick of ``task`` as its latest recorded non-validation demonstration (batch_conditioning); None
        while it has none (then its candidate hallucination)."""
        idx = [i for i in use if task_of[i] == task and i not in in_val][-1:]
        if not idx:
            return None
        return [phi[idx[0]] * scale_new if replay else phi[idx[0]]], np.ones(1)

    ess = {t: float(len(idx)) for t, idx in per_task.items()}  # 0/1 importance weights: episodes per task
    norms = {t: float(np.mean([np.square(phi[i]).sum(1).mean() for i in idx])) for t, idx in per_task.items()}
    info = {"effective_sample_size": ess, "mean_sq_norm_phi": norms, "frames_per_episode": frames,
            "replayed_episodes": len(replay)}
    if criterion_cache is not None:
        if keys is None:
            raise ValueError("a criterion_cache needs one key per episode (keys)")
        signature = (frames, tuple(keys[i] for i in targets), tuple(target_tasks), float(noise_var),
                     float(prior_var), form, float(hallucination_weight))
        data_keys = [keys[i] for i in use if i not in in_val]
        return _cached_criterion(criterion_cache, signature, data_keys, rest, candidate, target_tasks, target_phi,
                                 weights, noise_var, prior_var, form, info,
                                 recorded if batch_conditioning == "recorded" else None)
    return feature_score_fn(data_phi, candidate, target_phi, weights, noise_var=noise_var, prior_var=prior_var,
                            form=form, info=info, chosen_phi_of=recorded if batch_conditioning == "recorded" else None)


def _cached_criterion(store: MutableMapping[str, Any], signature: tuple, data_keys: list[Hashable],
                      data_rows: list[np.ndarray], candidate: Callable[[str], Any], tasks: list[str],
                      target_phi: np.ndarray, weights: np.ndarray, noise_var: float, prior_var: float, form: str,
                      info: dict, chosen_of: Callable[[str], Any] | None = None) -> ScoreFn:
    """The ScoreFn of the exact incremental criterion kept in ``store`` (see ``criterion_cache``): extended by the
    episodes not conditioned on yet when the data only grew, else rebuilt. One lock per store serialises updates
    and scoring (task_selector may serve requests concurrently). ``chosen_of``: batch_conditioning "recorded"'s
    entry of a picked task (None = the paper's batch); its rows are read for this call's ScoreFn only, as the
    latest recording changes from call to call."""
    import threading

    from amf_ros.core.incremental import IncrementalFeatureCriterion

    lock = store.setdefault("lock", threading.Lock())
    with lock:
        entry = store.get("entry")
        done = len(entry["data_keys"]) if entry is not None else 0
        if entry is not None and entry["signature"] == signature and entry["data_keys"] == data_keys[:done]:
            if len(data_keys) > done:
                entry["engine"].add_data(np.concatenate(data_rows[done:]))
                entry["data_keys"] = list(data_keys)
            how = "updated" if len(data_keys) > done else "reused"
        else:
            alts = [candidate(t) for t in tasks]
            data = np.concatenate(data_rows) if data_rows else np.zeros((0, target_phi.shape[1]))
            engine = IncrementalFeatureCriterion(data, [a for a, _ in alts], target_phi, weights, noise_var=noise_var,
                                                 prior_var=prior_var, form=form,
                                                 candidate_weights=[w for _, w in alts])
            entry = store["entry"] = {"signature": signature, "data_keys": list(data_keys), "engine": engine,
                                      "fn": engine.score_fn(tasks)}
            how = "built"
    fn = entry["fn"]
    if chosen_of is not None:
        fn = entry["engine"].score_fn(tasks, pick_rows_of=lambda t: _only_block(chosen_of(t)))

    def score(candidates: list[str], chosen: list[str]) -> np.ndarray:
        with lock:
            return fn(candidates, chosen)

    score.last_info = {"form": form, **info, "criterion": how}  # type: ignore[attr-defined]
    return score


def _only_block(entry: tuple[list[np.ndarray], np.ndarray] | None) -> np.ndarray | None:
    """The one (m, D) block of a batch_conditioning "recorded" entry (None stays None: the pick's hallucination)."""
    return None if entry is None else entry[0][0]
