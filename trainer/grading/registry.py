"""Which grader handles a question: the one place that decides, by question kind.

Graders register here from `TrainerConfig.ready()` (arithmetic for `arithmetic` questions,
rubric for `scenario` and `design`); everything else asks `grader_for(question)` instead of
testing the kind itself. A grader is one of two shapes:

- *stepwise* (`stepwise = True`): the answer is a chain of steps on a drawn variant, each
  graded as it is submitted — `grade_step(chain, step_name, raw, ...)`;
- *written*: one free-text answer graded when it is submitted — `grade_answer(question,
  answer)`, returning a result with `.score` (0..1) and `.as_dict()` (stored on the attempt).

A new grader subclasses `Grader`, implements its shape's method and is registered for the
kinds it takes over (`register(kind, grader, replace=True)` to swap an existing one).
"""

from __future__ import annotations

from typing import Any, Protocol


class GradeResult(Protocol):
    score: float  # 0..1

    def as_dict(self) -> dict: ...


class Grader:
    """Base of every grader: its name, its shape, and the entry point of that shape."""

    name: str = ""
    stepwise: bool = False  # steps on a drawn variant (True) or one written answer

    def grade_step(self, chain, step_name: str, raw: str, *, hints_used: int, hint_penalty: float):
        """Parse `raw` and grade one step of `chain` (stepwise graders)."""
        raise TypeError(f"the {self.name} grader grades a written answer, not steps")

    def grade_answer(self, question, answer: str) -> GradeResult:
        """Grade a written answer to `question` (written-answer graders)."""
        raise TypeError(f"the {self.name} grader grades steps, not a written answer")

    def warm_up(self) -> None:
        """Load what the first grading would otherwise wait for (a model); default: nothing."""


_graders: dict[str, Grader] = {}


def register(kind: str, grader: Grader, *, replace: bool = False) -> None:
    """Make `grader` the grader of questions of `kind`. Registering the same kind of
    grader again replaces it (ready() may run twice); a different one needs replace=True."""
    current = _graders.get(kind)
    if current is not None and type(current) is not type(grader) and not replace:
        raise ValueError(
            f"{kind!r} questions are already graded by {current.name!r}; "
            "pass replace=True to swap it"
        )
    _graders[kind] = grader


def unregister(kind: str) -> None:
    _graders.pop(kind, None)


def graders() -> dict[str, Grader]:
    """Question kind -> its grader (a copy)."""
    return dict(_graders)


def grader_for(question: Any) -> Grader:
    """The grader of a question (or of a question kind, given as a string)."""
    kind = question if isinstance(question, str) else question.kind
    try:
        return _graders[kind]
    except KeyError:
        known = ", ".join(sorted(_graders)) or "none"
        raise LookupError(
            f"no grader is registered for {kind!r} questions (known: {known})"
        ) from None


def warm_up() -> None:
    """Warm every registered grader once (at server start, in the background)."""
    for grader in {id(g): g for g in _graders.values()}.values():
        grader.warm_up()
