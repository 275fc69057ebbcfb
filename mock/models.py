"""Mock interviews: a timed run through one of the bank's loops.

Each question of the loop is a MockItem with its own server-side start and deadline; the
answer itself is a trainer Attempt (so the practice graders and the fsrs schedule apply),
follow-up probes are FollowUpAnswer rows, and a peer interviewer joins through a
single-use MockInvite.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class MockInterview(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "In progress"
        FINISHED = "finished", "Finished"

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="mock_interviews"
    )
    loop = models.ForeignKey("questions.Loop", on_delete=models.PROTECT, related_name="mocks")
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.ACTIVE)
    started = models.DateTimeField()
    deadline = models.DateTimeField(help_text="The whole loop's deadline (server time).")
    finished = models.DateTimeField(null=True, blank=True)
    time_scale = models.FloatField(default=1.0, help_text="MOCK_TIME_SCALE when started.")
    budget_s = models.FloatField(help_text="Sum of the items' budgets, in seconds.")
    interviewer = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="mocks_interviewed",
    )
    overall = models.FloatField(null=True, blank=True, help_text="0..10, the auto score.")
    competencies = models.JSONField(default=dict, blank=True, help_text="competency → 0..10")

    class Meta:
        ordering = ("-started",)

    def __str__(self) -> str:
        return f"{self.user} · {self.loop_id} · {self.started:%Y-%m-%d %H:%M}"


class MockItem(models.Model):
    """One question of a mock: its budget, server-side start and deadline, lateness."""

    mock = models.ForeignKey(MockInterview, on_delete=models.CASCADE, related_name="items")
    order = models.PositiveIntegerField()
    question = models.ForeignKey(
        "questions.Question", on_delete=models.PROTECT, related_name="mock_items"
    )
    budget_s = models.FloatField()
    attempt = models.OneToOneField(
        "trainer.Attempt",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="mock_item",
    )
    started = models.DateTimeField(null=True, blank=True)
    deadline = models.DateTimeField(null=True, blank=True)
    answered = models.DateTimeField(null=True, blank=True, help_text="Main answer stored.")
    closed = models.DateTimeField(null=True, blank=True)
    late = models.BooleanField(
        default=False, help_text="Main answer (or a step) after the deadline."
    )
    step_drafts = models.JSONField(default=dict, blank=True, help_text="step name → typed text")
    step_drafts_saved = models.DateTimeField(null=True, blank=True)
    late_steps = models.JSONField(default=list, blank=True)
    interviewer_points = models.JSONField(null=True, blank=True)
    interviewer_notes = models.TextField(blank=True)
    interviewer_score = models.FloatField(null=True, blank=True, help_text="0..1")

    class Meta:
        ordering = ("mock", "order")
        constraints = [
            models.UniqueConstraint(fields=("mock", "order"), name="one_item_per_order"),
        ]

    def __str__(self) -> str:
        return f"{self.mock_id}/{self.order}: {self.question_id}"


class FollowUpAnswer(models.Model):
    """The answer to one follow-up probe, shown one at a time after the main answer."""

    item = models.ForeignKey(MockItem, on_delete=models.CASCADE, related_name="follow_up_answers")
    index = models.PositiveIntegerField()
    prompt = models.TextField()
    draft = models.TextField(blank=True)
    draft_saved = models.DateTimeField(null=True, blank=True)
    answer = models.TextField(blank=True)
    submitted = models.DateTimeField(null=True, blank=True)
    late = models.BooleanField(default=False)
    score = models.FloatField(null=True, blank=True, help_text="0..1 (follow-ups with a rubric)")
    result = models.JSONField(default=dict, blank=True, help_text="The rubric grader's result.")

    class Meta:
        ordering = ("item", "index")
        constraints = [
            models.UniqueConstraint(fields=("item", "index"), name="one_answer_per_follow_up"),
        ]

    def __str__(self) -> str:
        return f"{self.item_id} follow-up {self.index}"


class MockInvite(models.Model):
    """A link that makes its first (non-candidate) opener the mock's interviewer."""

    mock = models.ForeignKey(MockInterview, on_delete=models.CASCADE, related_name="invites")
    token = models.CharField(max_length=64, unique=True)
    created = models.DateTimeField(auto_now_add=True)
    expires = models.DateTimeField()
    used_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )
    used = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"invite for mock {self.mock_id}"
