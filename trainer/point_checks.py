"""Point checks (writes): after a written answer is graded, the rubric points it attempted
but did not verify (verdict unclear or contradicted) that have a `check` are offered on one
screen for CHECK_WINDOW_S. A passed check makes the point hit (decided by check), a failed
one contradicted; an unanswered one changes nothing. A check is never offered for a point
the answer did not attempt: recognising the right option is not recalling it.

The server keeps the round honest: offers are made once per attempt, answered once, only
for points offered, and not after the window plus a grace for the network.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from trainer.check_specs import CheckSpec, check_spec
from trainer.grading.arithmetic import AnswerError, parse_answer
from trainer.models import Attempt, PointCheck
from trainer.rescore import rescore, verdict_of

CHECK_WINDOW_S = 60
CHECK_GRACE_S = 5  # a post sent at 0 s still arrives
OFFERED_VERDICTS = ("unclear", "contradicted")


class CheckRefused(Exception):
    """An answer the round cannot take; the message says why, `status` is the HTTP one."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass(frozen=True)
class Round:
    checks: list[PointCheck]
    deadline: datetime | None

    def remaining_s(self, now: datetime | None = None) -> float:
        if self.deadline is None:
            return 0.0
        return max(0.0, (self.deadline - (now or timezone.now())).total_seconds())

    @property
    def open(self) -> bool:
        return any(c.answered is None for c in self.checks) and self.remaining_s() > 0


def offerable(attempt: Attempt) -> list[tuple[int, CheckSpec, str]]:
    """(point index, its check, its verdict) for every point a check may be offered for."""
    points = (attempt.result or {}).get("points", [])
    rubric = list(attempt.question.rubric.all())
    out = []
    for p in points:
        index = p.get("index")
        verdict = verdict_of(p)
        if not isinstance(index, int) or not 0 <= index < len(rubric) or p.get("penalty"):
            continue
        if not p.get("attempted") or verdict not in OFFERED_VERDICTS:
            continue
        spec = check_spec(rubric[index])
        if spec is not None:
            out.append((index, spec, verdict))
    return out


def in_mock(attempt: Attempt) -> bool:
    """A mock's answer is scored as given (its checks are the interviewer's probes): no
    round of checks may raise its score afterwards. (`mock_item` is the mock's reverse
    relation onto Attempt, asked by name: trainer imports nothing of the mock.)"""
    return Attempt.objects.filter(pk=attempt.pk, mock_item__isnull=False).exists()


def checks_round(*, attempt: Attempt, now: datetime | None = None) -> Round:
    """The attempt's round of checks, offered the first time a graded attempt is shown
    (so the clock starts when the learner sees it); later calls return the same round."""
    now = now or timezone.now()
    checks = list(attempt.point_checks.all())
    if not checks and attempt.graded is not None and not in_mock(attempt):
        with transaction.atomic():
            locked = Attempt.objects.select_for_update().get(pk=attempt.pk)
            if not locked.point_checks.exists():
                PointCheck.objects.bulk_create(
                    [
                        PointCheck(
                            attempt=locked,
                            point_index=index,
                            kind=spec.kind,
                            ask=spec.ask,
                            options=spec.shown_options(f"{attempt.pk}:{index}")
                            if spec.kind == "choice"
                            else [],
                            unit=spec.unit,
                            verdict_before=verdict,
                            offered=now,
                        )
                        for index, spec, verdict in offerable(locked)
                    ]
                )
        checks = list(attempt.point_checks.all())
    deadline = min((c.offered for c in checks), default=None)
    return Round(checks, deadline + timedelta(seconds=CHECK_WINDOW_S) if deadline else None)


def _grade_one(check: PointCheck, spec: CheckSpec | None, raw: str, final: bool) -> None:
    """Fill in the check's response, passed and reason from `raw` (blank: unanswered)."""
    raw = raw.strip()[:200]
    check.response = raw
    if not raw or spec is None:
        check.passed = None
        return
    if check.kind == "choice":
        if not raw.isdecimal() or not int(raw) < len(check.options):
            raise CheckRefused(f"Point {check.point_index + 1}: choose one of the options.")
        chosen = check.options[int(raw)]
        check.response = chosen
        check.passed = chosen == spec.answer
        check.reason = "" if check.passed else f"check: you chose “{chosen}”"
        return
    try:
        value = float(parse_answer(raw, spec.unit).magnitude)
    except AnswerError as exc:
        if final:  # the time-out post: an unreadable number counts as unanswered
            check.response, check.passed = "", None
            return
        raise CheckRefused(f"Point {check.point_index + 1}: {exc}") from None
    check.passed = spec.accepts(value)
    check.reason = "" if check.passed else f"check: you answered {raw}"


def _apply(result: dict, checks: list[PointCheck]) -> dict:
    """The result with passed checks as hits and failed ones as contradictions, rescored."""
    by_index = {c.point_index: c for c in checks if c.passed is not None}
    points = []
    for p in result.get("points", []):
        check = by_index.get(p.get("index"))
        if check is not None and p.get("attempted") and verdict_of(p) in OFFERED_VERDICTS:
            p = {
                **p,
                "verdict": "hit" if check.passed else "contradicted",
                "decided_by": "check",
                "reason": "" if check.passed else check.reason,
            }
        points.append(p)
    return rescore({**result, "points": points})


def checks_answer(
    *, attempt: Attempt, responses: dict[int, str], final: bool = False, now=None
) -> list[PointCheck]:
    """Grade the learner's answers to the offered checks (point index -> posted value:
    an option's position, or a number with a unit) and apply them to the attempt's result
    and score. Raises CheckRefused for a point not offered (400), a round already answered
    (409) or one past its time (409: the round is closed, nothing changes)."""
    now = now or timezone.now()
    with transaction.atomic():
        locked = Attempt.objects.select_for_update().select_related("question").get(pk=attempt.pk)
        checks = {c.point_index: c for c in locked.point_checks.all()}
        if not checks:
            raise CheckRefused("No checks were offered for this answer.")
        unknown = sorted(set(responses) - set(checks))
        if unknown:
            raise CheckRefused(f"No check was offered for point {unknown[0] + 1}.")
        if any(c.answered is not None for c in checks.values()):
            raise CheckRefused("These checks are already answered; the first answers stand.", 409)
        deadline = min(c.offered for c in checks.values()) + timedelta(
            seconds=CHECK_WINDOW_S + CHECK_GRACE_S
        )
        late = now > deadline
        rubric = list(locked.question.rubric.all())
        for index, check in checks.items():
            check.answered = now
            if late:
                check.response, check.passed = "", None
                continue
            spec = check_spec(rubric[index]) if index < len(rubric) else None
            _grade_one(check, spec, responses.get(index, ""), final)
        PointCheck.objects.bulk_update(
            checks.values(), ["answered", "response", "passed", "reason"]
        )
        if not late:
            locked.result = _apply(locked.result or {}, list(checks.values()))
            locked.score = locked.result["score"]
            locked.save(update_fields=["result", "score"])
    if late:
        raise CheckRefused("Time is up for these checks: your verdicts stay as graded.", 409)
    attempt.refresh_from_db()
    return list(checks.values())


def checks_skip(*, attempt: Attempt, now=None) -> None:
    """The learner declines the round (offered now if it was not yet): every open check
    closes unanswered (no change)."""
    checks_round(attempt=attempt, now=now)
    attempt.point_checks.filter(answered__isnull=True).update(answered=now or timezone.now())
