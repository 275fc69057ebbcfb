"""Lab titles by slug, for apps that link to labs without importing the lab app.

The lab registers a lookup at `AppConfig.ready()`; a page that names related labs (the mock
scorecard) asks `title(slug)` and links the page by URL name. A slug no lookup knows (a lab
that was removed, or the lab app not installed) has no title: callers leave it out.
"""

from __future__ import annotations

from collections.abc import Callable

TitleOf = Callable[[str], "str | None"]

_lookups: list[TitleOf] = []


def register(lookup: TitleOf) -> None:
    """Add a `slug -> title or None` lookup (read at each call, so it may be lazy)."""
    if lookup not in _lookups:
        _lookups.append(lookup)


def unregister(lookup: TitleOf) -> None:
    if lookup in _lookups:
        _lookups.remove(lookup)


def title(slug: str) -> str | None:
    """The lab's title, or None when no registered catalog has that slug."""
    for lookup in _lookups:
        found = lookup(slug)
        if found is not None:
            return found
    return None
