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
    draft_saved = models.DateTimeField(null=True, blank=True)
    graded = models.DateTimeField(null=True, blank=True)
    grader_error = models.TextField(blank=True)
    self_points = models.JSONField(
        null=True, blank=True, help_text="Rubric point indices the learner says they covered."
    )
    self_score = models.FloatField(null=True, blank=True, help_text="0..1")

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


class ReviewCard(models.Model):
    """Spaced repetition (fsrs): one card per learner and question."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="review_cards"
    )
    question = models.ForeignKey(
        "questions.Question", on_delete=models.CASCADE, related_name="review_cards"
    )
    card = models.JSONField(default=dict, help_text="fsrs.Card.to_dict()")
    due = models.DateTimeField(db_index=True)
    reviews = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ("due",)
        constraints = [
            models.UniqueConstraint(fields=("user", "question"), name="one_card_per_question"),
        ]

    def __str__(self) -> str:
        return f"{self.user} · {self.question_id} due {self.due:%Y-%m-%d}"


class ReviewLog(models.Model):
    card = models.ForeignKey(ReviewCard, on_delete=models.CASCADE, related_name="logs")
    attempt = models.ForeignKey(Attempt, on_delete=models.SET_NULL, null=True, blank=True)
    rating = models.PositiveSmallIntegerField(help_text="fsrs Rating: 1 Again .. 4 Easy")
    reviewed = models.DateTimeField()
    duration_s = models.PositiveIntegerField(default=0)
    next_due = models.DateTimeField()

    class Meta:
        ordering = ("-reviewed",)

    def __str__(self) -> str:
        return f"{self.card_id} rated {self.rating} at {self.reviewed:%Y-%m-%d %H:%M}"
