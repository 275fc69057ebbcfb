"""Reads for the practice side (querysets and lookups scoped to the learner)."""

from __future__ import annotations

from django.http import HttpRequest
from django.shortcuts import get_object_or_404

from trainer.models import Attempt


def own_attempt(request: HttpRequest, attempt_id: int) -> Attempt:
    """The signed-in learner's attempt; someone else's is indistinguishable from missing."""
    return get_object_or_404(
        Attempt.objects.select_related("question__topic"), pk=attempt_id, user=request.user
    )
