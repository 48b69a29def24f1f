"""The console answers only requests addressed to one of its own names (Host header): the DNS-rebinding guard.

A page at http://evil.example:8765/ whose name the attacker re-points at 127.0.0.1 reaches the loopback console with
Host and Origin both ``evil.example:8765``; the Origin check alone (same as Host) lets it through. aiohttp on a real
socket, the client setting the Host header as such a browser would.
"""

from __future__ import annotations

import asyncio
import socket

import pytest

from amf_ros.console.model import ConsoleModel
from amf_ros.console.server import ConsoleServer, accepted_hosts, host_name

aiohttp = pytest.importorskip("aiohttp")

TASKS = {"carrot": "put carrot on plate"}


def test_host_names_are_parsed_from_the_header():
    assert host_name("localhost:8765") == "localhost"
    assert host_name("[::1]:8765") == "::1"
    assert host_name("Robot-PC.Example.:80") == "robot-pc.example"
    assert host_name("") == "" and host_name("[::1") == ""


def test_accepted_hosts_by_bind_address():
    assert accepted_hosts("127.0.0.1") == {"127.0.0.1", "localhost", "::1"}
    assert accepted_hosts("::1") == {"127.0.0.1", "localhost", "::1"}
    assert accepted_hosts("192.168.1.5", ["robot-pc"]) == {"192.168.1.5", "robot-pc"}  # no loopback listener there
    wild = accepted_hosts("0.0.0.0", ["robot-pc.lab"])
    assert {"localhost", "127.0.0.1", "::1", "robot-pc.lab", socket.gethostname().lower()} <= wild
    assert "evil.example" not in wild


async def _probe(port: int, host: str) -> list[int]:
    """Statuses of the page, the state API, a static file and a WebSocket upgrade with this Host (Origin alike)."""
    base = f"http://127.0.0.1:{port}"
    headers = {"Host": host, "Origin": f"http://{host}"}
    statuses = []
    async with aiohttp.ClientSession() as session:
        for path in ("/", "/api/state", "/static/console.js"):
            async with session.get(base + path, headers=headers) as r:
                statuses.append(r.status)
                if r.status == 403:
                    assert "Host" in await r.text() and "allowed_hosts" in await r.text()
        try:
            ws = await session.ws_connect(base + "/ws", headers=headers)
        except aiohttp.WSServerHandshakeError as exc:
            statuses.append(exc.status)
        else:
            statuses.append(101)
            await ws.close()
    return statuses


def test_every_request_with_a_foreign_host_is_refused_and_configured_names_work():
    refused: list[str] = []
    server = ConsoleServer(ConsoleModel(TASKS), lambda c, r: None, port=0, allowed_hosts=["robot-pc.lab"],
                           log=lambda level, text: refused.append(text))
    port = server.start()
    try:
        for host in ("evil.example", "127.0.0.1.evil.example", "robot-pc.lab.evil.example", "localhost.", ""):
            want = [403] * 4 if host != "localhost." else [200, 200, 200, 101]  # trailing dot: same name
            assert asyncio.run(_probe(port, f"{host}:{port}" if host else "")) == want, host
        for host in (f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}", f"ROBOT-PC.lab:{port}"):
            assert asyncio.run(_probe(port, host)) == [200, 200, 200, 101], host
    finally:
        server.stop()
    assert any("evil.example" in line and "not one of this console's names" in line for line in refused)
