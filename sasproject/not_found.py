"""A row that does not exist, or that the user may not see, is a 404 page: the one way the pages'
views say so."""

from __future__ import annotations

from types import TracebackType

from django.http import Http404


class AsNotFound:
    """`with AsNotFound("No such order.", Order.DoesNotExist): ...` - any of the named errors
    raised inside becomes Http404 with the message (the lookup's error is not chained: the page
    says no more than "no such"). Never swallows an error."""

    def __init__(self, message: str, *missing: type[Exception]) -> None:
        self.message, self.missing = message, missing

    def __enter__(self) -> None:
        return None

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        if kind is not None and issubclass(kind, self.missing):
            raise Http404(self.message) from None
