"""Where things are, for tests that need a path (the test tree moves; these names do not)."""

from __future__ import annotations

from pathlib import Path

SUPPORT = Path(__file__).resolve().parent
TEST = SUPPORT.parent
REPO = TEST.parent
CONFIGS = REPO / "config"
STANDIN = SUPPORT / "standin"  # a stand-in simpler_env package that follows the real interface
