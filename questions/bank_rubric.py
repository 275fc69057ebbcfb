"""The rubric part of a bank question (issue 19): a point's claims, contradictions,
key_terms, expects and check, and follow-ups with their own small rubric.

Schema (pydantic, as questions.bank) plus the checks that need the question: numbers that
must evaluate against its variables, and the rule that a published scenario/design
question gives every earning point `claims` and a `check` (docs/BANK_FORMAT.md).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from questions import rubric_points
from questions.expressions import ExpressionError


class _Strict(BaseModel):  # as questions.bank._Strict (kept here to avoid an import cycle)
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)


class NumberIn(_Strict):
    """A number a point expects: an expression over the question's variables, its unit,
    a tolerance ("5%" or a fraction) and a label the learner may see."""

    expr: str | int | float
    unit: str = ""
    tol: str | float = "10%"
    label: str = ""


NumberSpec = str | NumberIn  # "320 KiB ±10%" or {expr, unit, tol, label}


class CheckIn(_Strict):
    """The probe that confirms a point: a multiple choice (`answer` + distractor `options`,
    by default the point's contradictions) or a `number`."""

    ask: str = Field(min_length=1)
    answer: str | None = Field(default=None, min_length=1)
    options: list[str] | None = None
    number: NumberSpec | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> CheckIn:
        if (self.answer is None) == (self.number is None):
            raise ValueError(
                "give exactly one of `answer` (a multiple choice) or `number` (a number check)"
            )
        if self.number is not None and self.options is not None:
            raise ValueError("`options` belong to a multiple choice; a number check has none")
        if self.answer is not None and self.answer in (self.options or []):
            raise ValueError(f"the answer {self.answer!r} is also listed as a wrong option")
        return self


class RubricPointIn(_Strict):
    text: str = Field(min_length=1)
    weight: float = Field(default=1.0, gt=0)
    concepts: list[str] = []
    penalty: bool = False
    claims: list[str] = Field(default=[], max_length=3)
    contradictions: list[str] = []
    key_terms: list[str] = []
    expects: list[NumberSpec] = []
    check: CheckIn | None = None

    @field_validator("concepts", "claims", "contradictions", "key_terms", mode="before")
    @classmethod
    def _text_entries(cls, value: Any) -> Any:
        # YAML reads `[MLA, 70,272 B]` as [MLA, 70, "272 B"]: a bare number in a list of terms
        # is almost always a split thousands separator (or a figure that should be quoted).
        if isinstance(value, list):
            for v in value:
                if isinstance(v, (int, float)) and not isinstance(v, bool):
                    raise ValueError(
                        f"has the bare number {v!r}: quote each entry that holds a number "
                        '(YAML splits [70,272 B] into 70 and "272 B")'
                    )
        return value

    @field_validator("claims", "contradictions", "key_terms")
    @classmethod
    def _no_blank_entries(cls, value: list[str]) -> list[str]:
        if any(not v.strip() for v in value):
            raise ValueError("has an empty entry; remove it or write the statement")
        return value

    @model_validator(mode="after")
    def _choice_has_options(self) -> RubricPointIn:
        check = self.check
        if check is not None and check.answer is not None:
            options = check.options if check.options is not None else self.contradictions
            if len(options) < 1:
                raise ValueError(
                    "check: a multiple-choice check needs at least 2 options in all (the "
                    "answer and 1+ wrong ones); give `options` or the point's `contradictions`"
                )
        return self


class FollowUpIn(_Strict):
    """A probe an interviewer asks next; its own small rubric (1-3 points, check optional)."""

    prompt: str = Field(min_length=1)
    rubric: list[RubricPointIn] = Field(default=[], max_length=3)


def follow_up_objects(value: Any) -> Any:
    """Plain strings (the old format) are follow-ups without a rubric."""
    if isinstance(value, list):
        return [{"prompt": v} if isinstance(v, str) else v for v in value]
    return value


def point_number_errors(point: RubricPointIn, scope: dict[str, object]) -> list[tuple[str, str]]:
    """(path, message) for each of a point's `expects` and `check.number` that does not
    evaluate in `scope` (the question's variables)."""
    numbers: list[tuple[str, Any]] = [(f"expects[{j}]", e) for j, e in enumerate(point.expects)]
    if point.check is not None and point.check.number is not None:
        numbers.append(("check > number", point.check.number))
    errors = []
    for path, spec in numbers:
        raw = spec if isinstance(spec, str) else spec.model_dump(exclude_defaults=True)
        try:
            rubric_points.resolve_number(raw, scope)
        except ExpressionError as exc:
            errors.append((path, str(exc)))
    return errors


PUBLISHED_NEEDS_CHECKS = ("scenario", "design")


def publication_errors(question: Any) -> list[tuple[int, str]]:
    """(point index, message) for each non-penalty point of a published scenario/design
    question that lacks `claims` or a `check`: the grader cannot verify such a point."""
    if question.status != "published" or question.kind not in PUBLISHED_NEEDS_CHECKS:
        return []
    message = (
        f"a published {question.kind} question needs `claims` and a `check` on every "
        "non-penalty point (docs/BANK_FORMAT.md)"
    )
    return [
        (i, message)
        for i, point in enumerate(question.rubric)
        if not point.penalty and (not point.claims or point.check is None)
    ]
