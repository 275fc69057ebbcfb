"""Lab runs and their durable points (every point is in the DB; Redis only streams it)."""

from __future__ import annotations

from django.conf import settings
from django.db import models


class LabRun(models.Model):
    class Status(models.TextChoices):
        QUEUED = "queued", "Queued"
        RUNNING = "running", "Running"
        DONE = "done", "Done"
        FAILED = "failed", "Failed"
        CANCELLED = "cancelled", "Cancelled"

    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="lab_runs"
    )
    lab = models.SlugField(max_length=80)
    params = models.JSONField(default=dict)
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.QUEUED)
    queue = models.CharField(max_length=32, default="lab-cpu")
    task_id = models.CharField(max_length=64, blank=True)
    worker = models.CharField(max_length=200, blank=True)
    device = models.CharField(max_length=200, blank=True)
    cancel_requested = models.BooleanField(default=False)
    created = models.DateTimeField(auto_now_add=True)
    started = models.DateTimeField(null=True, blank=True)
    finished = models.DateTimeField(null=True, blank=True)
    heartbeat = models.DateTimeField(null=True, blank=True)
    error = models.TextField(blank=True)
    summary = models.JSONField(default=dict, blank=True)
    # Load average, CPU share, torch threads and niceness at start/end (lab/conditions.py).
    conditions = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("-created",)
        indexes = [models.Index(fields=("status", "created"))]

    def __str__(self) -> str:
        return f"{self.lab} #{self.pk} ({self.status})"


class LabPoint(models.Model):
    run = models.ForeignKey(LabRun, on_delete=models.CASCADE, related_name="points")
    seq = models.PositiveIntegerField()
    series = models.CharField(max_length=64)
    x = models.FloatField()
    y = models.FloatField()
    extra = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ("run", "seq")
        constraints = [models.UniqueConstraint(fields=("run", "seq"), name="unique_point_seq")]

    def __str__(self) -> str:
        return f"{self.run_id}#{self.seq} {self.series} ({self.x}, {self.y})"
