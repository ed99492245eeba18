"""A TCP fault proxy (issue 22): forwards one listening address to one upstream, and on demand
adds latency, resets connections or blackholes them. Standard library only (asyncio, in a
background thread), so a test, the soak or a shell can run it anywhere.

In a program::

    from chaos.faultproxy import FaultProxy
    p = FaultProxy(upstream=("127.0.0.1", 5432), listen=("127.0.0.1", 0)).start()
    p.port                                   # the bound listen port
    p.set(latency_ms=200, jitter_ms=50)      # live and new connections
    p.set(reset=True)                        # every connection RST now, new ones RST on accept
    p.set(blackhole=True)                    # nothing moves either way until it is lifted
    p.set()                                  # every fault off (the defaults)
    p.reset_all()                            # RST every open connection now (one shot)
    p.stats()                                # {"opened", "closed", "reset", "active", ...}
    p.stop()

From a shell (a control endpoint on 127.0.0.1 lets another process set the faults)::

    python -m chaos.faultproxy --listen 127.0.0.1:6390 --upstream 127.0.0.1:6379 --control 127.0.0.1:0
    # prints: FAULTPROXY_LISTENING listen=127.0.0.1:6390 upstream=127.0.0.1:6379 control=http://127.0.0.1:NNNN
    curl -X POST -d '{"latency_ms": 100}' http://127.0.0.1:NNNN/set
    curl -X POST http://127.0.0.1:NNNN/reset_all ;  curl http://127.0.0.1:NNNN/stats
    # or, in Python: FaultProxyControl("http://127.0.0.1:NNNN").set(blackhole=True)

What each fault does, and what it is like on a real network:

- `latency_ms` / `jitter_ms`: every chunk read from either side is written to the other side
  `latency_ms` plus a uniform random `0..jitter_ms` later, in order (a chunk never overtakes the
  one before it). It applies in EACH direction, so a request/answer round trip takes twice the
  latency more.
- `reset=True`: every open connection is reset now (RST to both the client and the upstream,
  SO_LINGER 0), and every new connection is reset as soon as it is accepted, until it is set back
  to False. The client sees ECONNRESET, as when a middlebox or the server's host drops its state.
- `blackhole=True`: no byte moves either way, on live and new connections (a new connection is
  accepted but not connected upstream), until it is lifted; nothing is lost: bytes wait in the
  socket buffers and flow again after, as TCP's retransmissions would deliver them once a
  partition heals. Clients see timeouts, never an error.
- `reset_all()`: a one-shot reset of the connections open now; new ones are unaffected.

Counts in `stats()`: `opened` (accepted), `closed` (ended by either side or by `stop`), `reset`
(ended by a reset fault; counted in `closed` too), `active`, `upstream_failures` (the upstream
refused or did not answer: the client is closed), `bytes_up` (client to upstream), `bytes_down`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import signal
import socket
import struct
import sys
import threading
import time
import urllib.request
from collections.abc import Coroutine
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

READY_MARKER = "FAULTPROXY_LISTENING"
CHUNK = 64 * 1024
UPSTREAM_CONNECT_TIMEOUT = 10.0


@dataclass(frozen=True)
class Faults:
    latency_ms: float = 0.0
    jitter_ms: float = 0.0
    reset: bool = False
    blackhole: bool = False

    @classmethod
    def checked(cls, *, latency_ms: float, jitter_ms: float, reset: bool, blackhole: bool) -> Faults:
        """Bad values are refused (ValueError) before anything changes."""
        for name, value in (("latency_ms", latency_ms), ("jitter_ms", jitter_ms)):
            if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 600_000:
                raise ValueError(f"{name} must be a number of milliseconds in [0, 600000], not {value!r}")
        for name, flag in (("reset", reset), ("blackhole", blackhole)):
            if not isinstance(flag, bool):
                raise ValueError(f"{name} must be true or false, not {flag!r}")
        return cls(float(latency_ms), float(jitter_ms), reset, blackhole)


def _rst(writer: asyncio.StreamWriter) -> None:
    """Close with a TCP RST instead of a FIN: SO_LINGER on, timeout 0, then abort."""
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _socket_open(writer: asyncio.StreamWriter) -> bool:
    sock = writer.get_extra_info("socket")
    return sock is not None and sock.fileno() != -1


class _Connection:
    """One client and its upstream: two pumps, one per direction."""

    def __init__(self, proxy: FaultProxy, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter):
        self.proxy = proxy
        self.client_r, self.client_w = client_r, client_w
        self.up_w: asyncio.StreamWriter | None = None
        self.tasks: list[asyncio.Task[None]] = []
        self.ended = False

    async def run(self) -> None:
        proxy = self.proxy
        try:
            if proxy.faults.reset:
                self.reset()
                return
            await proxy._passable()
            if self.ended:
                return
            try:
                up_r, up_w = await asyncio.wait_for(
                    asyncio.open_connection(*proxy.upstream), UPSTREAM_CONNECT_TIMEOUT
                )
            except (OSError, TimeoutError):
                proxy._count("upstream_failures")
                self.close()
                return
            self.up_w = up_w
            proxy._writers.add(up_w)
            if self.ended:  # reset (or stopped) while connecting
                _rst(up_w)
                return
            self.tasks = [
                asyncio.create_task(self._pump(self.client_r, up_w, "bytes_up")),
                asyncio.create_task(self._pump(up_r, self.client_w, "bytes_down")),
            ]
            await asyncio.gather(*self.tasks, return_exceptions=True)
            self.close()
        finally:
            self.close()

    async def _pump(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, counter: str) -> None:
        """Read, hold for the latency, write - in order. The reader side and the writer side are
        two loops joined by a queue, so a slow upstream does not stop the clock of the latency."""
        proxy = self.proxy
        queue: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue(maxsize=256)  # back-pressure

        async def read() -> None:
            last = 0.0
            while True:
                await proxy._passable()
                try:
                    data = await reader.read(CHUNK)
                except OSError:
                    data = b""
                faults = proxy.faults
                delay = (faults.latency_ms + random.uniform(0, faults.jitter_ms)) / 1000.0
                last = max(last, time.monotonic() + delay)
                await queue.put((last, data))
                if not data:
                    return

        reading = asyncio.create_task(read())
        try:
            while True:
                due, data = await queue.get()
                wait = due - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await proxy._passable()
                if not data:  # EOF from this side: pass the half-close on
                    with contextlib.suppress(OSError, RuntimeError):
                        if writer.can_write_eof():
                            writer.write_eof()
                    return
                writer.write(data)
                proxy._count(counter, len(data))
                try:
                    await writer.drain()
                except OSError:
                    return
        finally:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await reading

    def _end(self) -> bool:
        if self.ended:
            return False
        self.ended = True
        self.proxy._connections.discard(self)
        self.proxy._count("closed")
        self.proxy._count("active", -1)
        for task in self.tasks:
            task.cancel()
        return True

    def reset(self) -> None:
        if self._end():
            self.proxy._count("reset")
            _rst(self.client_w)
            if self.up_w is not None:
                _rst(self.up_w)

    def close(self) -> None:
        if self._end():
            for writer in (self.client_w, self.up_w):
                if writer is not None:
                    writer.close()


class FaultProxy:
    """See the module docstring. Thread-safe: `set`, `reset_all`, `stats` and `stop` may be
    called from any thread; the proxy runs its own event loop in a daemon thread."""

    def __init__(self, *, upstream: tuple[str, int], listen: tuple[str, int] = ("127.0.0.1", 0)) -> None:
        self.upstream = (upstream[0], int(upstream[1]))
        self.listen = (listen[0], int(listen[1]))
        self.faults = Faults()
        self.port = 0
        self._counts = dict.fromkeys(
            ("opened", "closed", "reset", "active", "upstream_failures", "bytes_up", "bytes_down"), 0
        )
        self._lock = threading.Lock()
        self._connections: set[_Connection] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._open: asyncio.Event | None = None  # set while not blackholed
        # Every stream either side opened (client and upstream) whose socket may still be open:
        # closed for sure when the loop ends. Strong references: a writer the proxy no longer
        # holds can still own an open socket (a close waiting to flush to a peer that stopped
        # reading). Pruned of closed ones as connections come.
        self._writers: set[asyncio.StreamWriter] = set()
        self._stopping = False

    # -- the public interface --------------------------------------------------------------
    def start(self) -> FaultProxy:
        if self._thread is not None:
            raise RuntimeError("this FaultProxy is already started")
        ready: Future[None] = Future()
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._serve, args=(ready,), name=f"faultproxy-{self.upstream[1]}", daemon=True
        )
        self._thread.start()
        ready.result(timeout=10)  # raises what binding raised (address in use...)
        return self

    def set(
        self, latency_ms: float = 0, jitter_ms: float = 0, reset: bool = False, blackhole: bool = False
    ) -> None:
        """Replace the faults (what is not named goes back to its default: off)."""
        faults = Faults.checked(latency_ms=latency_ms, jitter_ms=jitter_ms, reset=reset, blackhole=blackhole)
        self._call(self._apply(faults))

    def reset_all(self) -> int:
        """RST every connection open now; returns how many."""
        return int(self._call(self._reset_open()))

    def stats(self) -> dict[str, Any]:
        with self._lock:
            counts: dict[str, Any] = dict(self._counts)
        counts["faults"] = asdict(self.faults)
        counts["listen"] = f"{self.listen[0]}:{self.port}"
        counts["upstream"] = f"{self.upstream[0]}:{self.upstream[1]}"
        return counts

    def stop(self) -> None:
        """Stop listening and close every connection (FIN, not RST). Idempotent."""
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            return
        self._call(self._shutdown())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    def __enter__(self) -> FaultProxy:
        return self.start() if self._thread is None else self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- inside the loop -----------------------------------------------------------------------
    def _serve(self, ready: Future[None]) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)
        try:
            self._open = asyncio.Event()
            self._open.set()
            self._server = loop.run_until_complete(
                asyncio.start_server(self._accept, self.listen[0], self.listen[1], backlog=512)
            )
            self.port = int(self._server.sockets[0].getsockname()[1])
        except BaseException as exc:
            ready.set_exception(exc)
            loop.close()
            return
        ready.set_result(None)
        try:
            loop.run_forever()
        finally:
            self._close_everything(loop)
            loop.run_until_complete(loop.shutdown_asyncgens())
            loop.close()

    def _close_everything(self, loop: asyncio.AbstractEventLoop) -> None:
        """As the loop ends: every task cancelled and awaited, every socket closed at once (a
        writer's close() waits to flush first, which a peer that stopped reading never lets it
        do): none is left for the garbage collector to find open."""
        # First a moment for what is under way to finish: connections accepted as the server
        # closed are still being set up (a task each, which `_accept` then ends at once).
        loop.run_until_complete(asyncio.sleep(0.05))
        tasks = asyncio.all_tasks(loop)
        for task in tasks:
            task.cancel()
        if tasks:
            loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        for writer in list(self._writers):
            writer.transport.abort()
        loop.run_until_complete(asyncio.sleep(0))  # the aborted transports' connection_lost

    def _call(self, coro: Coroutine[Any, Any, Any]) -> Any:
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            coro.close()
            raise RuntimeError("the FaultProxy is not running (call start() first)")
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(timeout=30)

    def _count(self, name: str, n: int = 1) -> None:
        with self._lock:
            self._counts[name] += n

    async def _passable(self) -> None:
        assert self._open is not None
        await self._open.wait()

    def _accept(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> Coroutine[Any, Any, None] | None:
        """A client connected (asyncio calls this as the connection is made). The writer is
        recorded here, not in the coroutine that serves the connection: a connection made as
        the proxy stops may have that coroutine cancelled before it starts, and its socket
        would be left open for the garbage collector (a ResourceWarning in whatever runs then)."""
        self._writers = {w for w in self._writers if _socket_open(w)}
        self._writers.add(writer)
        if self._stopping:  # accepted as the server closed
            writer.transport.abort()
            return None
        with contextlib.suppress(OSError):
            writer.get_extra_info("socket").setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn = _Connection(self, reader, writer)
        self._connections.add(conn)
        self._count("opened")
        self._count("active")
        return conn.run()

    async def _apply(self, faults: Faults) -> None:
        assert self._open is not None
        self.faults = faults
        if faults.blackhole:
            self._open.clear()
        else:
            self._open.set()
        if faults.reset:
            await self._reset_open()

    async def _reset_open(self) -> int:
        victims = list(self._connections)
        for conn in victims:
            conn.reset()
        return len(victims)

    async def _shutdown(self) -> None:
        assert self._server is not None and self._open is not None
        self._stopping = True
        self._server.close()
        self._open.set()  # blackholed pumps wake up and see their connection ended
        for conn in list(self._connections):
            conn.close()
        await asyncio.sleep(0)


class FaultProxyControl:
    """The client of the CLI's control endpoint, for a process that did not start the proxy."""

    def __init__(self, url: str, *, timeout: float = 10.0) -> None:
        if not url.startswith("http://"):
            raise ValueError(f"the control endpoint is an http:// URL, not {url!r}")
        self.url, self.timeout = url.rstrip("/"), timeout

    def _request(self, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        data = None if body is None else json.dumps(body).encode()
        method = "GET" if body is None else "POST"
        request = urllib.request.Request(self.url + path, data=data, method=method)  # noqa: S310 (http:// checked)
        with urllib.request.urlopen(request, timeout=self.timeout) as answer:  # noqa: S310
            return dict(json.loads(answer.read()))

    def set(
        self, latency_ms: float = 0, jitter_ms: float = 0, reset: bool = False, blackhole: bool = False
    ) -> dict[str, Any]:
        faults = {"latency_ms": latency_ms, "jitter_ms": jitter_ms, "reset": reset, "blackhole": blackhole}
        return self._request("/set", faults)

    def reset_all(self) -> int:
        return int(self._request("/reset_all", {})["reset"])

    def stats(self) -> dict[str, Any]:
        return self._request("/stats")


def _control_server(proxy: FaultProxy, address: tuple[str, int]) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, status: int, body: dict[str, Any]) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self) -> None:
            if self.path == "/stats":
                self._answer(200, proxy.stats())
            else:
                self._answer(404, {"error": "not_found", "detail": "GET /stats, POST /set, POST /reset_all"})

        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b"{}"
            try:
                body = json.loads(raw or b"{}")
                if not isinstance(body, dict):
                    raise ValueError("the body must be a JSON object")
            except ValueError as exc:
                self._answer(400, {"error": "bad_request", "detail": str(exc)})
                return
            if self.path == "/set":
                unknown = set(body) - {"latency_ms", "jitter_ms", "reset", "blackhole"}
                if unknown:
                    self._answer(400, {"error": "bad_request", "detail": f"unknown fields {sorted(unknown)}"})
                    return
                try:
                    proxy.set(**body)
                except ValueError as exc:
                    self._answer(400, {"error": "bad_request", "detail": str(exc)})
                    return
                self._answer(200, proxy.stats())
            elif self.path == "/reset_all":
                self._answer(200, {"reset": proxy.reset_all()})
            else:
                self._answer(404, {"error": "not_found", "detail": "GET /stats, POST /set, POST /reset_all"})

        def log_message(self, format: str, *args: Any) -> None:  # quiet: the soak logs faults itself
            pass

    server = ThreadingHTTPServer(address, Handler)
    server.daemon_threads = True
    return server


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise argparse.ArgumentTypeError(f"expected HOST:PORT, got {text!r}")
    return host.strip("[]"), int(port)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m chaos.faultproxy", description=__doc__.split("\n")[0])
    parser.add_argument("--listen", type=_address, required=True, help="HOST:PORT to accept on (port 0: any)")
    parser.add_argument("--upstream", type=_address, required=True, help="HOST:PORT to forward to")
    parser.add_argument(
        "--control",
        type=_address,
        default=("127.0.0.1", 0),
        help="HOST:PORT of the HTTP control endpoint (default 127.0.0.1:0, any free port)",
    )
    args = parser.parse_args(argv)
    try:
        proxy = FaultProxy(upstream=args.upstream, listen=args.listen).start()
        control = _control_server(proxy, args.control)
    except OSError as exc:
        print(f"faultproxy: cannot listen: {exc}", file=sys.stderr)
        return 1
    threading.Thread(target=control.serve_forever, daemon=True).start()
    stopping = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stopping.set())
    host, port = control.server_address[:2]
    print(
        f"{READY_MARKER} listen={args.listen[0]}:{proxy.port} upstream={args.upstream[0]}:{args.upstream[1]}"
        f" control=http://{host!s}:{port}",
        flush=True,
    )
    stopping.wait()
    control.shutdown()
    proxy.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
