"""Authoring helpers behind the admin: validate a problem as edited, preview a variant,
export selected content. The same checks as `load_bank` (questions.bank)."""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any

from pydantic import ValidationError

from questions import bank as bank_files
from questions import problems
from questions.expressions import ExpressionError, format_quantity
from questions.markdown import render_markdown
from questions.models import Problem, Question, Topic
from questions.services import dump_yaml, question_dict, topic_file_dict

ADMIN_CHECK_VARIANTS = 24  # "every expression evaluates for >= 20 random variants"


@dataclass(frozen=True)
class Issue:
    """One thing wrong with a problem: where, as the bank names it, and what. `step` is the
    index of the step (in order) it belongs to, `field` that step's field ("expression",
    "unit", "misconceptions[0] > expression"); None and "" for the problem as a whole."""

    path: str
    message: str
    step: int | None = None
    field: str = ""

    def __str__(self) -> str:
        return f"{self.path}: {self.message}"


def problem_issues(data: dict[str, Any]) -> list[Issue]:
    """Everything wrong with a problem given as the bank's `problem:` mapping, each issue
    tied to its step where it has one (so the admin can show it on that step's row)."""
    try:
        problem_in = bank_files.ProblemIn.model_validate(data)
    except ValidationError as exc:
        return [_schema_issue(err) for err in exc.errors()]
    names = [str(s.get("name", "")) for s in data.get("steps") or ()]
    checked = bank_files.check_problem(problem_in)
    return [_check_issue(path, message, names) for path, message in checked]


def _schema_issue(err: Any) -> Issue:
    loc = err["loc"]
    message = err["msg"].removeprefix("Value error, ")
    path = " > ".join(str(p) for p in loc)
    if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
        return Issue(path, message, step=loc[1], field=" > ".join(str(p) for p in loc[2:]))
    return Issue(path, message)


def _check_issue(path: str, message: str, names: list[str]) -> Issue:
    """check_problem's paths read "steps[1] (kv_per_seq) > expression"."""
    for i, name in enumerate(names):
        prefix = f"steps[{i}] ({name})"
        if path == prefix or path.startswith(f"{prefix} > "):
            return Issue(path, message, step=i, field=path[len(prefix) :].removeprefix(" > "))
    return Issue(path, message)


def problem_errors(data: dict[str, Any]) -> list[str]:
    """Everything wrong with a problem given as the bank's `problem:` mapping."""
    return [str(issue) for issue in problem_issues(data)]


def problem_data(problem: Problem, steps: list[dict] | None = None) -> dict[str, Any]:
    """The bank mapping of a saved problem, optionally with edited steps in place of saved."""
    if steps is None:
        steps = question_dict(problem.question).get("problem", {}).get("steps", [])
    return {"parameters": problem.parameters, "condition": problem.condition, "steps": steps}


@dataclass(frozen=True)
class StepPreview:
    name: str
    prompt_html: str
    answer: str
    unit: str
    tolerance: str
    hints: tuple[str, ...]
    misconceptions: tuple[tuple[str, str], ...]
    explanation_html: str


@dataclass(frozen=True)
class VariantPreview:
    seed: int
    choices: dict[str, Any]
    steps: tuple[StepPreview, ...]
    error: str = ""
    scope: dict[str, object] = field(default_factory=dict, repr=False)


def variant_preview(problem: problems.Problem, seed: int | None = None) -> VariantPreview:
    """One random variant with the reference answer (and each misconception's value)."""
    seed = random.randrange(2**31) if seed is None else seed
    try:
        variant = problems.draw_variant(problem, seed)
        scope: dict[str, object] = dict(variant.variables)
        values = problems.solve(problem, scope)
    except (problems.ProblemError, ExpressionError) as exc:
        return VariantPreview(seed=seed, choices={}, steps=(), error=str(exc))
    scope.update(values)
    steps = tuple(_step_preview(step, values[step.name], scope) for step in problem.steps)
    return VariantPreview(seed=seed, choices=variant.choices, steps=steps, scope=scope)


def _step_preview(step: problems.Step, value, scope: dict[str, object]) -> StepPreview:
    def fill(text: str) -> str:
        return problems.render_text(text, scope)

    wrong = problems.misconception_values(step, scope)
    return StepPreview(
        name=step.name,
        prompt_html=render_markdown(fill(step.prompt)),
        answer=format_quantity(value, step.unit),
        unit=describe_unit(step.unit, step.integer),
        tolerance=tolerance_text(step.rtol, step.atol, step.unit, step.integer),
        hints=tuple(fill(h) for h in step.hints),
        misconceptions=tuple((format_quantity(v, step.unit), fill(m.feedback)) for m, v in wrong),
        explanation_html=render_markdown(fill(step.explanation)),
    )


def tolerance_text(rtol: float, atol: float, unit: str, integer: str = "") -> str:
    """How a learner is told the tolerance: "within 1%" (plus an absolute floor if any),
    after how to round on an integer step: "round down · within 1%"."""
    text = f"within {rtol * 100:.3g}%"
    text = f"{text} or {atol:g} {unit}" if atol else text
    return f"{problems.ROUNDING_WORDS[integer]} · {text}" if integer else text


def describe_unit(unit: str, integer: str = "") -> str:
    """The answer box's unit: "GiB", "percent", "a plain number", "a whole number"."""
    if unit.strip() in ("", "1", "dimensionless"):
        return "a whole number" if integer else "a plain number"
    return f"{unit}, a whole number" if integer else unit


def questions_yaml(questions: list[Question]) -> str:
    """Selected questions in the bank format, one YAML document per topic."""
    documents = []
    by_topic: dict[int, list[Question]] = {}
    for q in sorted(questions, key=lambda q: (q.topic.order, q.order, q.slug)):
        by_topic.setdefault(q.topic_id, []).append(q)
    for topic_questions in by_topic.values():
        topic = topic_questions[0].topic
        document = topic_file_dict(topic)
        wanted = {q.slug for q in topic_questions}
        document["questions"] = [d for d in document["questions"] if d["slug"] in wanted]
        documents.append(dump_yaml(document))
    return "---\n".join(documents)


def topics_yaml(topics: list[Topic]) -> str:
    return "---\n".join(dump_yaml(topic_file_dict(t)) for t in topics)
