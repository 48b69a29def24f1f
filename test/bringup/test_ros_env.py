"""The one ROS-domain helper (amf_ros/bringup/ros_env.py): which domain and discovery range a graph gets."""

from __future__ import annotations

import socket

import pytest

from amf_ros.bringup.ros_env import DOMAIN_IDS, domain_id_free, free_domain_id, isolated_ros_env


@pytest.fixture
def clean_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    monkeypatch.delenv("ROS_DOMAIN_ID", raising=False)
    monkeypatch.delenv("ROS_AUTOMATIC_DISCOVERY_RANGE", raising=False)
    return monkeypatch


def test_a_free_domain_is_picked_unless_one_is_set_or_given(clean_env: pytest.MonkeyPatch) -> None:
    import os

    env = isolated_ros_env()
    assert int(env["ROS_DOMAIN_ID"]) in DOMAIN_IDS and env["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"
    assert {k: os.environ[k] for k in env} == env  # this process's rclpy joins the same domain
    clean_env.setenv("ROS_DOMAIN_ID", "42")
    assert isolated_ros_env()["ROS_DOMAIN_ID"] == "42"
    assert isolated_ros_env(7)["ROS_DOMAIN_ID"] == "7" == os.environ["ROS_DOMAIN_ID"]
    clean_env.setenv("ROS_DOMAIN_ID", "")  # set but empty: not a domain
    assert int(isolated_ros_env()["ROS_DOMAIN_ID"]) in DOMAIN_IDS


def test_discovery_is_loopback_unless_the_caller_keeps_its_own(clean_env: pytest.MonkeyPatch) -> None:
    clean_env.setenv("ROS_AUTOMATIC_DISCOVERY_RANGE", "SUBNET")
    assert isolated_ros_env(3, keep_discovery_range=True)["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "SUBNET"
    assert isolated_ros_env(3)["ROS_AUTOMATIC_DISCOVERY_RANGE"] == "LOCALHOST"


def test_a_domain_whose_port_is_taken_is_not_free() -> None:
    # Another process may take the port between the check and our bind: try the next free domain then (a few
    # tries; 100 domains are far more than this machine's concurrent test sessions).
    for _ in range(10):
        domain = free_domain_id()
        assert domain in DOMAIN_IDS
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            try:
                s.bind(("127.0.0.1", 7400 + 250 * domain + 11))
            except OSError:
                continue
            assert not domain_id_free(domain)
            return
    raise AssertionError("no free domain could be bound in 10 tries")
