"""Small helpers for talking to nodes from a test (futures with timeouts, waiting for services/actions)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from ros_testing import (  # noqa: E402,F401  (re-exported)
    INSTALL_LIB, call, pick_domain_id, require_ros, wait_for, wait_future)

REPO = Path(__file__).resolve().parents[2]


def make_checkpoint(path: Path, tasks: tuple[str, ...] = ("reach", "push"), head: str = "mlp", seed: int = 0) -> Path:
    """A small policy checkpoint for the Metaworld suite (39-D state, native 4-D action, chunks of 4, frozen prior),
    fitted for a few steps on synthetic data: enough for every node to load, act, embed and fine-tune it fast.
    The "hash" task encoder avoids loading the language model in every node process."""
    import numpy as np

    from amf_ros.envs.metaworld_suite import load_tasks
    from amf_ros.policies.agent import TaskConditionedPolicy
    from amf_ros.policies.config import PolicyConfig

    specs = load_tasks(keys=list(tasks))
    cfg = PolicyConfig(head=head, trunk="state", task_encoder="hash", action_horizon=4, seed=seed)
    policy = TaskConditionedPolicy(cfg, action_dim=4, state_dim=39, tasks={s.key: s.instruction for s in specs})
    rng = np.random.default_rng(seed)
    n, per = 40, 10
    transitions = {"state": rng.normal(size=(n, 39)).astype(np.float32),
                   "action": rng.uniform(-1, 1, (n, 4)).astype(np.float32),
                   "task": np.array([specs[(i // per) % len(specs)].key for i in range(n)]),
                   "episode_index": np.repeat(np.arange(n // per), per), "step": np.tile(np.arange(per), n // per)}
    policy.fit(transitions, 5)
    policy.freeze_prior()
    return Path(policy.save(path))


def call_after_restart(call_once, attempts: int = 12):
    """``call_once()`` (a client call with a short timeout), retried while it raises ROSCallError: a request sent
    while a restarted server is still being discovered is lost, and the killed one's entry lingers in discovery, so
    "service available" proves nothing. Raises the last error after ``attempts`` tries."""
    from amf_ros.ros.client import ROSCallError

    for attempt in range(attempts):
        try:
            return call_once()
        except ROSCallError:
            if attempt == attempts - 1:
                raise
