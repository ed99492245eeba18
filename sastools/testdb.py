"""A migrated template database for the test databases (issue 27, item 7: the fast tier).

Every pytest process (each pytest-xdist worker) creates its own test database and migrates it:
53 migrations, about 11 s on 2 cores, paid by each process of every run. Instead the first run
migrates a template once - named after a digest of everything that decides its schema: the
migrations, the SQL files they install and the pinned requirements (third-party migrations) -
and each test database is then a copy of it (Django's `TEST["TEMPLATE"]` for PostgreSQL:
`CREATE DATABASE ... TEMPLATE`, well under a second); Django's own migrate that follows finds
nothing to apply. A change to any of those files makes a new digest, hence a new template, and
the old ones are dropped. An advisory lock per template makes concurrent sessions of one schema
(two checkouts, a developer and CI) wait for one another instead of migrating the same template
twice; sessions of other schemas (other branches on this server) never wait for it: with one lock
for all, a session waited 108 s at start-up on a shared machine for other branches' templates.

https://docs.djangoproject.com/en/5.2/ref/settings/#template
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PREFIX = "sas_tpl_"
# pg_advisory_lock keys for "making a template": (LOCK_CLASS, a number from the template's name).
LOCK_CLASS = 727_027
# Templates of other schemas kept (other checkouts or branches on this server use theirs).
KEEP_OTHERS = 4


def schema_digest() -> str:
    """A digest of every file that decides a migrated database's schema and rows."""
    files = sorted(
        [p for p in REPO.glob("*/migrations/*.py")]
        + [p for p in REPO.glob("*/*/migrations/*.py")]
        + [p for p in REPO.glob("*/sql/*.sql")]
        + [p for p in REPO.glob("*/*/sql/*.sql")]
        + [REPO / "requirements.txt"]
    )
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(REPO)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()[:16]


def template_ready(database_url: str) -> str:
    """The name of the migrated template for this checkout's schema, made if missing (by
    `manage.py migrate` into it, in a subprocess with the test process's environment)."""
    import psycopg

    head, _, _ = database_url.rpartition("/")
    name = f"{PREFIX}{schema_digest()}"
    with psycopg.connect(f"{head}/postgres", autocommit=True) as admin:
        admin.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, _lock_key(name)))
        try:
            made = admin.execute(
                "SELECT datistemplate FROM pg_database WHERE datname = %s", (name,)
            ).fetchone()
            if made is None or not made[0]:
                # Absent, or half made by a run that died: start again.
                admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
                admin.execute(f'CREATE DATABASE "{name}"')
                subprocess.run(
                    [sys.executable, "manage.py", "migrate", "--noinput", "-v", "0"],
                    cwd=REPO,
                    env={**os.environ, "DATABASE_URL": f"{head}/{name}"},
                    check=True,
                )
                # Marked a template only once whole; nobody connects to it but CREATE DATABASE.
                admin.execute(f'ALTER DATABASE "{name}" WITH is_template = true ALLOW_CONNECTIONS = false')
            _older_dropped(admin, keep=name, spare=KEEP_OTHERS)
        finally:
            admin.execute("SELECT pg_advisory_unlock(%s, %s)", (LOCK_CLASS, _lock_key(name)))
    return name


def _lock_key(name: str) -> int:
    """The advisory lock's second key for a template: a signed 32-bit number from its name."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:4], "big", signed=True)


def _older_dropped(admin: object, *, keep: str, spare: int) -> None:
    """Drop the templates of older schemas (a changed migration made a new one), but the `spare`
    newest: another checkout on this server may be testing its own schema. One that a session
    is making (its lock is held) is left to it; one being copied (CREATE DATABASE ... TEMPLATE
    connects to it) refuses the drop, and is left for a later session."""
    import psycopg

    rows = admin.execute(  # type: ignore[attr-defined]
        "SELECT datname, datistemplate FROM pg_database WHERE datname LIKE %s AND datname <> %s"
        " ORDER BY oid DESC",
        (f"{PREFIX}%", keep),
    ).fetchall()
    for old, was_template in rows[spare:]:
        key = (LOCK_CLASS, _lock_key(old))
        if not admin.execute("SELECT pg_try_advisory_lock(%s, %s)", key).fetchone()[0]:  # type: ignore[attr-defined]
            continue
        try:
            admin.execute(f'ALTER DATABASE "{old}" WITH is_template = false')  # type: ignore[attr-defined]
            admin.execute(f'DROP DATABASE IF EXISTS "{old}"')  # type: ignore[attr-defined]
        except psycopg.errors.ObjectInUse:
            if was_template:
                admin.execute(f'ALTER DATABASE "{old}" WITH is_template = true')  # type: ignore[attr-defined]
        finally:
            admin.execute("SELECT pg_advisory_unlock(%s, %s)", key)  # type: ignore[attr-defined]
