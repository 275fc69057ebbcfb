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


class PointCheck(models.Model):
    """A check offered after a written answer: one short probe for a rubric point the answer
    attempted but did not verify. Offered once, answered once, within CHECK_WINDOW_S."""

    class Kind(models.TextChoices):
        CHOICE = "choice", "Multiple choice"
        NUMBER = "number", "Number with a unit"

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="point_checks")
    point_index = models.PositiveIntegerField()
    kind = models.CharField(max_length=8, choices=Kind.choices)
    ask = models.TextField()
    options = models.JSONField(default=list, blank=True, help_text="As shown (shuffled).")
    unit = models.CharField(max_length=64, blank=True, help_text="A number check's unit.")
    verdict_before = models.CharField(max_length=16)
    offered = models.DateTimeField()
    answered = models.DateTimeField(null=True, blank=True, help_text="Answered or closed.")
    response = models.CharField(max_length=200, blank=True, help_text="Blank: not answered.")
    passed = models.BooleanField(null=True, blank=True, help_text="None: not answered.")
    reason = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ("attempt", "point_index")
        constraints = [
            models.UniqueConstraint(fields=("attempt", "point_index"), name="one_check_per_point"),
        ]

    def __str__(self) -> str:
        return f"{self.attempt_id} check on point {self.point_index}"


class FollowUpResponse(models.Model):
    """A practice answer to one of the question's follow-ups (those with a rubric), graded
    with the same rubric grader on the follow-up's own points."""

    attempt = models.ForeignKey(
        Attempt, on_delete=models.CASCADE, related_name="follow_up_responses"
    )
    index = models.PositiveIntegerField()
    prompt = models.TextField()
    draft = models.TextField(blank=True)
    draft_saved = models.DateTimeField(null=True, blank=True)
    answer = models.TextField(blank=True)
    submitted = models.DateTimeField(null=True, blank=True)
    score = models.FloatField(null=True, blank=True, help_text="0..1")
    result = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("attempt", "index")
        constraints = [
            models.UniqueConstraint(fields=("attempt", "index"), name="one_response_per_follow_up"),
        ]

    def __str__(self) -> str:
        return f"{self.attempt_id} follow-up {self.index}"


class VerdictObjection(models.Model):
    """A learner's "this verdict is wrong" on one point, for the authors' queue."""

    class Status(models.TextChoices):
        OPEN = "open", "Open"
        ACCEPTED = "accepted", "Accepted"
        REJECTED = "rejected", "Rejected"

    class Label(models.TextChoices):  # tests/data/rubric_eval answer labels
        STRONG = "strong", "strong"
        PARTIAL = "partial", "partial"
        ON_TOPIC_WRONG = "on-topic-wrong", "on-topic-wrong"
        OFF = "off", "off"
        ADVERSARIAL = "adversarial", "adversarial"
        BUZZWORD = "buzzword", "buzzword"

    class Correct(models.TextChoices):
        HIT = "hit", "hit (the answer makes the point)"
        MISSED = "missed", "missed (the answer does not make it)"
        CONTRADICTED = "contradicted", "contradicted (the answer states it wrongly)"

    attempt = models.ForeignKey(Attempt, on_delete=models.CASCADE, related_name="objections")
    follow_up = models.PositiveIntegerField(
        null=True, blank=True, help_text="Follow-up index; empty: the main answer."
    )
    point_index = models.PositiveIntegerField()
    verdict = models.CharField(max_length=16, help_text="The verdict objected to.")
    rubric_version = models.CharField(max_length=32, blank=True)
    grader_version = models.CharField(max_length=32, blank=True)
    note = models.TextField(blank=True, help_text="The learner's words.")
    created = models.DateTimeField(auto_now_add=True)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.OPEN)
    staff_label = models.CharField(
        max_length=16, choices=Label.choices, blank=True, help_text="The answer's label."
    )
    correct_verdict = models.CharField(
        max_length=16,
        choices=Correct.choices,
        blank=True,
        help_text="The right verdict for this point; empty: the opposite of the objected one.",
    )

    class Meta:
        ordering = ("-created",)

    def __str__(self) -> str:
        return f"objection to point {self.point_index} of attempt {self.attempt_id}"
