"""Everything the site holds about one learner: find it, export it as JSON, delete it.

Which rows are a learner's is Django's own answer: the deletion `Collector` that
`user.delete()` uses gathers every row that cascades from the account (attempts and their
step answers, review cards and logs, lab runs and points, mock interviews with their items,
follow-ups and invites, admin log entries, group memberships). The export serialises
exactly those rows, so what is exported is what is deleted.

`USER_REFERENCES` names every field in the project that points at the user model and how
it is handled; `uncovered_references()` walks `apps.get_models()` and reports any field
missing from it (or whose `on_delete` no longer matches), and both commands refuse to run
until it is declared, so a new model that references users is never silently missed.
Outside the database: sessions (the `django_session` rows that log this user in), and what
the other apps register in `common.learner_data` from their `AppConfig.ready()` — Redis keys
to drop (a lab run's stream, a mock's live stream) and extra export sections (a mock's
scorecards, the notes a user wrote as someone's interviewer).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

from django.apps import apps
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.core import serializers
from django.core.serializers.json import DjangoJSONEncoder
from django.db import models, router, transaction
from django.db.models.deletion import CASCADE, SET_NULL, Collector
from django.utils import timezone

from common import learner_data as contributions

FORMAT_VERSION = 1
# The row is the learner's: exported, and deleted with the account (cascade).
OWNED = "owned"
# The row is someone else's and only mentions the learner: the mention is exported and
# set to NULL on deletion (e.g. the interviewer seat of another learner's mock).
DETACHED = "detached"

USER_REFERENCES: dict[str, str] = {
    "trainer.Attempt.user": OWNED,
    "trainer.ReviewCard.user": OWNED,
    "lab.LabRun.owner": OWNED,
    "mock.MockInterview.user": OWNED,
    "mock.MockInterview.interviewer": DETACHED,
    "mock.MockInvite.used_by": DETACHED,
    "admin.LogEntry.user": OWNED,
    "auth.User_groups.user": OWNED,
    "auth.User_user_permissions.user": OWNED,
}
EXPECTED_ON_DELETE = {OWNED: CASCADE, DETACHED: SET_NULL}
# Never exported: a hash is no use to the learner and a gift to anyone who reads the file.
ACCOUNT_FIELDS_LEFT_OUT = {"password"}


def field_label(f: models.Field) -> str:
    meta = f.model._meta
    return f"{meta.app_label}.{meta.object_name}.{f.name}"


def user_reference_fields() -> list[models.Field]:
    """Every concrete foreign key / one-to-one in the project that points at the user model
    (auto-created many-to-many tables included)."""
    user_model = get_user_model()
    found = []
    for model in apps.get_models(include_auto_created=True):
        for f in model._meta.get_fields():
            if not (f.is_relation and f.concrete and (f.many_to_one or f.one_to_one)):
                continue
            if f.related_model is not None and issubclass(user_model, f.related_model):
                found.append(f)
    return found


def uncovered_references(fields: list[models.Field] | None = None) -> list[str]:
    """Problems with `USER_REFERENCES`: undeclared fields, declared fields that no longer
    exist, and declarations whose on_delete does not do what they say."""
    fields = user_reference_fields() if fields is None else fields
    problems = []
    seen = set()
    for f in fields:
        label = field_label(f)
        seen.add(label)
        how = USER_REFERENCES.get(label)
        if how is None:
            problems.append(
                f"{label} references users but is not in trainer.learner_data.USER_REFERENCES "
                "(declare it owned or detached so export/delete cover it)"
            )
            continue
        on_delete = f.remote_field.on_delete
        if on_delete is not EXPECTED_ON_DELETE[how]:
            problems.append(
                f"{label} is declared {how} but its on_delete is {on_delete.__name__} "
                f"(expected {EXPECTED_ON_DELETE[how].__name__})"
            )
    for label in sorted(set(USER_REFERENCES) - seen):
        problems.append(f"{label} is in USER_REFERENCES but no such field references users")
    return problems


def ensure_covered() -> None:
    from django.core.management.base import CommandError

    problems = uncovered_references()
    if problems:
        raise CommandError("Learner data coverage is incomplete:\n  " + "\n  ".join(problems))


def _model_label(model: type[models.Model]) -> str:
    return model._meta.label  # "app.Model"


def collect(user) -> Collector:
    """What `user.delete()` would delete (and which foreign keys it would set to NULL)."""
    collector = Collector(using=router.db_for_write(type(user), instance=user), origin=user)
    collector.collect([user])
    return collector


def owned_rows(user) -> dict[str, list[models.Model]]:
    """Every row deleted with the account, by model label, the account itself left out."""
    collector = collect(user)
    rows: dict[str, dict[Any, models.Model]] = {}
    for model, instances in collector.data.items():
        for obj in instances:
            rows.setdefault(_model_label(model), {})[obj.pk] = obj
    for qs in collector.fast_deletes:
        for obj in qs:
            rows.setdefault(_model_label(qs.model), {})[obj.pk] = obj
    rows.pop(_model_label(type(user)), None)
    return {
        label: sorted(by_pk.values(), key=lambda o: o.pk) for label, by_pk in sorted(rows.items())
    }


def detached_rows(user) -> dict[str, list[int]]:
    """Other people's rows that mention this user (set NULL on deletion, not deleted):
    field label → pks."""
    owned = {label: {o.pk for o in objs} for label, objs in owned_rows(user).items()}
    out: dict[str, list[int]] = {}
    for f in user_reference_fields():
        if USER_REFERENCES.get(field_label(f)) != DETACHED:
            continue
        pks = f.model._default_manager.filter(**{f.name: user}).values_list("pk", flat=True)
        mine = owned.get(_model_label(f.model), set())
        out[field_label(f)] = sorted(pk for pk in pks if pk not in mine)
    return out


def session_keys(user) -> list[str]:
    """Unexpired database sessions logged in as this user (sessions store no user column,
    so each one is decoded)."""
    keys = []
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        if session.get_decoded().get("_auth_user_id") == str(user.pk):
            keys.append(session.session_key)
    return keys


def _serialise(objs: list[models.Model]) -> list[dict[str, Any]]:
    return serializers.serialize("python", objs)


def _json_safe(value: Any) -> Any:
    """Serializer output → plain JSON types (datetimes and decimals as strings)."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def export(user) -> dict[str, Any]:
    ensure_covered()
    account = _serialise([user])[0]
    for name in ACCOUNT_FIELDS_LEFT_OUT:
        account["fields"].pop(name, None)
    rows = {label: _serialise(objs) for label, objs in owned_rows(user).items()}
    data = {
        "format": FORMAT_VERSION,
        "exported": timezone.now(),
        "account": account,
        "rows": rows,
        "counts": {label: len(objs) for label, objs in rows.items()},
        **contributions.sections(user),
        "mentioned_in": detached_rows(user),
        "active_sessions": len(session_keys(user)),
    }
    return _json_safe(data)


@dataclass
class DeleteReport:
    deleted: dict[str, int] = field(default_factory=dict)
    detached: dict[str, int] = field(default_factory=dict)
    sessions: int = 0
    redis_keys: int = 0
    redis_error: str = ""

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def delete(user) -> DeleteReport:
    """Delete the account and everything it owns in one transaction; log it out everywhere;
    then drop its Redis streams (best effort: they expire within a day anyway)."""
    ensure_covered()
    report = DeleteReport()
    keys = contributions.redis_keys(user)
    with transaction.atomic():
        report.detached = {label: len(pks) for label, pks in detached_rows(user).items() if pks}
        report.sessions = Session.objects.filter(session_key__in=session_keys(user)).delete()[0]
        _total, per_model = user.delete()
        report.deleted = {label: n for label, n in sorted(per_model.items()) if n}
    report.redis_keys, report.redis_error = _delete_redis_keys(keys)
    return report


def _delete_redis_keys(keys: list[str]) -> tuple[int, str]:
    if not keys:
        return 0, ""
    import redis

    import common.redis

    try:
        return int(common.redis.client().delete(*keys)), ""
    except (redis.RedisError, OSError) as exc:
        return 0, f"{type(exc).__name__}: {exc}"
