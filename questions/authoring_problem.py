"""The Problem page's live preview: the problem as the change form holds it now (saved or
not), and one variant of it worked step by step: each step's expression, the same with this
variant's numbers in place of the names, and its value in the step's unit.

The numbers come from `questions.problems` (draw_variant, step_value), the code that draws
and grades a learner's variant; an invalid expression becomes that step's error, never a 500.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pydantic

from questions import authoring, catalog, problems
from questions import bank as bank_files
from questions.expressions import (
    ExpressionError,
    describe_dimension,
    evaluate,
    format_quantity,
    same_dimension,
)
from questions.markdown import render_markdown
from questions.models import Problem

MAX_ROWS = 200  # steps read from a posted form; a problem has a handful
STEP_FIELDS = ("order", "name", "prompt", "expression", "unit", "integer", "rtol", "atol")
_NAME_RE = re.compile(r"(?<![\w.])[A-Za-z_]\w*(?![\w(])")
_PLAIN_NUMBER_RE = re.compile(r"[\d.,]+")


@dataclass(frozen=True)
class EditedProblem:
    """The bank's `problem:` mapping as edited, and what in the form could not be read."""

    data: dict[str, Any]
    unreadable: tuple[str, ...] = ()


def problem_as_edited(post: Mapping[str, str], saved: Problem | None) -> EditedProblem:
    """Read the change form's fields (parameters, condition, the step rows); whatever the
    form does not carry comes from `saved`. Misconceptions are always the saved ones: they
    are edited on each step's own page."""
    data = authoring.problem_data(saved) if saved else {"parameters": {}, "condition": ""}
    data.setdefault("steps", [])
    unreadable: list[str] = []
    if "parameters" in post:
        try:
            data["parameters"] = json.loads(post["parameters"] or "{}")
        except json.JSONDecodeError as exc:
            unreadable.append(
                f"parameters: not valid JSON ({exc.msg} at line {exc.lineno}, column "
                f"{exc.colno}); fix it to see a variant"
            )
    if "condition" in post:
        data["condition"] = post["condition"].strip()
    if "steps-TOTAL_FORMS" in post:
        data["steps"] = _edited_steps(post, saved, unreadable)
    return EditedProblem(data=data, unreadable=tuple(unreadable))


def _edited_steps(post: Mapping[str, str], saved: Problem | None, unreadable: list[str]):
    saved_misconceptions = {}
    if saved is not None:
        for step in saved.steps.prefetch_related("misconceptions"):
            saved_misconceptions[str(step.pk)] = [
                {"expression": m.expression, "feedback": m.feedback}
                for m in step.misconceptions.all()
            ]
    total = post.get("steps-TOTAL_FORMS", "0")
    rows = []
    for i in range(min(int(total) if total.isdigit() else 0, MAX_ROWS)):
        row = {name: (post.get(f"steps-{i}-{name}") or "").strip() for name in STEP_FIELDS}
        if post.get(f"steps-{i}-DELETE") or not (row["name"] or row["expression"]):
            continue  # deleted, or an "add another" row left blank
        where = f"step {row['name'] or i + 1}"
        step = {
            **{name: row[name] for name in ("name", "prompt", "expression", "unit")},
            "integer": row["integer"] or None,
            "rtol": _number(row["rtol"], 0.01, f"{where} > rtol", unreadable),
            "atol": _number(row["atol"], 0.0, f"{where} > atol", unreadable),
            "hints": _json_list(post.get(f"steps-{i}-hints", "")),
            "explanation": post.get(f"steps-{i}-explanation", ""),
            "misconceptions": saved_misconceptions.get(post.get(f"steps-{i}-id", ""), []),
        }
        rows.append((_number(row["order"], 0, f"{where} > order", unreadable), i, step))
    return [step for _, _, step in sorted(rows, key=lambda r: r[:2])]


def _number(text: str, default: float, where: str, unreadable: list[str]) -> float:
    if not text:
        return default
    try:
        return float(text)
    except ValueError:
        unreadable.append(f"{where}: {text!r} is not a number (the preview uses {default:g})")
        return default


def _json_list(text: str) -> list[str]:
    try:
        value = json.loads(text or "[]")
    except json.JSONDecodeError:
        return []
    return [str(v) for v in value] if isinstance(value, list) else []


@dataclass(frozen=True)
class WorkedStep:
    name: str
    prompt_html: str
    expression: str
    substituted: str = ""  # the expression with this variant's numbers for the names
    value: str = ""  # "320 KiB": in the step's unit, rounded as the step says
    magnitude: float | None = None
    rounding: str = ""  # "round down" on an integer step
    error: str = ""


@dataclass(frozen=True)
class WorkedVariant:
    seed: int
    choices: dict[str, Any]
    steps: tuple[WorkedStep, ...] = ()
    error: str = ""  # nothing could be worked: the parameters or the condition


def work_variant(data: Mapping[str, Any], seed: int) -> WorkedVariant:
    """Draw the variant of `seed` and work every step in order; a step that fails carries
    the error, and the steps after it are not worked (they may use its value)."""
    try:
        spec = problems.from_dict({**data, "parameters": _parameter_specs(data)})
        variant = problems.draw_variant(spec, seed)
    except (problems.ProblemError, ExpressionError, catalog.CatalogError) as exc:
        return WorkedVariant(seed=seed, choices={}, error=str(exc))
    scope: dict[str, object] = dict(variant.variables)
    steps: list[WorkedStep] = []
    broken = ""
    for step in spec.steps:
        prompt_html = render_markdown(problems.render_text(step.prompt, scope))
        if broken:
            error = f"not worked: it comes after {broken!r}, which has an error"
            steps.append(WorkedStep(step.name, prompt_html, step.expression, error=error))
            continue
        worked = _work_step(step, scope, prompt_html)
        broken = step.name if worked.error else ""
        steps.append(worked)
    return WorkedVariant(seed=seed, choices=variant.choices, steps=tuple(steps))


def _parameter_specs(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    parameters = data.get("parameters")
    if not isinstance(parameters, dict) or not parameters:
        raise problems.ProblemError(
            'add parameters to draw a variant, e.g. {"tp": {"choices": [1, 2, 4]}}'
        )
    specs = {}
    for name, raw in parameters.items():
        try:
            specs[name] = bank_files.ParameterIn.model_validate(raw).spec()
        except pydantic.ValidationError as exc:
            first = exc.errors()[0]
            where = " > ".join(str(p) for p in (name, *first["loc"]))
            message = first["msg"].removeprefix("Value error, ")
            raise problems.ProblemError(f"parameters > {where}: {message}") from None
    return specs


def _work_step(step: problems.Step, scope: dict[str, object], prompt_html: str) -> WorkedStep:
    """One step in `scope` (its value is added to `scope` for the steps after it)."""
    shown = substituted(step.expression, scope)
    try:
        raw = evaluate(step.expression, scope)
        if not same_dimension(raw, step.unit):
            raise ExpressionError(
                f"the unit is {step.unit!r} ({describe_dimension(step.unit)}) but the "
                f"expression yields {raw.units:~P} ({describe_dimension(raw)})"
            )
        value = problems.step_value(step, scope)  # what the grader compares answers with
    except ExpressionError as exc:
        return WorkedStep(step.name, prompt_html, step.expression, shown, error=str(exc))
    scope[step.name] = value
    return WorkedStep(
        step.name,
        prompt_html,
        step.expression,
        shown,
        value=format_quantity(value, step.unit),
        magnitude=float(value.magnitude),
        rounding=problems.ROUNDING_WORDS.get(step.integer, ""),
    )


def substituted(expression: str, scope: Mapping[str, object]) -> str:
    """`expression` with each variable's value in place of its name: "2 * model_layers"
    -> "2 * 80"; values with a unit are bracketed: "(4,096 token)"."""

    def fill(match: re.Match[str]) -> str:
        value = scope.get(match.group())
        if value is None or isinstance(value, str | bool):
            return match.group()  # a unit, a function, or a name the scope lacks
        text = format_quantity(value)
        return text if _PLAIN_NUMBER_RE.fullmatch(text) else f"({text})"

    return _NAME_RE.sub(fill, " ".join(str(expression).split()))
