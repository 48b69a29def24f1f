"""GP policy backend (AMF-GP): a multi-output GP over x = (state, task) with an RBF kernel.

Why: the paper's controlled setting (Sec. 5.1), where the policy *is* a Gaussian process, so the AMF criterion needs
no kernel approximation. Output dimensions are independent GPs sharing one kernel and one noise level, hence one
posterior variance per input; the mean is per output dimension.

Shapes: states (B, S), task vectors (B, T), actions (B, A); inputs x = concat(state, task) (B, S + T).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass

import numpy as np

from amf_ros.core.kernels import RBFKernel
from amf_ros.core.posterior import KernelPosterior


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
        return self.config.noise_var

    @property
    def num_points(self) -> int:
        return self._y.shape[0]

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


class GPScoreFn:
    """AMF-GP criterion as a :data:`~amf_ros.core.selectors.ScoreFn` over task keys (App. E with eq.-4 weights).

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
        from amf_ros.core.criterion import check_form

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
            for k, col in zip(missing, self._loglik_uncached(vecs).T):
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
            for a, w in zip(alts, weights):
                post.add(a[int(np.argmax(w))])
        tx, tw, cx, cw, info = self.inputs(candidate_tasks)
        self.last_info = {"form": self.form, "normalize": self.normalize,
                          "effective_sample_size": {"target": info["ess_target"],
                                                    "candidate": info["ess_candidate"]}}
        return posterior_criterion(post, tx, tw, cx, cw, self.form)

    def __call__(self, candidates: list[str], chosen: list[str]) -> np.ndarray:
        vec = lambda keys: np.stack([np.asarray(self.task_vector(k), dtype=np.float64) for k in keys])  # noqa: E731
        scores = self.scores_for_vectors(vec(candidates), vec(chosen) if chosen else None)
        ess = self.last_info["effective_sample_size"]
        # keyed by candidate, like the NN score functions (what the task_selector node reports per task)
        self.last_info["effective_sample_size"] = dict(zip(candidates, ess["candidate"]))
        self.last_info["effective_sample_size_targets"] = ess["target"]
        return scores
