"""Fixtures of the data tests (the helpers live in test/support/data_helpers.py)."""

from __future__ import annotations

import pytest
from data_helpers import RATES, record_lerobot_store, synthetic_steps

from amf_ros.data.lerobot import LeRobotExportConfig, export_lerobot


@pytest.fixture
def steps10() -> list[dict]:
    return synthetic_steps(10)


@pytest.fixture(scope="module", params=sorted(RATES))
def exported(request, tmp_path_factory):
    """(rate, store, export result) of a recorded store exported to LeRobot v3, once per rate."""
    rate = request.param
    root = tmp_path_factory.mktemp(f"lerobot_{rate}hz")
    store = record_lerobot_store(root / "store", rate, RATES[rate])
    res = export_lerobot(store, root / "export", LeRobotExportConfig())
    return rate, store, res
