"""What a rubric point's `check` asks and what it accepts, read from the question's bank
data (the answer never leaves the server): a multiple choice (the right option and its
distractors) or a number with a unit and a tolerance.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass

from questions import expressions
from questions import services as question_services

MAX_OPTIONS = 5  # the answer and up to four distractors: readable in 15 s
DEFAULT_TOL = 0.10
_LITERAL_RE = re.compile(r"^(?P<quantity>.+?)\s*(?:±|\+/-|\+-)\s*(?P<tol>[\d.]+)\s*%\s*$")


@dataclass(frozen=True)
class CheckSpec:
    kind: str  # "choice" | "number"
    ask: str
    answer: str = ""  # choice: the right option
    distractors: tuple[str, ...] = ()
    value: float = 0.0  # number: the expected value in `unit`
    unit: str = ""
    tol: float = DEFAULT_TOL  # fraction

    def shown_options(self, seed: str) -> list[str]:
        """The answer and distractors, shuffled the same way for the same `seed` (one
        attempt's point): reloading the page never reorders them."""
        options = [self.answer, *[d for d in self.distractors if d != self.answer]]
        options = list(dict.fromkeys(options))[:MAX_OPTIONS]
        random.Random(seed).shuffle(options)
        return options


def _raw_check(rubric_point) -> dict:
    as_point = getattr(rubric_point, "as_point", None)
    if callable(as_point):
        check = as_point().get("check") or {}
        if check:
            return check
    return dict(getattr(rubric_point, "check", None) or {})


def _tol(value) -> float:
    if value is None or value == "":
        return DEFAULT_TOL
    if isinstance(value, str):
        text = value.strip()
        return float(text.removesuffix("%")) / 100 if text.endswith("%") else float(text)
    return float(value)


def _number(question, number) -> tuple[float, str, float]:
    """(value, unit, tol) of a check's `number`: a literal "320 KiB ±5%", an already
    evaluated {value, unit, tol} or an {expr, unit, tol} over the question's variables."""
    if isinstance(number, str):
        match = _LITERAL_RE.match(number.strip())
        text, tol = (match["quantity"], float(match["tol"]) / 100) if match else (number, None)
        q = expressions.evaluate(text, {})
        unit = f"{q.units:~P}" if not q.dimensionless else ""
        return float(q.magnitude), unit, DEFAULT_TOL if tol is None else tol
    if "value" in number:
        return float(number["value"]), number.get("unit", ""), _tol(number.get("tol"))
    resolver = getattr(question_services, "resolved_expects", None)
    if resolver is not None:
        resolved = resolver(question, [number])[0]
        return float(resolved["value"]), resolved.get("unit", ""), _tol(resolved.get("tol"))
    unit = number.get("unit", "")
    q = expressions.evaluate(number["expr"], dict(getattr(question, "variables", None) or {}))
    value = expressions.to_magnitude(q, unit) if unit else float(q.magnitude)
    return value, unit, _tol(number.get("tol"))


def check_spec(question, rubric_point) -> CheckSpec | None:
    """The point's check, or None when it has none (or it cannot be read: no check then,
    rather than a check nobody can pass)."""
    raw = _raw_check(rubric_point)
    ask = str(raw.get("ask", "")).strip()
    if not ask:
        return None
    if raw.get("number") not in (None, ""):
        try:
            value, unit, tol = _number(question, raw["number"])
        except (expressions.ExpressionError, KeyError, TypeError, ValueError):
            return None
        return CheckSpec("number", ask, value=value, unit=unit, tol=tol)
    answer = str(raw.get("answer", "")).strip()
    distractors = raw.get("options") or getattr(rubric_point, "contradictions", None) or []
    distractors = tuple(str(d).strip() for d in distractors if str(d).strip())
    if not answer or not distractors:
        return None
    return CheckSpec("choice", ask, answer=answer, distractors=distractors)
