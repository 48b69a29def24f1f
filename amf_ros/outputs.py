"""Human-facing outputs every command writes: plain-text tables and figures saved atomically.

Why here, below every package: `amf run` (loop/), `amf data` (data/cli.py) and the benchmarks (bench/) all print
tables and save plots; the benchmarks' own results.json contract stays in :mod:`amf_ros.bench.results`. Results
files are written with :func:`amf_ros.atomic.atomic_write_json`.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from amf_ros.atomic import atomic_write_bytes


def format_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], floatfmt: str = ".3f") -> str:
    """A plain fixed-width text table (no dependency), for stdout and README."""
    def fmt(v: Any) -> str:
        return format(v, floatfmt) if isinstance(v, (float, np.floating)) else str(v)

    cells = [[fmt(v) for v in row] for row in rows]
    widths = [max(len(str(h)), *(len(r[i]) for r in cells)) if cells else len(str(h)) for i, h in enumerate(headers)]
    line = "  ".join(str(h).ljust(w) for h, w in zip(headers, widths, strict=True))
    sep = "  ".join("-" * w for w in widths)
    body = ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=False)) for r in cells]
    return "\n".join([line, sep, *body])


def save_figure(fig: Any, path: str | os.PathLike) -> Path:
    """Save a matplotlib figure atomically (PNG)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=120, bbox_inches="tight")
    return atomic_write_bytes(path, buf.getvalue())
