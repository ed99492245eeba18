"""Baseline (c) of issue 6: the nearest durable peer - the order's three calls as three chained
Procrastinate jobs, on the same PostgreSQL (a database of its own).

Each job makes the same HTTP call to the simulator as our agents make (same endpoint, body and
Idempotency-Key header; httpx with one keep-alive pooled client per process - the async client,
since Procrastinate's workers are asyncio and recommend async tasks), then defers the next job,
as a Procrastinate user chains jobs. The order is done when the last job's row is 'succeeded'.

Installed in the bench-only venv (.bench-venv/); the driver is bench/baselines/procrastinate_bench.py.
"""

from __future__ import annotations

import os
from typing import Any

import httpx
import procrastinate

DSN = os.environ.get(
    "PROCRASTINATE_DSN", "postgresql://postgres@127.0.0.1:5432/sasproject_bench_procrastinate"
)
SIMULATOR_URL = os.environ.get("SIMULATOR_URL", "http://127.0.0.1:8055").rstrip("/")
QUEUE = "orders"

app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=DSN))

_client: httpx.AsyncClient | None = None


def _http() -> httpx.AsyncClient:
    """One pooled keep-alive client per worker process."""
    global _client
    if _client is None:
        _client = httpx.AsyncClient(limits=httpx.Limits(max_connections=20, max_keepalive_connections=10))
    return _client


async def _post(path: str, body: dict[str, Any], idempotency_key: str) -> Any:
    response = await _http().post(
        SIMULATOR_URL + path,
        json=body,
        headers={"Idempotency-Key": idempotency_key},
        timeout=httpx.Timeout(10.0),
    )
    response.raise_for_status()
    return response.json()


# The same bodies as orders/workflows.py builds for the agents.
@app.task(name="reserve", queue=QUEUE)
async def reserve(order_id: str, items: list[dict[str, Any]], amount: str, currency: str, card: str) -> None:
    await _post("/inventory/reserve", {"items": items, "order_id": order_id}, f"{order_id}:reserve")
    await charge.defer_async(order_id=order_id, items=items, amount=amount, currency=currency, card=card)


@app.task(name="charge", queue=QUEUE)
async def charge(order_id: str, items: list[dict[str, Any]], amount: str, currency: str, card: str) -> None:
    await _post(
        "/payment/charge",
        {"amount": amount, "currency": currency, "card": card, "order_id": order_id},
        f"{order_id}:charge",
    )
    await ship.defer_async(order_id=order_id, items=items)


@app.task(name="ship", queue=QUEUE)
async def ship(order_id: str, items: list[dict[str, Any]]) -> None:
    await _post("/shipping/create", {"order_id": order_id, "items": items}, f"{order_id}:ship")
