"""Run by tests/sasproject/test_pooler.py in a subprocess whose DATABASE_URL is PgBouncer in
transaction mode and DATABASE_DIRECT_URL PostgreSQL (as a deployment behind a pooler): one
check of the product's own code, named by argv[1], printed as one JSON line.

    python -m tests.sasproject.pooled_probe settings|evaluator|idle_limit|quota [owner id]
"""

from __future__ import annotations

import json
import sys
import threading
import time
from typing import Any

import django


def _settings() -> dict[str, Any]:
    from django.conf import settings
    from django.db import connection, connections

    from sasproject.database import pooled, session_connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT current_setting('idle_in_transaction_session_timeout')")
        pooled_idle = cursor.fetchone()[0]
    with session_connection().cursor() as cursor:
        cursor.execute("SELECT current_setting('idle_in_transaction_session_timeout')")
        direct_idle = cursor.fetchone()[0]
    default = settings.DATABASES["default"]
    return {
        "pooled": pooled(),
        "session_alias": session_connection().alias,
        "default_port": int(default["PORT"]),
        "direct_port": int(settings.DATABASES["direct"]["PORT"]),
        "default_options": "options" in default["OPTIONS"],
        "prepare_threshold": connection.connection.prepare_threshold,
        "server_side_cursors": not default["DISABLE_SERVER_SIDE_CURSORS"],
        "pooled_idle": pooled_idle,
        "direct_idle": direct_idle,
        "aliases_open": sorted(c.alias for c in connections.all(initialized_only=True)),
    }


def _evaluator() -> dict[str, Any]:
    from alerting.services import alert_rules_evaluate

    return {"ran": alert_rules_evaluate().ran}


def _idle_limit() -> dict[str, Any]:
    """A dispatcher's transaction through the pooler, idle past its limit: PostgreSQL ends it."""
    from django.db import DatabaseError, connection, transaction

    from sasproject.database import transaction_idle_limit

    seen = ""
    error = ""
    try:
        with transaction.atomic():
            transaction_idle_limit()
            with connection.cursor() as cursor:
                cursor.execute("SELECT current_setting('idle_in_transaction_session_timeout')")
                seen = cursor.fetchone()[0]
            time.sleep(2.5)  # idle in the transaction, as a dispatcher cut off from the network
            with connection.cursor() as cursor:
                cursor.execute("SELECT 1")
    except DatabaseError as exc:
        error = f"{type(exc).__name__}: {exc}"
    connection.close()
    with connection.cursor() as cursor:  # the pool's next transaction: the limit did not stay
        cursor.execute("SELECT current_setting('idle_in_transaction_session_timeout')")
        after = cursor.fetchone()[0]
    return {"seen": seen, "error": error, "after": after}


def _quota(owner_id: int) -> dict[str, Any]:
    """Eight threads submit an order each at once for one owner, through the pooler's few server
    connections: the runs-in-flight quota's transaction-scoped advisory lock lets exactly the
    quota through."""
    from django.db import connection

    from orders.services import order_submit
    from scheduler.limits import QuotaExceeded

    accepted: list[str] = []
    refused: list[str] = []
    gate = threading.Barrier(8)

    def submit() -> None:
        try:
            gate.wait()
            order_submit(
                owner_id=owner_id,
                data={"items": [{"sku": "SKU-1", "quantity": 1}], "amount": "5.00", "currency": "EUR"},
            )
            accepted.append("ok")
        except QuotaExceeded:
            refused.append("quota")
        finally:
            connection.close()

    threads = [threading.Thread(target=submit) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"accepted": len(accepted), "refused": len(refused)}


def main() -> None:
    django.setup()
    what = sys.argv[1]
    if what == "settings":
        out = _settings()
    elif what == "evaluator":
        out = _evaluator()
    elif what == "idle_limit":
        out = _idle_limit()
    else:
        out = _quota(int(sys.argv[2]))
    print("PROBE " + json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
