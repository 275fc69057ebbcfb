"""The content: topics, questions with rubrics, arithmetic problems, interview loops.

The bank files (questions/bank/*.yaml) are the source of truth; `load_bank` upserts them
here by slug and `export_bank` writes them back.
"""

from __future__ import annotations

from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models

from . import rubric_points
from .markdown import render_markdown

COMPETENCIES = ("latency", "memory", "throughput", "cost", "reliability", "safety", "quality")


class Topic(models.Model):
    slug = models.SlugField(unique=True, max_length=80)
    title = models.CharField(max_length=200)
    summary = models.TextField(blank=True)
    order = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ("order", "slug")

    def __str__(self) -> str:
        return self.title


def published_q(path: str = "") -> models.Q:
    """The one definition of what a learner may see: a published question. `path` reaches
    the question from another model ("question__" from an Attempt, LoopItem or ReviewCard,
    "questions__" from a Topic). Every learner-facing read filters with this; only the
    admin (authors' previews) shows drafts."""
    return models.Q(**{f"{path}status": Question.Status.PUBLISHED})


class QuestionQuerySet(models.QuerySet):
    def published(self) -> QuestionQuerySet:
        return self.filter(published_q())


class Question(models.Model):
    class Kind(models.TextChoices):
        SCENARIO = "scenario", "Scenario"
        ARITHMETIC = "arithmetic", "Arithmetic"
        DESIGN = "design", "Design"

    class Status(models.TextChoices):
        DRAFT = "draft", "Draft"
        PUBLISHED = "published", "Published"

    topic = models.ForeignKey(Topic, on_delete=models.PROTECT, related_name="questions")
    slug = models.SlugField(unique=True, max_length=120)
    kind = models.CharField(max_length=16, choices=Kind.choices)
    title = models.CharField(max_length=200)
    prompt = models.TextField(help_text="Markdown.")
    prompt_html = models.TextField(blank=True, editable=False)
    difficulty = models.PositiveSmallIntegerField(
        default=2, validators=[MinValueValidator(1), MaxValueValidator(3)]
    )
    competencies = models.JSONField(default=list, blank=True)
    model_answer = models.TextField(blank=True, help_text="Markdown.")
    model_answer_html = models.TextField(blank=True, editable=False)
    follow_ups = models.JSONField(
        default=list,
        blank=True,
        help_text='Probes asked next: [{"prompt": "...", "rubric": [point dicts]}] '
        "(rubric optional; see docs/BANK_FORMAT.md).",
    )
    variables = models.JSONField(
        default=dict,
        blank=True,
        help_text="Fixed values the rubric's numbers use, as a problem's parameters with one "
        'value each: {"model": {"catalog": "models", "choices": ["llama-3.1-70b"]}, '
        '"tp": {"value": 4}}.',
    )
    related_labs = models.JSONField(default=list, blank=True)
    sources = models.JSONField(
        default=list,
        blank=True,
        help_text='Where the prose comes from: [{"ref", "url" (optional), "quote", "checked"}].',
    )
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.DRAFT)
    order = models.PositiveIntegerField(default=0)
    updated = models.DateTimeField(auto_now=True)

    objects = QuestionQuerySet.as_manager()

    class Meta:
        ordering = ("topic__order", "order", "slug")

    def __str__(self) -> str:
        return self.title

    def save(self, *args, **kwargs) -> None:
        self.prompt_html = render_markdown(self.prompt)
        self.model_answer_html = render_markdown(self.model_answer)
        super().save(*args, **kwargs)

    def follow_up_items(self) -> list[dict]:
        """Each follow-up as {"prompt": str, "rubric": [full point dicts]} (old plain strings
        too). Resolve a follow-up point for grading with `follow_up_point()`."""
        return [rubric_points.normalise_follow_up(f) for f in self.follow_ups or []]

    def follow_up_prompts(self) -> list[str]:
        return [f["prompt"] for f in self.follow_up_items()]

    def variable_scope(self) -> dict[str, object]:
        """The expression variables of `variables` (model_layers, gpu_memory, tp, ...)."""
        return rubric_points.variables_scope(self.variables or {})

    def follow_up_point(self, follow_up: int, index: int) -> dict:
        """The grader's plain dict of point `index` of follow-up `follow_up` (as as_point())."""
        point = self.follow_up_items()[follow_up]["rubric"][index]
        return rubric_points.resolve_point(point, self.variable_scope())


class RubricPoint(models.Model):
    question = models.ForeignKey(Question, on_delete=models.CASCADE, related_name="rubric")
    order = models.PositiveIntegerField(default=0)
    text = models.TextField()
    weight = models.FloatField(default=1.0, validators=[MinValueValidator(0.01)])
    concepts = models.JSONField(default=list, blank=True)
    penalty = models.BooleanField(
        default=False, help_text="A red flag: subtracts its weight when the answer says it."
    )
    claims = models.JSONField(
        default=list,
        blank=True,
        help_text='1-3 statements that make the point true: ["Decode is memory-bound."]',
    )
    contradictions = models.JSONField(
        default=list,
        blank=True,
        help_text='The usual wrong versions: ["Decode is compute-bound."]',
    )
    key_terms = models.JSONField(
        default=list,
        blank=True,
        help_text='Words a sentence must mention to be about the point; alternatives with " | ": '
        '["decode", "memory-bound | bandwidth"]',
    )
    expects = models.JSONField(
        default=list,
        blank=True,
        help_text='Numbers the point needs: ["320 KiB ±10%", {"expr": "2 * model_layers * '
        'model_kv_heads * model_head_dim * 2 B", "unit": "KiB", "tol": "5%", "label": "KV per '
        'token"}]',
    )
    # Named check_spec because Model.check() is Django's system-check hook; the bank field,
    # point_dict() and as_point() call it "check".
    check_spec = models.JSONField(
        "check",
        db_column="check",
        default=dict,
        blank=True,
        help_text='A probe: {"ask": "Which phase is compute-bound at batch 1?", "answer": '
        '"Prefill", "options": ["Decode", "Both"]} or {"ask": "...", "number": "320 KiB ±5%"}',
    )

    class Meta:
        ordering = ("order", "id")

    def __str__(self) -> str:
        return self.text[:80]

    def point_dict(self) -> dict:
        """The point as authored (bank YAML fields), every field present."""
        data = {name: getattr(self, name) for name in rubric_points.POINT_FIELDS[:-1]}
        return rubric_points.normalise_point({**data, "check": self.check_spec})

    def version(self) -> str:
        """12 hex digits that change whenever the point's text, weight or metadata change."""
        return rubric_points.point_version(self.point_dict())

    def as_point(self) -> dict:
        """The grader's plain dict: expects and check.number evaluated against the
        question's variables to {"value", "unit", "tol" (fraction), "label"}."""
        return rubric_points.resolve_point(self.point_dict(), self.question.variable_scope())


class Problem(models.Model):
    """The arithmetic of a question: how variants are drawn, and its ordered steps."""

    question = models.OneToOneField(Question, on_delete=models.CASCADE, related_name="problem")
    parameters = models.JSONField(default=dict, blank=True)
    condition = models.CharField(max_length=500, blank=True)

    def __str__(self) -> str:
        return f"Problem of {self.question.slug}"


class Step(models.Model):
    problem = models.ForeignKey(Problem, on_delete=models.CASCADE, related_name="steps")
    order = models.PositiveIntegerField(default=0)
    name = models.CharField(max_length=64)
    prompt = models.TextField(help_text="Markdown with {placeholders}.")
    expression = models.CharField(max_length=1000)
    unit = models.CharField(max_length=64)
    rtol = models.FloatField(default=0.01, validators=[MinValueValidator(0)])
    atol = models.FloatField(default=0.0, validators=[MinValueValidator(0)])
    hints = models.JSONField(default=list, blank=True)
    explanation = models.TextField(blank=True)

    class Integer(models.TextChoices):
        FLOOR = "floor", "Whole number, rounded down"
        CEIL = "ceil", "Whole number, rounded up"
        ROUND = "round", "Whole number, rounded to nearest"

    integer = models.CharField(
        max_length=8,
        choices=Integer.choices,
        blank=True,
        help_text="A count (GPUs, sequences): the reference is rounded this way and the "
        "answer must be a whole number.",
    )

    class Meta:
        ordering = ("order", "id")
        constraints = [
            models.UniqueConstraint(fields=("problem", "name"), name="unique_step_name"),
        ]

    def __str__(self) -> str:
        return f"{self.order}. {self.name}"


class Misconception(models.Model):
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="misconceptions")
    order = models.PositiveIntegerField(default=0)
    expression = models.CharField(max_length=1000)
    feedback = models.TextField()

    class Meta:
        ordering = ("order", "id")

    def __str__(self) -> str:
        return self.feedback[:80]


class Loop(models.Model):
    """A named mock-interview loop: ordered questions with minutes each."""

    slug = models.SlugField(unique=True, max_length=80)
    title = models.CharField(max_length=200)
    description = models.TextField(blank=True)
    order = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ("order", "slug")

    def __str__(self) -> str:
        return self.title


class LoopItem(models.Model):
    loop = models.ForeignKey(Loop, on_delete=models.CASCADE, related_name="items")
    question = models.ForeignKey(Question, on_delete=models.PROTECT, related_name="loop_items")
    order = models.PositiveIntegerField(default=0)
    minutes = models.PositiveIntegerField(default=10, validators=[MinValueValidator(1)])

    class Meta:
        ordering = ("order", "id")

    def __str__(self) -> str:
        return f"{self.loop_id}: {self.question_id} ({self.minutes} min)"
