"""The rubric part of a bank question (issue 19): a point's claims, contradictions,
key_terms, expects and check, and follow-ups with their own small rubric.

Schema (pydantic, as questions.bank) plus the checks that need the question: numbers that
must evaluate against its variables, and the rule that a published scenario/design
question gives every earning point `claims` and a `check` (docs/BANK_FORMAT.md).
"""

from __future__ import annotations

import io
import re
import tokenize
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from questions import rubric_points
from questions.expressions import ExpressionError, names_used


class _Strict(BaseModel):  # as questions.bank._Strict (kept here to avoid an import cycle)
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)


class AssumeIn(_Strict):
    """A figure the prompt leaves open (memory headroom, MFU, achieved link bandwidth): the
    question's own value, the range a reasonable candidate may take, and what it is."""

    value: float
    range: tuple[float, float]
    unit: str = ""
    what: str = Field(min_length=1)

    @model_validator(mode="after")
    def _inside(self) -> AssumeIn:
        low, high = self.range
        if low > high:
            raise ValueError(f"range {list(self.range)} runs backwards")
        if not low <= self.value <= high:
            raise ValueError(f"value {self.value:g} lies outside its range {list(self.range)}")
        return self


class NumberIn(_Strict):
    """A number a point expects: an expression over the question's variables, its unit,
    a tolerance ("5%" or a fraction), a label the learner may see, and the assumptions it
    depends on (`assume:`; a stated value is right when some assumption in range gives it)."""

    expr: str | int | float
    unit: str = ""
    tol: str | float = "10%"
    label: str = ""
    assume: dict[str, AssumeIn] = {}


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


# --- figures an expected value depends on (issue 29) -----------------------------------------
# An `expects` that silently assumes a 10% memory headroom, an MFU or a link speed rejects a
# correct number computed under another reasonable assumption. Every figure in its expression
# must be one the learner was given (the prompt), a constant of the formula, or an assumption
# with a range (`assume:`).
STRUCTURAL = {1.0, 2.0, 3.0, 4.0, 6.0, 100.0, 1000.0, 1024.0}  # 1 B, K and V, 3 gated-MLP
# matrices, FLOP per parameter (2 forward, 6 training), %, unit steps
_NUMBER_IN_TEXT_RE = re.compile(
    r"(?<![\d.,])(\d{1,3}(?:,\d{3})+|\d+(?:\.\d+)?)\s*([kKMB]\b|thousand|million|billion)?"
)


_SCALES = {
    "k": (1e3, 1024),
    "K": (1e3, 1024),
    "M": (1e6,),
    "B": (1e9,),
    "thousand": (1e3,),
    "million": (1e6,),
    "billion": (1e9,),
}
_ONE_IN_RE = re.compile(r"\b1 in (\d+)\b")


def prompt_figures(text: str) -> set[float]:
    """Every value the text states, in the forms an author's expression may use: 8K is 8,000
    and 8,192; 10% is 0.1 and 0.9 (its complement); "1 in 8" gives 1/8."""
    out: set[float] = set()
    for m in _NUMBER_IN_TEXT_RE.finditer(text or ""):
        value = float(m.group(1).replace(",", ""))
        values = [value * s for s in _SCALES.get(m.group(2) or "", (1,))]
        values.append(value)
        for v in values:
            out.update({v, v / 100, 1 - v / 100, v + 1})  # v + 1: "n + 1" positions
    # only "1 in 8" reads as 1/8: every figure's reciprocal let "2 TB" pass as an MFU of 0.5
    out.update(1 / float(n) for n in _ONE_IN_RE.findall(text or "") if float(n))
    return out


# a constant with a unit that is still a constant of the formula: percent, bytes per value
STRUCTURAL_WITH_UNIT = {(100.0, "percent"), (1.0, "B"), (2.0, "B"), (4.0, "B")}


def _literals(expr: str) -> list[tuple[float, str]]:
    """(value, the unit after it or "") of each number literal: "6 * params" is a FLOP factor,
    "(6 ms)" a figure, "2 B" the bytes of a BF16 value."""
    found: list[tuple[float, str]] = []
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(expr).readline))
    except (tokenize.TokenError, SyntaxError, ValueError):
        return found
    for tok, nxt in zip(tokens, tokens[1:] + tokens[-1:], strict=True):
        if tok.type == tokenize.NUMBER:
            is_unit = nxt.type == tokenize.NAME and nxt.string not in names_used(nxt.string)
            found.append((float(tok.string.replace("_", "")), nxt.string if is_unit else ""))
    return found


def _stated(value: float, figures: set[float], unit: str = "") -> bool:
    constant = (value, unit) in STRUCTURAL_WITH_UNIT if unit else value in STRUCTURAL
    return constant or any(abs(value - f) <= 1e-6 * max(1.0, abs(f)) for f in figures)


def unstated_figures(
    point: RubricPointIn, prompt: str, variables: dict[str, Any]
) -> list[tuple[str, str]]:
    """(path, message) for each figure an `expects` or `check.number` expression depends on
    that the prompt does not state and no `assume:` gives a range: a literal ("0.9 *
    gpu_memory") or a variable fixed by `value:` (a catalog variable is a known spec)."""
    stated = prompt_figures(prompt)
    specs = [(f"expects[{j}]", e, stated) for j, e in enumerate(point.expects)]
    if point.check is not None and point.check.number is not None:
        # the check's question is shown with it: a figure it states is given
        specs.append(
            ("check > number", point.check.number, stated | prompt_figures(point.check.ask))
        )
    errors = []
    for path, spec, figures in specs:
        if not isinstance(spec, NumberIn):
            continue  # a literal "147 GB ±5%" is the answer itself, not a formula
        expr = str(spec.expr)
        open_figures = [v for v, unit in _literals(expr) if not _stated(v, figures, unit)]
        for name in sorted(names_used(expr) - set(spec.assume)):
            var = variables.get(name)
            value = getattr(var, "value", None) if var is not None else None
            choices = getattr(var, "choices", None) if var is not None else None
            if value is None and choices and not getattr(var, "catalog", None):
                value = choices[0] if len(choices) == 1 else None
            if value is not None and not _stated(float(value), figures):
                open_figures.append(float(value))
        for value in dict.fromkeys(open_figures):
            errors.append(
                (
                    path,
                    f"depends on {value:g}, a figure the prompt does not state: state it in "
                    "the prompt, or name it and give it a range under `assume:` "
                    "(e.g. headroom: {value: 0.9, range: [0.85, 1.0], what: usable share of "
                    "GPU memory})",
                )
            )
    return errors


def assumption_errors(question: Any) -> list[tuple[str, str]]:
    """unstated_figures() for every earning point of a published scenario/design question
    and of its follow-ups (a follow-up's prompt counts as stated too)."""
    if question.status != "published" or question.kind not in PUBLISHED_NEEDS_CHECKS:
        return []
    variables = dict(question.variables or {})
    groups = [("rubric", question.prompt, question.rubric)] + [
        (f"follow_ups[{i}] > rubric", f"{question.prompt}\n{f.prompt}", f.rubric)
        for i, f in enumerate(question.follow_ups)
    ]
    return [
        (f"{where}[{i}] > {path}", message)
        for where, prompt, points in groups
        for i, point in enumerate(points)
        if not point.penalty
        for path, message in unstated_figures(point, prompt, variables)
    ]
