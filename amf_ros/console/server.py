"""The operator console's web server: one page, one WebSocket per browser, run by aiohttp on a thread of its own.

Why a thread with its own event loop: the ROS node's executor must never wait on a browser, and a browser must never
wait on the ROS graph. ROS callbacks write the :class:`~amf_ros.console.model.ConsoleModel`; here one ticker
(``push_period_s``) refreshes the stream ages and serialises each changed section once; every browser's sender then
forwards what it has not seen. A slow browser only misses intermediate versions. Commands from a browser are
validated (:mod:`amf_ros.console.protocol`) and handed to ``dispatch``, which must not block; its answer comes back
to that browser as a ``result`` message. Drive inputs go to ``on_drive`` (answered only when refused), and a
browser whose WebSocket ends is released from driving (``on_drive_release``).

The camera: a latest-only :class:`FrameSlot` (frames arriving faster than they are shown are dropped, nothing
queues) wakes one encoder, which encodes the newest frame once for every browser, at most at ``display_rate_hz``,
or at ``drive_display_rate_hz`` while any browser's Drive panel is on (``{"op": "view", "mode": "drive"}``), and
wakes each browser's sender at once: a driving browser gets every encoded frame as soon as it exists, a watching one
at most ``display_rate_hz`` of them. A browser whose socket is slow is sent the newest frame when it is ready again,
never a queue of old ones.

Access: bound to 127.0.0.1 by default. Any other ``host`` requires a token (refused at start without one); every
request must then carry it (``?token=`` on the page and WebSocket URLs, or ``Authorization: Bearer``), compared in
constant time. WebSocket upgrades from another origin are refused (a page elsewhere in the operator's browser cannot
drive the robot through a loopback console). Every HTTP and WebSocket request must name an accepted host in its
``Host`` header (:func:`accepted_hosts`), else 403: a page served from an attacker's name that resolves to this
machine (DNS rebinding) carries its own name in both Host and Origin, so the Origin check alone lets it through.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import ipaddress
import json
import socket
import threading
import time
from pathlib import Path
from typing import Any, Callable, Sequence
from urllib.parse import urlsplit

import numpy as np

from amf_ros.console.camera import FrameSlot, encode_jpeg
from amf_ros.console.drive import DriveInput
from amf_ros.console.model import SECTIONS, ConsoleModel
from amf_ros.console.protocol import MAX_MESSAGE_BYTES, BadCommandError, Command, parse_message

STATIC_DIR = Path(__file__).with_name("static")
Reply = Callable[[bool, str], None]
Dispatch = Callable[[Command, Reply], None]
OnDrive = Callable[[str, DriveInput], str]
"""``on_drive(client, input)`` -> "" (accepted) or why it was refused; must return at once."""
DRIVE_REFUSAL_PERIOD_S = 1.0
"""A browser whose Drive input is refused (another browser drives) is told so at most once per this period, not
20 times a second."""


def is_loopback(host: str) -> bool:
    """True for 127.0.0.0/8, ::1 and 'localhost' (a console there needs no token)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


WILDCARD_HOSTS = ("0.0.0.0", "::", "")
"""Bind addresses that listen on every interface."""


def host_name(header: str) -> str:
    """The host name of a ``Host`` header (port and IPv6 brackets dropped, lower case, no trailing dot); "" when it
    is missing or malformed."""
    try:
        name = urlsplit(f"//{header.strip()}").hostname or ""
    except ValueError:
        return ""
    return name.rstrip(".")


def accepted_hosts(host: str, allowed: Sequence[str] = ()) -> frozenset[str]:
    """Host names a request may carry in its ``Host`` header: the bound ``host`` (on every interface: this
    machine's host name and fully qualified name), the loopback names (localhost, 127.0.0.1, ::1) when the console
    listens on loopback, and ``allowed`` (the node's ``allowed_hosts``: the names and addresses operators use)."""
    names = {host_name(h) for h in allowed if h.strip()}
    if host in WILDCARD_HOSTS:
        names |= {socket.gethostname().lower(), socket.getfqdn().lower()}
    else:
        names.add(host_name(host if ":" not in host else f"[{host}]"))
    if host in WILDCARD_HOSTS or is_loopback(host):
        names |= {"localhost", "127.0.0.1", "::1"}
    return frozenset(n for n in names if n)


class _Client:
    """One browser's WebSocket: its id (the page shows who drives), the camera rate it wants, its sender's wake-up."""

    def __init__(self, ws: Any, client_id: str) -> None:
        self.ws, self.id = ws, client_id
        self.mode = "watch"
        self.wake = asyncio.Event()
        self.camera_sent_at = -1e9
        self.refused_at = -1e9


class ConsoleServer:
    """Serves the console page and its WebSockets (module docstring).

    Args:
        model: what the page shows.
        dispatch: called (on the server's thread) with each validated command and a thread-safe ``reply(ok, text)``;
            must return at once (start a service call, not wait for it).
        host, port: where to listen (port 0 = any free port; :attr:`port` tells which).
        token: required on every request when non-empty; must be non-empty for a non-loopback ``host``.
        frames: the camera slot (None = no camera panel); ``to_rgb`` turns a stored frame into an RGB array.
        display_rate_hz: camera frames per second sent to watching browsers at most.
        push_period_s: how often changed sections are pushed.
        allowed_hosts: further names (or addresses) a request's ``Host`` header may carry (:func:`accepted_hosts`).
        drive_display_rate_hz: camera frames per second at most while a browser's Drive panel is on.
        on_drive: called (on the server's thread) with each valid Drive input and its browser's id; returns "" or
            why it was refused; must return at once. None: Drive inputs are refused.
        on_drive_release: called with a browser's id when its WebSocket ends (it may have been driving).
        frame_stamp: a stored frame's capture time (s, the image's header stamp), sent with it as ``stamp``.
    """

    def __init__(self, model: ConsoleModel, dispatch: Dispatch, host: str = "127.0.0.1", port: int = 8765,
                 token: str = "", frames: FrameSlot | None = None, to_rgb: Callable[[Any], np.ndarray] | None = None,
                 display_rate_hz: float = 2.0, push_period_s: float = 0.2,
                 log: Callable[[str, str], None] | None = None, allowed_hosts: Sequence[str] = (),
                 drive_display_rate_hz: float = 15.0, on_drive: OnDrive | None = None,
                 on_drive_release: Callable[[str], None] | None = None,
                 frame_stamp: Callable[[Any], float] | None = None) -> None:
        if not token and not is_loopback(host):
            raise ValueError(f"host {host!r} is reachable from other machines: set a 'token' (every browser must then "
                             "open the page with ?token=...), or bind to 127.0.0.1")
        self.model, self.dispatch = model, dispatch
        self.host, self.port, self.token = host, int(port), token
        self.hosts = accepted_hosts(host, allowed_hosts)
        self.frames, self.to_rgb = frames, to_rgb
        self.display_period_s = 1.0 / max(display_rate_hz, 1e-3)
        self.drive_period_s = 1.0 / max(drive_display_rate_hz, display_rate_hz, 1e-3)
        self.push_period_s = float(push_period_s)
        self.on_drive, self.on_drive_release, self.frame_stamp = on_drive, on_drive_release, frame_stamp
        self._log = log or (lambda level, text: None)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._clients: dict[Any, _Client] = {}
        self._next_client = 0
        self._sections: dict[str, tuple[int, str]] = {}
        self._camera: dict[str, tuple[int, str]] = {}
        self._camera_seen: dict[str, int] = {}
        self._frame_ready: asyncio.Event | None = None
        self._static_files = {str(p.relative_to(STATIC_DIR)): p.resolve() for p in sorted(STATIC_DIR.rglob("*"))
                              if p.is_file()}
        self.stats = {"camera_encoded": 0, "camera_encode_s": 0.0, "camera_sent": 0, "pushes": 0,
                      "bad_messages": 0, "drive_inputs": 0, "drive_refused": 0}

    # -- lifecycle ---------------------------------------------------------------------------------------------
    def start(self, timeout_s: float = 10.0) -> int:
        """Bind and serve on a daemon thread; return the port. Raises OSError (address in use, ...) or TimeoutError."""
        ready: dict[str, Any] = {}
        started = threading.Event()

        def run() -> None:
            loop = asyncio.new_event_loop()
            asyncio.set_event_loop(loop)
            self._loop = loop
            try:
                self.port = loop.run_until_complete(self._serve())
            except BaseException as exc:
                ready["error"] = exc
                started.set()
                loop.close()
                return
            started.set()
            try:
                loop.run_forever()
            finally:
                loop.run_until_complete(self._cleanup())
                loop.close()

        self._thread = threading.Thread(target=run, name="console-http", daemon=True)
        self._thread.start()
        if not started.wait(timeout_s):
            raise TimeoutError(f"console server did not start within {timeout_s:g} s")
        if "error" in ready:
            raise ready["error"]
        return self.port

    def stop(self, timeout_s: float = 5.0) -> None:
        """Close every WebSocket and the listener; idempotent, bounded by ``timeout_s``."""
        loop, thread = self._loop, self._thread
        if self.frames is not None:
            self.frames.notify = None
        if loop is None or thread is None or not thread.is_alive():
            return
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout_s)

    @property
    def url(self) -> str:
        """The page's address to print for the operator, with the token when one is set."""
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/" + (f"?token={self.token}" if self.token else "")

    @property
    def num_clients(self) -> int:
        """Browsers connected right now."""
        return len(self._clients)

    async def _serve(self) -> int:
        from aiohttp import web

        app = web.Application(client_max_size=64 * 1024)
        app.router.add_get("/", self._index)
        app.router.add_get("/ws", self._websocket)
        app.router.add_get("/api/state", self._state)
        app.router.add_get("/static/{name:.+}", self._static)
        app.middlewares.append(self._host_middleware())  # first: a foreign Host learns nothing, not even 401
        app.middlewares.append(self._auth_middleware())
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, self.host, self.port, reuse_address=True)
        await site.start()
        loop = asyncio.get_running_loop()
        loop.create_task(self._tick())
        if self.frames is not None:
            ready = self._frame_ready = asyncio.Event()
            loop.create_task(self._camera_loop(ready))

            def notify() -> None:
                try:
                    loop.call_soon_threadsafe(ready.set)
                except RuntimeError:  # the loop closed (shutdown): nobody to show the frame to
                    pass
            self.frames.notify = notify
            ready.set()  # a frame stored before the server started
        return int(site._server.sockets[0].getsockname()[1])  # port 0 -> the one the OS chose

    async def _cleanup(self) -> None:
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        for ws in list(self._clients):
            await ws.close(code=1001, message=b"console shutting down")
        if self._runner is not None:
            await self._runner.cleanup()

    # -- access ------------------------------------------------------------------------------------------------
    def _authorized(self, request: Any) -> bool:
        if not self.token:
            return True
        given = request.query.get("token", "")
        header = request.headers.get("Authorization", "")
        if not given and header.startswith("Bearer "):
            given = header[len("Bearer "):]
        return hmac.compare_digest(given.encode(), self.token.encode())

    def _host_middleware(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def check(request: Any, handler: Any) -> Any:
            given = request.headers.get("Host", "")
            if host_name(given) not in self.hosts:
                self._log("warn", f"refused {request.method} {request.path} from {request.remote}: Host "
                                  f"{given[:100]!r} is not one of this console's names {sorted(self.hosts)}")
                return web.Response(status=403, text=f"operator console: refused: Host {given[:100]!r} is not a name "
                                                     "of this console (a guard against DNS rebinding); open it by the "
                                                     "address it is bound to, or add the name to the node's "
                                                     "'allowed_hosts' parameter\n")
            return await handler(request)

        return check

    def _auth_middleware(self) -> Any:
        from aiohttp import web

        @web.middleware
        async def check(request: Any, handler: Any) -> Any:
            if not request.path.startswith("/static/") and not self._authorized(request):
                self._log("warn", f"refused {request.method} {request.path} from {request.remote}: missing or wrong "
                                  "token")
                return web.Response(status=401, text="operator console: this console needs its access token; open "
                                                     "the URL with ?token=<token> (the node's 'token' parameter)\n")
            return await handler(request)

        return check

    # -- HTTP --------------------------------------------------------------------------------------------------
    async def _index(self, request: Any) -> Any:
        from aiohttp import web

        return web.FileResponse(STATIC_DIR / "index.html", headers={"Cache-Control": "no-store"})

    async def _static(self, request: Any) -> Any:
        """Only the files shipped in static/ (a fixed list: no path from a URL reaches the file system); each
        resolved, since a colcon symlink install makes every file a link into the source tree."""
        from aiohttp import web

        path = self._static_files.get(request.match_info["name"])
        if path is None:
            raise web.HTTPNotFound(text="operator console: no such file\n")
        return web.FileResponse(path)

    async def _state(self, request: Any) -> Any:
        from aiohttp import web

        return web.json_response(self.model.snapshot())

    # -- WebSocket ---------------------------------------------------------------------------------------------
    async def _websocket(self, request: Any) -> Any:
        from aiohttp import WSMsgType, web

        origin = request.headers.get("Origin")
        if origin and urlsplit(origin).netloc != request.host:
            self._log("warn", f"refused a WebSocket from origin {origin!r} (page served as {request.host})")
            return web.Response(status=403, text="operator console: cross-origin WebSocket refused\n")
        ws = web.WebSocketResponse(heartbeat=10.0, max_msg_size=16 * MAX_MESSAGE_BYTES)
        await ws.prepare(request)
        self._next_client += 1
        client = self._clients[ws] = _Client(ws, f"b{self._next_client}")
        if self._frame_ready is not None:
            self._frame_ready.set()  # the newest frame for the new browser, even from an idle camera
        sender = asyncio.get_running_loop().create_task(self._feed(client))
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self._on_text(client, msg.data)
                elif msg.type == WSMsgType.BINARY:
                    self._on_text(client, msg.data)  # refused with a reason by parse_message
                elif msg.type == WSMsgType.ERROR:
                    break
        finally:
            sender.cancel()
            self._clients.pop(ws, None)
            if self.on_drive_release is not None:
                self.on_drive_release(client.id)  # a page closed while driving releases everything at once
        return ws

    def _on_text(self, client: _Client, raw: str | bytes) -> None:
        loop = asyncio.get_running_loop()
        ws = client.ws

        def reply(op: str) -> Reply:
            def send(ok: bool, text: str) -> None:
                doc = json.dumps({"type": "result", "op": op, "ok": bool(ok), "text": str(text)[:1000]})
                loop.call_soon_threadsafe(self._send_soon, ws, doc)
            return send

        try:
            cmd = parse_message(raw, self.model.tasks)
        except BadCommandError as exc:
            self.stats["bad_messages"] += 1
            self.model.log("error", f"refused a message: {exc}")
            reply("invalid")(False, f"refused: {exc}")
            return
        if isinstance(cmd, DriveInput):
            return self._on_drive(client, cmd, reply("drive"))
        if cmd.op == "view":  # the server's own business: which camera rate this browser gets
            client.mode = cmd.mode
            if self._frame_ready is not None:
                self._frame_ready.set()  # re-encode at the new rate at once
            return reply("view")(True, f"camera at up to {1 / self._period(client.mode):.0f} frames/s")
        try:
            self.dispatch(cmd, reply(cmd.op))
        except Exception as exc:
            self.model.log("error", f"{cmd.op} failed: {type(exc).__name__}: {exc}")
            reply(cmd.op)(False, f"{cmd.op} failed: {type(exc).__name__}: {exc}")

    def _on_drive(self, client: _Client, inp: DriveInput, reply: Reply) -> None:
        self.stats["drive_inputs"] += 1
        why = "this console does not drive (no on_drive)" if self.on_drive is None else ""
        if not why:
            try:
                why = self.on_drive(client.id, inp)  # type: ignore[misc]
            except Exception as exc:
                why = f"drive input failed: {type(exc).__name__}: {exc}"
                self._log("error", why)
        if why:
            self.stats["drive_refused"] += 1
            now = time.monotonic()
            if now - client.refused_at >= DRIVE_REFUSAL_PERIOD_S:
                client.refused_at = now
                reply(False, why)

    def _period(self, mode: str) -> float:
        return self.drive_period_s if mode == "drive" else self.display_period_s

    def _send_soon(self, ws: Any, text: str) -> None:
        if not ws.closed:
            asyncio.get_running_loop().create_task(self._send(ws, text))

    @staticmethod
    async def _send(ws: Any, text: str) -> bool:
        try:
            await ws.send_str(text)
            return True
        except (ConnectionError, RuntimeError):
            return False

    async def _feed(self, client: _Client) -> None:
        """Everything to one browser: a hello with every section, then what changed every push period, and each new
        camera frame as soon as it is encoded (a watching browser at most every ``display_period_s``)."""
        ws = client.ws
        hello = {"type": "hello", "sections": {name: self.model.section(name) for name in SECTIONS},
                 "tasks": list(self.model.tasks), "camera": self.frames is not None, "client": client.id}
        if not await self._send(ws, json.dumps(hello)):
            return
        seen = {name: -1 for name in SECTIONS}
        camera_seen: dict[str, int] = {}
        next_sections = 0.0
        while not ws.closed:
            now = time.monotonic()
            if now >= next_sections:
                next_sections = now + self.push_period_s
                for name, (version, text) in list(self._sections.items()):
                    if version != seen[name] and not await self._send(ws, text):
                        return
                    seen[name] = version
            # due within half a wake-up period (a push, or a driving encoder's frame) counts as due: a watching
            # browser keeps display_rate_hz
            slack = min(self.push_period_s, self.drive_period_s) / 2
            if now - client.camera_sent_at >= self._period(client.mode) - slack:
                sent = False
                for name, (seq, text) in list(self._camera.items()):
                    if seq != camera_seen.get(name):
                        if not await self._send(ws, text):
                            return
                        camera_seen[name], sent = seq, True
                        self.stats["camera_sent"] += 1
                if sent:
                    client.camera_sent_at = now
            client.wake.clear()
            try:
                await asyncio.wait_for(client.wake.wait(), max(0.0, next_sections - time.monotonic()))
            except asyncio.TimeoutError:
                pass

    async def _tick(self) -> None:
        """Once per push period, for all browsers: stream ages and the serialised changed sections."""
        while True:
            try:
                self.model.refresh_streams()
                versions = self.model.versions()
                for name in SECTIONS:
                    if self._sections.get(name, (-1, ""))[0] != versions[name]:
                        data = self.model.section(name)
                        self._sections[name] = (versions[name], json.dumps(
                            {"type": "section", "name": name, "data": data}))
                        self.stats["pushes"] += 1
            except Exception as exc:
                self._log("error", f"console update failed: {type(exc).__name__}: {exc}")
            await asyncio.sleep(self.push_period_s)

    async def _camera_loop(self, ready: asyncio.Event) -> None:
        """Encode the newest frame once for every browser when one arrives (``ready`` set), at most once per the
        fastest period any browser wants, and wake the senders (module docstring)."""
        last = -1e9
        while True:
            await ready.wait()
            ready.clear()
            if not self._clients:  # nobody looks: nothing to encode (a browser that connects wakes this loop)
                continue
            modes = {c.mode for c in self._clients.values()}
            period = self.drive_period_s if "drive" in modes else self.display_period_s
            wait = last + period - time.monotonic()
            if wait > 0:
                await asyncio.sleep(wait)  # frames arriving meanwhile replace each other in the slot
            try:
                if self._encode_camera():
                    last = time.monotonic()
                    for client in self._clients.values():
                        client.wake.set()
            except Exception as exc:
                self._log("error", f"camera update failed: {type(exc).__name__}: {exc}")

    def _encode_camera(self) -> bool:
        """Encode each stream's newest frame not encoded yet; True if any was."""
        done = False
        for name, seq, frame in self.frames.take_newer(self._camera_seen):  # type: ignore[union-attr]
            self._camera_seen[name] = seq
            t0 = time.perf_counter()
            try:
                rgb = self.to_rgb(frame) if self.to_rgb is not None else np.asarray(frame)
                jpeg = encode_jpeg(rgb)
            except Exception as exc:
                self.model.log("warn", f"camera {name}: cannot show a frame: {type(exc).__name__}: {exc}")
                continue
            self.stats["camera_encoded"] += 1
            self.stats["camera_encode_s"] += time.perf_counter() - t0
            stamp = None
            if self.frame_stamp is not None:
                try:
                    stamp = float(self.frame_stamp(frame))
                except (TypeError, ValueError, AttributeError):
                    stamp = None
            self._camera[name] = (seq, json.dumps({"type": "camera", "name": name, "at": time.time(), "stamp": stamp,
                                                   "seq": seq, "jpeg": base64.b64encode(jpeg).decode("ascii")}))
            done = True
        return done
