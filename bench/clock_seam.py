"""What the engine's clock seam costs production (issue 31): nothing measurable.

Python: the engine reads `clock.now()` (scheduler/clock.py) where it read `timezone.now()`;
`clock.now` IS `timezone.now` until a test harness rebinds it, so the call is the same function
behind one module attribute lookup either way. Printed: ns per call of each, and their ratio.

SQL: no statement changed. Under production's search path (pg_catalog first, implicitly) an
unqualified `statement_timestamp()` is pg_catalog's; the harness's shadow schema exists only in
a test's transaction. Printed: which function the database resolves, on a plain connection.

    .venv/bin/python bench/clock_seam.py
"""

from __future__ import annotations

import os
import sys
import timeit
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "sasproject.settings")

import django

django.setup()

from django.db import connection  # noqa: E402
from django.utils import timezone  # noqa: E402

from scheduler import clock  # noqa: E402

N = 1_000_000


def per_call(stmt: str) -> float:
    """Best of 5 runs of N calls, in ns per call."""
    runs = timeit.repeat(stmt, globals={"timezone": timezone, "clock": clock}, number=N, repeat=5)
    return min(runs) / N * 1e9


def main() -> None:
    before = per_call("timezone.now()")
    after = per_call("clock.now()")
    print(f"timezone.now(): {before:.1f} ns/call   clock.now(): {after:.1f} ns/call", end="   ")
    print(f"ratio {after / before:.3f}")
    print(f"clock.now is timezone.now: {clock.now is timezone.now}")
    try:
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT pronamespace::regnamespace::text, current_schemas(true) FROM pg_proc"
                " WHERE oid = 'statement_timestamp()'::regprocedure"
            )
            schema, schemas = cursor.fetchone()
            print(f"statement_timestamp() resolves to schema {schema} (search path {schemas})")
    except Exception as exc:  # no database configured: the Python figures stand alone
        print(f"database not reachable ({exc.__class__.__name__}); SQL check skipped")


if __name__ == "__main__":
    main()
