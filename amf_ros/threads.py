"""The one place that limits a process's compute threads: torch's intra-op pool and the BLAS/OpenMP pools.

Why one home: the nodes, the fine-tune worker, the policies and the benchmarks all cap their threads, for two
reasons. Speed: on a shared 2-core machine small matrices run several times slower when every process spins
several threads. Reproducibility: a multi-threaded BLAS sums in an order that depends on its thread count, so a
benchmark job that must give bit-identical records on every engine runs with one thread. torch is imported only
when its limit is asked for, threadpoolctl only when a BLAS limit is.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

SINGLE_THREAD_ENV: dict[str, str] = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
"""Environment of a child process that must run single-threaded from its first import (e.g. Ray's job workers),
the same limit :func:`limit_threads` ``(1, blas=True)`` sets inside a running process."""


def _threadpool_limits(n: int) -> contextlib.AbstractContextManager:
    try:
        import threadpoolctl
    except ImportError as exc:
        raise ImportError(f"limiting the BLAS threads needs threadpoolctl ({exc}). Install: pip install "
                          "threadpoolctl") from exc
    return threadpoolctl.threadpool_limits(limits=int(n))


def limit_threads(n: int, *, torch: bool = True, blas: bool = False) -> None:
    """Cap this process's threads at ``n`` for the rest of its life (``n <= 0``: leave every limit as it is).

    Args:
        n: threads per pool.
        torch: cap torch's intra-op threads (imports torch).
        blas: also cap the BLAS/OpenMP pools already loaded (needs threadpoolctl; ImportError saying so otherwise).
    """
    if n <= 0:
        return
    if torch:
        import torch as _torch

        _torch.set_num_threads(int(n))
    if blas:
        _threadpool_limits(n)  # process-wide: the limits stay when the returned context object is dropped


@contextlib.contextmanager
def limited_threads(n: int, *, torch: bool = True, blas: bool = False) -> Iterator[None]:
    """:func:`limit_threads` for the body of a ``with`` block only: the previous limits come back after it.

    Why: a library entry point (e.g. pre-training) that callers run inside their own process must not leave its
    limits behind.
    """
    if n <= 0:
        yield
        return
    with contextlib.ExitStack() as stack:
        if torch:
            import torch as _torch

            before = _torch.get_num_threads()
            _torch.set_num_threads(int(n))
            stack.callback(_torch.set_num_threads, before)
        if blas:
            stack.enter_context(_threadpool_limits(n))
        yield
