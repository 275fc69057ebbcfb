"""Mock-interview services (writes): start a loop, run its clock on the server, store
answers (late ones marked, never dropped), close questions, finish and grade.

Time is the server's: each item gets `started` and `deadline` when it is first shown; the
page only displays `deadline - now`. An answer arriving after deadline + grace is stored
with late=True. A question whose own deadline has passed stays open — the candidate may
finish it, marked late — until they submit or move on; the loop's deadline (+ grace) ends
the mock: every open question is closed on the next request, whatever was autosaved
becoming its answer.
"""

from __future__ import annotations

import contextlib
import logging
import secrets
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from mock import live
from mock.models import FollowUpAnswer, MockInterview, MockInvite, MockItem
from questions.models import Loop, Step, published_q
from trainer import api as practice

logger = logging.getLogger(__name__)
# Longest step draft and interviewer notes stored (the inputs carry them as maxlength).
STEP_DRAFT_MAX_CHARS = 200
NOTES_MAX_CHARS = 5_000


class MockError(Exception):
    """A request the mock cannot honour; the message says what to do instead."""


class DraftRejected(MockError):
    """Input the answer boxes cannot have produced (an unknown box or step: 400, too long:
    413). Nothing of the request is saved; the page keeps the text in its box."""

    status = 400


class DraftTooLarge(DraftRejected):
    status = 413


def _grace() -> timedelta:
    return timedelta(seconds=settings.MOCK_DEADLINE_GRACE_S)


def is_late(item: MockItem, when: datetime) -> bool:
    """After the item's deadline plus the network grace (seconds, not scaled)."""
    return item.deadline is not None and when > item.deadline + _grace()


def remaining_s(deadline: datetime | None, now: datetime | None = None) -> float:
    """Seconds left until `deadline` by the server's clock (never negative)."""
    if deadline is None:
        return 0.0
    return max(0.0, (deadline - (now or timezone.now())).total_seconds())


# --- starting and the clock --------------------------------------------------------------


def mock_start(*, user, loop: Loop, now: datetime | None = None) -> MockInterview:
    """A new mock of `loop`: every question's budget is its minutes × MOCK_TIME_SCALE; the
    loop's deadline is the sum. The first question starts at once. Only published questions
    are asked (a draft in the loop is skipped, its minutes with it)."""
    loop_items = list(
        loop.items.filter(published_q("question__"))
        .select_related("question")
        .order_by("order", "id")
    )
    if not loop_items:
        raise MockError(
            "This loop has no published questions yet; load the bank or pick another loop."
        )
    now = now or timezone.now()
    scale = float(settings.MOCK_TIME_SCALE)
    budgets = [li.minutes * 60.0 * scale for li in loop_items]
    with transaction.atomic():
        mock = MockInterview.objects.create(
            user=user,
            loop=loop,
            started=now,
            deadline=now + timedelta(seconds=sum(budgets)),
            time_scale=scale,
            budget_s=sum(budgets),
        )
        MockItem.objects.bulk_create(
            MockItem(mock=mock, order=i, question=li.question, budget_s=b)
            for i, (li, b) in enumerate(zip(loop_items, budgets, strict=True))
        )
    mock_current(mock=mock, now=now)
    return mock


def mock_current(*, mock: MockInterview, now: datetime | None = None) -> MockItem | None:
    """The question the candidate is on: expired ones are closed, the next one is started
    (a fresh Attempt, so arithmetic gets a fresh variant). None when the loop is over."""
    now = now or timezone.now()
    with transaction.atomic():
        mock = MockInterview.objects.select_for_update().get(pk=mock.pk)
        if mock.finished is not None:
            return None
        for item in mock.items.select_related("question", "attempt").order_by("order"):
            if item.closed is not None:
                continue
            if item.started is None:
                if now >= mock.deadline:  # the loop's time is up: never reached
                    _close(item, now)
                    continue
                item.attempt = practice.attempt_start(user=mock.user, question=item.question)
                item.started = now
                item.deadline = min(now + timedelta(seconds=item.budget_s), mock.deadline)
                item.save(update_fields=["attempt", "started", "deadline"])
                if mock.interviewer_id is not None:
                    ref = _item_ref(item)
                    transaction.on_commit(lambda ref=ref: live.publish(mock.pk, "item", ref))
                return item
            if now > mock.deadline + _grace():  # the loop is over; a late question is not
                _close(item, now)
                continue
            return item
    mock_finish(mock=mock)
    return None


def _item_ref(item: MockItem) -> dict:
    return {"item": item.order, "question": item.question.title}


# --- answers -------------------------------------------------------------------------------


def _open_item(item: MockItem) -> MockItem:
    item = MockItem.objects.select_related("mock", "question", "attempt").get(pk=item.pk)
    if item.started is None:
        raise MockError("This question has not started yet.")
    return item


def _chars(text: str) -> int:
    """Length as the box counts it: a line break is one character (a form post sends CRLF)."""
    return len(text) - text.count("\r\n")


def check_text(text: str) -> str:
    """An answer or follow-up text within what a box keeps (LF line breaks), or 413."""
    limit = practice.ANSWER_MAX_CHARS
    if _chars(text) > limit:
        raise DraftTooLarge(
            f"This answer is {_chars(text):,} characters long; a box keeps at most {limit:,}. "
            "Nothing was saved from this request: your text is still in the box, shorten it "
            "and it saves again."
        )
    return text.replace("\r\n", "\n")


def check_steps(item: MockItem, steps: dict[str, str]) -> dict[str, str]:
    """Step texts keyed by this question's own step names, each within a step box's limit:
    an unknown name is a 400 that names it, a longer text a 413 that names the limit."""
    if not practice.grader_for(item.question).stepwise:
        raise DraftRejected("This question takes a written answer, not arithmetic steps.")
    steps_of = Step.objects.filter(problem__question=item.question)
    names = list(steps_of.values_list("name", flat=True))
    cleaned: dict[str, str] = {}
    for name, raw in steps.items():
        if name not in names:
            shown = name if len(name) <= 64 else name[:64] + "…"
            raise DraftRejected(
                f"This question has no step {shown!r}; its steps are {', '.join(names)}."
            )
        text = str(raw)
        if _chars(text) > STEP_DRAFT_MAX_CHARS:
            raise DraftTooLarge(
                f"Step {name!r} is {_chars(text):,} characters long; a step box keeps at most "
                f"{STEP_DRAFT_MAX_CHARS}. Nothing was saved from this request."
            )
        cleaned[name] = text.replace("\r\n", "\n")
    return cleaned


def draft_save(*, item: MockItem, slot: str, text: str = "", steps: dict | None = None) -> None:
    """Autosave one answer box (`main`, `fu-<index>` or `steps`) and tell the interviewer's
    stream it changed. Input a box cannot produce is refused whole (DraftRejected)."""
    item = _open_item(item)
    now = timezone.now()
    if slot == "main" and item.attempt is not None:
        practice.draft_save(attempt=item.attempt, text=check_text(text))
    elif slot == "steps":
        item.step_drafts = check_steps(item, steps or {})
        item.step_drafts_saved = now
        item.save(update_fields=["step_drafts", "step_drafts_saved"])
    elif slot.startswith("fu-"):
        row = _follow_up_row(item, int(slot.removeprefix("fu-")))
        text = check_text(text)
        if row.submitted is None:
            row.draft, row.draft_saved = text, now
            row.save(update_fields=["draft", "draft_saved"])
    else:
        raise DraftRejected(f"No answer box {slot!r}.")
    _publish_answer(item, slot)


def answer_submit(*, item: MockItem, text: str) -> MockItem:
    """The main answer to a scenario/design question: stored now, graded at the end."""
    item = _open_item(item)
    now = timezone.now()
    with transaction.atomic():
        attempt = practice.Attempt.objects.select_for_update().get(pk=item.attempt_id)
        if attempt.submitted is not None:
            raise MockError("This question is already answered; its first answer is kept.")
        attempt.answer = attempt.draft = text[: practice.ANSWER_MAX_CHARS]
        attempt.submitted = now
        attempt.save(update_fields=["answer", "draft", "submitted"])
        item.answered, item.late = now, is_late(item, now)
        item.save(update_fields=["answered", "late"])
    _publish_answer(item, "main")
    return item


def steps_submit(*, item: MockItem, raws: dict[str, str]) -> dict[str, str]:
    """Arithmetic: grade each typed step in order (no verdict is shown until the end).
    Returns {step: error} for unreadable input, which stays in its box."""
    item = _open_item(item)
    raws = check_steps(item, raws)  # a written question (was a 500), unknown steps, too long
    now = timezone.now()
    context = practice.attempt_context(item.attempt)
    errors: dict[str, str] = {}
    for step in context.problem.steps:
        raw = (raws.get(step.name) or "").strip()
        if not raw or step.name in context.answers:
            continue
        try:
            practice.step_answer_submit(attempt=item.attempt, step_name=step.name, raw=raw)
        except practice.AnswerError as exc:
            errors[step.name] = str(exc)
            continue
        if is_late(item, now):
            item.late_steps = [*item.late_steps, step.name]
    item.step_drafts = {k: v for k, v in raws.items() if k in errors}
    answered = item.attempt.step_answers.count()
    if answered == len(context.problem.steps) and item.answered is None:
        item.answered = now
    item.late = bool(item.late_steps)
    item.save(update_fields=["late_steps", "step_drafts", "answered", "late"])
    _publish_answer(item, "steps")
    return errors


def follow_up_current(item: MockItem) -> FollowUpAnswer | None:
    """The probe to answer now: one at a time, after the main answer, in the bank's order."""
    if item.answered is None:
        return None
    done = item.follow_up_answers.filter(submitted__isnull=False).count()
    if done >= len(item.question.follow_up_items()):
        return None
    return _follow_up_row(item, done)


def _follow_up_row(item: MockItem, index: int) -> FollowUpAnswer:
    prompts = item.question.follow_up_prompts()
    if not 0 <= index < len(prompts):
        raise MockError("This question has no such follow-up.")
    row, _ = FollowUpAnswer.objects.get_or_create(
        item=item, index=index, defaults={"prompt": prompts[index]}
    )
    return row


def follow_up_submit(*, item: MockItem, index: int, text: str) -> FollowUpAnswer:
    item = _open_item(item)
    current = follow_up_current(item)
    if current is None or current.index != index:
        raise MockError("That follow-up is not the one being asked now.")
    now = timezone.now()
    current.answer = current.draft = text[: practice.ANSWER_MAX_CHARS]
    current.submitted, current.late = now, is_late(item, now)
    current.save(update_fields=["answer", "draft", "submitted", "late"])
    _publish_answer(item, f"fu-{index}")
    return current


def _publish_answer(item: MockItem, slot: str) -> None:
    """Once the text is committed (the interviewer's stream reads it from the DB then)."""
    if item.mock.interviewer_id is not None:
        mock_id, order = item.mock_id, item.order
        transaction.on_commit(lambda: live.publish_answer(mock_id, order, slot))


def item_next(*, item: MockItem, drafts: dict[str, str] | None = None) -> None:
    """The candidate moves on (or the clock ran out): save the boxes' last text, close.
    Text no box can hold refuses the whole move (DraftRejected) before anything is saved."""
    item = _open_item(item)
    drafts = drafts or {}
    texts = {k: v for k, v in drafts.items() if k == "main" or k.startswith("fu-")}
    steps = {k.removeprefix("step:"): v for k, v in drafts.items() if k.startswith("step:")}
    for text in texts.values():
        check_text(text)
    if steps:
        check_steps(item, steps)
    for slot, text in texts.items():
        with contextlib.suppress(MockError, ValueError):  # a follow-up not asked yet: skipped
            draft_save(item=item, slot=slot, text=text)
    if steps:
        draft_save(item=item, slot="steps", steps=steps)
    with transaction.atomic():
        MockInterview.objects.select_for_update().get(pk=item.mock_id)
        item = MockItem.objects.select_related("question", "attempt", "mock").get(pk=item.pk)
        if item.closed is None:
            _close(item, timezone.now())


# --- closing, finishing, grading -------------------------------------------------------------


def _close(item: MockItem, now: datetime) -> None:
    """What was autosaved becomes the answer (late if saved after the deadline)."""
    if item.attempt is None:  # never reached: nothing to store, grade or schedule
        item.closed = now
        item.save(update_fields=["closed", "started", "deadline"])
        return
    if practice.grader_for(item.question).stepwise:
        _close_steps(item, now)
    elif item.attempt.submitted is None:
        attempt = item.attempt
        saved = attempt.draft_saved or now
        attempt.answer, attempt.submitted = attempt.draft, now
        attempt.save(update_fields=["answer", "submitted"])
        item.answered, item.late = now, bool(attempt.draft.strip()) and is_late(item, saved)
    for row in item.follow_up_answers.filter(submitted__isnull=True).exclude(draft=""):
        row.answer, row.submitted = row.draft, now
        row.late = is_late(item, row.draft_saved or now)
        row.save(update_fields=["answer", "submitted", "late"])
    item.closed = now
    item.save()
    if item.mock.interviewer_id is not None:
        mock_id, ref = item.mock_id, {"item": item.order + 1}
        transaction.on_commit(lambda: live.publish(mock_id, "item", ref))


def _close_steps(item: MockItem, now: datetime) -> None:
    attempt = item.attempt
    late_saved = is_late(item, item.step_drafts_saved or now)
    for name, raw in (item.step_drafts or {}).items():
        if not str(raw).strip():
            continue
        try:
            practice.step_answer_submit(attempt=attempt, step_name=name, raw=str(raw))
        except (practice.AnswerError, KeyError):
            continue  # unreadable at time-out: the step stays unanswered (no credit)
        if late_saved:
            item.late_steps = [*item.late_steps, name]
    attempt.refresh_from_db()
    if attempt.submitted is None:  # not every step answered: score what was
        context = practice.attempt_context(attempt)
        steps = len(context.problem.steps)
        attempt.score = sum(a.credit for a in context.answers.values()) / steps
        attempt.submitted = now
        attempt.result = {
            "steps": steps,
            "verdicts": {n: a.verdict for n, a in context.answers.items()},
            "hints": 0,
        }
        attempt.save(update_fields=["score", "submitted", "result"])
        practice.review_record(attempt=attempt)
    item.answered = item.answered or now
    item.late = bool(item.late_steps)


def mock_finish(*, mock: MockInterview) -> MockInterview:
    """End the loop: close what is open, grade every answer (feeding fsrs), store scores."""
    now = timezone.now()
    with transaction.atomic():
        mock = MockInterview.objects.select_for_update().get(pk=mock.pk)
        if mock.finished is not None:
            return mock
        for item in mock.items.select_related("question", "attempt").filter(closed__isnull=True):
            _close(item, now)
        mock.finished = now
        mock.status = MockInterview.Status.FINISHED
        mock.save(update_fields=["finished", "status"])
    mock_grade(mock=mock)
    if mock.interviewer_id is not None:
        live.publish(mock.pk, "end", {})
    return mock


def mock_grade(*, mock: MockInterview) -> MockInterview:
    """Grade answers not yet graded (rubric + fsrs review) and store the auto scores."""
    from mock.scorecard import scorecard

    for item in mock.items.select_related("attempt", "question"):
        attempt = item.attempt
        if (
            attempt is not None
            and not practice.grader_for(item.question).stepwise
            and attempt.submitted is not None
            and attempt.graded is None
        ):
            practice.attempt_grade(attempt=attempt)
        follow_ups_grade(item=item)
    card = scorecard(mock)
    mock.overall = card.overall_auto
    mock.competencies = {c.name: c.auto for c in card.competencies if c.auto is not None}
    mock.save(update_fields=["overall", "competencies"])
    return mock


def follow_ups_grade(*, item: MockItem) -> None:
    """Grade the item's answered follow-ups that have a rubric, once (the same grader as
    the main answer, on the follow-up's own points). A grader failure leaves the answer
    ungraded; the scorecard shows it without verdicts."""
    items = item.question.follow_up_items()
    for row in item.follow_up_answers.filter(submitted__isnull=False, score__isnull=True):
        if row.index >= len(items) or not items[row.index]["rubric"] or not row.answer.strip():
            continue
        try:
            row.score, row.result = practice.follow_up_grade(item.question, row.index, row.answer)
        except Exception:  # one follow-up must not cost the scorecard
            logger.exception("grading follow-up %s of mock item %s failed", row.index, item.pk)
            continue
        row.save(update_fields=["score", "result"])


# --- the interviewer seat --------------------------------------------------------------------


def invite_create(*, mock: MockInterview, user, now: datetime | None = None) -> MockInvite:
    """A fresh single-use link (24 h by default) for the candidate to share."""
    if mock.user_id != user.pk:
        raise MockError("Only the candidate can invite an interviewer.")
    if mock.interviewer_id is not None:
        raise MockError("This mock already has an interviewer.")
    now = now or timezone.now()
    return MockInvite.objects.create(
        mock=mock,
        token=secrets.token_urlsafe(32),
        expires=now + timedelta(hours=settings.MOCK_INVITE_HOURS),
    )


def _invite_refusal(invite, mock: MockInterview, user, now: datetime) -> str:
    """Why `user` may not take the seat ("" when they may, or already hold it)."""
    if invite.used_by_id is not None:
        return (
            ""
            if invite.used_by_id == user.pk
            else ("This invite link has already been used by someone else.")
        )
    if user.pk == mock.user_id:
        return "This is your own mock: send the link to your interviewer instead."
    if invite.expires <= now:
        return "This invite link has expired; ask the candidate for a new one."
    if mock.interviewer_id is not None:
        return "This mock already has an interviewer."
    return ""


def invite_check(*, token: str, user, now: datetime | None = None) -> tuple[MockInterview, bool]:
    """Whether `user` may take the seat the invite offers, changing nothing: (mock, True when
    the seat is already theirs). Opening the link (a GET, a link preview, a prefetch) must
    not take the seat; `invite_accept` (a POST) does."""
    invite = MockInvite.objects.select_related("mock").filter(token=token).first()
    if invite is None:
        raise MockError("This invite link is not valid.")
    reason = _invite_refusal(invite, invite.mock, user, now or timezone.now())
    if reason:
        raise MockError(reason)
    return invite.mock, invite.used_by_id == user.pk


def invite_accept(*, token: str, user, now: datetime | None = None) -> MockInterview:
    """Bind the invite to the first signed-in user who accepts it (never the candidate)."""
    now = now or timezone.now()
    with transaction.atomic():
        invite = (
            MockInvite.objects.select_for_update().select_related("mock").filter(token=token)
        ).first()
        if invite is None:
            raise MockError("This invite link is not valid.")
        mock = MockInterview.objects.select_for_update().get(pk=invite.mock_id)
        reason = _invite_refusal(invite, mock, user, now)
        if reason:
            raise MockError(reason)
        if invite.used_by_id == user.pk:
            return mock  # the interviewer reopening their own link
        invite.used_by, invite.used = user, now
        invite.save(update_fields=["used_by", "used"])
        mock.interviewer = user
        mock.save(update_fields=["interviewer"])
    return mock


def interviewer_mark(
    *, item: MockItem, user, points: list[int], notes: str, score_10: float | None = None
) -> MockItem:
    """The interviewer's rubric ticks and notes; the score uses the grader's weights (a
    question without a rubric, e.g. arithmetic, takes the interviewer's 0-10 instead)."""
    if item.mock.interviewer_id != user.pk:
        raise MockError("Only this mock's interviewer can mark it.")
    rubric = list(item.question.rubric.all())
    chosen = sorted({i for i in points if 0 <= i < len(rubric)})
    earnable = sum(p.weight for p in rubric if not p.penalty)
    earned = sum(rubric[i].weight for i in chosen if not rubric[i].penalty)
    lost = sum(rubric[i].weight for i in chosen if rubric[i].penalty)
    item.interviewer_points = chosen
    item.interviewer_notes = notes[:NOTES_MAX_CHARS]
    if earnable:
        item.interviewer_score = max(0.0, min(1.0, (earned - lost) / earnable))
    elif score_10 is not None:
        item.interviewer_score = max(0.0, min(1.0, score_10 / 10))
    item.save(update_fields=["interviewer_points", "interviewer_notes", "interviewer_score"])
    return item
