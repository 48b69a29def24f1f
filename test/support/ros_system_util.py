"""Small helpers for talking to nodes from a test (futures with timeouts, waiting for services/actions)."""

from __future__ import annotations

from pathlib import Path

from ros_testing import INSTALL_LIB, call, require_ros, wait_for, wait_future  # noqa: F401  (re-exported)

from amf_ros.bench.tiny_checkpoint import tiny_checkpoint as make_checkpoint  # noqa: F401  (re-exported)

REPO = Path(__file__).resolve().parents[2]
