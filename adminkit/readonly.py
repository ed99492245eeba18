"""Read-only admins for big tables: no add, edit or delete; bounded counts; exact-match search."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from functools import reduce
from operator import or_
from typing import Any

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import Q, QuerySet
from django.http import HttpRequest
from django.utils.functional import cached_property

from .changelist import BoundedChangeListMixin


def parse_uuid(term: str) -> uuid.UUID | None:
    """A search term as a UUID, or None: the admins search by exact id (an index lookup)."""
    try:
        return uuid.UUID(term.strip())
    except ValueError:
        return None


def exact_search(
    queryset: QuerySet[Any], term: str, *, by_uuid: tuple[str, ...], by_text: tuple[str, ...]
) -> tuple[QuerySet[Any], bool]:
    """The admins' search, exact matches only so each is an index lookup: a term that is a UUID
    matches any field of `by_uuid`, anything else any field of `by_text`; an empty term, all."""
    text = term.strip()
    if not text:
        return queryset, False
    parsed = parse_uuid(text)
    fields, value = (by_text, text) if parsed is None else (by_uuid, str(parsed))
    return queryset.filter(reduce(or_, (Q(**{name: value}) for name in fields))), False


class ExactSearchMixin:
    """`get_search_results` by `exact_search` over the admin's `search_by_uuid` and
    `search_by_text` fields (its `search_fields` only switch the search box on)."""

    search_by_uuid: tuple[str, ...] = ()
    search_by_text: tuple[str, ...] = ()

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        return exact_search(queryset, search_term, by_uuid=self.search_by_uuid, by_text=self.search_by_text)


class ValueFilter(admin.SimpleListFilter):
    """A list filter on one field's value, its choices from `values()` (a registry, say, not a
    DISTINCT over the table)."""

    field = ""

    def values(self) -> list[str]:
        raise NotImplementedError

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, str]]:
        return [(name, name) for name in self.values()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        return queryset.filter(**{self.field: value}) if value else queryset


def value_filter(title: str, field: str, values: Callable[[], list[str]]) -> type[ValueFilter]:
    """A `ValueFilter` on `field` (its URL parameter too), titled `title`, its choices `values()`."""
    attrs = {"title": title, "parameter_name": field, "field": field, "values": lambda self: values()}
    return type(f"ValueFilter_{field}", (ValueFilter,), attrs)


class CappedCountPaginator(Paginator):
    """Counts at most `cap` rows: `COUNT(*)` over a big table's whole filter is the slow part of
    a changelist. Past the cap an operator narrows the filters instead of paging."""

    cap = 10_000

    @cached_property
    def count(self) -> int:
        # A sliced queryset counts as SELECT COUNT(*) FROM (... LIMIT cap): bounded work.
        return int(self.object_list[: self.cap].count())  # type: ignore[attr-defined]


class NoWritesMixin:
    """No add, no edit, no delete (a ModelAdmin's or an inline's)."""

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ReadOnlyAdmin(NoWritesMixin, BoundedChangeListMixin, admin.ModelAdmin):
    """No add, no edit, no delete: the rows are the engine's state and audit log. Staff see the
    detail pages in Django's view-only mode."""

    paginator = CappedCountPaginator
    show_full_result_count = False
    # Facet counts run one COUNT per filter choice over the table: not on these tables.
    show_facets = admin.ShowFacets.NEVER


class ReadOnlyInline(NoWritesMixin, admin.TabularInline):
    extra = 0
    max_num = 0
    can_delete = False
    show_change_link = False
