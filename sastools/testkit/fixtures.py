"""The pytest fixture `harness` (import it into a conftest.py: `from sastools.testkit.fixtures
import harness`). Asks for pytest-django's `db`: the harness works inside the test's
transaction, which its rollback undoes."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from .engine import Harness, harness_open


@pytest.fixture
def harness(db: Any) -> Iterator[Harness]:
    with harness_open() as h:
        yield h
