"""Request hygiene shared by every view."""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse, QueryDict

NUL = "\x00"


def _without_nul(data: QueryDict) -> QueryDict:
    if not any(NUL in key or any(NUL in v for v in values) for key, values in data.lists()):
        return data
    clean = QueryDict(mutable=True, encoding=data.encoding)
    for key, values in data.lists():
        clean.setlist(key.replace(NUL, ""), [v.replace(NUL, "") for v in values])
    clean._mutable = False
    return clean


class StripNulMiddleware:
    """Drop NUL characters from query strings and form posts before any view sees them.

    Nobody types U+0000, but a pasted binary blob or a crafted request can carry it, and
    PostgreSQL text columns refuse it ("cannot contain NUL (0x00) bytes"): a save would
    be a 500 on PostgreSQL while SQLite stores it. Removing it loses no text a person wrote;
    the rest of the answer is kept."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        request.GET = _without_nul(request.GET)
        if request.method == "POST" and request.content_type in (
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ):
            request.POST = _without_nul(request.POST)
        return self.get_response(request)
