"""HTTP front end of the simulator: a threaded HTTP/1.1 keep-alive server on the standard library."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import FrameType
from typing import Any

from simulator.faults import SERVICES, FaultBoard, FaultValidationError, ServiceFaults
from simulator.services import (
    MAX_KEY_LENGTH,
    ROUTES,
    BadRequest,
    Operation,
    Result,
    Services,
    bad_request,
    parse_body,
)
from simulator.state import SimulatorState

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8055
MAX_BODY_BYTES = 1024 * 1024
LISTENING_PREFIX = "SIMULATOR_LISTENING"

_LEDGER_FILTERS = ("service", "operation", "key")
ECHO_PATH = "/echo"
ECHO_MAX_DELAY_MS = 60_000


def _encode(body: object) -> bytes:
    return json.dumps(body, separators=(",", ":")).encode()


class SimulatorHandler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "sasproject-simulator/1.0"
    sys_version = ""
    # Headers and body leave in one write (buffered wfile, flushed per response) and Nagle is off:
    # no 40 ms delayed-ACK stalls on keep-alive connections.
    wbufsize = -1
    disable_nagle_algorithm = True
    # An idle keep-alive connection is closed after this many seconds.
    timeout = 120

    server: SimulatorServer

    # -- plumbing ------------------------------------------------------------------------------------

    def version_string(self) -> str:
        return self.server_version

    def log_message(self, format: str, *args: Any) -> None:
        if self.server.verbose:
            super().log_message(format, *args)

    def _send_json(self, status: int, body: object, headers: dict[str, str] | None = None) -> None:
        payload = _encode(body)
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        elif self.request_version == "HTTP/1.0":
            self.send_header("Connection", "keep-alive")  # the client asked for it (ab -k)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(payload)
        self.wfile.flush()

    def _drop_connection(self) -> None:
        """Close the connection without writing a byte: the client sees a connection error."""
        self.close_connection = True
        with contextlib.suppress(OSError):
            self.connection.shutdown(socket.SHUT_RDWR)

    def _read_body(self) -> bytes | None:
        """The request body, or None after an error response has been sent."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            self.close_connection = True
            self._send_json(411, {"error": "length_required", "detail": "chunked bodies are not supported"})
            return None
        raw_length = self.headers.get("Content-Length")
        if raw_length is None:
            return b""
        try:
            length = int(raw_length)
            if length < 0:
                raise ValueError(raw_length)
        except ValueError:
            self.close_connection = True
            self._send_json(400, {"error": "bad_request", "detail": "invalid Content-Length"})
            return None
        if length > MAX_BODY_BYTES:
            self.close_connection = True
            self._send_json(413, {"error": "payload_too_large", "detail": f"max {MAX_BODY_BYTES} bytes"})
            return None
        body = self.rfile.read(length) if length else b""
        if len(body) != length:  # the client went away mid-body
            self.close_connection = True
            return None
        return body

    def _route(self) -> tuple[str, dict[str, list[str]]]:
        split = urllib.parse.urlsplit(self.path)
        path = split.path.rstrip("/") or "/"
        return path, urllib.parse.parse_qs(split.query, keep_blank_values=True)

    def _not_found(self) -> None:
        self._send_json(404, {"error": "not_found"})

    def _method_not_allowed(self, allow: str) -> None:
        self._send_json(405, {"error": "method_not_allowed"}, {"Allow": allow})

    def _received(self) -> tuple[str, dict[str, list[str]], bytes] | None:
        """The request's path, query and body - or None once it has been answered (an /echo
        request served, or an error response about its body sent)."""
        if self._echoed():
            return None
        path, query = self._route()
        body = self._read_body()
        return None if body is None else (path, query, body)

    # -- verbs -----------------------------------------------------------------------------------------

    def do_GET(self) -> None:
        if (received := self._received()) is None:
            return
        path, query, _ = received
        if path == "/health":
            self._send_json(200, {"status": "ok"})
        elif path == "/_ledger":
            self._get_ledger(query)
        elif path == "/_faults":
            self._send_json(200, {"faults": self.server.faults.snapshot()})
        elif path.startswith("/_faults/") and path.removeprefix("/_faults/") in SERVICES:
            self._send_json(200, {"faults": self.server.faults.snapshot()[path.removeprefix("/_faults/")]})
        elif path == "/_stats":
            self._send_json(200, self.server.state.stats())
        elif path in ROUTES or path == "/_reset":
            self._method_not_allowed("POST")
        else:
            self._not_found()

    def do_HEAD(self) -> None:
        self.do_GET()

    def do_PATCH(self) -> None:
        if self._received() is not None:
            self._not_found()

    def do_PUT(self) -> None:
        if (received := self._received()) is None:
            return
        path, _, body = received
        service = path.removeprefix("/_faults/")
        if not path.startswith("/_faults/") or service not in SERVICES:
            self._not_found()
            return
        try:
            update = json.loads(body or b"null")
        except ValueError as exc:
            self._send_json(400, {"error": "bad_request", "detail": f"malformed JSON: {exc}"})
            return
        try:
            faults = self.server.faults.update(service, update)
        except FaultValidationError as exc:
            self._send_json(400, {"error": "bad_request", "detail": str(exc)})
            return
        self._send_json(200, {"service": service, "faults": faults.as_dict()})

    def do_DELETE(self) -> None:
        if (received := self._received()) is None:
            return
        path = received[0]
        if path == "/_faults":
            self.server.faults.clear()
            self._send_json(200, {"status": "cleared"})
        elif path.startswith("/_faults/") and (service := path.removeprefix("/_faults/")) in SERVICES:
            self.server.faults.reset_service(service)
            self._send_json(200, {"status": "cleared", "service": service})
        else:
            self._not_found()

    def do_POST(self) -> None:
        if (received := self._received()) is None:
            return
        path, _, body = received
        operation = ROUTES.get(path)
        if operation is not None:
            self._business(operation, body)
        elif path == "/_reset":
            self.server.reset()
            self._send_json(200, {"status": "reset"})
        elif path in {"/health", "/_ledger", "/_stats", "/_faults"}:
            self._method_not_allowed("GET")
        else:
            self._not_found()

    # -- business calls ---------------------------------------------------------------------------------

    def _business(self, operation: Operation, raw: bytes) -> None:
        server = self.server
        service = operation.service
        faults = server.faults.get(service)

        def count(outcome: str) -> None:
            server.state.count(service, operation.name, outcome)

        if faults.down:
            count("fault_down")
            self._drop_connection()
            return
        if faults.hang:
            count("fault_hang")
            server.faults.wait_while_hanging(service)
            self._drop_connection()
            return
        if faults.latency_ms > 0:
            time.sleep(faults.latency_ms / 1000.0)
        if server.faults.roll(service, faults.transient_rate):
            count("fault_transient")
            self._send_json(503, {"error": "unavailable"}, {"Retry-After": "1"})
            return

        result = self._run(operation, raw, faults)
        if server.faults.roll(service, faults.lost_reply_rate):
            count("fault_lost_reply")
            self._drop_connection()
            return
        count(result.outcome)
        self._send_json(result.status, result.body)

    def _run(self, operation: Operation, raw: bytes, faults: ServiceFaults) -> Result:
        key = self.headers.get("Idempotency-Key", "").strip()
        if not key:
            return Result(400, {"error": "missing_idempotency_key"}, "missing_key")
        if len(key) > MAX_KEY_LENGTH:
            return bad_request(f"Idempotency-Key is longer than {MAX_KEY_LENGTH} characters")
        try:
            body = parse_body(raw, operation)
        except BadRequest as exc:
            return bad_request(str(exc))
        return self.server.services.execute(operation, key, body, faults)

    # -- echo: a generic endpoint for HTTP-call jobs -------------------------------------------------

    def _echoed(self) -> bool:
        """Serve the request if it is for /echo[/...]; False if it is not."""
        path, query = self._route()
        if path != ECHO_PATH and not path.startswith(ECHO_PATH + "/"):
            return False
        body = self._read_body()
        if body is not None:
            self._echo(path, query, body)
        return True

    def _echo(self, path: str, query: dict[str, list[str]], raw: bytes) -> None:
        """Answer any method on /echo[/...] with what was received. `?status=N` answers N;
        with `&fail_times=K` only the first K calls with the request's Idempotency-Key answer
        N and later ones 200 (a fault that clears on retry); `?delay_ms=M` waits first. A 2xx
        answer is an applied effect: one ledger entry (service "echo", operation the method)."""
        try:
            status = int(query.get("status", ["200"])[-1])
            fail_times = int(query["fail_times"][-1]) if "fail_times" in query else None
            delay_ms = int(query.get("delay_ms", ["0"])[-1])
            if not 200 <= status <= 599 or (fail_times is not None and fail_times < 0):
                raise ValueError("status must be 200-599 and fail_times at least 0")
            if not 0 <= delay_ms <= ECHO_MAX_DELAY_MS:
                raise ValueError(f"delay_ms must be 0-{ECHO_MAX_DELAY_MS}")
        except ValueError as exc:
            self._send_json(400, {"error": "bad_request", "detail": f"echo: {exc}"})
            return
        if delay_ms:
            time.sleep(delay_ms / 1000.0)
        key = self.headers.get("Idempotency-Key", "").strip()
        call = self.server.state.echo_call(key)
        if fail_times is not None and call > fail_times:
            status = 200
        method = self.command.lower()
        headers = {name.lower(): value for name, value in self.headers.items()}
        text = raw.decode(errors="replace")
        if 200 <= status < 300:
            self.server.state.append_ledger(
                "echo",
                method,
                key,
                f"echo_{uuid.uuid4().hex[:12]}",
                {"path": path, "body": text, "headers": headers},
            )
        self.server.state.count("echo", method, "applied" if status < 300 else f"status_{status}")
        self._send_json(
            status,
            {
                "method": self.command,
                "path": path,
                "query": {name: values[-1] for name, values in query.items()},
                "headers": headers,
                "body": text,
                "idempotency_key": key,
                "call": call,
            },
        )

    # -- control ------------------------------------------------------------------------------------------

    def _get_ledger(self, query: dict[str, list[str]]) -> None:
        unknown = sorted(set(query) - set(_LEDGER_FILTERS))
        if unknown:
            self._send_json(400, {"error": "bad_request", "detail": f"unknown filters: {', '.join(unknown)}"})
            return
        filters = {name: query[name][-1] for name in _LEDGER_FILTERS if name in query}
        entries = self.server.state.ledger(**filters)
        self._send_json(200, {"entries": entries})


class SimulatorServer(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True
    request_queue_size = 1024

    def __init__(
        self, address: tuple[str, int], *, verbose: bool = False, journal: Path | None = None
    ) -> None:
        self.verbose = verbose
        self.state = SimulatorState(journal)
        self.faults = FaultBoard()
        self.services = Services(self.state, self.faults)
        if ":" in address[0]:
            self.address_family = socket.AF_INET6
        super().__init__(address, SimulatorHandler)

    @property
    def url(self) -> str:
        host, port = self.server_address[0], self.server_address[1]
        host = str(host)
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{port}"

    def reset(self) -> None:
        """Forget everything: ledger, idempotency store, tombstones, faults and stats."""
        self.faults.clear()
        self.state.reset()

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that disconnects (or times out) mid-request is normal here, not a bug.
        if isinstance(sys.exc_info()[1], ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)

    def server_close(self) -> None:
        self.faults.close()  # wake up hanging requests
        super().server_close()


def _parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m simulator",
        description="Simulated inventory, payment and shipping services with runtime fault injection.",
    )
    parser.add_argument(
        "--host",
        default=os.environ.get("SIMULATOR_HOST", DEFAULT_HOST),
        help=f"address to bind (env SIMULATOR_HOST, default {DEFAULT_HOST})",
    )
    parser.add_argument(
        "--port",
        type=int,
        default=int(os.environ.get("SIMULATOR_PORT") or DEFAULT_PORT),
        help=f"port to bind, 0 picks a free one (env SIMULATOR_PORT, default {DEFAULT_PORT})",
    )
    parser.add_argument("--verbose", action="store_true", help="log every request to stderr")
    parser.add_argument(
        "--journal",
        type=Path,
        default=os.environ.get("SIMULATOR_JOURNAL") or None,
        help="keep the state in this append-only file and replay it at start, so a restart (a kill -9)"
        " keeps the ledger and the idempotency store (env SIMULATOR_JOURNAL; default: memory only)",
    )
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = _parse_args(argv)
    try:
        server = SimulatorServer((args.host, args.port), verbose=args.verbose, journal=args.journal)
    except OSError as exc:
        print(f"simulator: cannot listen on {args.host}:{args.port}: {exc}", file=sys.stderr)
        return 1

    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)

    serving = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, name="simulator")
    serving.start()
    try:
        # The socket is bound and listening since the constructor; connections queue until accepted.
        with contextlib.suppress(OSError):  # nobody reading stdout is not a reason to stop serving
            print(f"{LISTENING_PREFIX} {server.url}", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        server.shutdown()
        serving.join()
        server.server_close()
    return 0
