"""Mock-interview services: scaled budgets, fresh variants, server-side deadlines (late
answers kept and marked), closing at time-out, follow-ups one at a time, the fsrs feed."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from mock import services
from mock.models import MockInterview, MockItem
from mock.scorecard import competencies_of, scorecard
from questions.models import Loop, Question
from trainer.models import Attempt, ReviewLog

pytestmark = pytest.mark.django_db
WARM_UP = "inference-warm-up"


def start(user, settings, scale=1.0) -> MockInterview:
    settings.MOCK_TIME_SCALE = scale
    return services.mock_start(user=user, loop=Loop.objects.get(slug=WARM_UP))


def current(mock) -> MockItem:
    return services.mock_current(mock=mock)


def expire(item: MockItem, seconds_ago: float = 10) -> None:
    """Time travel: move the item's deadline into the past (beyond the grace)."""
    past = timezone.now() - timedelta(seconds=seconds_ago)
    MockItem.objects.filter(pk=item.pk).update(deadline=past, started=past - timedelta(minutes=1))


def test_start_scales_each_budget_and_starts_the_first_question(ada, settings):
    mock = start(ada, settings, scale=0.5)
    loop = Loop.objects.get(slug=WARM_UP)
    minutes = [li.minutes for li in loop.items.all()]
    items = list(mock.items.all())
    assert [i.budget_s for i in items] == [m * 30.0 for m in minutes]
    assert mock.budget_s == sum(minutes) * 30.0
    assert abs((mock.deadline - mock.started).total_seconds() - mock.budget_s) < 1e-6
    first = items[0]
    assert first.started is not None and first.attempt is not None
    assert abs((first.deadline - first.started).total_seconds() - first.budget_s) < 1e-6
    assert all(i.started is None for i in items[1:])


def test_arithmetic_questions_get_a_fresh_variant_each_mock(ada, settings):
    seeds = []
    for _ in range(2):
        mock = start(ada, settings)
        item = mock.items.get(question__kind=Question.Kind.ARITHMETIC)
        MockItem.objects.filter(mock=mock).exclude(pk=item.pk).update(
            started=timezone.now(), closed=timezone.now()
        )
        assert current(mock).pk == item.pk
        item.refresh_from_db()
        seeds.append(item.attempt.variant_seed)
        services.mock_finish(mock=mock)
    assert None not in seeds and seeds[0] != seeds[1]


def test_an_answer_before_the_deadline_is_on_time(ada, settings, fast_grader):
    item = current(start(ada, settings))
    services.answer_submit(item=item, text="Prefill then decode.")
    item.refresh_from_db()
    assert item.answered and not item.late
    assert item.attempt.answer == "Prefill then decode." and item.attempt.submitted


def test_an_answer_after_the_deadline_is_stored_and_marked_late(ada, settings):
    item = current(start(ada, settings))
    expire(item)
    services.answer_submit(item=item, text="Prefill is compute-bound; decode reads the weights.")
    item.refresh_from_db()
    assert item.late is True
    assert item.attempt.answer.startswith("Prefill is compute-bound")


def test_within_the_grace_an_answer_is_not_late(ada, settings):
    settings.MOCK_DEADLINE_GRACE_S = 2.0
    item = current(start(ada, settings))
    MockItem.objects.filter(pk=item.pk).update(deadline=timezone.now() - timedelta(seconds=0.5))
    services.answer_submit(item=item, text="Prefill then decode.")
    item.refresh_from_db()
    assert item.late is False


def test_the_client_cannot_extend_the_deadline(ada, settings, client):
    """Remaining time comes from the server's deadline; nothing the page sends changes it."""
    mock = start(ada, settings)
    item = current(mock)
    deadline = item.deadline
    client.force_login(ada)
    client.post(
        f"/mock/{mock.pk}/items/0/draft/", {"slot": "main", "answer": "x", "deadline": "9e9"}
    )
    item.refresh_from_db()
    assert item.deadline == deadline


def test_moving_on_after_the_deadline_closes_with_the_draft_and_the_next_starts(ada, settings):
    mock = start(ada, settings)
    item = current(mock)
    services.draft_save(item=item, slot="main", text="Typed before time ran out.")
    expire(item)
    Attempt.objects.filter(pk=item.attempt_id).update(
        draft_saved=timezone.now() - timedelta(seconds=20)  # before the (moved) deadline
    )
    # Past its own deadline the question stays open (the loop's time is not up): the
    # candidate may still finish it, late. Moving on closes it with what was typed.
    assert current(mock).pk == item.pk and MockItem.objects.get(pk=item.pk).closed is None
    services.item_next(item=item)
    nxt = current(mock)
    assert nxt.order == 1 and nxt.started is not None
    item.refresh_from_db()
    assert item.closed is not None
    assert item.attempt.answer == "Typed before time ran out." and item.attempt.submitted
    assert item.late is False  # it was typed (autosaved) before the deadline


def test_a_question_past_its_deadline_stays_open_until_the_loop_ends(ada, settings):
    mock = start(ada, settings)
    item = current(mock)
    expire(item, seconds_ago=600)
    again = current(mock)
    assert again.pk == item.pk and again.closed is None
    services.answer_submit(item=again, text="Finished after the bell.")
    again.refresh_from_db()
    assert again.late is True and again.attempt.answer == "Finished after the bell."
    # The loop's deadline still ends everything.
    MockInterview.objects.filter(pk=mock.pk).update(deadline=timezone.now() - timedelta(seconds=30))
    assert current(mock) is None
    assert MockItem.objects.filter(mock=mock, closed__isnull=True).count() == 0


def test_a_draft_saved_after_the_deadline_is_late_when_captured(ada, settings):
    mock = start(ada, settings)
    item = current(mock)
    expire(item)
    services.draft_save(item=item, slot="main", text="Typed after the deadline.")
    services.item_next(item=item)
    item.refresh_from_db()
    assert item.attempt.answer == "Typed after the deadline." and item.late is True


def test_resume_returns_the_same_question_with_the_server_remaining_time(ada, settings):
    mock = start(ada, settings)
    first = current(mock)
    again = current(mock)
    assert again.pk == first.pk and again.deadline == first.deadline
    later = first.deadline - timedelta(seconds=100)
    assert services.remaining_s(again.deadline, later) == pytest.approx(100.0)


def test_follow_ups_come_one_at_a_time_after_the_first_answer(ada, settings):
    item = current(start(ada, settings))
    assert services.follow_up_current(item) is None  # not before the main answer
    services.answer_submit(item=item, text="Prefill then decode.")
    item.refresh_from_db()
    probe = services.follow_up_current(item)
    assert probe.index == 0 and probe.prompt == item.question.follow_up_prompts()[0]
    with pytest.raises(services.MockError):
        services.follow_up_submit(item=item, index=1, text="skipping ahead")
    services.follow_up_submit(item=item, index=0, text="Prefill grows quadratically in attention.")
    assert services.follow_up_current(item).index == 1


def test_a_late_follow_up_is_kept_and_marked(ada, settings):
    item = current(start(ada, settings))
    services.answer_submit(item=item, text="Prefill then decode.")
    expire(item)
    row = services.follow_up_submit(item=item, index=0, text="At 32K prefill grows.")
    assert row.late is True and row.answer == "At 32K prefill grows."


def test_the_loop_deadline_leaves_later_questions_unreached(ada, settings, fast_grader):
    mock = start(ada, settings)
    item = current(mock)
    past = timezone.now() - timedelta(seconds=30)
    MockInterview.objects.filter(pk=mock.pk).update(deadline=past)
    MockItem.objects.filter(pk=item.pk).update(deadline=past)
    assert current(mock) is None
    mock.refresh_from_db()
    assert mock.finished is not None
    card = scorecard(mock)
    assert [c.reached for c in card.items] == [True, False, False, False]
    assert all(c.auto == 0.0 for c in card.items[1:])


def test_finishing_grades_everything_and_feeds_fsrs(ada, settings, fast_grader):
    mock = start(ada, settings)
    for _ in range(3):
        item = current(mock)
        services.answer_submit(item=item, text=item.question.model_answer)
        services.item_next(item=item)
    item = current(mock)
    assert item.question.kind == Question.Kind.ARITHMETIC
    from trainer import services as practice

    context = practice.attempt_context(item.attempt)
    arithmetic = practice.arithmetic
    reference = arithmetic.Chain(context.problem, context.variant.variables, {}).reference()
    raws = {
        s.name: arithmetic.reference_text(reference[s.name], s.unit) for s in context.problem.steps
    }
    assert services.steps_submit(item=item, raws=raws) == {}
    services.item_next(item=item)
    assert current(mock) is None
    mock.refresh_from_db()
    assert mock.finished and mock.overall is not None and mock.competencies
    logs = ReviewLog.objects.filter(card__user=ada)
    assert logs.count() == 4 and all(log.attempt_id for log in logs)
    card = scorecard(mock)
    arithmetic = card.items[3]
    assert arithmetic.auto == pytest.approx(1.0) and len(arithmetic.steps) == len(raws)


def test_quality_maps_onto_reliability(bank):
    question = Question(competencies=["latency", "quality", "reliability", "made-up"])
    assert competencies_of(question) == ["latency", "reliability"]


def test_a_late_arithmetic_step_is_graded_and_marked_late(ada, settings):
    mock = start(ada, settings)
    MockItem.objects.filter(mock=mock, order__lt=3).update(
        started=timezone.now(), closed=timezone.now()
    )
    item = current(mock)
    assert item.question.kind == Question.Kind.ARITHMETIC
    expire(item)
    errors = services.steps_submit(item=item, raws={"prefill_tflop": "16 TFLOP"})
    assert errors == {}
    item.refresh_from_db()
    assert item.late_steps == ["prefill_tflop"] and item.late is True
    assert item.attempt.step_answers.get().raw == "16 TFLOP"


def test_unreadable_step_input_is_explained_and_kept(ada, settings):
    mock = start(ada, settings)
    MockItem.objects.filter(mock=mock, order__lt=3).update(
        started=timezone.now(), closed=timezone.now()
    )
    item = current(mock)
    errors = services.steps_submit(item=item, raws={"prefill_tflop": "lots"})
    assert "prefill_tflop" in errors
    item.refresh_from_db()
    assert item.step_drafts == {"prefill_tflop": "lots"} and not item.late_steps
