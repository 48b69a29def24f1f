"""Where benchmark jobs run: in this process, a local process pool, or Ray (one machine or a cluster).

Why Ray: a benchmark grid is a list of independent, deterministic jobs (pre-train one seed, run one method); the
Metaworld grid takes 37 min on 2 cores and the grids of issue 15 take hours, so a user with a cluster runs the same
list on an existing distributed engine instead of this package's pool. Every engine returns the results in
submission order and each job sets its own seeds and one torch and one BLAS thread (amf_ros.threads), so the same
seeds give bit-identical results.json whichever engine ran them (a test checks it).

Engines: ``serial`` (jobs = 1), ``process`` (spawned worker processes, no dependency), ``ray`` (``ray.init()``
local by default with ``jobs`` CPUs, or ``address`` = "auto" / "ray://host:10001" for a cluster; each job asks for
one CPU). Default: ``ray`` when it is installed, else ``process``. On a cluster, the jobs' ``work_dir`` (pre-trained
checkpoints handed from pre-training jobs to method jobs) must be on storage every node mounts, and every node needs
this package installed (docs/metaworld.md, "Running a grid on a Ray cluster").
"""

from __future__ import annotations

import importlib.util
import logging
import os
from typing import Any, Callable, Sequence

from amf_ros.threads import SINGLE_THREAD_ENV

log = logging.getLogger(__name__)

ENGINES = ("serial", "process", "ray")


def default_engine() -> str:
    """``ray`` when importable, else ``process`` (the no-dependency default)."""
    return "ray" if importlib.util.find_spec("ray") is not None else "process"


class Engine:
    """Runs ``fn(*args)`` for each args tuple; results in submission order; ``tick()`` after each finished job.

    Args:
        kind: one of :data:`ENGINES`.
        jobs: parallel jobs (process pool size; Ray: CPUs of a local cluster, ignored with an address).
        address: Ray cluster address ("" = start a local Ray for this run).
    """

    def __init__(self, kind: str, jobs: int = 1, address: str = "") -> None:
        if kind not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {kind=}")
        if jobs < 1:
            raise ValueError(f"jobs must be >= 1, got {jobs=}")
        if kind == "ray" and importlib.util.find_spec("ray") is None:
            raise ValueError("engine 'ray' needs Ray: pip install 'ray>=2.40' (or use --engine process)")
        self.kind, self.jobs, self.address = kind, int(jobs), address
        self._pool: Any = None
        self._ray_started = False

    def __enter__(self) -> "Engine":
        if self.kind == "process" and self.jobs > 1:
            import concurrent.futures as cf
            import multiprocessing as mpc

            self._pool = cf.ProcessPoolExecutor(max_workers=self.jobs, mp_context=mpc.get_context("spawn"))
        elif self.kind == "ray":
            import ray

            if not ray.is_initialized():
                kwargs: dict[str, Any] = {"address": self.address} if self.address else {"num_cpus": self.jobs}
                # the jobs import this package from the driver's environment (same machine, or installed on every
                # node of a cluster); Ray's own log lines stay out of the benchmark's output
                ray.init(log_to_driver=False, include_dashboard=False, logging_level=logging.WARNING,
                         runtime_env={"env_vars": dict(SINGLE_THREAD_ENV)}, **kwargs)
                self._ray_started = True
            log.info("Ray: %s CPUs available", ray.available_resources().get("CPU", "?"))
        return self

    def __exit__(self, *exc: object) -> None:
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None
        if self._ray_started:
            import ray

            ray.shutdown()
            self._ray_started = False

    def map(self, fn: Callable[..., Any], args: Sequence[tuple], tick: Callable[[], None] = lambda: None) -> list:
        """``[fn(*a) for a in args]`` on this engine, in order."""
        if self.kind == "serial" or (self.kind == "process" and self._pool is None):
            out = []
            for a in args:
                out.append(fn(*a))
                tick()
            return out
        if self.kind == "process":
            futures = [self._pool.submit(fn, *a) for a in args]
            out = []
            for fut in futures:  # in submission order: results stay deterministic
                out.append(fut.result())
                tick()
            return out
        import ray

        remote = ray.remote(num_cpus=1, max_retries=0)(fn)
        refs = [remote.remote(*a) for a in args]
        pending = list(refs)
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for _ in done:
                tick()
        return ray.get(refs)


def cpu_count() -> int:
    """CPUs of this machine (1 when unknown), for sizing worker pools."""
    return os.cpu_count() or 1
