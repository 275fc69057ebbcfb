"""An arithmetic attempt's prompt and steps as pages show them: the one step renderer.

The practice page, the mock's question page and the interviewer's seat all render the
variant's numbers into the question and step prompts here; each page's template picks the
fields it shows (the mock shows no hints, tolerances or references to the candidate).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from questions.authoring import describe_unit, tolerance_text
from questions.expressions import UREG, format_quantity, parse_unit
from questions.markdown import render_markdown
from questions.problems import render_text, solve
from trainer.models import StepAnswer
from trainer.services import AttemptContext


@dataclass(frozen=True)
class StepView:
    number: int  # 1-based
    name: str
    prompt_html: str
    unit: str
    unit_label: str
    tolerance: str
    hints: list[str]  # the hints revealed so far
    hints_left: int
    answer: StepAnswer | None
    reference: str  # "" unless revealed
    explanation_html: str  # "" unless revealed
    your_value: str  # the learner's answer as read, "" before one
    draft: str = ""  # a mock's autosaved, not yet submitted text


def prompt_html(context: AttemptContext) -> str:
    """The question's prompt with this variant's numbers."""
    scope = dict(context.variant.variables)
    return render_markdown(render_text(context.attempt.question.prompt, scope))


def step_views(
    context: AttemptContext,
    *,
    reveal: bool | None = None,
    drafts: Mapping[str, str] | None = None,
) -> list[StepView]:
    """Every step of the attempt, prompts filled with the variant and its reference chain.
    `reveal` adds each step's reference answer and explanation (default: once the attempt
    is finished); `drafts` are the mock's unsent step texts by step name."""
    if reveal is None:
        reveal = context.attempt.submitted is not None
    drafts = drafts or {}
    scope = dict(context.variant.variables)
    reference = solve(context.problem, scope)
    scope.update(reference)
    views = []
    for i, step in enumerate(context.problem.steps):
        shown = context.attempt.hints.get(step.name, 0)
        answer = context.answers.get(step.name)
        views.append(
            StepView(
                number=i + 1,
                name=step.name,
                prompt_html=render_markdown(render_text(step.prompt, scope)),
                unit=step.unit,
                unit_label=describe_unit(step.unit, step.integer),
                tolerance=tolerance_text(step.rtol, step.atol, step.unit, step.integer),
                hints=[render_text(h, scope) for h in step.hints[:shown]],
                hints_left=len(step.hints) - shown,
                answer=answer,
                reference=format_quantity(reference[step.name], step.unit) if reveal else "",
                explanation_html=render_markdown(render_text(step.explanation, scope))
                if reveal
                else "",
                your_value=format_quantity(UREG.Quantity(answer.value, parse_unit(step.unit)))
                if answer
                else "",
                draft=drafts.get(step.name, ""),
            )
        )
    return views
