"""Grade whiteboard arithmetic step by step: parse with units, compare within tolerance,
carry the learner's own earlier values forward (follow-through credit), and name the
mistake when an answer matches an authored misconception or a generic slip.

Plain functions over `questions.problems` (no Django): the grader, the bank self-tests and
the benchmark call exactly this. `ArithmeticGrader` is its face in the grader registry.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from questions import problems
from questions.expressions import (
    UREG,
    ExpressionError,
    Quantity,
    describe_dimension,
    evaluate,
    format_quantity,
    names_used,
    parse_unit,
    same_dimension,
)
from trainer.grading.registry import Grader

HINT_PENALTY = 0.10  # credit lost per revealed hint
MAX_ANSWER_LENGTH = 80
_THOUSANDS_RE = re.compile(r"(?<=\d)[, ](?=\d{3}(?:\D|$))")
_BINARY_RATIOS = {1: "KiB vs KB", 2: "MiB vs MB", 3: "GiB vs GB", 4: "TiB vs TB"}


class AnswerError(ValueError):
    """Input the learner has to fix; it costs nothing."""


@dataclass(frozen=True)
class StepResult:
    name: str
    verdict: str  # correct | follow_through | misconception | slip | incorrect
    credit: float
    feedback: str
    value: float  # the learner's answer, in the step's unit
    expected: float  # the reference answer, in the step's unit
    expected_given_yours: float | None = None
    broke_at: str | None = None  # the earlier step where the learner's chain broke
    misconception: int | None = None  # index of the authored misconception matched


@dataclass
class Chain:
    """A variant's reference chain and the learner's answers so far (in step units)."""

    problem: problems.Problem
    variables: dict[str, object]
    answers: dict[str, Quantity] = field(default_factory=dict)

    _reference: dict[str, Quantity] | None = field(default=None, repr=False)

    def reference(self) -> dict[str, Quantity]:
        if self._reference is None:  # the variant's chain never changes
            self._reference = problems.solve(self.problem, self.variables)
        return self._reference

    def given_answers(self) -> dict[str, Quantity]:
        return problems.solve(self.problem, self.variables, overrides=self.answers)


# --- parsing -----------------------------------------------------------------------------


def parse_answer(text: str, unit: str) -> Quantity:
    """Read `327680`, `320 KiB`, `0.3125 MiB`, `3.2768e5 B`, `1,024`, `2^20 B`, `45 %`.

    A bare number is in the step's `unit`. Raises AnswerError with a sentence to show.
    """
    target = parse_unit(unit)
    cleaned = " ".join((text or "").split())
    if not cleaned:
        raise AnswerError(
            f"Enter a number, optionally with a unit (answer in {unit or 'a plain number'})."
        )
    if len(cleaned) > MAX_ANSWER_LENGTH:
        raise AnswerError(f"That is {len(cleaned)} characters; an answer is one number and a unit.")
    cleaned = _THOUSANDS_RE.sub("", cleaned).replace("×", "*").replace("·", "*")
    percent = cleaned.endswith("%")
    cleaned = cleaned.removesuffix("%").strip()
    if "," in cleaned:
        raise AnswerError("Use a dot for decimals (0.5) and commas only between thousands (1,024).")
    try:
        value = evaluate(cleaned, {})
    except ExpressionError as exc:
        raise AnswerError(_explain_parse_error(cleaned, str(exc))) from None
    if percent:
        if not value.dimensionless:
            raise AnswerError("A percentage is a plain number; drop the unit or the %.")
        value = value / 100
    if value.dimensionless and not UREG.Quantity(1, target).dimensionless:
        value = UREG.Quantity(value.to(UREG.dimensionless).magnitude, target)
    if not same_dimension(value, target):
        raise AnswerError(
            f"This step asks for {describe_dimension(target)} ({unit}); "
            f"{format_quantity(value)} is {describe_dimension(value)}."
        )
    return value.to(target)


def _explain_parse_error(text: str, message: str) -> str:
    unknown = re.search(r"unknown (?:unit or variable|variable|unit|name) '([^']+)'", message)
    if unknown:
        close = re.search(r"did you mean '([^']+)'", message)
        hint = f" Did you mean {close.group(1)}?" if close else ""
        return (
            f"“{unknown.group(1)}” is not a unit I know.{hint} Units look like B, KiB, GB, "
            "GB/s, ms, s, token/s, TFLOPS or USD/hour."
        )
    return f"I could not read “{text}” as a number with a unit, e.g. 320 KiB or 1.2e3 ms."


# --- grading -----------------------------------------------------------------------------


def _close(value: float, target: float, step: problems.Step) -> bool:
    return abs(value - target) <= max(step.rtol * abs(target), step.atol)


def _in_unit(q: Quantity, unit: str) -> float:
    return float(q.to(parse_unit(unit)).magnitude)


def depends_on(problem: problems.Problem, step_name: str) -> set[str]:
    """The earlier steps `step_name` uses, directly or through other steps."""
    steps = {s.name: s for s in problem.steps}
    seen: set[str] = set()
    todo = [step_name]
    while todo:
        for name in names_used(steps[todo.pop()].expression) & steps.keys():
            if name not in seen:
                seen.add(name)
                todo.append(name)
    return seen


def grade_step(
    chain: Chain,
    step_name: str,
    answer: Quantity,
    hints_used: int = 0,
    hint_penalty: float = HINT_PENALTY,
) -> StepResult:
    """Grade one step against the reference and against the learner's own chain."""
    problem = chain.problem
    index = next(i for i, s in enumerate(problem.steps) if s.name == step_name)
    step = problem.steps[index]
    reference = chain.reference()
    try:
        yours = chain.given_answers()
    except ExpressionError as exc:  # e.g. an earlier answer of 0 that this step divides by
        yours, unusable = None, str(exc)
    value, expected = _in_unit(answer, step.unit), _in_unit(reference[step_name], step.unit)
    given = _in_unit(yours[step_name], step.unit) if yours is not None else None
    full = max(0.0, 1.0 - hint_penalty * hints_used)
    base = {"name": step_name, "value": value, "expected": expected}

    if _close(value, expected, step):
        return StepResult(
            verdict="correct", credit=full, feedback=_correct_text(step, hints_used), **base
        )
    broke_at = _broken_step(chain, index, reference)
    if yours is None:  # reported, not silently graded against a chain that does not exist
        return _graded_without_your_chain(chain, step, reference, value, base, broke_at, unusable)
    if broke_at and _close(value, given, step):
        return StepResult(
            verdict="follow_through",
            credit=full,
            expected_given_yours=given,
            broke_at=broke_at,
            feedback=(
                f"Correct given your {broke_at_label(problem, broke_at)}: the method is right, "
                f"and the chain broke at that step."
            ),
            **base,
        )
    result = _match_misconception(chain, step, reference, yours, value, base)
    if result:
        return result
    slip = _generic_slip(step, value, expected if not broke_at else given)
    if slip:
        return StepResult(
            verdict="slip",
            credit=0.0,
            feedback=slip,
            broke_at=broke_at,
            expected_given_yours=given if broke_at else None,
            **base,
        )
    return StepResult(
        verdict="incorrect",
        credit=0.0,
        broke_at=broke_at,
        expected_given_yours=given if broke_at else None,
        feedback=f"Not within {step.rtol * 100:.3g}% of the expected value.",
        **base,
    )


def _graded_without_your_chain(chain, step, reference, value, base, broke_at, reason):
    """Your earlier answers make this step impossible to recompute: grade against the
    reference values and say why no follow-through credit could be checked."""
    earlier = broke_at_label(chain.problem, broke_at) if broke_at else "earlier answers"
    note = (
        f" Your {earlier} cannot be carried into this step ({reason}), so it was graded "
        "against the reference values only."
    )
    result = _match_misconception(chain, step, reference, reference, value, base)
    if result:
        return replace(result, feedback=result.feedback + note, broke_at=broke_at)
    slip = _generic_slip(step, value, base["expected"])
    verdict, feedback = (
        ("slip", slip)
        if slip
        else (
            "incorrect",
            f"Not within {step.rtol * 100:.3g}% of the expected value.",
        )
    )
    return StepResult(
        verdict=verdict, credit=0.0, feedback=feedback + note, broke_at=broke_at, **base
    )


def broke_at_label(problem: problems.Problem, name: str) -> str:
    index = next(i for i, s in enumerate(problem.steps) if s.name == name)
    return f"step {index + 1} ({name.replace('_', ' ')})"


def _correct_text(step: problems.Step, hints_used: int) -> str:
    if not hints_used:
        return "Correct."
    return f"Correct, with {hints_used} hint{'s' if hints_used > 1 else ''}."


def _broken_step(chain: Chain, index: int, reference: Mapping[str, Quantity]) -> str | None:
    """The first earlier step this one depends on where the learner's answer was wrong."""
    problem = chain.problem
    needed = depends_on(problem, problem.steps[index].name)
    for step in problem.steps[:index]:
        if step.name in needed and step.name in chain.answers:
            mine = _in_unit(chain.answers[step.name], step.unit)
            if not _close(mine, _in_unit(reference[step.name], step.unit), step):
                return step.name
    return None


def _match_misconception(chain, step, reference, yours, value, base) -> StepResult | None:
    for scope_values in (reference, yours) if yours is not reference else (reference,):
        scope = {**chain.variables, **{k: v for k, v in scope_values.items() if k != step.name}}
        try:
            wrongs = problems.misconception_values(step, scope)
        except ExpressionError:  # not computable from these values (e.g. divides by zero)
            continue
        for i, (m, wrong) in enumerate(wrongs):
            if _close(value, _in_unit(wrong, step.unit), step):
                return StepResult(
                    verdict="misconception",
                    credit=0.0,
                    feedback=m.feedback,
                    misconception=i,
                    **base,
                )
    return None


def _generic_slip(step: problems.Step, value: float, expected: float) -> str | None:
    """Powers of ten, GB vs GiB, bits vs bytes: detected for every step, without authoring."""
    if value == 0 or expected == 0 or (value > 0) != (expected > 0):
        return None
    ratio = value / expected
    if ratio == 0 or not math.isfinite(ratio):  # beyond any slip (overflow or underflow)
        return None
    exponent = round(math.log10(abs(ratio)))
    if exponent and _close(value, expected * 10**exponent, step):
        return (
            f"Off by a factor of 10^{exponent}: check the unit prefixes (k, M, G, T; ms vs s) "
            "and any dropped power of ten."
        )
    for n, pair in _BINARY_RATIOS.items():
        for factor in (1.024**n, 1.024**-n):
            if _close(value, expected * factor, step):
                return (
                    f"Close, but you mixed binary and decimal units ({pair}): 1 GiB = 2^30 B "
                    "while 1 GB = 10^9 B, 7.4% apart at the giga scale."
                )
    if _information(step.unit):
        for factor, text in ((8, "bits where bytes"), (1 / 8, "bytes where bits")):
            if _close(value, expected * factor, step):
                return f"Off by a factor of 8: you counted {text} were needed."
    return None


def _information(unit: str) -> bool:
    return "[information]" in str(parse_unit(unit).dimensionality)


def score(results: list[StepResult], steps: int) -> float:
    """The attempt's score in [0, 1]: each step weighs the same; unanswered steps score 0."""
    return sum(r.credit for r in results) / steps if steps else 0.0


def reference_text(q: Quantity, unit: str) -> str:
    return format_quantity(q, unit)


class ArithmeticGrader(Grader):
    """Arithmetic questions in the grader registry: read the typed answer in the step's
    unit (AnswerError if it cannot be read), then grade it against the chain."""

    name = "arithmetic"
    stepwise = True

    def grade_step(
        self, chain: Chain, step_name: str, raw: str, *, hints_used: int, hint_penalty: float
    ) -> StepResult:
        step = next(s for s in chain.problem.steps if s.name == step_name)
        value = parse_answer(raw, step.unit)
        return grade_step(chain, step_name, value, hints_used=hints_used, hint_penalty=hint_penalty)
