"""The nginx front door's helpers (tests/deploy/test_front_door.py and bench/slow_clients.py):
docker/nginx/nginx.conf rendered for a local run, and slow clients (slowloris)."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path

from .harness import REPO

CONFIG = REPO / "docker" / "nginx" / "nginx.conf"
SLOW_CLIENTS = 50
TEMP_PATHS = ("client_body", "proxy", "fastcgi", "uwsgi", "scgi")


def render_config(*, upstream: str, port: int, runtime: Path) -> str:
    """docker/nginx/nginx.conf with the upstream and the listening port of this test, and its
    temp files under `runtime`: the only lines changed, each found exactly once."""
    text = CONFIG.read_text()
    swaps = {
        "        server web:8000;\n": f"        server {upstream};\n",
        "        listen 8080;\n": f"        listen 127.0.0.1:{port};\n",
        "http {\n": "http {\n" + "".join(f"    {kind}_temp_path {runtime / kind};\n" for kind in TEMP_PATHS),
    }
    for old, new in swaps.items():
        assert text.count(old) == 1, f"{CONFIG.name} no longer has exactly one {old!r}"
        text = text.replace(old, new)
    return text


@dataclass
class SlowClients:
    """`count` connections that each send a request line, then a header line every `every`
    seconds, never the blank line that ends the headers (slowloris). A thread keeps them going;
    `open` counts the ones the server has not closed."""

    address: tuple[str, int]
    path: str
    count: int = SLOW_CLIENTS
    every: float = 1.0
    sockets: list[socket.socket] = field(default_factory=list)
    closed: set[int] = field(default_factory=set)
    stop: threading.Event = field(default_factory=threading.Event)
    thread: threading.Thread | None = None

    def __enter__(self) -> SlowClients:
        for n in range(self.count):
            sock = socket.create_connection(self.address, timeout=5)
            sock.sendall(f"GET {self.path}-{n} HTTP/1.1\r\nHost: 127.0.0.1\r\n".encode())
            self.sockets.append(sock)
        self.thread = threading.Thread(target=self._trickle, name="slow-clients", daemon=True)
        self.thread.start()
        return self

    def _trickle(self) -> None:
        line = 0
        while not self.stop.wait(self.every):
            line += 1
            for n, sock in enumerate(self.sockets):
                if n in self.closed:
                    continue
                try:
                    sock.sendall(f"X-Slow-{line}: {'a' * 10}\r\n".encode())
                except OSError:
                    self.closed.add(n)
                    continue
                if self._closed_by_server(sock):
                    self.closed.add(n)

    @staticmethod
    def _closed_by_server(sock: socket.socket) -> bool:
        """The server answered (nginx's 408) or closed: anything readable ends a slow client."""
        sock.setblocking(False)
        try:
            sock.recv(4096)  # an answer, or b"" for a close
            return True
        except BlockingIOError:
            return False
        except OSError:
            return True
        finally:
            sock.setblocking(True)

    @property
    def open(self) -> int:
        return self.count - len(self.closed)

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join(timeout=30)
        for sock in self.sockets:
            sock.close()
