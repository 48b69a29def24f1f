"""Small helpers for talking to nodes from a test (futures with timeouts, waiting for services/actions)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, Callable


import sys

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "support"))
from ros_testing import INSTALL_LIB, pick_domain_id, require_ros  # noqa: E402,F401  (re-exported)

REPO = Path(__file__).resolve().parents[2]


def wait_future(future: Any, timeout: float, what: str = "call") -> Any:
    """Result of an rclpy future completed by a background executor, or AssertionError after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not future.done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: no answer within {timeout} s")
        time.sleep(0.01)
    return future.result()


def wait_for(predicate: Callable[[], bool], timeout: float, what: str, poll: float = 0.05) -> None:
    """Poll ``predicate`` until true or raise AssertionError naming ``what`` (launch_testing's assertWaitFor)."""
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def call(node: Any, srv_type: Any, name: str, request: Any, timeout: float = 30.0) -> Any:
    """Call service ``name`` (waiting for it to appear) and return the response."""
    client = node.create_client(srv_type, name)
    try:
        if not client.wait_for_service(timeout_sec=timeout):
            raise AssertionError(f"service {name} did not appear within {timeout} s")
        return wait_future(client.call_async(request), timeout, f"service {name}")
    finally:
        node.destroy_client(client)


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
