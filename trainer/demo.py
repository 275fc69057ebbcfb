"""Demo accounts for `make run`: one learner and one author (a staff user in Authors)."""

from __future__ import annotations

from dataclasses import dataclass

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, Permission

AUTHORS_GROUP = "Authors"
AUTHOR_MODELS = (
    "topic",
    "question",
    "rubricpoint",
    "problem",
    "step",
    "misconception",
    "loop",
    "loopitem",
)
# The learners' objections to verdicts: authors review them (no add, no delete).
AUTHOR_OBJECTION_PERMS = ("view_verdictobjection", "change_verdictobjection")


@dataclass(frozen=True)
class DemoAccount:
    username: str
    password: str
    role: str


DEMO_LEARNER = DemoAccount("learner", "learn-inference-2026", "learner")
DEMO_AUTHOR = DemoAccount("author", "author-inference-2026", "author (admin at /admin/)")


def authors_group_ensure() -> Group:
    """The Authors group: every permission on the question-bank models, and the review of
    learners' objections to verdicts."""
    group, _ = Group.objects.get_or_create(name=AUTHORS_GROUP)
    perms = Permission.objects.filter(
        content_type__app_label="questions", content_type__model__in=AUTHOR_MODELS
    ) | Permission.objects.filter(
        content_type__app_label="trainer", codename__in=AUTHOR_OBJECTION_PERMS
    )
    group.permissions.set(perms)
    return group


def demo_users_ensure() -> list[DemoAccount]:
    """Create (or reset the passwords of) the demo learner and author; idempotent."""
    user_model = get_user_model()
    group = authors_group_ensure()
    for account in (DEMO_LEARNER, DEMO_AUTHOR):
        user, _ = user_model.objects.get_or_create(username=account.username)
        user.set_password(account.password)
        user.is_staff = account is DEMO_AUTHOR
        user.save()
        if account is DEMO_AUTHOR:
            user.groups.add(group)
    return [DEMO_LEARNER, DEMO_AUTHOR]
