"""Arithmetic problems as plain data: draw a variant, solve its step chain, fill prompts.

The one place that turns a problem's parameter spec into numbers. The bank loader, the
admin preview, the arithmetic grader and the lab's predictions all call it. No Django.
"""

from __future__ import annotations

import itertools
import math
import random
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from questions import catalog
from questions.expressions import (
    UREG,
    ExpressionError,
    Quantity,
    evaluate,
    evaluate_condition,
    format_quantity,
    parse_unit,
)

CATALOG_KINDS = ("models", "gpus", "dtypes")
INTEGER_MODES = ("floor", "ceil", "round")
MAX_RANGE_VALUES = 10_000
_PLACEHOLDER_RE = re.compile(r"\{([A-Za-z][A-Za-z0-9_]*)\}")


class ProblemError(ValueError):
    """A problem whose parameters or condition cannot produce a variant."""


@dataclass(frozen=True)
class Misconception:
    expression: str
    feedback: str


@dataclass(frozen=True)
class Step:
    name: str
    prompt: str
    expression: str
    unit: str
    rtol: float = 0.01
    atol: float = 0.0
    hints: tuple[str, ...] = ()
    misconceptions: tuple[Misconception, ...] = ()
    explanation: str = ""
    integer: str = ""  # "" | floor | ceil | round: the answer is a whole number


@dataclass(frozen=True)
class Problem:
    parameters: Mapping[str, Mapping[str, Any]]
    steps: tuple[Step, ...]
    condition: str = ""


@dataclass(frozen=True)
class Variant:
    """One drawn instance: the raw choices and the expression variables they give."""

    seed: int
    choices: dict[str, Any]
    variables: dict[str, object] = field(repr=False)


def parameter_values(name: str, spec: Mapping[str, Any]) -> list[Any]:
    """The finite list of raw values a parameter can take (catalog slugs or numbers)."""
    if "catalog" in spec:
        return list(spec["choices"])
    if "choices" in spec:
        return list(spec["choices"])
    if "value" in spec:
        return [spec["value"]]
    low, high = spec["range"]
    step = spec.get("step", 1)
    count = round((high - low) / step) + 1
    if count > MAX_RANGE_VALUES:
        raise ProblemError(f"parameter {name!r} spans {count} values; use a coarser step")
    return [_tidy(low + i * step) for i in range(count)]


def _tidy(value: float) -> float | int:
    rounded = round(value, 10)
    return int(rounded) if float(rounded).is_integer() else rounded


def parameter_variables(name: str, spec: Mapping[str, Any], value: Any) -> dict[str, object]:
    """The expression variables one parameter contributes for one of its values."""
    if "catalog" in spec:
        return catalog.variables(spec["catalog"], value, name)
    unit = spec.get("unit")
    return {name: UREG.Quantity(value, parse_unit(unit)) if unit else value}


def variables_for(problem: Problem, choices: Mapping[str, Any]) -> dict[str, object]:
    out: dict[str, object] = {}
    for name, spec in problem.parameters.items():
        out.update(parameter_variables(name, spec, choices[name]))
    return out


def _satisfies(problem: Problem, variables: Mapping[str, object]) -> bool:
    return not problem.condition or evaluate_condition(problem.condition, variables)


def draw_variant(problem: Problem, seed: int, max_tries: int = 500) -> Variant:
    """The variant for `seed`: deterministic, and always one that meets the condition."""
    rng = random.Random(seed)
    pools = {name: parameter_values(name, spec) for name, spec in problem.parameters.items()}
    for _ in range(max_tries):
        choices = {name: rng.choice(values) for name, values in pools.items()}
        variables = variables_for(problem, choices)
        if _satisfies(problem, variables):
            return Variant(seed=seed, choices=choices, variables=variables)
    # Rare condition: fall back to the satisfying combinations, still chosen by the seed.
    valid = all_variants(problem, limit=5000)
    if not valid:
        raise ProblemError(f"no combination of parameters satisfies {problem.condition!r}")
    choices = valid[rng.randrange(len(valid))]
    return Variant(seed=seed, choices=choices, variables=variables_for(problem, choices))


def all_variants(problem: Problem, limit: int = 5000) -> list[dict[str, Any]]:
    """Every parameter combination meeting the condition (the first `limit` checked)."""
    names = list(problem.parameters)
    pools = [parameter_values(n, problem.parameters[n]) for n in names]
    found = []
    for combo in itertools.islice(itertools.product(*pools), limit):
        choices = dict(zip(names, combo, strict=True))
        if _satisfies(problem, variables_for(problem, choices)):
            found.append(choices)
    return found


# How a learner is told to round, beside the step's answer box.
ROUNDING_WORDS = {"floor": "round down", "ceil": "round up", "round": "round to nearest"}


def round_whole(value: float, mode: str) -> float:
    """`value` rounded to a whole number as an integer step says (floor, ceil or round half
    up), forgiving float noise: 51.99999999997 floors to 52, 52.00000000003 ceils to 52."""
    nearest = math.floor(value + 0.5)
    if abs(value - nearest) <= 1e-9 * max(1.0, abs(value)):
        return float(nearest)
    if mode == "floor":
        return float(math.floor(value))
    if mode == "ceil":
        return float(math.ceil(value))
    return float(nearest)


def rounded(step: Step, value: Quantity) -> Quantity:
    """`value` (in the step's unit) rounded as the step's `integer` says; unchanged if none."""
    if not step.integer:
        return value
    return UREG.Quantity(round_whole(float(value.magnitude), step.integer), value.units)


def step_value(step: Step, scope: Mapping[str, object], expression: str | None = None) -> Quantity:
    """The value of a step's expression (or of `expression`, e.g. a misconception's) in
    `scope`, in the step's unit, rounded as the step's `integer` says."""
    value = evaluate(step.expression if expression is None else expression, scope)
    return rounded(step, value.to(parse_unit(step.unit)))


def solve(
    problem: Problem,
    variables: Mapping[str, object],
    overrides: Mapping[str, Quantity] | None = None,
) -> dict[str, Quantity]:
    """Each step's value, in order. `overrides` replaces earlier steps' values (a learner's
    own answers, for error carried forward); every later step is recomputed from them."""
    scope: dict[str, object] = dict(variables)
    values: dict[str, Quantity] = {}
    for step in problem.steps:
        if overrides and step.name in overrides:
            values[step.name] = overrides[step.name]
        else:
            values[step.name] = step_value(step, scope)
        scope[step.name] = values[step.name]
    return values


def misconception_values(
    step: Step, scope: Mapping[str, object]
) -> list[tuple[Misconception, Quantity]]:
    """Each authored misconception of `step` evaluated in `scope`, in the step's unit (and
    rounded as the step's `integer` says: a learner who holds the misconception rounds too)."""
    return [(m, step_value(step, scope, m.expression)) for m in step.misconceptions]


_COUNT_UNITS = {"token": "tokens", "request": "requests"}
_ADJECTIVE_NOUNS = re.compile(
    r"\s+(?:requests?|sequences?|sessions?|prompts?|contexts?|conversations?|chats?|documents?)\b"
)


def _fill_quantity(value: Quantity, after: str) -> str:
    """Format a value for running text: "8,192 tokens", "a 8,192-token prompt" style."""
    unit = f"{value.units:~P}"
    if unit == "request/s":  # "10 requests/s", not pint's "10 request/s"
        number = format_quantity(value.magnitude)
        return f"{number} {'request' if value.magnitude == 1 else 'requests'}/s"
    if unit not in _COUNT_UNITS:
        return format_quantity(value)
    number = format_quantity(value.magnitude)
    follows = after.lstrip()[:12].lower()
    if follows.lstrip("-").startswith((unit, _COUNT_UNITS[unit])):
        return number  # the author wrote the unit: "{context} tokens", "{context}-token"
    if _ADJECTIVE_NOUNS.match(after):
        return f"{number}-{unit}"  # "{context} requests" -> "8,192-token requests"
    return f"{number} {unit if value.magnitude == 1 else _COUNT_UNITS[unit]}"


def render_text(template: str, scope: Mapping[str, object]) -> str:
    """Fill `{name}` placeholders with formatted values; unknown names are left visible."""

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in scope:
            return match.group(0)
        value = scope[name]
        if isinstance(value, str):
            return value
        if isinstance(value, Quantity):
            return _fill_quantity(value, match.string[match.end() : match.end() + 40])
        return format_quantity(value)

    return _PLACEHOLDER_RE.sub(fill, template or "")


def placeholders(template: str) -> set[str]:
    return set(_PLACEHOLDER_RE.findall(template or ""))


def from_dict(data: Mapping[str, Any]) -> Problem:
    """Build a Problem from the bank's `problem:` mapping (already schema-checked)."""
    steps = tuple(
        Step(
            name=s["name"],
            prompt=s.get("prompt", ""),
            expression=str(s["expression"]),
            unit=s["unit"],
            rtol=float(s.get("rtol", 0.01)),
            atol=float(s.get("atol", 0.0)),
            hints=tuple(s.get("hints") or ()),
            misconceptions=tuple(
                Misconception(str(m["expression"]), m["feedback"])
                for m in s.get("misconceptions") or ()
            ),
            explanation=s.get("explanation", "") or "",
            integer=s.get("integer") or "",
        )
        for s in data.get("steps") or ()
    )
    return Problem(
        parameters=dict(data.get("parameters") or {}),
        steps=steps,
        condition=data.get("condition") or "",
    )


def differs(a: Quantity, b: Quantity, rtol: float, atol: float) -> bool:
    """Whether two values of the same unit differ beyond a step's tolerance."""
    x, y = float(a.magnitude), float(b.to(a.units).magnitude)
    return abs(x - y) > max(rtol * abs(y), atol)


__all__: Sequence[str] = (
    "ExpressionError",
    "Misconception",
    "Problem",
    "ProblemError",
    "Step",
    "Variant",
    "all_variants",
    "differs",
    "draw_variant",
    "from_dict",
    "misconception_values",
    "parameter_values",
    "render_text",
    "rounded",
    "solve",
    "step_value",
    "variables_for",
)
