"""The arm status topic every arm publishes (sim_bridge and widowx_driver): one default, one description."""

from __future__ import annotations

from typing import Any

from amf_ros.bringup.params import param


def arm_status_topic() -> Any:
    """The ``arm_status_topic`` field of an arm node's parameter dataclass."""
    return param(
        "arm/status",
        "Latched arm status (amf_ros/ArmStatus): the e-stop (engaged, times engaged) and the actions applied and "
        "refused by reason since the start; published at start, on every e-stop change and after every action. "
        "policy_server ends a run_policy goal when the e-stop engages, demo_recorder discards the episode "
        "('' = not published).",
    )
