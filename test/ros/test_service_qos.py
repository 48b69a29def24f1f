"""Every service server and client of the package, and every action server and client, uses the services' QoS of
amf_ros/ros/qos.py (issue 33 item 4: with rclpy's default depth of 10, 40 of 50 concurrent next_task requests were
never answered; test/dds/test_service_load.py measures it). Checked over the source, so a new service cannot
quietly fall back to the default."""

from __future__ import annotations

import ast
from pathlib import Path

ROS_DIR = Path(__file__).resolve().parents[2] / "amf_ros" / "ros"


def unsized_services(source: str, filename: str = "<src>") -> list[str]:
    """``file:line`` of each create_service/create_client without ``qos_profile=qos.SERVICES`` and each
    ActionServer/ActionClient without ``**qos.action_services()``."""
    bad = []
    for node in ast.walk(ast.parse(source, filename)):
        if not isinstance(node, ast.Call):
            continue
        name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
        kwargs = {kw.arg: ast.unparse(kw.value) for kw in node.keywords}
        if name in ("create_service", "create_client") and kwargs.get("qos_profile") != "qos.SERVICES":
            bad.append(f"{filename}:{node.lineno}: {name} without qos_profile=qos.SERVICES")
        if name in ("ActionServer", "ActionClient") and kwargs.get(None) != "qos.action_services()":
            bad.append(f"{filename}:{node.lineno}: {name} without **qos.action_services()")
    return bad


def test_the_check_finds_a_service_on_the_default_qos():
    assert unsized_services('n.create_service(NextTask, "next_task", cb)')
    assert unsized_services('n.create_client(NextTask, "next_task", qos_profile=qos_profile_services_default)')
    assert unsized_services('ActionServer(n, RunPolicy, "run_policy", cb)')
    assert not unsized_services('n.create_client(NextTask, "next_task", qos_profile=qos.SERVICES)')
    assert not unsized_services('ActionClient(n, RunPolicy, "run_policy", **qos.action_services())')


def test_every_service_and_action_of_the_package_is_sized_for_its_callers():
    files = sorted(ROS_DIR.rglob("*.py"))
    sources = {f: f.read_text() for f in files}
    assert sum(s.count("create_service(") for s in sources.values()) >= 8, "the check sees the nodes' services"
    bad = [hit for f, s in sources.items() for hit in unsized_services(s, str(f.relative_to(ROS_DIR.parent.parent)))]
    assert bad == [], "\n".join(bad)
