"""Helpers every model module of the scheduler uses: the row-check constraint and non-negative
validators."""

from __future__ import annotations

from django.core.validators import MinValueValidator
from django.db import models
from django.db.models import F, Func


def row_check(function: str, *columns: str) -> Func:
    """A table's CHECK constraint as one call of a row-check function (scheduler/sql/
    functions.sql says why: one function call per row written instead of several constraint
    expressions rebuilt on every statement)."""
    return Func(*(F(column) for column in columns), function=function, output_field=models.BooleanField())


# Counters and positions that cannot be negative. Not PositiveIntegerField: its own CHECK
# constraint would be one more per table, and the row check covers it (and forms get the same
# minimum from the validator).
NON_NEGATIVE = [MinValueValidator(0)]
