"""The practice app's public surface: what other apps (the mock) may use of trainer.

A mock question is a practice attempt run against a clock, so the mock starts, saves,
grades and reviews attempts through these, renders an arithmetic attempt's steps with the
same renderer as the practice page, grades follow-up answers, reads verdicts like the
practice feedback (and point checks: the interviewer's probes), and asks the grader
registry what kind of answer a question takes. Nothing else of trainer is imported
outside it (import-linter holds that): add to it deliberately.
"""

from trainer.check_specs import CheckSpec, check_spec
from trainer.feedback import PointRow, RubricLine, Total, point_rows, total
from trainer.follow_ups import follow_up_grade
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
    "CheckSpec",
    "PointRow",
    "RubricLine",
    "StepView",
    "Total",
    "attempt_context",
    "attempt_grade",
    "attempt_start",
    "check_spec",
    "draft_save",
    "follow_up_grade",
    "grader_for",
    "point_rows",
    "prompt_html",
    "review_record",
    "step_answer_submit",
    "step_views",
    "total",
]
