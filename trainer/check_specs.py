"""What a rubric point's `check` asks and what it accepts, read from the question's bank
data (the answer never leaves the server): a multiple choice (the right option and its
distractors: the check's `options`, else the point's contradictions) or a number with a
unit and a tolerance (evaluated against the question's variables by `as_point()`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from questions.expressions import ExpressionError

MAX_OPTIONS = 5  # the answer and up to four distractors: readable in 15 s


@dataclass(frozen=True)
class CheckSpec:
    kind: str  # "choice" | "number"
    ask: str
    answer: str = ""  # choice: the right option
    distractors: tuple[str, ...] = ()
    value: float = 0.0  # number: the expected value, in `unit`
    unit: str = ""
    tol: float = 0.10  # fraction of `value`
    low: float | None = None  # number: the least and most any assumption in range gives
    high: float | None = None

    @property
    def expected_text(self) -> str:
        """What passes, for the interviewer: the right option, or "320 KiB ±5%"."""
        if self.kind == "choice":
            return self.answer
        if self.low is not None and self.high is not None and self.high > self.low:
            return f"{self.low:.4g}–{self.high:.4g} {self.unit} ±{self.tol * 100:.3g}%"
        return f"{self.value:.4g} {self.unit} ±{self.tol * 100:.3g}%".replace("  ", " ")

    def accepts(self, value: float) -> bool:
        """Whether a number answers the check: within the tolerance of some value the
        point's assumptions allow (of `value` when it assumes nothing)."""
        from trainer.grading.rubric.numbers import Expect

        return Expect(self.value, self.unit, self.tol, low=self.low, high=self.high).accepts(value)

    def shown_options(self, seed: str) -> list[str]:
        """The answer and distractors, shuffled the same way for the same `seed` (one
        attempt's point): reloading the page never reorders them."""
        options = [self.answer, *[d for d in self.distractors if d != self.answer]]
        options = list(dict.fromkeys(options))[:MAX_OPTIONS]
        random.Random(seed).shuffle(options)
        return options


def check_spec(rubric_point) -> CheckSpec | None:
    """The point's check, or None when it has none (or it cannot be read: then no check,
    rather than one nobody can pass)."""
    try:
        check = rubric_point.as_point().get("check")
    except (ExpressionError, KeyError, TypeError, ValueError):
        return None
    if not check or not str(check.get("ask", "")).strip():
        return None
    ask = str(check["ask"]).strip()
    if check.get("kind") == "number":
        number = check["number"]
        return CheckSpec(
            "number",
            ask,
            value=float(number["value"]),
            unit=number["unit"],
            tol=number["tol"],
            low=number.get("low"),
            high=number.get("high"),
        )
    answer = str(check.get("answer", "")).strip()
    distractors = tuple(str(d).strip() for d in check.get("options") or [] if str(d).strip())
    if not answer or not distractors:
        return None
    return CheckSpec("choice", ask, answer=answer, distractors=distractors)
