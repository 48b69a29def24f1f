"""`amf bench selector-scaling`: cost of the exact AMF criterion per next_task call, per new episode and per
rebuild, its memory, and its ranking against the brute-force computation, from 10 to 1,000 demonstrations.

Setting of issue 15: 10 tasks, 50 steps per demonstration, feature dimension 7168 (Octo head's last layer),
targets = 2 demonstrations per task, candidates = per task 2 alternative hallucinated demonstrations. Features are
synthetic but structured like loss-gradient embeddings of a smooth policy: random Fourier features (an RBF kernel in
disguise) of (state along a smooth trajectory, task embedding), so consecutive states have similar features.
Weights are those of a deterministic policy (App. M, Octo): the targets of task c are the states of c's
demonstrations, the hallucinated demo of c' is one of c''s.

Engines (``engines`` in the config):

* ``exact`` (the default criterion): :class:`~amf_ros.core.incremental.IncrementalFeatureCriterion` on all rows --
  Sigma_U among targets and candidates cached, a new episode = a rank-50 update, a call = scores from Sigma_U;
* ``subsampled`` (opt-in approximation, the former benchmark): the same engine on at most ``max_data_rows``
  conditioned rows, states thinned per demonstration and rescaled (``core/subsample.py``).

Both are ranked against the brute force (``feature_criterion`` on all rows, nothing cached or subsampled) for demo
counts up to ``reference_up_to``: Spearman rho, argmin agreement, max relative score difference.

Run: ``amf bench selector-scaling [--out DIR] [--seeds CALLS] [--demos N ...] [--config FILE]``.
"""

from __future__ import annotations

import argparse
import logging
import os
import time
import tracemalloc
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from amf_ros.bench.results import add_common_args, config_dict, summarize
from amf_ros.config_file import load_config
from amf_ros.core.criterion import feature_criterion
from amf_ros.core.incremental import IncrementalFeatureCriterion, sample_space_limit
from amf_ros.core.selectors import make_selector
from amf_ros.core.subsample import keep_indices
from amf_ros.outputs import format_table, save_figure
from amf_ros.threads import limited_threads

logger = logging.getLogger(__name__)

DEFAULT_CONFIG = Path(__file__).resolve().parents[2] / "config" / "bench" / "selector_scaling.yaml"
ENGINES: tuple[str, ...] = ("exact", "subsampled")


@dataclass
class SelectorScalingConfig:
    """Sizes of the timed problem (defaults = config/bench/selector_scaling.yaml = acceptance)."""

    demos: list[int] = field(default_factory=lambda: [10, 30, 100, 300, 1000])
    seeds: int = 30  # timed next_task calls (B = 1) per demo count and engine, after one warm-up
    rounds: int = 1  # unused (common flag)
    jobs: int | None = None  # unused: BLAS uses the cores
    episode_repeats: int = 5  # timed new episodes (one 50-step demonstration each) per demo count and engine
    batch_size: int = 5  # greedy batch timed against one pick
    batch_repeats: int = 5
    engines: list[str] = field(default_factory=lambda: list(ENGINES))
    num_tasks: int = 10
    steps_per_demo: int = 50
    feature_dim: int = 7168
    max_data_rows: int = 600  # the subsampled approximation's budget of conditioned rows
    target_demos_per_task: int = 2
    candidate_demos_per_task: int = 2
    noise_var: float = 0.01
    prior_var: float = 1.0
    form: str = "log_variance"
    reference_up_to: int = 1000  # brute-force criterion (all rows) for demo counts <= this
    blas_threads: int | None = 1  # None = the BLAS default (all cores)
    state_dim: int = 4
    task_embed_dim: int = 8
    lengthscale: float = 1.0

    def __post_init__(self) -> None:
        if not self.demos or min(self.demos) < self.num_tasks:
            raise ValueError(f"demos must be counts >= num_tasks ({self.num_tasks}), got {self.demos}")
        if min(self.seeds, self.max_data_rows, self.feature_dim, self.steps_per_demo, self.episode_repeats,
               self.batch_size, self.batch_repeats) < 1:
            raise ValueError(f"seeds, max_data_rows, feature_dim, steps_per_demo, episode_repeats, batch_size, "
                             f"batch_repeats must be >= 1, got {self}")
        unknown = sorted(set(self.engines) - set(ENGINES))
        if unknown or not self.engines:
            raise ValueError(f"engines must be a non-empty subset of {list(ENGINES)}, got {self.engines}")


class SyntheticEmbedder:
    """phi(state, task) = sqrt(2/D) cos(W [state, e_task] + b): random Fourier features, (rows, D) float64."""

    def __init__(self, cfg: SelectorScalingConfig, rng: np.random.Generator) -> None:
        dx = cfg.state_dim + cfg.task_embed_dim
        self.w = rng.normal(0.0, 1.0 / cfg.lengthscale, size=(dx, cfg.feature_dim))
        self.b = rng.uniform(0.0, 2.0 * np.pi, size=cfg.feature_dim)
        self.task_emb = rng.normal(0.0, 0.7, size=(cfg.num_tasks, cfg.task_embed_dim))
        self.goals = rng.normal(0.0, 1.0, size=(cfg.num_tasks, cfg.state_dim))
        self.cfg = cfg

    def states(self, task: int, rng: np.random.Generator) -> np.ndarray:
        """(H, S) a smooth noisy path from near the origin towards the task's goal."""
        h = self.cfg.steps_per_demo
        frac = 1.0 - 0.93 ** np.arange(h)
        start = rng.normal(0.0, 0.1, size=self.cfg.state_dim)
        return start + frac[:, None] * (self.goals[task] - start) + 0.02 * rng.normal(size=(h, self.cfg.state_dim))

    def __call__(self, states: np.ndarray, task: int) -> np.ndarray:
        """(rows, D) features of ``states`` paired with ``task``."""
        x = np.concatenate([states, np.broadcast_to(self.task_emb[task], (states.shape[0], self.cfg.task_embed_dim))],
                           axis=1)
        return np.sqrt(2.0 / self.cfg.feature_dim) * np.cos(x @ self.w + self.b)


@dataclass
class Problem:
    """Criterion inputs: data (N, D), per task its candidate alternatives, targets (K, D) and weights (K,), and
    ``episodes``: further demonstrations (continuing the round robin over tasks) to add one at a time."""

    data: np.ndarray
    candidates: list[list[np.ndarray]]
    targets: np.ndarray
    target_weights: np.ndarray
    episodes: list[np.ndarray]
    keep: int


def build_problem(cfg: SelectorScalingConfig, n_demos: int, keep: int, seed: int = 0, extra: int = 0) -> Problem:
    """The problem for ``n_demos`` demonstrations (round robin over tasks) with ``keep`` states per demo.

    With keep < steps_per_demo, conditioned rows (data, candidates) are scaled by sqrt(H / keep) and targets
    weighted by H / keep (core/subsample.py's rule). The same seed gives the same demonstrations at any ``keep``.
    """
    rng = np.random.default_rng(seed)
    emb = SyntheticEmbedder(cfg, rng)
    h = cfg.steps_per_demo
    tasks = np.arange(n_demos + extra) % cfg.num_tasks
    paths = [emb.states(int(t), rng) for t in tasks]
    sel = keep_indices(h, keep)  # features are only computed at kept states (as a real embedder would)
    scale = np.sqrt(h / sel.size)  # = conditioning_rows' scaling: each kept row stands for h / k states
    k = sel.size
    data = np.empty((n_demos * k, cfg.feature_dim))  # filled in place: at 1,000 demos this is 2.9 GB
    for i in range(n_demos):
        data[i * k:(i + 1) * k] = emb(paths[i][sel], int(tasks[i]))
        if keep < h:
            data[i * k:(i + 1) * k] *= scale
    t_x, t_w, cands = [], [], []
    for c in range(cfg.num_tasks):
        own = [paths[i] for i in range(n_demos) if tasks[i] == c]
        if not own:
            raise ValueError(f"task {c} has no demonstration; use n_demos >= num_tasks, got {n_demos=}")
        n_t = min(len(own), cfg.target_demos_per_task)
        for p in own[:n_t]:
            t_x.append(emb(p[sel], c))
            t_w.append(np.full(sel.size, (h / sel.size) / (cfg.num_tasks * n_t)))  # = target_rows' weights
        cands.append([emb(p[sel], c) * scale if keep < h else emb(p[sel], c)
                      for p in own[: cfg.candidate_demos_per_task]])
    episodes = [emb(paths[i][sel], int(tasks[i])) * (scale if keep < h else 1.0)
                for i in range(n_demos, n_demos + extra)]
    return Problem(data, cands, np.concatenate(t_x), np.concatenate(t_w), episodes, k)


def states_per_demo(cfg: SelectorScalingConfig, n_demos: int) -> int:
    """Kept states per demonstration of the subsampled approximation (at most ``max_data_rows`` data rows)."""
    return int(np.clip(cfg.max_data_rows // n_demos, 1, cfg.steps_per_demo))


def _timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[Any, float, float]:
    """fn(*args, **kwargs), its wall and CPU seconds."""
    t0, c0 = time.perf_counter(), time.process_time()
    out = fn(*args, **kwargs)
    return out, time.perf_counter() - t0, time.process_time() - c0


def _peak_mb(fn: Callable[..., Any], *args: Any) -> tuple[Any, float]:
    """fn(*args) and the peak of memory it allocated (tracemalloc: numpy buffers included), in MiB."""
    tracemalloc.start()
    try:
        out = fn(*args)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    return out, peak / 2**20


def _pct(x: Sequence[float], q: float) -> float:
    return float(np.percentile(x, q)) if len(x) else float("nan")


def measure_engine(cfg: SelectorScalingConfig, prob: Problem) -> dict:
    """Build (timed, peak memory), calls, B-batches and new episodes of one engine on one problem."""
    def build() -> IncrementalFeatureCriterion:
        return IncrementalFeatureCriterion(prob.data, prob.candidates, prob.targets, prob.target_weights,
                                           noise_var=cfg.noise_var, prior_var=cfg.prior_var, form=cfg.form)

    (eng, build_s, build_cpu), peak_build = _peak_mb(_timed, build)
    keys = [f"task{c}" for c in range(cfg.num_tasks)]
    fn = eng.score_fn(keys)
    selector, rng = make_selector("amf", warm_start=False), np.random.default_rng(0)

    def pick(b: int) -> Any:
        return selector.select(keys, {}, rng, batch_size=b, score_fn=fn)

    first = pick(1)  # warm-up
    calls = [_timed(pick, 1)[1:] for _ in range(cfg.seeds)]
    batches = [_timed(pick, cfg.batch_size)[1:] for _ in range(cfg.batch_repeats)]
    # batch_conditioning "recorded": a pick conditions on its task's latest recording (here: the rows of the task's
    # last candidate alternative), extending the cached state once per request, as task_selector does
    recorded = {k: np.asarray(prob.candidates[c][-1]) for c, k in enumerate(keys)}

    def pick_recorded(b: int) -> Any:
        return selector.select(keys, {}, rng, batch_size=b, score_fn=eng.score_fn(keys, pick_rows_of=recorded.get))

    recorded_batches = [_timed(pick_recorded, cfg.batch_size)[1:] for _ in range(cfg.batch_repeats)]
    _, peak_call = _peak_mb(pick, 1)
    batch_sel, peak_batch = _peak_mb(pick, cfg.batch_size)
    scores = eng.scores()
    state_mb, space, unique = eng.nbytes / 2**20, eng.space, int(eng.layout.rows.shape[0])
    episodes, switch = [], []
    for ep in prob.episodes[:-1]:
        before = eng.space
        _, wall, cpu = _timed(eng.add_data, ep)
        (switch if eng.space != before else episodes).append((wall, cpu))
    _, peak_episode = _peak_mb(eng.add_data, prob.episodes[-1])
    return {
        "states_per_demo": prob.keep, "data_rows": int(prob.data.shape[0]), "target_rows": len(prob.targets),
        "unique_rows": unique, "alternatives": sum(len(c) for c in prob.candidates), "space": space,
        "space_after_episodes": eng.space,
        "build_s": build_s, "build_cpu_s": build_cpu,
        "call_times_s": [w for w, _ in calls], "call_p50_s": _pct([w for w, _ in calls], 50),
        "call_p99_s": _pct([w for w, _ in calls], 99), "call_cpu_p50_s": _pct([c for _, c in calls], 50),
        "batch_p50_s": _pct([w for w, _ in batches], 50), "batch_p99_s": _pct([w for w, _ in batches], 99),
        "batch_ratio": _pct([w for w, _ in batches], 50) / _pct([w for w, _ in calls], 50),
        "batch_cpu_p50_s": _pct([c for _, c in batches], 50),
        "batch_recorded_p50_s": _pct([w for w, _ in recorded_batches], 50),
        "batch_recorded_ratio": _pct([w for w, _ in recorded_batches], 50) / _pct([w for w, _ in calls], 50),
        "episode_p50_s": _pct([w for w, _ in episodes], 50), "episode_p99_s": _pct([w for w, _ in episodes], 99),
        "episode_cpu_p50_s": _pct([c for _, c in episodes], 50),
        "switch_to_feature_space_s": switch[0][0] if switch else None,
        "state_mb": state_mb, "state_mb_after_episodes": eng.nbytes / 2**20, "peak_build_mb": peak_build,
        "peak_call_mb": peak_call,
        "peak_batch_mb": peak_batch, "peak_episode_mb": peak_episode,
        "first_pick": first.tasks[0], "batch": batch_sel.tasks, "scores": scores.tolist(),
    }


def agreement(full: np.ndarray, got: np.ndarray) -> dict:
    """Ranking of ``got`` against the brute-force scores ``full``: Spearman rho, argmin, regret, max rel diff."""
    from scipy.stats import spearmanr

    full, got = np.asarray(full), np.asarray(got)
    rho = float(spearmanr(full, got).statistic) if len(full) > 1 else 1.0
    spread = float(np.max(full) - np.min(full))
    regret = float(full[int(np.argmin(got))] - np.min(full))
    return {"spearman": rho, "same_argmin": bool(np.argmin(full) == np.argmin(got)),
            "regret_fraction_of_spread": regret / spread if spread > 0 else 0.0,
            "max_rel_diff": float(np.max(np.abs(got - full) / np.maximum(np.abs(full), 1e-300)))}


def cost_model(cfg: SelectorScalingConfig, n_demos: int, unique_rows: int, target_rows: int,
               alternatives: int) -> dict:
    """Leading-term flops (a multiply-add = 2) and bytes moved of the exact engine, and of the brute force.

    D features, N data rows, U unique target/candidate rows, Q targets, J alternatives of m rows each.
    """
    d, m = cfg.feature_dim, cfg.steps_per_demo
    n, u, q, j = n_demos * m, unique_rows, target_rows, alternatives
    sample = n <= sample_space_limit(d, u)
    call = j * (m * m * q + 2 * m * q)  # trmm L_j^-1 Sigma_CjQ per alternative, then the column sums of squares
    if sample:  # V Phi_n^T, b^T V, Phi_n Phi_U^T, b^T W_U, the rank-m downdate of Sigma_U
        episode = 4 * n * d * m + 2 * n * u * m + 2 * u * d * m + 2 * u * u * m
        episode_bytes = 8 * (2 * n * d + n * u + 2 * u * u)
        build = 2 * n * n * d + n ** 3 / 3 + 2 * n * d * u + u * u * (d + n)
        state = 8 * (u * u + n * d + n * u)
    else:  # symm S Phi_n^T, syrk of S (one triangle), Phi_U G, the downdate of Sigma_U
        episode = 3 * d * d * m + 2 * u * d * m + 2 * u * u * m
        episode_bytes = 8 * (1.5 * d * d + 2 * u * u)  # symm reads one triangle of S, syrk reads and writes it
        build = n * d * d + d ** 3 + d * d * u + u * u * d
        state = 8 * (u * u + d * d)
    points = q + j * m  # the brute force whitens targets and hallucinated points against the data every call
    brute = (n * n * d + 2 * n ** 3 / 3 + (2 * n * d + 2 * n * n) * points if n <= d
             else n * d * d + d ** 3 / 3 + d * d * points) + 2 * min(n, d) * q * j * m
    return {"demos": n_demos, "space": "sample" if sample else "feature", "call_flops": call,
            "call_bytes": 8 * j * m * q, "pick_update_flops": 2 * u * u * m, "pick_update_bytes": 3 * 8 * u * u,
            "episode_flops": episode, "episode_bytes": episode_bytes, "build_flops": build, "state_bytes": state,
            "brute_force_flops": brute}


def run_size(cfg: SelectorScalingConfig, n: int) -> tuple[dict, dict | None]:
    """Every engine at ``n`` demonstrations, and the brute-force reference."""
    out: dict[str, dict] = {}
    extra = cfg.episode_repeats + 1
    full = build_problem(cfg, n, cfg.steps_per_demo, extra=extra)
    ref = None
    if n <= cfg.reference_up_to:
        scores, wall, cpu = _timed(feature_criterion, full.data, full.candidates, full.targets, full.target_weights,
                                   noise_var=cfg.noise_var, prior_var=cfg.prior_var, form=cfg.form)
        ref = {"demos": n, "time_s": wall, "cpu_s": cpu, "scores": scores.tolist()}
    if "exact" in cfg.engines:
        out["exact"] = measure_engine(cfg, full)
    del full
    if "subsampled" in cfg.engines:
        out["subsampled"] = measure_engine(cfg, build_problem(cfg, n, states_per_demo(cfg, n), extra=extra))
    if ref is not None:
        for res in out.values():
            res.update(agreement(np.array(ref["scores"]), np.array(res["scores"])))
    return out, ref


def run(cfg: SelectorScalingConfig, progress: bool = True) -> dict:
    """Time every engine at each demonstration count of ``cfg.demos``; the results.json document."""
    from tqdm import tqdm

    t0 = time.perf_counter()
    per: dict[int, dict] = {}
    refs = []
    with limited_threads(cfg.blas_threads or 0, torch=False, blas=True):  # None: the BLAS default (all cores)
        for n in tqdm(cfg.demos, desc="selector-scaling", disable=not progress):
            per[n], ref = run_size(cfg, n)
            if ref is not None:
                refs.append(ref)
    engines: dict[str, dict[str, list]] = {}
    for name in cfg.engines:
        rows = [per[n][name] for n in cfg.demos]
        engines[name] = {key: [r.get(key) for r in rows] for key in rows[0] if key != "call_times_s"}
    model = [cost_model(cfg, n, per[n]["exact"]["unique_rows"], per[n]["exact"]["target_rows"],
                        per[n]["exact"]["alternatives"]) for n in cfg.demos] if "exact" in cfg.engines else []
    return {
        "benchmark": "selector-scaling", "config": config_dict(cfg),
        "metric": "seconds per next_task call (all candidates scored, B = 1) from the cached state",
        "wall_time_s": time.perf_counter() - t0, "cpu_count": os.cpu_count(), "demos": list(cfg.demos),
        "engines": engines, "reference": refs, "cost_model": model,
        "methods": {name: summarize(cfg.demos, np.array([per[n][name]["call_times_s"] for n in cfg.demos]).T)
                    for name in cfg.engines},
    }


def _table(res: dict) -> str:
    rows = []
    for name, e in res["engines"].items():
        for i, n in enumerate(res["demos"]):
            def ms(key: str, e: dict = e, i: int = i) -> float:
                return 1e3 * e[key][i] if e[key][i] is not None else float("nan")

            rows.append([name, n, e["data_rows"][i], e["space"][i], ms("call_p50_s"), ms("call_p99_s"),
                         ms("batch_p50_s"), e["batch_ratio"][i], ms("batch_recorded_p50_s"),
                         ms("episode_p50_s"), ms("episode_p99_s"),
                         e["build_s"][i], e["state_mb"][i], max(e["peak_build_mb"][i], e["peak_episode_mb"][i]),
                         e["spearman"][i] if "spearman" in e else float("nan"),
                         e["same_argmin"][i] if "same_argmin" in e else "-",
                         e["max_rel_diff"][i] if "max_rel_diff" in e else float("nan")])
    batch = f"B={res['config']['batch_size']} ms"
    return format_table(["engine", "demos", "rows", "space", "call p50 ms", "call p99 ms", batch, "x call",
                         f"{batch}, recorded", "episode p50 ms", "episode p99 ms", "build s", "state MB", "peak MB",
                         "spearman", "argmin", "max rel diff"], rows, floatfmt=".3g")


def main(argv: Sequence[str]) -> int:
    """Command line of ``amf bench selector-scaling``: run, write results.json and the plot, print the table."""
    parser = argparse.ArgumentParser(prog="amf bench selector-scaling", description=__doc__.split("\n\n")[0])
    add_common_args(parser, out="results/selector_scaling")
    parser.add_argument("--demos", type=int, nargs="*", default=None, help="demonstration counts to time")
    args = parser.parse_args(list(argv))
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    cfg = load_config(SelectorScalingConfig, args.config or DEFAULT_CONFIG, seeds=args.seeds, demos=args.demos)
    res = run(cfg)
    from amf_ros.bench.results import write_results

    path = write_results(Path(args.out), res)
    print(_table(res))
    for ref in res["reference"]:
        print(f"brute force (feature_criterion, all rows) at {ref['demos']} demos: {ref['time_s']:.2f} s")
    for name, e in res["engines"].items():
        for n, s in zip(res["demos"], e["switch_to_feature_space_s"], strict=True):
            if s is not None:
                print(f"{name}: the first new episode at {n} demos switched to feature space ({s:.2f} s, once)")
    _plot(res, Path(args.out))
    print(f"wall time {res['wall_time_s']:.1f} s; results in {path}")
    return 0


def _plot(res: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    demos = res["demos"]
    fig, ax = plt.subplots(2, 2, figsize=(10, 7))
    for name, e in res["engines"].items():
        ax[0, 0].plot(demos, np.array(e["call_p50_s"]) * 1e3, "o-", label=f"{name} call p50")
        ax[0, 0].plot(demos, np.array(e["call_p99_s"]) * 1e3, "x:", label=f"{name} call p99")
        ax[0, 0].plot(demos, np.array(e["batch_p50_s"]) * 1e3, "s--", label=f"{name} B={res['config']['batch_size']}")
        ax[0, 1].plot(demos, e["episode_p50_s"], "o-", label=f"{name} new episode p50")
        ax[0, 1].plot(demos, e["build_s"], "s--", label=f"{name} build from scratch")
        ax[1, 0].plot(demos, e["state_mb"], "o-", label=f"{name} cached state")
        ax[1, 0].plot(demos, np.maximum(e["peak_build_mb"], e["peak_episode_mb"]), "s--", label=f"{name} peak")
        if "spearman" in e:
            ax[1, 1].plot(demos, e["spearman"], "o-", label=f"{name} Spearman vs brute force")
    if res["reference"]:
        ax[0, 1].plot([r["demos"] for r in res["reference"]], [r["time_s"] for r in res["reference"]], "k^:",
                      label="brute force (per call)")
    ax[0, 0].axhline(50, color="gray", lw=0.8)
    ax[0, 0].set_ylabel("ms per next_task call")
    ax[0, 1].set_ylabel("seconds")
    ax[1, 0].set_ylabel("MB")
    ax[1, 1].set_ylabel("rank correlation")
    for a in ax.flat:
        a.set_xscale("log")
        a.set_xlabel("collected demonstrations")
        a.grid(alpha=0.3)
        a.legend(fontsize=7)
    for a in (ax[0, 0], ax[0, 1], ax[1, 0]):
        a.set_yscale("log")
    fig.tight_layout()
    save_figure(fig, out / "selector_scaling.png")
    plt.close(fig)
