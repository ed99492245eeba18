"""The reprice agent: one page of products per request (agents.long.PagedAgentTask).

Its queue follows its name: `agents.catalogue.reprice` -> `agent.catalogue`.
"""

from __future__ import annotations

import time
from typing import Any

from celery import shared_task
from django.conf import settings
from django.db import connection

from agents.long import Page, PagedAgentTask, PageDone

# One page, in the page's transaction: lock the next `size` products after the cursor, reprice
# them, count them in the ledger. Keyset pagination (id > cursor): each page is an index range
# scan, however far into the table it is.
_REPRICE_PAGE = """
WITH page AS (
    SELECT id FROM catalogue_product WHERE id > %(after)s ORDER BY id LIMIT %(size)s FOR UPDATE
), changed AS (
    UPDATE catalogue_product AS p
    SET price = round(p.price * (100 + %(percent)s::numeric) / 100, 2),
        repriced_count = p.repriced_count + 1, last_repriced_run = %(run_id)s::uuid,
        updated_at = statement_timestamp()
    FROM page WHERE p.id = page.id
    RETURNING p.id
), ledger AS (
    INSERT INTO catalogue_repriceledger (run_id, page_start, page_end, rows, applied_at)
    SELECT %(run_id)s::uuid, %(after)s, max(id), count(*), statement_timestamp()
    FROM changed HAVING count(*) > 0
)
SELECT count(*), coalesce(max(id), %(after)s),
       NOT EXISTS (SELECT 1 FROM catalogue_product
                   WHERE id > (SELECT coalesce(max(id), %(after)s) FROM changed))
FROM changed
"""


class RepriceAgent(PagedAgentTask):
    def process_page(self, page: Page) -> PageDone:
        with connection.cursor() as cursor:
            total = page.total
            if total is None:
                cursor.execute("SELECT count(*) FROM catalogue_product")
                total = int(cursor.fetchone()[0])
            cursor.execute(
                _REPRICE_PAGE,
                {
                    "after": page.start,
                    "size": page.size,
                    "percent": page.payload["percent"],
                    "run_id": page.payload["run_id"],
                },
            )
            rows, last_id, last = cursor.fetchone()
        # Demo pacing (settings.SAS["CATALOGUE_PAGE_DELAY"]): a page that takes a while, inside
        # its transaction, so a person can watch the progress bar and a test can kill mid-page.
        delay = float(settings.SAS["CATALOGUE_PAGE_DELAY"])
        if delay > 0:
            time.sleep(delay)
        return PageDone(next_start=int(last_id), rows=int(rows), last=bool(last), total=total)


def _reprice(self: RepriceAgent, **kwargs: Any) -> str:
    return self.perform_page(**kwargs)


reprice = shared_task(name="agents.catalogue.reprice", bind=True, base=RepriceAgent)(_reprice)
