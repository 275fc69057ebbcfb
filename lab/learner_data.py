"""The lab's part of a learner's data beyond its rows (registered in LabConfig.ready()):
the Redis stream of each of the learner's runs, dropped with the account."""

from __future__ import annotations

from lab import broker
from lab.models import LabRun


def redis_keys(user) -> list[str]:
    return [
        broker.stream_key(pk)
        for pk in LabRun.objects.filter(owner=user).values_list("pk", flat=True)
    ]
