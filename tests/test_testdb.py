"""The migrated template of the test databases (sastools/testdb.py, issue 27 item 7): a session
waits only for a session making the same schema's template, never for another schema's (other
branches on the same server): with one lock for all, a session's start-up waited 108 s."""

from __future__ import annotations

import threading

import psycopg

from sastools.testdb import LOCK_CLASS, PREFIX, _lock_key, schema_digest, template_ready


def _server_url() -> str:
    from tests.conftest import database_url

    return database_url("postgres")


def test_template_ready__another_schema_being_made__answers_without_waiting() -> None:
    answered: list[str] = []
    with psycopg.connect(_server_url(), autocommit=True) as other:
        # Another session making its own schema's template holds that template's lock.
        other.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, _lock_key(f"{PREFIX}another")))
        worker = threading.Thread(target=lambda: answered.append(template_ready(_server_url())), daemon=True)
        worker.start()
        worker.join(timeout=120)
        assert not worker.is_alive(), "template_ready waited for another schema's lock"
    assert answered == [f"{PREFIX}{schema_digest()}"]


def test_template_ready__same_schema_being_made__waits_for_it() -> None:
    name = f"{PREFIX}{schema_digest()}"
    answered: list[str] = []
    with psycopg.connect(_server_url(), autocommit=True) as other:
        other.execute("SELECT pg_advisory_lock(%s, %s)", (LOCK_CLASS, _lock_key(name)))
        worker = threading.Thread(target=lambda: answered.append(template_ready(_server_url())), daemon=True)
        worker.start()
        worker.join(timeout=2)
        assert worker.is_alive() and not answered
    worker.join(timeout=120)
    assert answered == [name]
