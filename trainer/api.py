"""The practice app's public surface: what other apps (the mock) may use of trainer.

A mock question is a practice attempt run against a clock, so the mock starts, saves,
grades and reviews attempts through these, renders an arithmetic attempt's steps with the
same renderer as the practice page, and asks the grader registry what kind of answer a
question takes. Nothing else of trainer is imported outside it (import-linter holds that):
add to it deliberately.
"""

from trainer.grading.arithmetic import AnswerError
from trainer.grading.registry import grader_for
from trainer.models import Attempt
from trainer.reviews import review_record
from trainer.services import (
    ANSWER_MAX_CHARS,
    AttemptContext,
    attempt_context,
    attempt_grade,
    attempt_start,
    draft_save,
    step_answer_submit,
)
from trainer.steps import StepView, prompt_html, step_views

__all__ = [
    "ANSWER_MAX_CHARS",
    "AnswerError",
    "Attempt",
    "AttemptContext",
    "StepView",
    "attempt_context",
    "attempt_grade",
    "attempt_start",
    "draft_save",
    "grader_for",
    "prompt_html",
    "review_record",
    "step_answer_submit",
    "step_views",
]
