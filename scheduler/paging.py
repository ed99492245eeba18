"""Pages of a long, ordered query that cost the same on page 500 as on page 1 (issue 28,
bench/outputs.py: a job with 10,000 runs).

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
    """A Paginator over an ordered QuerySet whose page reads its ids first (see the module)."""

    def page(self, number: Any) -> Page:
        number = self.validate_number(number)
        bottom = (number - 1) * self.per_page
        top = bottom + self.per_page
        if top + self.orphans >= self.count:
            top = self.count
        rows: QuerySet[Any] = self.object_list
        ids = rows.values("pk")[bottom:top]
        return self._get_page(rows.filter(pk__in=ids), number, self)
