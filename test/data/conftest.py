"""pytest setup for the data tests: puts test/data on sys.path so tests can import data_helpers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from data_helpers import synthetic_steps  # noqa: E402


@pytest.fixture
def steps10() -> list[dict]:
    return synthetic_steps(10)
