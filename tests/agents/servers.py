"""Hostile HTTP servers for the egress tests: real sockets in a thread of the test process.

- "huge": 200 with a body of `size` bytes (400 MB by default), written in 64 KiB chunks for as
  long as the client reads; `sent` counts what went out.
- "drip": 200 and a declared body of 1 MB, one byte every `interval` seconds, for ever.
- "drip_headers": the status line, then one header byte every `interval` seconds.
- "redirect": 302 to `location`.
- "fail": 500 always; "split": 500 for paths under /fail, 200 `{}` for the others.
Every request is counted (`hits`), with its path.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

HUGE = 400 * 1024 * 1024


@dataclass
class HostileServer:
    server: ThreadingHTTPServer
    mode: str
    size: int = HUGE
    interval: float = 0.05
    location: str = ""
    sent: int = 0
    paths: list[str] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)
    closed: threading.Event = field(default_factory=threading.Event)

    @property
    def port(self) -> int:
        return int(self.server.server_address[1])

    def url(self, path: str = "/") -> str:
        return f"http://127.0.0.1:{self.port}{path}"

    def add_sent(self, count: int) -> None:
        with self.lock:
            self.sent += count

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def start_hostile_server(mode: str, **options: Any) -> HostileServer:
    state: HostileServer

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _answer(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            with state.lock:
                state.paths.append(self.path)
            try:
                getattr(self, f"_{state.mode}")()
            except OSError:  # the client hung up: what it is supposed to do
                state.closed.set()
            self.close_connection = True

        do_GET = do_POST = do_PUT = _answer

        def _huge(self) -> None:
            self.send_response(200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(state.size))
            self.end_headers()
            chunk = b"x" * 65536
            left = state.size
            while left > 0:
                piece = chunk[: min(left, len(chunk))]
                self.wfile.write(piece)
                state.add_sent(len(piece))
                left -= len(piece)

        def _drip(self) -> None:
            self.send_response(200)
            self.send_header("Content-Length", str(1024 * 1024))
            self.end_headers()
            self.wfile.flush()
            while True:
                time.sleep(state.interval)
                self.wfile.write(b"x")
                self.wfile.flush()
                state.add_sent(1)

        def _drip_headers(self) -> None:
            self.wfile.write(b"HTTP/1.1 200 OK\r\n")
            self.wfile.flush()
            while True:
                time.sleep(state.interval)
                self.wfile.write(b"X")
                self.wfile.flush()
                state.add_sent(1)

        def _redirect(self) -> None:
            self.send_response(302)
            self.send_header("Location", state.location)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def _fail(self) -> None:
            self.send_response(500)
            self.send_header("Content-Length", "4")
            self.end_headers()
            self.wfile.write(b"down")

        def _split(self) -> None:
            status = 500 if self.path.startswith("/fail") else 200
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def _deep(self) -> None:  # JSON nested 5,000 deep (10 kB): Python's parser recursed per level
            body = b"[" * 5000 + b"]" * 5000
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    # Small socket buffers: what the kernel holds for a client that stopped reading stays small,
    # so `sent` is close to what the client read.
    server.socket.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
    state = HostileServer(server=server, mode=mode, **options)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return state
