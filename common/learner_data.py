"""What each app adds to a learner's data export and deletion, registered at start-up.

`trainer.learner_data` finds the learner's database rows itself (Django's deletion
`Collector` follows every foreign key). What the rows alone do not give is registered here
by the app that owns it, from its `AppConfig.ready()`:

- `redis_keys(user)`: keys outside the database to drop with the account (a lab run's
  stream, a mock's live stream);
- `sections`: extra named parts of the export, computed from the rows so the file reads
  without the site (a mock's scorecards, the notes a user wrote as someone's interviewer).

No app imports another for this: each registers its own, trainer only calls the registry.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

KeysOf = Callable[[Any], list[str]]
SectionOf = Callable[[Any], Any]


@dataclass(frozen=True)
class Contributor:
    """One app's part of a learner's data beyond its rows."""

    app: str
    redis_keys: KeysOf | None = None
    sections: Mapping[str, SectionOf] = field(default_factory=dict)


_contributors: dict[str, Contributor] = {}


def register(
    app: str, *, redis_keys: KeysOf | None = None, sections: Mapping[str, SectionOf] = ()
) -> Contributor:
    """Register `app`'s contributor, from its AppConfig.ready() (again: replaces it).
    Export sections keep the order given; a section name may belong to one app only."""
    sections = dict(sections)
    for other in _contributors.values():
        if other.app == app:
            continue
        taken = sections.keys() & other.sections.keys()
        if taken:
            raise ValueError(f"export section(s) {sorted(taken)} already belong to {other.app!r}")
    contributor = Contributor(app, redis_keys, sections)
    _contributors[app] = contributor
    return contributor


def unregister(app: str) -> None:
    """Forget `app`'s contributor (for tests that register a stand-in)."""
    _contributors.pop(app, None)


def contributors() -> list[Contributor]:
    """Every registered contributor, in registration order (INSTALLED_APPS order)."""
    return list(_contributors.values())


def redis_keys(user) -> list[str]:
    """The Redis keys of every app that holds some of this user's data there."""
    keys: list[str] = []
    for c in _contributors.values():
        if c.redis_keys is not None:
            keys += c.redis_keys(user)
    return keys


def sections(user) -> dict[str, Any]:
    """Every app's extra export sections for this user, by name."""
    return {
        name: section(user) for c in _contributors.values() for name, section in c.sections.items()
    }
