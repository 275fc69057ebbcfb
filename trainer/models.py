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
    score = models.FloatField(null=True, blank=True, help_text="0..1")
    result = models.JSONField(default=dict, blank=True)
    hints = models.JSONField(default=dict, blank=True, help_text="Hints revealed per step.")

    class Meta:
        ordering = ("-started",)

    def __str__(self) -> str:
        return f"{self.user} on {self.question_id}"


class StepAnswer(models.Model):
    """One graded step of an arithmetic attempt: what was typed, how it was read, the verdict."""

    class Verdict(models.TextChoices):
        CORRECT = "correct", "Correct"
        FOLLOW_THROUGH = "follow_through", "Correct given your earlier answer"
        MISCONCEPTION = "misconception", "Misconception"
        SLIP = "slip", "Slip"
        INCORRECT = "incorrect", "Incorrect"

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="step_answers")
    step_name = models.CharField(max_length=64)
    order = models.PositiveIntegerField(default=0)
    raw = models.CharField(max_length=200)
    value = models.FloatField(help_text="The parsed answer, in `unit`.")
    unit = models.CharField(max_length=64)
    verdict = models.CharField(max_length=16, choices=Verdict.choices)
    credit = models.FloatField()
    feedback = models.TextField(blank=True)
    hints_used = models.PositiveSmallIntegerField(default=0)
    expected = models.FloatField(help_text="The reference answer, in `unit`.")
    expected_given_yours = models.FloatField(null=True, blank=True)
    broke_at = models.CharField(max_length=64, blank=True)
    created = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ("attempt", "order")
        constraints = [
            models.UniqueConstraint(fields=("attempt", "step_name"), name="one_answer_per_step"),
        ]

    def __str__(self) -> str:
        return f"{self.attempt_id}/{self.step_name}: {self.raw} ({self.verdict})"
