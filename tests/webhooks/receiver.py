"""A webhook receiver for tests: a real HTTP server the agent workers POST to.

It records every request (raw body and headers) and answers per `mode`:
- "ok": 200;
- "fail_first": 500 the first time it sees an event id, 200 after (so every event arrives twice);
- "refuse": 410 always (a permanent refusal: the delivery is given up).
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from webhooks.signing import signature_verify


@dataclass
class Received:
    body: bytes
    headers: dict[str, str]
    status: int

    @property
    def json(self) -> dict[str, Any]:
        return json.loads(self.body)


@dataclass
class Receiver:
    server: ThreadingHTTPServer
    mode: str = "ok"
    requests: list[Received] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def url(self) -> str:
        port = self.server.server_address[1]
        return f"http://127.0.0.1:{port}/hooks/orders"

    def accepted(self) -> list[Received]:
        with self.lock:
            return [r for r in self.requests if r.status == 200]

    def unique_events(self, secret: str) -> list[dict[str, Any]]:
        """Accepted events, deduplicated by event id (as a receiver should), after checking every
        request's signature (over its timestamp and body) and that a duplicate carries the same
        body."""
        seen: dict[str, bytes] = {}
        events: list[dict[str, Any]] = []
        for request in self.accepted():
            # `t=<unix>,v1=<HMAC of "t.body">`, within the replay window; t is X-SAS-Timestamp.
            header = request.headers["X-SAS-Signature"]
            assert signature_verify(secret=secret, body=request.body, header=header)
            assert header.startswith(f"t={request.headers['X-SAS-Timestamp']},v1=")
            event_id = request.headers["X-SAS-Event-Id"]
            assert request.json["event_id"] == event_id
            if event_id in seen:
                assert seen[event_id] == request.body, "a duplicate must be the same delivery"
                continue
            seen[event_id] = request.body
            events.append(request.json)
        return events


def start_receiver(mode: str = "ok") -> Receiver:
    receiver: Receiver

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            event_id = self.headers.get("X-SAS-Event-Id", "")
            with receiver.lock:
                seen_before = any(r.headers.get("X-SAS-Event-Id") == event_id for r in receiver.requests)
                if receiver.mode == "refuse":
                    status = 410
                elif receiver.mode == "fail_first" and not seen_before:
                    status = 500
                else:
                    status = 200
                receiver.requests.append(
                    Received(body=body, headers=dict(self.headers.items()), status=status)
                )
            self.send_response(status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"{}")

        def log_message(self, format: str, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    receiver = Receiver(server=server, mode=mode)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return receiver
