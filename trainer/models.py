"""The practice side: a learner's attempts at questions (filled in by the practice issues)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class Attempt(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="attempts"
    )
    question = models.ForeignKey(
        "questions.Question", on_delete=models.PROTECT, related_name="attempts"
    )
    variant_seed = models.BigIntegerField(null=True, blank=True)
    draft = models.TextField(blank=True)
    answer = models.TextField(blank=True)
    started = models.DateTimeField(auto_now_add=True)
    submitted = models.DateTimeField(null=True, blank=True)
    score = models.FloatField(null=True, blank=True)
    result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("-started",)

    def __str__(self) -> str:
        return f"{self.user} on {self.question_id}"
