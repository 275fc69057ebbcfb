"""trainer.grading.registry: one place decides which grader handles a question. Every
question in the bank is routed to the grader that graded it before the registry (arithmetic
steps for `arithmetic`, the rubric for `scenario` and `design`), and each grader's entry
point gives what the grader module gives."""

from __future__ import annotations

import pytest
from django.core.management import call_command

from questions import problems
from questions.models import Question
from questions.services import problem_spec
from trainer.grading import arithmetic, registry, rubric

pytestmark = pytest.mark.django_db
BEFORE = {"arithmetic": arithmetic.ArithmeticGrader, "scenario": rubric.RubricGrader}
BEFORE["design"] = rubric.RubricGrader


@pytest.fixture
def bank():
    call_command("load_bank", verbosity=0)


def test_every_question_kind_has_a_grader():
    assert set(registry.graders()) == set(Question.Kind.values)


def test_each_question_in_the_bank_goes_to_its_grader(bank):
    questions = list(Question.objects.all())
    assert {q.kind for q in questions} == set(Question.Kind.values)
    for question in questions:
        grader = registry.grader_for(question)
        assert type(grader) is BEFORE[question.kind], question.slug
        assert grader.stepwise == (question.kind == Question.Kind.ARITHMETIC)
        assert registry.grader_for(question.kind) is grader


def test_grade_step_is_the_arithmetic_grader_on_the_parsed_answer(bank):
    grader = registry.grader_for("arithmetic")
    for question in Question.objects.filter(kind=Question.Kind.ARITHMETIC)[:5]:
        spec = problem_spec(question.problem)
        variant = problems.draw_variant(spec, 11)
        chain = arithmetic.Chain(spec, variant.variables)
        step = spec.steps[0]
        expected = arithmetic.reference_text(chain.reference()[step.name], step.unit)
        for raw in (expected, f"2 * {expected}"):
            got = grader.grade_step(chain, step.name, raw, hints_used=1, hint_penalty=0.1)
            value = arithmetic.parse_answer(raw, step.unit)
            assert got == arithmetic.grade_step(
                chain, step.name, value, hints_used=1, hint_penalty=0.1
            )
        with pytest.raises(arithmetic.AnswerError):
            grader.grade_step(chain, step.name, "lots", hints_used=0, hint_penalty=0.1)


def test_grade_answer_is_the_rubric_grader_on_the_questions_points(bank, monkeypatch):
    seen = []

    def grade(answer, points, prompt=""):  # rubric.grade, looked up at call time
        seen.append((answer, points, prompt))
        return rubric.RubricResult(0.5, (), 0.9)

    monkeypatch.setattr(rubric, "grade", grade)
    question = Question.objects.filter(kind=Question.Kind.SCENARIO).first()
    result = registry.grader_for(question).grade_answer(question, "Prefill, then decode.")
    assert result.score == 0.5 and result.as_dict()["score"] == 0.5
    ((answer, points, prompt),) = seen
    assert answer == "Prefill, then decode." and prompt == question.prompt
    assert points == [  # every point with its metadata (expects evaluated) and version
        rubric.Point.from_dict(p.as_point() | {"rubric_version": p.version()})
        for p in question.rubric.all()
    ]


def test_a_grader_refuses_the_other_shape():
    with pytest.raises(TypeError, match="grades steps, not a written answer"):
        registry.grader_for("arithmetic").grade_answer(None, "text")
    with pytest.raises(TypeError, match="grades a written answer, not steps"):
        registry.grader_for("design").grade_step(None, "x", "1", hints_used=0, hint_penalty=0)


class FactChecker(registry.Grader):
    name = "fact-check"

    def __init__(self):
        self.warmed = 0

    def grade_answer(self, question, answer):
        return rubric.RubricResult(1.0, (), 1.0)

    def warm_up(self):
        self.warmed += 1


@pytest.fixture
def restore_graders():
    before = registry.graders()
    yield
    for kind in set(registry.graders()) - set(before):
        registry.unregister(kind)
    for kind, grader in before.items():
        registry.register(kind, grader, replace=True)


def test_a_new_grader_takes_over_a_kind_only_when_asked(restore_graders):
    checker = FactChecker()
    with pytest.raises(ValueError, match="already graded by 'rubric'; pass replace=True"):
        registry.register("scenario", checker)
    registry.register("scenario", checker, replace=True)
    assert registry.grader_for("scenario") is checker
    assert type(registry.grader_for("design")) is rubric.RubricGrader
    registry.register("design", rubric.RubricGrader())  # the same kind again: no error
    registry.register("design", checker, replace=True)
    registry.warm_up()
    assert checker.warmed == 1  # once, though it grades two kinds


def test_an_unknown_kind_is_named(restore_graders):
    registry.unregister("design")
    with pytest.raises(LookupError, match=r"no grader is registered for 'design' questions"):
        registry.grader_for("design")
