"""The front door holds (issue 26): docker/compose.yml's nginx (docker/nginx/nginx.conf, the same
file, run by Debian's nginx) in front of a real gunicorn - the Procfile's web command, i.e.
sasproject/gunicorn.conf.py serving sasproject.wsgi on this session's database.

50 slow clients, each sending a header line every second, hold every thread of a bare gunicorn
(its `/healthz` answers none of 3 probes), while through nginx `/healthz` answers all 3 and the
slow requests never reach gunicorn; nginx cuts them off at its header deadline. A client beyond
its connection cap gets 503 (another client does not), a body above the size limit 413, a header
line above the limit 400 - none of them reaching gunicorn. The client's address gunicorn gets is
the one nginx decided (the last X-Forwarded-For hop of a trusted proxy), never one the client
wrote."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import shutil
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from sastools.front_door import SLOW_CLIENTS, SlowClients, render_config
from sastools.harness import Proc, procfile_process, wait_for

NGINX = shutil.which("nginx") or "/usr/sbin/nginx"
# The config's per-client connection cap (limit_conn per_client).
CONNECTION_CAP = 32
# gunicorn's access log line: the path, then the X-Forwarded-For it received (GUNICORN_CMD_ARGS).
ACCESS_FORMAT = "%(U)s xff=[%({x-forwarded-for}i)s] status=%(s)s"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Front:
    nginx: str
    gunicorn: str
    web: Proc
    proxy: Proc

    def gunicorn_saw(self, marker: str) -> list[str]:
        return [line for line in self.web.log().splitlines() if marker in line]


def _get(
    base: str, path: str, *, timeout: float, headers: dict[str, str] | None = None
) -> tuple[int, str, str]:
    """One GET: its status, Server header and body."""
    host, port = base.removeprefix("http://").split(":")
    conn = http.client.HTTPConnection(host, int(port), timeout=timeout)
    try:
        conn.request("GET", path, headers=headers or {})
        response = conn.getresponse()
        return response.status, response.headers.get("Server", ""), response.read().decode(errors="replace")
    finally:
        conn.close()


def _answers(base: str, path: str = "/healthz") -> bool:
    try:
        return _get(base, path, timeout=5)[0] == 200
    except OSError:
        return False


@pytest.fixture(scope="module")
def front(worker_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Front]:
    if not Path(NGINX).exists():
        pytest.fail(f"{NGINX} is missing: apt-get install nginx-light (make test does)")
    log_dir = tmp_path_factory.mktemp("front-door")
    web_port, proxy_port = _free_port(), _free_port()
    # One process of 8 threads: the bare-gunicorn measurement is then exact (every connection
    # goes to the one process); through nginx that is the harder case. The production profile's
    # DEBUG off.
    env = {
        **worker_env,
        "DJANGO_DEBUG": "0",
        "WEB_PORT": str(web_port),
        "WEB_WORKERS": "1",
        "WEB_THREADS": "8",
        "GUNICORN_CMD_ARGS": f"--access-logformat '{ACCESS_FORMAT}'",
    }
    web = procfile_process("web", log_dir=log_dir, env=env).start(ready_marker="Booting worker")
    gunicorn = f"http://127.0.0.1:{web_port}"
    runtime = log_dir / "nginx"
    runtime.mkdir()
    conf = runtime / "nginx.conf"
    conf.write_text(render_config(upstream=f"127.0.0.1:{web_port}", port=proxy_port, runtime=runtime))
    # Foreground, its own prefix and pid file; as root its workers run as root too (they write
    # the temp files under the test's private folder, which nginx's default `nobody` cannot).
    globals_ = f"daemon off; pid {runtime / 'nginx.pid'};" + (" user root;" if os.geteuid() == 0 else "")
    proxy = Proc(
        name="nginx",
        args=[NGINX, "-p", str(runtime), "-c", str(conf), "-g", globals_],
        log_path=log_dir / "nginx.log",
        env={"PATH": os.environ.get("PATH", "")},
    ).start(ready_marker=None)
    nginx = f"http://127.0.0.1:{proxy_port}"
    try:
        wait_for(lambda: _answers(gunicorn), timeout=60, interval=0.2, what="gunicorn to answer")

        def nginx_up() -> bool:
            assert proxy.alive(), proxy.log()[-3000:]
            return _answers(nginx)

        wait_for(nginx_up, timeout=30, interval=0.2, what="nginx to answer")
        yield Front(nginx=nginx, gunicorn=gunicorn, web=web, proxy=proxy)
    finally:
        proxy.stop()
        web.stop()


def _probes(base: str, *, timeout: float) -> int:
    answered = 0
    for _ in range(3):
        with contextlib.suppress(OSError):
            answered += _get(base, "/healthz", timeout=timeout)[0] == 200
    return answered


def test_slow_clients__bare_gunicorn_held__through_nginx_healthz_answers(front: Front) -> None:
    # The attack itself, on gunicorn as compose published it before: no probe answered.
    with SlowClients(address=_address(front.gunicorn), path="/slow-bare") as bare:
        wait_for(lambda: bare.thread is not None and bare.thread.is_alive(), timeout=5, what="the trickle")
        bare_answered = _probes(front.gunicorn, timeout=5)
        bare_open = bare.open
    # Closed, they free its threads again.
    wait_for(lambda: _answers(front.gunicorn), timeout=60, interval=0.5, what="gunicorn to recover")

    with SlowClients(address=_address(front.nginx), path="/slow-nginx") as slow:
        open_at_probe = slow.open
        nginx_answered = _probes(front.nginx, timeout=20)
        # nginx's header deadline (client_header_timeout) ends them, trickle or not.
        wait_for(lambda: slow.open == 0, timeout=90, interval=0.5, what="nginx to cut off the slow clients")

    assert (bare_open, bare_answered) == (SLOW_CLIENTS, 0)
    assert (open_at_probe, nginx_answered) == (SLOW_CLIENTS, 3)
    assert front.gunicorn_saw("/slow-nginx") == []


def _address(base: str) -> tuple[str, int]:
    host, port = base.removeprefix("http://").split(":")
    return host, int(port)


def _hold(front: Front, n: int) -> list[socket.socket]:
    """`n` requests that nginx has read the headers of and waits for the body of: each counts
    towards the client's connection cap until its body deadline."""
    held = []
    for _ in range(n):
        sock = socket.create_connection(_address(front.nginx), timeout=5)
        sock.sendall(
            b"POST /held/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 100\r\n\r\n"
        )
        held.append(sock)
    return held


def _refused(base: str) -> tuple[int, str, str] | None:
    answer = _get(base, "/healthz", timeout=10)
    return answer if answer[0] == 503 else None


def test_connection_cap__per_client__beyond_it_503(front: Front) -> None:
    held = _hold(front, CONNECTION_CAP)
    last_byte = [time.monotonic()]

    def refused_while_held() -> tuple[int, str, str] | None:
        # A byte of each body every 2 s: nginx's client_body_timeout (10 s between two reads)
        # would otherwise drop the first held requests on a loaded machine before the last was
        # sent, and the client would never be at its cap (make test, once).
        if time.monotonic() - last_byte[0] > 2:
            for sock in held:
                sock.sendall(b" ")
            last_byte[0] = time.monotonic()
        return _refused(front.nginx)

    try:
        # Once nginx has read all their headers, this client's next request is refused...
        refused = wait_for(refused_while_held, timeout=8, interval=0.1, what="a request past the cap refused")
        # ...while another client (a trusted proxy's hop naming another address) is served.
        other = _get(front.nginx, "/healthz", timeout=10, headers={"X-Forwarded-For": "203.0.113.7"})
    finally:
        for sock in held:
            sock.close()

    assert refused[1] == "nginx" and "503" in refused[2]
    assert other[0] == 200
    assert front.gunicorn_saw("/held/") == []
    wait_for(lambda: _answers(front.nginx), timeout=30, interval=0.2, what="the cap to free again")


def test_body_above_the_limit__413__never_reaches_gunicorn(front: Front) -> None:
    with socket.create_connection(_address(front.nginx), timeout=10) as sock:
        sock.sendall(
            b"POST /api/orders/too-big/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 2000000\r\n\r\n" + b"x" * 65536
        )
        head = sock.recv(4096).decode(errors="replace")

    assert head.startswith("HTTP/1.1 413 ")
    assert front.gunicorn_saw("/too-big/") == []


def test_header_line_above_the_limit__400__never_reaches_gunicorn(front: Front) -> None:
    status, server, body = _get(front.nginx, "/huge-header/", timeout=10, headers={"X-Big": "a" * 9000})

    assert (status, server) == (400, "nginx") and "Request Header Or Cookie Too Large" in body
    assert front.gunicorn_saw("/huge-header/") == []


def test_client_address__the_trusted_hop_not_the_clients_own_words(front: Front) -> None:
    # The TLS proxy (here: this loopback client, trusted like Docker's bridge) appended the last
    # hop; the first one is what the client wrote itself.
    _get(front.nginx, "/whoami-spoofed/", timeout=10, headers={"X-Forwarded-For": "6.6.6.6, 198.51.100.4"})
    _get(front.nginx, "/whoami-direct/", timeout=10)

    (spoofed_line,) = front.gunicorn_saw("/whoami-spoofed/")
    (direct_line,) = front.gunicorn_saw("/whoami-direct/")
    assert re.search(r"xff=\[198\.51\.100\.4\]", spoofed_line), spoofed_line
    assert re.search(r"xff=\[127\.0\.0\.1\]", direct_line), direct_line


def test_gunicorn_itself__more_than_50_header_lines__431(front: Front) -> None:
    fifty = {f"X-Field-{n}": "x" for n in range(46)}  # + Host, Accept-Encoding, ... from http.client
    many = {f"X-Field-{n}": "x" for n in range(60)}

    assert _get(front.gunicorn, "/healthz", timeout=10, headers=fifty)[0] == 200
    assert _get(front.gunicorn, "/healthz", timeout=10, headers=many)[0] == 431
