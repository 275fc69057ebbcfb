"""Practice services (writes): start an attempt, reveal a hint, submit a step answer."""

from __future__ import annotations

import secrets
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from questions import problems
from questions.models import Question
from questions.services import problem_spec
from trainer.grading import arithmetic
from trainer.grading.registry import grader_for
from trainer.models import Attempt, StepAnswer


@dataclass(frozen=True)
class AttemptContext:
    """An arithmetic attempt's problem, its variant and the learner's chain so far."""

    attempt: Attempt
    problem: problems.Problem
    variant: problems.Variant
    answers: dict[str, StepAnswer]

    def chain(self) -> arithmetic.Chain:
        units = {s.name: s.unit for s in self.problem.steps}
        given = {
            name: arithmetic.UREG.Quantity(a.value, arithmetic.parse_unit(units[name]))
            for name, a in self.answers.items()
            if name in units
        }
        return arithmetic.Chain(self.problem, self.variant.variables, given)


def attempt_start(*, user, question: Question, seed: int | None = None) -> Attempt:
    """A new attempt with its own variant seed (stepwise: arithmetic) — same seed, same
    numbers."""
    if seed is None and grader_for(question).stepwise:
        seed = secrets.randbelow(2**31)
    return Attempt.objects.create(user=user, question=question, variant_seed=seed)


def attempt_current(*, user, question: Question) -> Attempt:
    """The learner's latest attempt at `question` (an unfinished one resumes with its draft;
    a finished one shows its review), or a new one."""
    attempt = Attempt.objects.filter(user=user, question=question).order_by("-started").first()
    return attempt or attempt_start(user=user, question=question)


def attempt_for_review(*, user, question: Question) -> Attempt:
    """A review is answered from memory: an unfinished attempt resumes (its draft is never
    lost), a finished one is not reopened — a new attempt starts, model answer hidden."""
    attempt = Attempt.objects.filter(user=user, question=question).order_by("-started").first()
    if attempt is not None and attempt.submitted is None and attempt.graded is None:
        return attempt
    return attempt_start(user=user, question=question)


def attempt_context(attempt: Attempt) -> AttemptContext:
    problem = problem_spec(attempt.question.problem)
    variant = problems.draw_variant(problem, attempt.variant_seed)
    answers = {a.step_name: a for a in attempt.step_answers.all()}
    return AttemptContext(attempt, problem, variant, answers)


def hint_reveal(*, attempt: Attempt, step_name: str) -> int:
    """Reveal the next hint of a step not yet answered; returns how many are shown."""
    context = attempt_context(attempt)
    step = _step(context.problem, step_name)
    shown = attempt.hints.get(step_name, 0)
    if step_name not in context.answers and shown < len(step.hints):
        shown += 1
        attempt.hints[step_name] = shown
        attempt.save(update_fields=["hints"])
    return shown


@transaction.atomic
def step_answer_submit(*, attempt: Attempt, step_name: str, raw: str) -> StepAnswer:
    """Parse and grade one step with the question's (stepwise) grader. Raises
    arithmetic.AnswerError for unreadable input (which costs nothing); a step already graded
    keeps its first answer."""
    attempt = Attempt.objects.select_for_update().get(pk=attempt.pk)
    context = attempt_context(attempt)
    step = _step(context.problem, step_name)
    if step_name in context.answers:
        return context.answers[step_name]
    hints_used = attempt.hints.get(step_name, 0)
    result = grader_for(attempt.question).grade_step(
        context.chain(),
        step_name,
        raw,
        hints_used=hints_used,
        hint_penalty=settings.ARITHMETIC_HINT_PENALTY,
    )
    answer = StepAnswer.objects.create(
        attempt=attempt,
        step_name=step_name,
        raw=raw.strip()[:200],
        order=[s.name for s in context.problem.steps].index(step_name),
        value=result.value,
        unit=step.unit,
        verdict=result.verdict,
        credit=result.credit,
        feedback=result.feedback,
        hints_used=hints_used,
        expected=result.expected,
        expected_given_yours=result.expected_given_yours,
        broke_at=result.broke_at or "",
    )
    context.answers[step_name] = answer
    if len(context.answers) == len(context.problem.steps):
        _attempt_finish(attempt, context)
    return answer


def _attempt_finish(attempt: Attempt, context: AttemptContext) -> None:
    credits = [a.credit for a in context.answers.values()]
    attempt.score = sum(credits) / len(context.problem.steps)
    attempt.submitted = timezone.now()
    attempt.result = {
        "steps": len(context.problem.steps),
        "verdicts": {name: a.verdict for name, a in context.answers.items()},
        "hints": sum(a.hints_used for a in context.answers.values()),
    }
    attempt.save(update_fields=["score", "submitted", "result"])
    from trainer.reviews import review_record

    review_record(attempt=attempt)


def _step(problem: problems.Problem, step_name: str) -> problems.Step:
    for step in problem.steps:
        if step.name == step_name:
            return step
    raise KeyError(f"this problem has no step {step_name!r}")


# --- scenario and design answers ---------------------------------------------------------


# The longest answer stored; the answer boxes carry it as maxlength, so the browser stops
# typing there instead of the tail being dropped silently (a crafted post is still cut).
ANSWER_MAX_CHARS = 20_000


def draft_save(*, attempt: Attempt, text: str) -> Attempt:
    """Autosave: keep what the learner typed (until the answer is submitted)."""
    if attempt.submitted is None:
        attempt.draft = text[:ANSWER_MAX_CHARS]
        attempt.draft_saved = timezone.now()
        attempt.save(update_fields=["draft", "draft_saved"])
    return attempt


def attempt_submit(*, attempt: Attempt, answer: str) -> Attempt:
    """Store the answer first (its own transaction), then grade it. A grader failure leaves
    the stored answer and a readable error; grading can be retried."""
    with transaction.atomic():
        locked = Attempt.objects.select_for_update().get(pk=attempt.pk)
        if locked.submitted is not None:
            return locked
        locked.answer = locked.draft = answer[:ANSWER_MAX_CHARS]
        locked.submitted = timezone.now()
        locked.save(update_fields=["answer", "draft", "submitted"])
    return attempt_grade(attempt=locked)


def attempt_grade(*, attempt: Attempt) -> Attempt:
    """Grade a submitted written answer with the question's grader (rubric) and schedule
    its review; a grader failure is stored as a readable error instead."""
    from trainer.judging import request_judge
    from trainer.reviews import review_record

    question = attempt.question
    try:
        result = grader_for(question).grade_answer(question, attempt.answer)
    except Exception as exc:  # the answer is already stored; say what failed, keep going
        attempt.grader_error = (
            f"The automatic grader failed ({type(exc).__name__}: {exc}). "
            "Your answer is saved; try grading again."
        )
        attempt.save(update_fields=["grader_error"])
        return attempt
    attempt.result = result.as_dict()
    attempt.score = result.score
    attempt.graded = timezone.now()
    attempt.grader_error = ""
    attempt.save(update_fields=["result", "score", "graded", "grader_error"])
    review_record(attempt=attempt)
    request_judge(attempt)  # a second opinion on unclear points, when one is configured
    return attempt


def self_assessment_save(*, attempt: Attempt, points: list[int]) -> Attempt:
    """The learner's own tick list; its score uses the same weights as the grader's."""
    rubric_points = list(attempt.question.rubric.all())
    chosen = sorted({i for i in points if 0 <= i < len(rubric_points)})
    earnable = sum(p.weight for p in rubric_points if not p.penalty)
    earned = sum(rubric_points[i].weight for i in chosen if not rubric_points[i].penalty)
    lost = sum(rubric_points[i].weight for i in chosen if rubric_points[i].penalty)
    attempt.self_points = chosen
    attempt.self_score = max(0.0, min(1.0, (earned - lost) / earnable)) if earnable else 0.0
    attempt.save(update_fields=["self_points", "self_score"])
    return attempt
