"""Slow clients against the web, bare and behind the front door (issue 26).

    python bench/slow_clients.py [--sockets 17 50] [--every 1.0]

Starts the web as compose runs it (sasproject/gunicorn.conf.py: 2 processes x 8 threads, DEBUG
off) on the bench database, and Debian's nginx with docker/nginx/nginx.conf in front of it (the
test's rendering, tests/deploy/test_front_door.py). For each number of sockets, against gunicorn
directly and through nginx: the sockets each send a request line, then a header line every
--every seconds, never ending their headers; meanwhile 3 `/healthz` probes (5 s each) are sent
one after the other. Prints the probes answered and their latency.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.common import REPO, _free_port, bench_environment, fmt_ms, log_dir, print_table
from sastools.front_door import SlowClients, render_config


def _answers(base: str, timeout: float) -> float | None:
    started = time.perf_counter()
    try:
        with urllib.request.urlopen(f"{base}/healthz", timeout=timeout) as response:
            return time.perf_counter() - started if response.status == 200 else None
    except OSError:
        return None


def _wait(base: str, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + 60
    while _answers(base, 2) is None:
        if time.monotonic() > deadline or proc.poll() is not None:
            raise RuntimeError(f"{base} did not answer:\n{log.read_text()[-3000:]}")
        time.sleep(0.2)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--sockets", type=int, nargs="+", default=[17, 50])
    parser.add_argument("--every", type=float, default=1.0)
    args = parser.parse_args()
    nginx_bin = shutil.which("nginx") or "/usr/sbin/nginx"
    env = {**bench_environment(), "WEB_WORKERS": "2", "WEB_THREADS": "8"}
    logs = log_dir()
    web_port, proxy_port = _free_port(), _free_port()
    web_log, nginx_log = logs / "web.log", logs / "nginx.log"
    runtime = logs / "nginx"
    runtime.mkdir()
    conf = runtime / "nginx.conf"
    conf.write_text(render_config(upstream=f"127.0.0.1:{web_port}", port=proxy_port, runtime=runtime))
    globals_ = f"daemon off; pid {runtime / 'nginx.pid'};" + (" user root;" if os.geteuid() == 0 else "")
    with web_log.open("wb") as out:
        web = subprocess.Popen(
            [sys.executable, "-m", "gunicorn", "-c", "sasproject/gunicorn.conf.py", "--bind",
             f"127.0.0.1:{web_port}", "--access-logfile", "/dev/null", "sasproject.wsgi"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    with nginx_log.open("wb") as out:
        nginx_args = [nginx_bin, "-p", str(runtime), "-c", str(conf), "-g", globals_]
        nginx = subprocess.Popen(nginx_args, stdout=out, stderr=subprocess.STDOUT)
    targets = {"gunicorn": f"http://127.0.0.1:{web_port}", "nginx": f"http://127.0.0.1:{proxy_port}"}
    try:
        _wait(targets["gunicorn"], web, web_log)
        _wait(targets["nginx"], nginx, nginx_log)
        rows: list[tuple[str, str]] = []
        for count in args.sockets:
            for name, base in targets.items():
                host, port = base.removeprefix("http://").split(":")
                address = (host, int(port))
                with SlowClients(address=address, path="/slow", count=count, every=args.every) as slow:
                    open_before = slow.open
                    probes = [_answers(base, 5) for _ in range(3)]
                answered = [p for p in probes if p is not None]
                latency = ", ".join(fmt_ms(p) for p in answered) or "-"
                got = f"{len(answered)} of 3 answered ({latency}); {open_before} sockets open"
                rows.append((f"{count} slow sockets -> {name}", got))
                # The threads free again once the sockets are closed.
                _wait(targets["gunicorn"], web, web_log)
        print(f"slow clients (a header line every {args.every} s), /healthz probes of 5 s:")
        print_table(rows)
    finally:
        for proc in (nginx, web):
            proc.terminate()
            proc.wait(timeout=30)


if __name__ == "__main__":
    main()
