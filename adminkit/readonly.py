"""Read-only admins for big tables: no add, edit or delete; bounded counts; exact-match search."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.http import HttpRequest
from django.utils.functional import cached_property

from .changelist import BoundedChangeListMixin


def parse_uuid(term: str) -> uuid.UUID | None:
    """A search term as a UUID, or None: the admins search by exact id (an index lookup)."""
    try:
        return uuid.UUID(term.strip())
    except ValueError:
        return None


class CappedCountPaginator(Paginator):
    """Counts at most `cap` rows: `COUNT(*)` over a big table's whole filter is the slow part of
    a changelist. Past the cap an operator narrows the filters instead of paging."""

    cap = 10_000

    @cached_property
    def count(self) -> int:
        # A sliced queryset counts as SELECT COUNT(*) FROM (... LIMIT cap): bounded work.
        return int(self.object_list[: self.cap].count())  # type: ignore[attr-defined]


class ReadOnlyAdmin(BoundedChangeListMixin, admin.ModelAdmin):
    """No add, no edit, no delete: the rows are the engine's state and audit log. Staff see the
    detail pages in Django's view-only mode."""

    paginator = CappedCountPaginator
    show_full_result_count = False
    # Facet counts run one COUNT per filter choice over the table: not on these tables.
    show_facets = admin.ShowFacets.NEVER

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyInline(admin.TabularInline):
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
