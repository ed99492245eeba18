"""The engine's Python clock: the one place its services and agents read "now" and wait.

Deadlines and backoffs are computed by the database (`statement_timestamp()` in the SQL of
`scheduler/sql/`, Django's `Now()`); the Python side compares them with `now()` and waits
between an attempt's tries with `sleep()`. Both are module attributes bound to Django's and
the standard library's own functions, read as `clock.now()` - the same attribute lookup and
call as `timezone.now()`, so production pays nothing for the seam (bench/clock_seam.py).

The test harness on a virtual clock (`sastools.testkit`) rebinds both for the duration of a
test, and moves the database's clock with them by a session setting (docs/developing/testing.md).
Nothing in production rebinds them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import datetime

from django.utils import timezone

# Read as `clock.now()`, never imported by name: a rebinding must reach every caller.
now: Callable[[], datetime] = timezone.now
sleep: Callable[[float], None] = time.sleep
