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

# The learner's words, normalised before pint reads the answer. Units themselves are pint's
# (questions.expressions defines token = tok, request = req, GPU, sequence = seq, million);
# this pass only rewrites how people type them. Each rule is (pattern, replacement).
_RATIO_MARK = r"(?:[x×X]|times)"
_COUNT_NOUNS = (  # counts that are not units (several are bank names, so not in the registry)
    "replica|node|pod|connection|slot|user|stream|head|layer|attempt|conversation|session|"
    "expert|instance|server|worker"
)
_TOKEN_PREFIX = {"k": "k", "m": "M", "g": "G"}
_NORMALISE: tuple[tuple[re.Pattern[str], object], ...] = (
    # "~52", "≈ 45 ms", "about 52": the number is what is graded
    (re.compile(r"^(?:~|≈|=|about\s+|approx\.?\s*|approximately\s+|roughly\s+)\s*", re.I), ""),
    # a ratio: "3.5x", "3.5 ×", "2^11 x", "3.5 times", "x3.5"
    (re.compile(rf"(?<=[\d.)])\s*{_RATIO_MARK}$", re.I), ""),
    (re.compile(r"^[x×X]\s*(?=[\d.])"), ""),
    # a product: "2 x 1024", "2×10^9", "52 x H100"
    (re.compile(rf"(?<=[\d.)])\s*{_RATIO_MARK}(?![A-Za-z])\s*(?=[\w.(])", re.I), " * "),
    # "per": "$1.2 per million tokens", "30 tok/s per seq"
    (re.compile(r"(?<![A-Za-z])per(?![A-Za-z])", re.I), " / "),
    # compound words: "GPU-hours", "GPU-h"
    (re.compile(r"(?<=[A-Za-z])-(?=[A-Za-z])"), " "),
    # magnitude suffixes on a number: "1.2k", "1M tokens", "12k GPU-h" (k is otherwise
    # Boltzmann's constant, K kelvin and M molar in pint)
    (re.compile(r"(?<=\d)k(?![A-Za-z0-9])", re.I), "e3"),
    (re.compile(r"(?<=\d)M(?![A-Za-z0-9])"), "e6"),
    # "$1.2/M tokens", "per 1 K tok": a lone magnitude letter before a token word
    (re.compile(r"(?<![\w.])([kKM])\s+(?=tok)", re.I), r"\1"),
    # token words in any case, with an SI prefix: tok, Tok, tokens, MTok, ktok, Mtokens
    (
        re.compile(r"(?<![A-Za-z])([kmg]?)(?:tokens?|toks?)(?![A-Za-z])", re.I),
        lambda m: _TOKEN_PREFIX.get(m.group(1).lower(), "") + "token",
    ),
    (re.compile(r"(?<![A-Za-z])gpus?(?![A-Za-z])", re.I), "GPU"),
    (re.compile(r"(?<![A-Za-z])(?:seqs?|sequences?)(?![A-Za-z])", re.I), "sequence"),
    (re.compile(r"(?<![A-Za-z])(?:reqs?|requests?)(?![A-Za-z])", re.I), "request"),
    (re.compile(rf"(?<![A-Za-z])(?:KV\s+)?(?:{_COUNT_NOUNS})s?(?![A-Za-z])", re.I), "count"),
    (re.compile(r"[×·]"), "*"),
)
_EXPONENT_RE = re.compile(r"(?<=[\d.])e[-+]?\d+", re.I)


def normalise_answer(text: str) -> str:
    """The learner's text with thousands separators dropped and the words people type
    for counts, ratios, rates and prices rewritten for pint ("3.5x" -> "3.5",
    "$1.2/1M tokens" -> "$1.2/1e6 token", "52 GPUs" -> "52 GPU", "40 replicas" -> "40 count")."""
    cleaned = _THOUSANDS_RE.sub("", " ".join((text or "").split()))
    for pattern, replacement in _NORMALISE:
        cleaned = pattern.sub(replacement, cleaned)
    return " ".join(cleaned.split())


def _is_bare_number(text: str) -> bool:
    """Whether `text` (normalised, without %) names no unit: "52", "2^10", "1.2e3"."""
    return not re.search(r"[^\W\d_]|\$", _EXPONENT_RE.sub("", text))


def parse_answer(text: str, unit: str) -> Quantity:
    """Read `327680`, `320 KiB`, `0.3125 MiB`, `3.2768e5 B`, `1,024`, `2^20 B`, `45 %`,
    `52 GPUs`, `3.5x`, `1.2k tok/s`, `150 req/s`, `$1.2 per 1M tokens`, `12k GPU-hours`.

    A bare number is in the step's `unit`: on a `percent` step "52" is 52 % (and "0.52" is
    0.52 %); on a plain-number step "0.52" is 0.52 and "52%" is 0.52. A count of requests
    answers a plain-number step ("52 requests"). Raises AnswerError with a sentence to show.
    """
    target = parse_unit(unit)
    cleaned = " ".join((text or "").split())
    if not cleaned:
        raise AnswerError(
            f"Enter a number, optionally with a unit (answer in {unit or 'a plain number'})."
        )
    if len(cleaned) > MAX_ANSWER_LENGTH:
        raise AnswerError(f"That is {len(cleaned)} characters; an answer is one number and a unit.")
    cleaned = normalise_answer(cleaned)
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
    elif _is_bare_number(cleaned):
        value = UREG.Quantity(value.to(UREG.dimensionless).magnitude, target)
    if value.dimensionless and not UREG.Quantity(1, target).dimensionless:
        value = UREG.Quantity(value.to(UREG.dimensionless).magnitude, target)
    if UREG.Quantity(1, target).dimensionless and value.dimensionality == _REQUESTS:
        value = UREG.Quantity(value.to(UREG.request).magnitude)  # "52 requests" is a count
    if not same_dimension(value, target):
        raise AnswerError(
            f"This step asks for {describe_dimension(target)} ({unit}); "
            f"{format_quantity(value)} is {describe_dimension(value)}."
        )
    return value.to(target)


_REQUESTS = UREG.request.dimensionality


def _explain_parse_error(text: str, message: str) -> str:
    unknown = re.search(r"unknown (?:unit or variable|variable|unit|name) '([^']+)'", message)
    if unknown:
        close = re.search(r"did you mean '([^']+)'", message)
        hint = f" Did you mean {close.group(1)}?" if close else ""
        return (
            f"“{unknown.group(1)}” is not a unit I know.{hint} Units look like B, KiB, GB, "
            "GB/s, ms, s, tok/s, req/s, GPUs, USD/hour or $/1M tokens; a ratio can be 3.5x."
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
    except ExpressionError:  # e.g. an earlier answer of 0 that this step divides by
        yours = None
    value, expected = _in_unit(answer, step.unit), _in_unit(reference[step_name], step.unit)
    given = _in_unit(yours[step_name], step.unit) if yours is not None else None
    full = max(0.0, 1.0 - hint_penalty * hints_used)
    base = {"name": step_name, "value": value, "expected": expected}
    whole = not step.integer or _is_whole(value)

    if whole and _close(value, expected, step):
        return StepResult(
            verdict="correct", credit=full, feedback=_correct_text(step, hints_used), **base
        )
    broke_at = _broken_step(chain, index, reference)
    if yours is None:  # reported, not silently graded against a chain that does not exist
        return _graded_without_your_chain(chain, step, reference, value, base, broke_at)
    if broke_at and whole and _close(value, given, step):
        return StepResult(
            verdict="follow_through",
            credit=full,
            expected_given_yours=given,
            broke_at=broke_at,
            feedback=(
                f"Correct given your answer to {broke_at_label(problem, broke_at)}: the method "
                "is right, and the chain broke at that step."
            ),
            **base,
        )
    result = _match_misconception(chain, step, reference, yours, value, base)
    if result:
        return result
    target, values = (given, yours) if broke_at else (expected, reference)
    slip = _rounding_slip(chain, step, values, value, target) or _generic_slip(step, value, target)
    extra = {"broke_at": broke_at, "expected_given_yours": given if broke_at else None}
    if slip:
        return StepResult(verdict="slip", credit=0.0, feedback=slip, **extra, **base)
    return StepResult(
        verdict="incorrect",
        credit=0.0,
        feedback=_incorrect_text(step, value, target, bool(broke_at)),
        **extra,
        **base,
    )


def _graded_without_your_chain(chain, step, reference, value, base, broke_at):
    """Your earlier answers make this step impossible to recompute: grade against the
    reference values and say why no follow-through credit could be checked."""
    earlier = (
        f"answer to {broke_at_label(chain.problem, broke_at)}" if broke_at else "earlier answers"
    )
    note = (
        f" Your {earlier} cannot be carried into this step (its formula cannot be computed "
        "with it, e.g. it would divide by zero), so it was graded against the reference "
        "values only."
    )
    result = _match_misconception(chain, step, reference, reference, value, base)
    if result:
        return replace(result, feedback=result.feedback + note, broke_at=broke_at)
    slip = _rounding_slip(chain, step, reference, value, base["expected"]) or _generic_slip(
        step, value, base["expected"]
    )
    verdict, feedback = (
        ("slip", slip)
        if slip
        else ("incorrect", _incorrect_text(step, value, base["expected"], False))
    )
    return StepResult(
        verdict=verdict, credit=0.0, feedback=feedback + note, broke_at=broke_at, **base
    )


def broke_at_label(problem: problems.Problem, name: str) -> str:
    """How feedback names a step: as the learner sees it ("step 2"), never by its key."""
    index = next(i for i, s in enumerate(problem.steps) if s.name == name)
    return f"step {index + 1}"


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
                    feedback=misconception_text(m, scope),
                    misconception=i,
                    **base,
                )
    return None


def misconception_text(m: problems.Misconception, scope: Mapping[str, object]) -> str:
    """An authored misconception's feedback with its {placeholders} filled from `scope` (the
    variant and the chain it matched), as hints and prompts are: never a raw key."""
    return problems.render_text(m.feedback, scope)


def _number(value: float) -> str:
    return format_quantity(value)


def _is_whole(value: float) -> bool:
    return abs(value - round(value)) <= 1e-9 * max(1.0, abs(value))


def _unrounded(chain: Chain, step: problems.Step, values: Mapping[str, Quantity]) -> float | None:
    """An integer step's value before rounding, from `values` (reference or yours)."""
    scope = {**chain.variables, **{k: v for k, v in values.items() if k != step.name}}
    try:
        return _in_unit(evaluate(step.expression, scope), step.unit)
    except ExpressionError:
        return None


def _rounding_slip(chain, step, values, value: float, target: float) -> str | None:
    """An integer step answered unrounded (52.7 where 52 is asked) or rounded the other way
    (53 where the step rounds down)."""
    if not step.integer:
        return None
    how = problems.ROUNDING_WORDS[step.integer]
    if not _is_whole(value):
        if problems.round_whole(value, step.integer) == target:
            return (
                f"Not a whole number: this step asks for a whole number ({how}), so "
                f"{_number(value)} becomes {_number(target)}."
            )
        return None
    raw = _unrounded(chain, step, values)
    if raw is None or _is_whole(raw):
        return None
    for other in ("floor", "ceil", "round"):
        if other != step.integer and problems.round_whole(raw, other) == value != target:
            return (
                f"You rounded the wrong way: {_number(raw)} must {how} here, to "
                f"{_number(target)}, not {_number(value)}."
            )
    return None


def _incorrect_text(step: problems.Step, value: float, target: float, broke: bool) -> str:
    """How far off a plain wrong answer is: "Not within 1% ...: yours is 4% high"."""
    of = "the value your earlier answers give" if broke else "the expected value"
    text = f"Not within {step.rtol * 100:.3g}% of {of}"
    if target and value and (value > 0) == (target > 0):
        ratio = value / target
        if 0.5 <= ratio <= 2:
            text += f": yours is {abs(ratio - 1) * 100:.2g}% {'high' if ratio > 1 else 'low'}"
        else:
            text += f": yours is {ratio:.3g} times it"
    elif target and value:
        text += ": yours has the opposite sign"
    if step.integer and not _is_whole(value):
        text += f". This step asks for a whole number ({problems.ROUNDING_WORDS[step.integer]})"
    return text + "."


_PERCENT = parse_unit("percent")


def _generic_slip(step: problems.Step, value: float, expected: float) -> str | None:
    """Detected for every step, without authoring: a percentage for a fraction, powers of
    ten, a factor of 2, x1,000 for x1,024 (GB vs GiB), bits vs bytes."""
    if value == 0 or expected == 0 or (value > 0) != (expected > 0):
        return None
    ratio = value / expected
    if ratio == 0 or not math.isfinite(ratio):  # beyond any slip (overflow or underflow)
        return None
    unit = parse_unit(step.unit)
    if unit == _PERCENT and _close(value, expected / 100, step):
        return (
            f"You gave a fraction where this step asks for a percentage: {_number(value * 100)}% "
            f"is the fraction {_number(value)}. Type {_number(value * 100)} or "
            f"{_number(value * 100)}% (a bare number here is read in percent)."
        )
    if unit == UREG.dimensionless and abs(expected) <= 1 and _close(value, expected * 100, step):
        return (
            f"This step asks for a fraction, not a percentage: {_number(value)} is read as "
            f"{_number(value)} ({_number(value * 100)}%). For {_number(value)}% type "
            f"{_number(value)}% or {_number(value / 100)}."
        )
    exponent = round(math.log10(abs(ratio)))
    if exponent and _close(value, expected * 10**exponent, step):
        return (
            f"Off by a factor of 10^{exponent}: check the unit prefixes (k, M, G, T; ms vs s) "
            "and any dropped power of ten."
        )
    if _close(value, expected / 2, step):
        return (
            "Exactly half the expected value: a factor of 2 is missing. The usual one: K and "
            "V are both cached; also a multiply-add is 2 FLOPs, and a BF16 value is 2 bytes."
        )
    if _close(value, expected * 2, step):
        return (
            "Exactly twice the expected value: one factor of 2 too many. Check the 2 for K "
            "and V, the 2 FLOPs per multiply-add and the 2 bytes per BF16 value: each "
            "belongs once, where it applies."
        )
    slip = _thousand_slip(step, value, expected)
    if slip:
        return slip
    if _information(step.unit):
        for factor, text in ((8, "bits where bytes"), (1 / 8, "bytes where bits")):
            if _close(value, expected * factor, step):
                return f"Off by a factor of 8: you counted {text} were needed."
    return None


def _thousand_slip(step: problems.Step, value: float, expected: float) -> str | None:
    """x1,000 where x1,024 was needed (or back): a ratio of 1.024^n, matched within an eighth
    of the gap so that a plain 4%-off answer is not blamed on GB vs GiB."""
    for n, (binary, decimal) in _BINARY_PREFIXES.items():
        gap = 1.024**n
        tolerance = min(step.rtol, (gap - 1) / 8)
        for factor in (gap, 1 / gap):
            if abs(value - expected * factor) <= tolerance * abs(expected * factor):
                way = (
                    f"{'high' if factor > 1 else 'low'} by {(gap - 1) * 100:.3g}%, exactly "
                    f"the gap between {binary} and {decimal}"
                )
                return (
                    f"Your answer is {way}: you mixed x1,000 and x1,024. 1 {binary} = "
                    f"{2 ** (10 * n):,} B but 1 {decimal} = {10 ** (3 * n):,} B."
                )
    return None


_BINARY_PREFIXES = {1: ("KiB", "KB"), 2: ("MiB", "MB"), 3: ("GiB", "GB"), 4: ("TiB", "TB")}


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
