"""Time-ordered ids (scheduler/ids.py, sas_uuid7() in functions.sql): version 7 layout, the
time in the first 48 bits, ordered across milliseconds - in Python and in PostgreSQL alike."""

from __future__ import annotations

import time
import uuid

import pytest
from django.db import connection

from scheduler.ids import uuid7


def _ms(u: uuid.UUID) -> int:
    return u.int >> 80


def test_uuid7__version_variant_and_time():
    before = time.time_ns() // 1_000_000
    u = uuid7()
    after = time.time_ns() // 1_000_000
    assert u.version == 7 and u.variant == uuid.RFC_4122
    assert before <= _ms(u) <= after


def test_uuid7__later_millisecond_sorts_after_and_ids_differ():
    first = uuid7()
    time.sleep(0.002)
    second = uuid7()
    assert first < second
    assert len({uuid7() for _ in range(10_000)}) == 10_000


@pytest.mark.django_db
def test_sas_uuid7__same_layout_from_the_database_clock():
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT sas_uuid7(), (extract(epoch FROM clock_timestamp()) * 1000)::bigint, "
            "pg_sleep(0.002), sas_uuid7()"
        )
        first, db_ms, _, second = cursor.fetchone()
    assert first.version == 7 and first.variant == uuid.RFC_4122
    assert abs(_ms(first) - db_ms) <= 5
    assert first < second
