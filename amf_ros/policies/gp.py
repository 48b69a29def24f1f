"""GP policy backend (AMF-GP): a multi-output GP over x = (state, task) with an RBF kernel.

Why: the paper's controlled setting (Sec. 5.1), where the policy *is* a Gaussian process, so the AMF criterion needs
no kernel approximation. Output dimensions are independent GPs sharing one kernel and one noise level, hence one
posterior variance per input; the mean is per output dimension.

Shapes: states (B, S), task vectors (B, T), actions (B, A); inputs x = concat(state, task) (B, S + T).

:class:`GPPolicy` is the posterior on task vectors (what the integrator benchmark and :class:`GPScoreFn` use);
:class:`GPTaskPolicy` puts it behind the package's Policy protocol (task keys, observations, transitions,
checkpoints), like every other backend.
"""

from __future__ import annotations

import copy
import dataclasses
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

import numpy as np

from amf_ros.core.kernels import RBFKernel
from amf_ros.core.posterior import KernelPosterior
from amf_ros.policies.base import FitResult, StepCallback, Transitions, check_shape


@dataclass(frozen=True)
class GPPolicyConfig:
    """Hyper-parameters of the GP policy (fixed, not learned; values for the integrator are in its yaml)."""

    state_lengthscale: float = 0.5
    task_lengthscale: float = 0.5
    amplitude: float = 0.25  # prior variance of each action dimension
    noise_var: float = 0.01  # demonstration noise variance (expert_noise_std^2)

    def __post_init__(self) -> None:
        for name in ("state_lengthscale", "task_lengthscale", "amplitude", "noise_var"):
            v = getattr(self, name)
            if not (np.isfinite(v) and v > 0):
                raise ValueError(f"{name} must be > 0, got {v!r}")


class GPPolicy:
    """Posterior of a zero-mean multi-output GP policy conditioned on demonstrations.

    Args:
        config: kernel and noise hyper-parameters.
        state_dim, task_dim, action_dim: sizes of the input parts and of the output.
    """

    def __init__(self, config: GPPolicyConfig, state_dim: int, task_dim: int, action_dim: int) -> None:
        self.config = config
        self.state_dim, self.task_dim, self.action_dim = state_dim, task_dim, action_dim
        self.kernel = RBFKernel((config.state_lengthscale,) * state_dim + (config.task_lengthscale,) * task_dim,
                                amplitude=config.amplitude)
        self.posterior = KernelPosterior(self.kernel, np.zeros((0, state_dim + task_dim)), config.noise_var)
        self._y = np.zeros((0, action_dim))
        self._alpha = np.zeros((0, action_dim))

    @property
    def noise_var(self) -> float:
        """Observation noise sigma^2 of the GP (from the config), which the criterion shares."""
        return self.config.noise_var

    @property
    def num_points(self) -> int:
        """Demonstrated (state, task) points the GP is conditioned on."""
        return self._y.shape[0]

    @property
    def targets(self) -> np.ndarray:
        """(N, A) demonstrated actions conditioned on so far, in the order of ``posterior.inputs``."""
        return self._y

    def inputs(self, states: np.ndarray, tasks: np.ndarray) -> np.ndarray:
        """(B, S + T) GP inputs; ``tasks`` may be one task vector (T,) broadcast to every state."""
        states = np.asarray(states, dtype=np.float64).reshape(-1, self.state_dim)
        tasks = np.asarray(tasks, dtype=np.float64)
        if tasks.ndim == 1:
            tasks = np.broadcast_to(tasks, (states.shape[0], self.task_dim))
        if tasks.shape != (states.shape[0], self.task_dim):
            raise ValueError(f"tasks must be ({self.task_dim},) or ({states.shape[0]}, {self.task_dim}), "
                             f"got shape {tasks.shape}")
        return np.concatenate([states, tasks], axis=1)

    def add(self, states: np.ndarray, tasks: np.ndarray, actions: np.ndarray) -> None:
        """Condition on demonstrated (state, task, action) rows (incremental Cholesky update)."""
        x = self.inputs(states, tasks)
        y = np.asarray(actions, dtype=np.float64).reshape(-1, self.action_dim)
        if y.shape[0] != x.shape[0]:
            raise ValueError(f"{x.shape[0]} inputs but {y.shape[0]} actions")
        if not np.all(np.isfinite(y)):
            raise ValueError("actions contain NaN or inf")
        self.posterior.add(x)
        self._y = np.concatenate([self._y, y])
        self._alpha = self.posterior.solve(self._y)

    def predict(self, states: np.ndarray, tasks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Posterior mean (B, A) and variance (B,) of the latent policy pi(s, c) (no demonstration noise)."""
        x = self.inputs(states, tasks)
        if self.num_points == 0:
            return np.zeros((x.shape[0], self.action_dim)), self.kernel.diag(x)
        k_xX = self.kernel(x, self.posterior.inputs)  # (B, N), shared by mean and variance
        white = self.posterior.whiten_cross(k_xX.T)  # (N, B)
        return k_xX @ self._alpha, np.maximum(self.kernel.diag(x) - np.einsum("nb,nb->b", white, white), 0.0)

    def act(self, states: np.ndarray, tasks: np.ndarray, rng: np.random.Generator | None) -> np.ndarray:
        """(B, A) actions sampled from N(mean, var I) (the stochastic policy); the mean if ``rng`` is None."""
        mean, var = self.predict(states, tasks)
        if rng is None:
            return mean
        return mean + np.sqrt(var)[:, None] * rng.standard_normal(mean.shape)

    def entropy(self, states: np.ndarray, tasks: np.ndarray) -> np.ndarray:
        """(B,) differential entropy of the Gaussian policy pi(s, c): A/2 log(2 pi e var)."""
        _, var = self.predict(states, tasks)
        return 0.5 * self.action_dim * np.log(2.0 * np.pi * np.e * np.maximum(var, 1e-300))

    def log_prob(self, states: np.ndarray, tasks: np.ndarray, actions: np.ndarray) -> np.ndarray:
        """(B,) log-density of actions under the noisy-expert predictive N(mean, (var + noise) I) (eq. 4's pi~)."""
        mean, var = self.predict(states, tasks)
        a = np.asarray(actions, dtype=np.float64).reshape(mean.shape)
        v = var + self.noise_var
        return -0.5 * (np.sum((a - mean) ** 2, axis=1) / v + self.action_dim * np.log(2.0 * np.pi * v))

    def copy(self) -> "GPPolicy":
        """Independent copy (conditioning the copy does not change this policy)."""
        new = copy.copy(self)
        new.posterior = copy.copy(self.posterior)  # add() rebinds arrays, so a shallow copy suffices
        return new


GP_POLICY_KIND = "GPTaskPolicy/1"
"""``meta["kind"]`` of a :class:`GPTaskPolicy` checkpoint."""


class GPTaskPolicy:
    """The GP policy behind the Policy protocol (policies/base.py): observations and task keys in, chunks out.

    Why: AMF-GP drives :class:`GPPolicy` with task vectors directly; this gives the same posterior the interface of
    every other backend (act on an observation for a task key, fit on transitions, checkpoints), so one contract
    test checks them all. A task key stands for a fixed task vector (the integrator's goal position). ``fit``
    conditions the posterior exactly on the demonstrated rows: one step whatever ``steps`` says (``batch_size`` and
    ``lr`` do not apply). Chunks are one action long (a GP acts per state). What a GP does not have is refused with
    ValueError: loss-gradient embeddings (AMF-GP scores with the kernel itself: :class:`GPScoreFn`) and an adaptive
    prior.

    Args:
        config: kernel and noise hyper-parameters.
        state_dim, action_dim: S and A.
        task_vectors: ``{task key: (T,) task vector}`` (all the same width T).
        instructions: ``{task key: instruction}`` (default: the key itself).
        seed: seed of the generator that :meth:`act` samples with when given no seed.
    """

    action_horizon = 1
    """H: the GP predicts one action per state."""

    def __init__(self, config: GPPolicyConfig, *, state_dim: int, action_dim: int,
                 task_vectors: Mapping[str, np.ndarray], instructions: Mapping[str, str] | None = None,
                 seed: int = 0) -> None:
        if state_dim < 1 or action_dim < 1:
            raise ValueError(f"state_dim and action_dim must be >= 1, got {state_dim=} {action_dim=}")
        if not task_vectors:
            raise ValueError("task_vectors is empty: the GP policy needs {task key: task vector}")
        vecs = {str(k): np.asarray(v, dtype=np.float64).reshape(-1) for k, v in task_vectors.items()}
        widths = {v.shape[0] for v in vecs.values()}
        if len(widths) != 1:
            raise ValueError(f"task vectors must all have one width, got widths {sorted(widths)}")
        instructions = dict(instructions) if instructions is not None else {k: k for k in vecs}
        missing = sorted(set(vecs) - set(instructions))
        if missing:
            raise ValueError(f"no instruction for task(s) {missing}")
        self.config, self.seed = config, int(seed)
        self.state_dim, self.action_dim = int(state_dim), int(action_dim)
        self.task_vectors = vecs
        self.instructions: dict[str, str] = {k: str(instructions[k]) for k in vecs}
        self.gp = GPPolicy(config, self.state_dim, widths.pop(), self.action_dim)
        self._blocks: list[int] = []  # rows of each fit, replayed in order by load (bit-identical posterior)
        self._rng = np.random.default_rng(self.seed)

    @property
    def tasks(self) -> list[str]:
        """Known task keys."""
        return list(self.task_vectors)

    def set_tasks(self, tasks: Mapping[str, str]) -> None:
        """Re-word known tasks; a new key is refused (ValueError): a GP task is a given task vector, not an
        instruction it could embed."""
        new = sorted(set(tasks) - set(self.task_vectors))
        if new:
            raise ValueError(f"the GP policy cannot add task(s) {new}: its tasks are the task vectors it was built "
                             f"with ({self.tasks})")
        self.instructions.update({str(k): str(v) for k, v in tasks.items()})

    @property
    def alphas(self) -> dict[str, float]:
        """Empty: the GP policy has no adaptive prior."""
        return {}

    @property
    def prior(self) -> None:
        """None: no frozen prior head (the GP prior is the kernel)."""
        return None

    @property
    def encoder(self) -> None:
        """None: task vectors are given, no instruction encoder is needed."""
        return None

    def _vectors(self, tasks: np.ndarray | list[str]) -> np.ndarray:
        keys = [str(t) for t in tasks]
        unknown = sorted(set(keys) - set(self.task_vectors))
        if unknown:
            raise ValueError(f"unknown task(s) {unknown}; known: {self.tasks}")
        return np.stack([self.task_vectors[k] for k in keys]) if keys else np.zeros((0, self.gp.task_dim))

    def _rows(self, transitions: Transitions) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(states (N, S), task vectors (N, T), actions (N, A)) of ``transitions``."""
        for key in ("state", "task", "action"):
            if key not in transitions:
                raise ValueError(f"transitions need {key!r}, got keys {sorted(transitions)}")
        states = np.asarray(transitions["state"], dtype=np.float64)
        actions = np.asarray(transitions["action"], dtype=np.float64)
        check_shape("transitions['state']", states.shape, (None, self.state_dim))
        check_shape("transitions['action']", actions.shape, (states.shape[0], self.action_dim))
        return states, self._vectors(list(transitions["task"])), actions

    def act(self, obs: Mapping[str, np.ndarray], task: str, seed: int | None = None) -> np.ndarray:
        """(1, A) action sampled from the posterior N(mean, var I) at ``obs["state"]`` (S,) for ``task``."""
        if "state" not in obs:
            raise ValueError(f"obs needs 'state' for the GP policy, got keys {sorted(obs)}")
        state = np.asarray(obs["state"], dtype=np.float64)
        check_shape("obs['state']", state.shape, (self.state_dim,))
        vec = self._vectors([task])[0]
        rng = self._rng if seed is None else np.random.default_rng(seed)
        return self.gp.act(state[None], vec, rng)

    def loss(self, transitions: Transitions) -> float:
        """Mean negative log-density of the demonstrated actions under the noisy-expert predictive (eq. 4's pi~)."""
        states, tasks, actions = self._rows(transitions)
        return float(np.mean(-self.gp.log_prob(states, tasks, actions)))

    def embed(self, transitions: Transitions) -> np.ndarray:
        """Refused: a GP has no loss-gradient embedding; AMF-GP scores with the kernel itself (GPScoreFn)."""
        raise ValueError("the GP policy has no loss-gradient embeddings: AMF-GP scores with the GP's own kernel "
                         "(amf_ros.policies.gp.GPScoreFn), not with AMF-NN's embeddings")

    def fit(self, transitions: Transitions, steps: int, *, batch_size: int | None = None, lr: float | None = None,
            seed: int | None = None, callback: StepCallback | None = None,
            row_weights: np.ndarray | None = None) -> FitResult:
        """Condition on every row of ``transitions`` (one exact step; ``steps`` = 0 does nothing). The loss curve
        has that one step's :meth:`loss` after conditioning; ``callback(0, loss)`` returning False discards it.
        ``row_weights`` (replay) is refused: exact conditioning has no minibatches to weigh."""
        if steps < 0:
            raise ValueError(f"steps must be >= 0, got {steps=}")
        if row_weights is not None:
            raise ValueError("the GP policy conditions on every row exactly: it has no minibatches for row_weights "
                             "(replay_fraction needs a gradient-trained head: diffusion or mlp)")
        t0 = time.perf_counter()
        states, tasks, actions = self._rows(transitions)
        if steps == 0:
            return FitResult(wall_time_s=time.perf_counter() - t0)
        gp = self.gp.copy()
        gp.add(states, tasks, actions)
        value = float(np.mean(-gp.log_prob(states, tasks, actions)))
        if callback is not None and not callback(0, value):
            return FitResult(wall_time_s=time.perf_counter() - t0, cancelled=True)
        self.gp = gp
        self._blocks.append(int(states.shape[0]))
        return FitResult(losses=[value], steps=1, wall_time_s=time.perf_counter() - t0)

    def fit_alpha(self, transitions: Transitions, steps: int | None = None,
                  seed: int | None = None) -> dict[str, float]:
        """Refused: the GP policy has no adaptive prior."""
        raise ValueError("fit_alpha needs a prior: the GP policy has no adaptive prior")

    def save(self, path: str | Path) -> Path:
        """Write the policy (its conditioning data, in fit order) to directory ``path`` atomically."""
        from amf_ros.policies.checkpoint import save_checkpoint

        tensors = {"inputs": np.array(self.gp.posterior.inputs), "actions": np.array(self.gp.targets),
                   "blocks": np.asarray(self._blocks, dtype=np.int64),
                   "task_vectors": np.stack([self.task_vectors[k] for k in self.tasks])}
        meta = {"kind": GP_POLICY_KIND, "config": dataclasses.asdict(self.config), "state_dim": self.state_dim,
                "action_dim": self.action_dim, "tasks": self.tasks,
                "instructions": [self.instructions[k] for k in self.tasks], "seed": self.seed}
        return save_checkpoint(path, tensors, meta)

    @classmethod
    def load(cls, path: str | Path) -> GPTaskPolicy:
        """Read a checkpoint of :meth:`save`; the posterior is rebuilt by the same conditioning steps, so it is
        bit-identical to the saved policy's."""
        from amf_ros.policies.checkpoint import CheckpointError, load_checkpoint

        tensors, meta = load_checkpoint(path)
        if meta.get("kind") != GP_POLICY_KIND:
            raise CheckpointError(f"{path}: not a {GP_POLICY_KIND} checkpoint (kind {meta.get('kind')!r})")
        try:
            tasks = [str(t) for t in meta["tasks"]]
            policy = cls(GPPolicyConfig(**meta["config"]), state_dim=int(meta["state_dim"]),
                         action_dim=int(meta["action_dim"]),
                         task_vectors=dict(zip(tasks, tensors["task_vectors"].numpy(), strict=True)),
                         instructions=dict(zip(tasks, meta["instructions"], strict=True)), seed=int(meta["seed"]))
            x, y = tensors["inputs"].numpy(), tensors["actions"].numpy()
            start, s = 0, policy.state_dim
            for rows in tensors["blocks"].numpy().tolist():
                policy.gp.add(x[start:start + rows, :s], x[start:start + rows, s:], y[start:start + rows])
                policy._blocks.append(int(rows))
                start += rows
        except (KeyError, TypeError, ValueError) as exc:
            raise CheckpointError(f"{path}: checkpoint does not describe a GPTaskPolicy ({exc})") from exc
        return policy


class GPScoreFn:
    """AMF-GP criterion as a :data:`~amf_ros.core.selection.ScoreFn` over task keys (App. E with eq.-4 weights).

    Args:
        policy: the current GP policy (its posterior is the data posterior; it is not modified).
        trajectories: collected fine-tuning trajectories as (states (H, S), actions (H, A), task vector (T,)).
        target_tasks: (Ct, T) target task vectors (mu_c's support or samples of it).
        task_vector: task key -> (T,) task vector (candidates are keys, as in every selector).
        form: "log_variance" or "variance"; normalize: "self" or "mean" (see ``core/occupancy.py``).
        log_prob_clip: per-step clipping of log pi~(a|s, c) (App. M: [-12, 0]); min_weight: pruning threshold.
    After a call, ``last_info["effective_sample_size"]`` maps each candidate to the Kish effective sample size of its
    eq.-4 weights (``..._targets``: the same for the target tasks, in order).
    """

    def __init__(self, policy: GPPolicy, trajectories: list[tuple[np.ndarray, np.ndarray, np.ndarray]],
                 target_tasks: np.ndarray, task_vector, form: str = "log_variance", normalize: str = "self",
                 log_prob_clip: tuple[float, float] = (-12.0, 0.0), min_weight: float = 1e-3,
                 max_trajectories: int | None = None) -> None:
        from amf_ros.core.criterion_terms import check_form

        if not trajectories:
            raise ValueError("GPScoreFn needs at least one collected trajectory (use the warm start first)")
        self.policy, self.trajectories = policy, trajectories
        self.target_tasks = np.atleast_2d(np.asarray(target_tasks, dtype=np.float64))
        self.task_vector, self.form, self.normalize = task_vector, check_form(form), normalize
        self.clip, self.min_weight, self.max_trajectories = log_prob_clip, min_weight, max_trajectories
        self.last_info: dict = {"form": form}
        self._cache: dict[bytes, np.ndarray] = {}
        self._loglik_demo = self._loglik(np.stack([t for _, _, t in trajectories]))

    def _loglik(self, tasks: np.ndarray) -> np.ndarray:
        """(n, C) clipped trajectory log-likelihoods of every collected trajectory under every task vector
        (cached per task vector: targets, candidates and demonstrated tasks often coincide)."""
        tasks = np.atleast_2d(np.asarray(tasks, dtype=np.float64))
        keys = [t.tobytes() for t in tasks]
        missing = list(dict.fromkeys(k for k in keys if k not in self._cache))
        if missing:
            vecs = np.stack([np.frombuffer(k, dtype=np.float64) for k in missing])
            for k, col in zip(missing, self._loglik_uncached(vecs).T, strict=True):
                self._cache[k] = col
        return np.stack([self._cache[k] for k in keys], axis=1)

    def _loglik_uncached(self, tasks: np.ndarray) -> np.ndarray:
        from amf_ros.core.importance import trajectory_log_likelihood

        states = np.stack([s for s, _, _ in self.trajectories])  # (n, H, S)
        actions = np.stack([a for _, a, _ in self.trajectories])  # (n, H, A)
        n, h = states.shape[:2]
        c = tasks.shape[0]
        s_rep = np.broadcast_to(states[:, None], (n, c, h, states.shape[-1])).reshape(-1, states.shape[-1])
        a_rep = np.broadcast_to(actions[:, None], (n, c, h, actions.shape[-1])).reshape(-1, actions.shape[-1])
        t_rep = np.broadcast_to(tasks[None, :, None], (n, c, h, tasks.shape[-1])).reshape(-1, tasks.shape[-1])
        step = self.policy.log_prob(s_rep, t_rep, a_rep).reshape(n, c, h)
        return trajectory_log_likelihood(step, self.clip)

    def _join(self, states: np.ndarray, task: np.ndarray) -> np.ndarray:
        return self.policy.inputs(states, task)

    def inputs(self, candidate_tasks: np.ndarray):
        """App. E inputs (see :func:`amf_ros.core.occupancy.app_e_inputs`) for (Cc, T) candidate vectors."""
        from amf_ros.core.importance import importance_weights
        from amf_ros.core.occupancy import app_e_inputs

        w_t = importance_weights(self._loglik(self.target_tasks), self._loglik_demo)
        w_c = importance_weights(self._loglik(candidate_tasks), self._loglik_demo)
        return app_e_inputs([s for s, _, _ in self.trajectories], self.target_tasks, candidate_tasks, w_t, w_c,
                            self._join, self.normalize, self.min_weight, self.max_trajectories)

    def scores_for_vectors(self, candidate_tasks: np.ndarray, chosen_tasks: np.ndarray | None = None) -> np.ndarray:
        """(Cc,) criterion for candidate task vectors, after hallucinating demos of ``chosen_tasks`` (B, T)."""
        from amf_ros.core.criterion import posterior_criterion

        candidate_tasks = np.atleast_2d(np.asarray(candidate_tasks, dtype=np.float64))
        post = self.policy.posterior
        if chosen_tasks is not None and len(chosen_tasks):
            post = copy.copy(post)
            _, _, alts, weights, _ = self.inputs(np.atleast_2d(chosen_tasks))
            for a, w in zip(alts, weights, strict=True):
                post.add(a[int(np.argmax(w))])
        tx, tw, cx, cw, info = self.inputs(candidate_tasks)
        self.last_info = {"form": self.form, "normalize": self.normalize,
                          "effective_sample_size": {"target": info["ess_target"],
                                                    "candidate": info["ess_candidate"]}}
        return posterior_criterion(post, tx, tw, cx, cw, self.form)

    def __call__(self, candidates: list[str], chosen: list[str]) -> np.ndarray:
        """ScoreFn: criterion per candidate task key after hallucinating the ``chosen`` ones; ESS keyed by candidate."""
        vec = lambda keys: np.stack([np.asarray(self.task_vector(k), dtype=np.float64) for k in keys])  # noqa: E731
        scores = self.scores_for_vectors(vec(candidates), vec(chosen) if chosen else None)
        ess = self.last_info["effective_sample_size"]
        # keyed by candidate, like the NN score functions (what the task_selector node reports per task)
        self.last_info["effective_sample_size"] = dict(zip(candidates, ess["candidate"], strict=True))
        self.last_info["effective_sample_size_targets"] = ess["target"]
        return scores
