"""The operator console's web server: one page, one WebSocket per browser, run by aiohttp on a thread of its own.

Why a thread with its own event loop: the ROS node's executor must never wait on a browser, and a browser must never
wait on the ROS graph. ROS callbacks write the :class:`~amf_ros.console.model.ConsoleModel`; here one ticker
(``push_period_s``) refreshes the stream ages, serialises each changed section once and encodes the newest camera
frame (at ``display_rate_hz``, from a latest-only :class:`FrameSlot`: frames arriving faster are dropped, nothing
queues); every browser's sender then forwards what it has not seen. A slow browser only misses intermediate
versions. Commands from a browser are validated (:mod:`amf_ros.console.protocol`) and handed to ``dispatch``,
which must not block; its answer comes back to that browser as a ``result`` message.

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

from amf_ros.console.model import SECTIONS, ConsoleModel
from amf_ros.console.protocol import MAX_MESSAGE_BYTES, BadCommandError, Command, parse_command

STATIC_DIR = Path(__file__).with_name("static")
Reply = Callable[[bool, str], None]
Dispatch = Callable[[Command, Reply], None]


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


class FrameSlot:
    """The newest camera frame per stream, written by ROS callbacks (cheap: a reference), read by the server.

    Why latest-only: the display runs at a few Hz, the camera at up to 30; an older frame is worthless once a newer
    one exists, so ``put`` replaces and nothing ever queues or slows the writer.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._frames: dict[str, tuple[int, Any]] = {}
        self._seq = 0

    def put(self, name: str, frame: Any) -> None:
        """Keep only the newest frame of stream ``name``: an older frame is worthless once a newer one exists."""
        with self._lock:
            self._seq += 1
            self._frames[name] = (self._seq, frame)

    def take_newer(self, seen: dict[str, int]) -> list[tuple[str, int, Any]]:
        """Frames newer than ``seen`` (name -> seq), as (name, seq, frame)."""
        with self._lock:
            return [(n, s, f) for n, (s, f) in self._frames.items() if s > seen.get(n, 0)]


def encode_jpeg(rgb: np.ndarray, max_width: int = 320, quality: int = 80) -> bytes:
    """An HxWx3 uint8 RGB image as a JPEG no wider than ``max_width`` (the page shows it small)."""
    import cv2

    img = np.asarray(rgb)
    if img.ndim == 2:
        img = np.stack([img] * 3, axis=-1)
    h, w = img.shape[:2]
    if w > max_width:
        img = cv2.resize(img, (max_width, max(1, round(h * max_width / w))), interpolation=cv2.INTER_AREA)
    ok, buf = cv2.imencode(".jpg", np.ascontiguousarray(img[..., ::-1]), [cv2.IMWRITE_JPEG_QUALITY, quality])
    if not ok:
        raise ValueError("JPEG encoding failed")
    return buf.tobytes()


class ConsoleServer:
    """Serves the console page and its WebSockets (module docstring).

    Args:
        model: what the page shows.
        dispatch: called (on the server's thread) with each validated command and a thread-safe ``reply(ok, text)``;
            must return at once (start a service call, not wait for it).
        host, port: where to listen (port 0 = any free port; :attr:`port` tells which).
        token: required on every request when non-empty; must be non-empty for a non-loopback ``host``.
        frames: the camera slot (None = no camera panel); ``to_rgb`` turns a stored frame into an RGB array.
        display_rate_hz: camera frames per second sent to browsers at most.
        push_period_s: how often changed sections are pushed.
        allowed_hosts: further names (or addresses) a request's ``Host`` header may carry (:func:`accepted_hosts`).
    """

    def __init__(self, model: ConsoleModel, dispatch: Dispatch, host: str = "127.0.0.1", port: int = 8765,
                 token: str = "", frames: FrameSlot | None = None, to_rgb: Callable[[Any], np.ndarray] | None = None,
                 display_rate_hz: float = 2.0, push_period_s: float = 0.2,
                 log: Callable[[str, str], None] | None = None, allowed_hosts: Sequence[str] = ()) -> None:
        if not token and not is_loopback(host):
            raise ValueError(f"host {host!r} is reachable from other machines: set a 'token' (every browser must then "
                             "open the page with ?token=...), or bind to 127.0.0.1")
        self.model, self.dispatch = model, dispatch
        self.host, self.port, self.token = host, int(port), token
        self.hosts = accepted_hosts(host, allowed_hosts)
        self.frames, self.to_rgb = frames, to_rgb
        self.display_period_s = 1.0 / max(display_rate_hz, 1e-3)
        self.push_period_s = float(push_period_s)
        self._log = log or (lambda level, text: None)
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._runner: Any = None
        self._clients: set[Any] = set()
        self._sections: dict[str, tuple[int, str]] = {}
        self._camera: dict[str, tuple[int, str]] = {}
        self._camera_seen: dict[str, int] = {}
        self._last_camera = 0.0
        self._static_files = {str(p.relative_to(STATIC_DIR)): p.resolve() for p in sorted(STATIC_DIR.rglob("*"))
                              if p.is_file()}
        self.stats = {"camera_encoded": 0, "camera_encode_s": 0.0, "pushes": 0, "bad_messages": 0}

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
        asyncio.get_running_loop().create_task(self._tick())
        return int(site._server.sockets[0].getsockname()[1])  # port 0 -> the one the OS chose

    async def _cleanup(self) -> None:
        for task in asyncio.all_tasks():
            if task is not asyncio.current_task():
                task.cancel()
        for client in list(self._clients):
            await client.close(code=1001, message=b"console shutting down")
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
        self._clients.add(ws)
        sender = asyncio.get_running_loop().create_task(self._feed(ws))
        try:
            async for msg in ws:
                if msg.type == WSMsgType.TEXT:
                    self._on_text(ws, msg.data)
                elif msg.type == WSMsgType.BINARY:
                    self._on_text(ws, msg.data)  # refused with a reason by parse_command
                elif msg.type == WSMsgType.ERROR:
                    break
        finally:
            sender.cancel()
            self._clients.discard(ws)
        return ws

    def _on_text(self, ws: Any, raw: str | bytes) -> None:
        loop = asyncio.get_running_loop()

        def reply(op: str) -> Reply:
            def send(ok: bool, text: str) -> None:
                doc = json.dumps({"type": "result", "op": op, "ok": bool(ok), "text": str(text)[:1000]})
                loop.call_soon_threadsafe(self._send_soon, ws, doc)
            return send

        try:
            cmd = parse_command(raw, self.model.tasks)
        except BadCommandError as exc:
            self.stats["bad_messages"] += 1
            self.model.log("error", f"refused a message: {exc}")
            reply("invalid")(False, f"refused: {exc}")
            return
        try:
            self.dispatch(cmd, reply(cmd.op))
        except Exception as exc:
            self.model.log("error", f"{cmd.op} failed: {type(exc).__name__}: {exc}")
            reply(cmd.op)(False, f"{cmd.op} failed: {type(exc).__name__}: {exc}")

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

    async def _feed(self, ws: Any) -> None:
        """Everything to one browser: a hello with every section, then what changed, every push period."""
        hello = {"type": "hello", "sections": {name: self.model.section(name) for name in SECTIONS},
                 "tasks": list(self.model.tasks), "camera": self.frames is not None}
        if not await self._send(ws, json.dumps(hello)):
            return
        seen = {name: -1 for name in SECTIONS}
        camera_seen: dict[str, int] = {}
        while not ws.closed:
            for name, (version, text) in list(self._sections.items()):
                if version != seen[name] and not await self._send(ws, text):
                    return
                seen[name] = version
            for name, (seq, text) in list(self._camera.items()):
                if seq != camera_seen.get(name) and not await self._send(ws, text):
                    return
                camera_seen[name] = seq
            await asyncio.sleep(self.push_period_s)

    async def _tick(self) -> None:
        """Once per push period, for all browsers: stream ages, serialised sections, the camera frame."""
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
                now = time.monotonic()
                # due within half a tick counts as due: checked every push period, frames keep display_rate_hz
                due = self.display_period_s - self.push_period_s / 2
                if self.frames is not None and now - self._last_camera >= due:
                    self._last_camera = now
                    self._encode_camera()
            except Exception as exc:
                self._log("error", f"console update failed: {type(exc).__name__}: {exc}")
            await asyncio.sleep(self.push_period_s)

    def _encode_camera(self) -> None:
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
            self._camera[name] = (seq, json.dumps({"type": "camera", "name": name, "at": time.time(),
                                                   "jpeg": base64.b64encode(jpeg).decode("ascii")}))
