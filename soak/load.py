"""The soak's load, a process of its own (`python -m soak.load`): orders over the API at a steady
rate with idempotency keys (one in 20 sent twice: the replay must give the same order; one in 10
with a declined card: compensated), a one-off job due a few seconds later every few seconds, and
a history export (a heartbeat step) every half minute. Every request is a JSON line in `--out`:
time, kind, HTTP status (0: no answer), seconds taken."""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
import urllib.error
import urllib.request
import uuid
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta
from typing import Any

ORDER = {"items": [{"sku": "SKU-1", "quantity": 2}], "amount": "25.00", "currency": "EUR"}


def post(url: str, token: str, body: dict[str, Any], key: str | None = None) -> tuple[int, Any]:
    headers = {"Authorization": f"Token {token}", "Content-Type": "application/json"}
    if key:
        headers["Idempotency-Key"] = key
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers=headers, method="POST")  # noqa: S310
    try:
        with urllib.request.urlopen(request, timeout=15) as response:  # noqa: S310
            return response.status, json.loads(response.read() or b"null")
    except urllib.error.HTTPError as exc:
        with exc:
            return exc.code, exc.read()[:200].decode(errors="replace")
    except (OSError, ValueError):
        return 0, None


class Load:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.tokens: list[str] = json.loads(args.tokens)
        self.rng = random.Random(args.seed)
        self.out = open(args.out, "a", buffering=1)  # noqa: SIM115 - closed in run()
        self.lock = threading.Lock()
        self.stop_at = time.monotonic() + args.seconds

    def record(self, kind: str, status: int, took: float, **extra: Any) -> None:
        line = json.dumps({"t": time.time(), "kind": kind, "status": status, "took": round(took, 3), **extra})
        with self.lock:
            self.out.write(line + "\n")

    def order(self, token: str, card: str, replay: bool) -> None:
        key = str(uuid.uuid4())
        body = {**ORDER, "card": card}
        for attempt in range(2 if replay else 1):
            began = time.monotonic()
            status, answer = post(f"{self.args.web}/api/orders/", token, body, key)
            order_id = answer.get("id") if isinstance(answer, dict) else None
            self.record("order_replay" if attempt else "order", status, time.monotonic() - began, id=order_id)

    def orders(self) -> None:
        interval = 1.0 / self.args.rate
        with ThreadPoolExecutor(max_workers=16) as pool:
            following = time.monotonic()
            while time.monotonic() < self.stop_at:
                token = self.rng.choice(self.tokens[:-1])
                card = "tok_decline" if self.rng.random() < 0.1 else "tok_ok"
                pool.submit(self.order, token, card, self.rng.random() < 0.05)
                following += interval
                time.sleep(max(0.0, following - time.monotonic()))

    def oneoff_jobs(self) -> None:
        n = 0
        while time.monotonic() < self.stop_at:
            n += 1
            run_at = (datetime.now(UTC) + timedelta(seconds=3)).isoformat()
            body = {
                "name": f"one-off {uuid.uuid4().hex[:8]}",
                "workflow": "order_fulfilment",
                "input": ORDER,
                "recurring": False,
                "run_at": run_at,
            }
            began = time.monotonic()
            status, _ = post(f"{self.args.web}/api/jobs/", self.tokens[n % (len(self.tokens) - 1)], body)
            self.record("oneoff_job", status, time.monotonic() - began)
            time.sleep(self.args.oneoff_every)

    def exports(self) -> None:
        while time.monotonic() < self.stop_at:
            began = time.monotonic()
            status, _ = post(f"{self.args.web}/api/exports/", self.tokens[-1], {})
            self.record("export", status, time.monotonic() - began)
            time.sleep(self.args.export_every)

    def run(self) -> None:
        threads = [
            threading.Thread(target=t, daemon=True) for t in (self.orders, self.oneoff_jobs, self.exports)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        self.out.close()


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m soak.load")
    parser.add_argument("--web", required=True)
    parser.add_argument(
        "--tokens", required=True, help="JSON list of API tokens; the last one requests exports"
    )
    parser.add_argument("--rate", type=float, required=True, help="orders per second")
    parser.add_argument("--seconds", type=float, required=True)
    parser.add_argument("--oneoff-every", type=float, default=4.0)
    parser.add_argument("--export-every", type=float, default=30.0)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", required=True)
    Load(parser.parse_args()).run()


if __name__ == "__main__":
    main()
