"""Pages of a long, ordered query that read none of the rows they skip (issue 28,
bench/outputs.py: a job with 10,000 runs; docs/decisions.md, record 40: why not keyset pagination).

Django's Paginator slices the query itself: `... ORDER BY created_at DESC, id DESC LIMIT 20
OFFSET 9980` reads, and computes every annotation of, the 9,980 rows it skips. `IdFirstPaginator`
finds the page's primary keys first - a subquery over the order's columns only, which an index
on the order (run_job_created_idx, history_job_rows_idx) answers from the index alone - and reads
the page's rows, annotations and all, by those keys: still one query, and the `?page=` numbers,
counts and contents are Django's (tests/scheduler/test_paging.py). The query must be ordered by a
unique key (its id last), as every paged query should be: ties would page differently.
"""

from __future__ import annotations

from typing import Any

from django.core.paginator import Page, Paginator
from django.db.models import QuerySet


class IdFirstPaginator(Paginator):
    """A Paginator over an ordered QuerySet whose pages after the first read their ids first (see
    the module; the first skips nothing, and its plain LIMIT is the cheaper statement to build).
    `count`: the number of rows if the caller has it (`job_get_counted` counts a job's runs and
    history in the job's own query), else Django's count(*) query."""

    def __init__(
        self, object_list: QuerySet[Any], per_page: int, *args: Any, count: int | None = None, **kwargs: Any
    ) -> None:
        super().__init__(object_list, per_page, *args, **kwargs)  # orphans, ... as Django's
        self.rows = object_list
        if count is not None:
            self.count = count  # the cached_property's value, known

    def page(self, number: Any) -> Page:
        number = self.validate_number(number)
        if number == 1:
            return super().page(number)
        bottom = (number - 1) * self.per_page
        top = bottom + self.per_page
        if top + self.orphans >= self.count:
            top = self.count
        ids = self.rows.values("pk")[bottom:top]
        return Page(self.rows.filter(pk__in=ids), number, self)
