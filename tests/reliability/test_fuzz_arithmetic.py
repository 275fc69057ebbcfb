"""Fuzzing arithmetic answers: the expression evaluator, answer parsing and step grading (on
the bank's own problems, with the learner's earlier answers carried forward), and the
htmx step-check view. Any text gives a grade or a clear message; never an exception/500,
and a rejected answer stores nothing."""

from __future__ import annotations

import contextlib
import math

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from hypothesis import HealthCheck, example, given
from hypothesis import settings as fuzz_settings
from hypothesis import strategies as st

from questions import bank, problems
from questions.expressions import ExpressionError, Quantity, evaluate, format_quantity
from questions.models import Question
from trainer import services
from trainer.grading.arithmetic import AnswerError, Chain, StepResult, grade_step, parse_answer
from trainer.models import Attempt, StepAnswer

CASES = 1000
FUZZ = fuzz_settings(
    max_examples=CASES,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
VERDICTS = {"correct", "follow_through", "misconception", "slip", "incorrect"}
STEP_UNITS = ["B", "KiB", "GiB", "GB/s", "ms", "s", "token/s", "", "USD/hour", "TFLOPS", "token"]

# --- answer text ---------------------------------------------------------------------------
MORE_UNITS = [
    "MB",
    "TB",
    "KB",
    "bit",
    "Gb",
    "us",
    "ns",
    "h",
    "minute",
    "FLOP",
    "W",
    "request",
    "%",
    "$",
    "USD",
    "GiB/s",
    "B/token",
    "furlong",
    "µs",
    "Å",
    "GB²",
    "1/s",
    "s^-1",
    "s**2",
    "kg",
    "degC",
    "radian",
    "inch",
    "Δ",
    "m/s",
    "ms/token",
]
UNITS = st.sampled_from([*STEP_UNITS, *MORE_UNITS, "token / s / request"])
EXPONENTS = st.integers(-400, 400)
MANTISSAS = st.sampled_from(["1", "9.99", "0.5", "-3", "2.5e", "1_000", "0x1F", ".5", "5."])
NUMBERS = st.one_of(
    st.integers(-(10**30), 10**30).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.builds(lambda m, e: f"{m}e{e}", MANTISSAS, EXPONENTS),
    st.builds(lambda m, e: f"{m}E+{e}", MANTISSAS, EXPONENTS),
    st.builds(lambda b, e: f"{b}^{e}", st.integers(-10, 10), EXPONENTS),
    st.builds(lambda b, e: f"{b}**{e}", st.integers(-10, 10), st.integers(-200, 200)),
    st.sampled_from(["1,024", "1 048 576", "12,34", "1,2,3", "٣", "½", "1e", "e5", "--5", "+-1"]),
)
FUNCTIONS = st.sampled_from(["sqrt", "log2", "ceil", "floor", "round", "min", "max", "exp", "__"])
SEPARATORS = st.sampled_from([" ", "", "  ", "\t", "\n", "*", " / ", "·", "×", " per "])


@st.composite
def answer_text(draw):
    """Numbers with and without units, operators, functions, nested parentheses, junk."""
    kind = draw(st.integers(0, 7))
    number, unit = draw(NUMBERS), draw(UNITS)
    if kind == 0:
        return number
    if kind == 1:
        return f"{number}{draw(SEPARATORS)}{unit}"
    if kind == 2:
        depth = draw(st.integers(0, 80))
        closing = depth + draw(st.integers(-2, 2))
        return "(" * depth + f"{number} {unit}" + ")" * max(0, closing)
    if kind == 3:
        op = draw(st.sampled_from(["+", "-", "*", "/", "**", "^", "%", "//", "==", ","]))
        return f"{number} {unit} {op} {draw(NUMBERS)} {draw(UNITS)}"
    if kind == 4:
        args = ", ".join(draw(st.lists(NUMBERS, max_size=3)))
        return f"{draw(FUNCTIONS)}({args}) {unit}"
    if kind == 5:
        return draw(st.text(max_size=90))  # any unicode
    if kind == 6:  # a right answer with unicode noise spliced in
        text = f"{number} {unit}"
        at = draw(st.integers(0, len(text)))
        return text[:at] + draw(st.text(min_size=1, max_size=3)) + text[at:]
    return draw(st.sampled_from(["__import__('os')", "1;2", "x=1", "{1}", "[1]", "1 GB" * 30]))


# The reference answer times: 1 (correct), a power of ten, GiB/GB, 8 (slips), anything.
SCALED_REFERENCE = st.sampled_from([1.0, 1.0, 1.001, 1000.0, 1e-3, 1.024**3, 8.0]) | st.floats(
    -1e6, 1e6
)


def check_quantity(q: Quantity) -> None:
    assert isinstance(q, Quantity) and math.isfinite(q.magnitude)
    assert format_quantity(q)  # printable


def test_the_evaluator_gives_a_value_or_an_expression_error():
    seen = {"cases": 0, "value": 0, "error": 0}

    @FUZZ
    @given(answer_text(), st.dictionaries(st.sampled_from(["x", "GB", "ms", "__x"]), NUMBERS))
    def case(text, variables):
        seen["cases"] += 1
        variables = {k: float(v) for k, v in variables.items() if _plain_float(v)}
        try:
            check_quantity(evaluate(text, variables))
        except ExpressionError as exc:
            assert str(exc)
            seen["error"] += 1
        else:
            seen["value"] += 1

    case()
    print(f"evaluator fuzz: {seen}")
    assert seen["cases"] >= CASES and seen["value"] > 100 and seen["error"] > 100


def _plain_float(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False


# --- grading on the bank's problems --------------------------------------------------------
@pytest.fixture(scope="module")
def bank_problems() -> list[problems.Problem]:
    read = bank.read_bank()  # every arithmetic problem of the bank
    assert not read.errors
    found = [problems.from_dict(bank._problem_dict(q.problem)) for q in read.questions if q.problem]
    assert len(found) >= 20
    return found


def test_any_answer_is_parsed_and_graded_or_explained(bank_problems):
    seen = {"cases": 0, "graded": 0, "rejected": 0, "verdicts": set()}

    @FUZZ
    @given(
        st.integers(0, len(bank_problems) - 1),
        st.integers(0, 2**31 - 1),
        st.lists(answer_text(), max_size=4),
        answer_text() | SCALED_REFERENCE,
        st.integers(0, 3),
    )
    # An earlier answer of 0 that a later step divides by: the learner's own chain could not
    # be recomputed and grade_step raised ExpressionError (a 500 in the view).
    @example(0, 1, ["0", "0", "0", "0"], "5", 0)
    @example(1, 1, ["0", "0", "0", "0"], "5", 0)
    # A ratio that overflows (1e308 vs a small reference) or underflows: log10 of inf/0.
    @example(0, 1, [], "1e308", 0)
    @example(0, 1, [], "1e-320", 0)
    @example(0, 1, ["-1e300", "1e-300"], "1e300", 2)
    def case(index, seed, earlier, text, hints):
        seen["cases"] += 1
        problem = bank_problems[index]
        variables = problems.draw_variant(problem, seed).variables
        target = problem.steps[min(len(earlier), len(problem.steps) - 1)]
        answers = {}
        for step, raw in zip(problem.steps, earlier, strict=False):
            if step is target:
                break
            with contextlib.suppress(AnswerError):
                answers[step.name] = parse_answer(raw, step.unit)
        if isinstance(text, float):  # the reference answer times a factor
            reference = problems.solve(problem, variables)[target.name]
            text = f"{reference.magnitude * text!r} {reference.units:~P}"
        try:
            value = parse_answer(text, target.unit)
        except AnswerError as exc:
            assert str(exc)
            seen["rejected"] += 1
            return
        check_quantity(value)
        result = grade_step(Chain(problem, variables, answers), target.name, value, hints)
        assert isinstance(result, StepResult) and result.verdict in VERDICTS
        assert 0.0 <= result.credit <= 1.0 and result.feedback
        assert math.isfinite(result.value) and math.isfinite(result.expected)
        seen["graded"] += 1
        seen["verdicts"].add(result.verdict)

    case()
    print(f"grading fuzz: { {k: v for k, v in seen.items()} }")
    assert seen["cases"] >= CASES and seen["graded"] > 100 and seen["rejected"] > 100
    assert {"correct", "incorrect"} <= seen["verdicts"]


@pytest.mark.parametrize("unit", STEP_UNITS)
def test_step_units_parse_answers_or_explain(unit):
    """A few hundred answers per step unit (the unit decides the dimension check)."""

    @fuzz_settings(max_examples=60, deadline=None, derandomize=True, database=None)
    @given(answer_text())
    def case(text):
        try:
            check_quantity(parse_answer(text, unit))
        except AnswerError as exc:
            assert str(exc)

    case()


# --- the step-check view ------------------------------------------------------------------
SLUG = "kv-arith-sequences-that-fit"
# A request renders the whole step list (~0.1 s here): the view gets fewer cases than the
# functions above, which see every answer it passes on.
VIEW_CASES = 100


@pytest.mark.django_db
def test_the_step_check_view_grades_or_explains_and_stores_only_grades(client, settings):
    settings.RATELIMITS = {}  # the limits have their own tests; here every post is checked
    call_command("load_bank", str(bank.BANK_DIR / "kv-cache-arithmetic.yaml"), verbosity=0)
    user = get_user_model().objects.create_user("ada", password="kv-heads-not-heads")
    client.force_login(user)
    question = Question.objects.get(slug=SLUG)
    attempt = services.attempt_start(user=user, question=question, seed=3)  # drawn at once
    steps = [s.name for s in services.attempt_context(attempt).problem.steps]
    seen = {"cases": 0, "graded": 0, "rejected": 0}

    @fuzz_settings(FUZZ, max_examples=VIEW_CASES)
    @given(st.sampled_from(steps), answer_text(), st.sampled_from(["0", "", "1e308", None]))
    @example(steps[1], "5", "0")  # an earlier step answered 0: later steps divide by it
    def case(step, text, earlier):
        seen["cases"] += 1
        StepAnswer.objects.filter(attempt=attempt).delete()
        Attempt.objects.filter(pk=attempt.pk).update(submitted=None, score=None)
        if earlier is not None and step != steps[0]:
            client.post(f"/attempts/{attempt.pk}/steps/{steps[0]}/", {"answer": earlier})
        before = StepAnswer.objects.filter(attempt=attempt).count()
        response = client.post(
            f"/attempts/{attempt.pk}/steps/{step}/", {"answer": text}, headers={"HX-Request": "1"}
        )
        assert response.status_code == 200, response.content[:300]
        html = response.content.decode()
        stored = StepAnswer.objects.filter(attempt=attempt, step_name=step).first()
        if stored is None:  # rejected: a message, the typed text kept, nothing stored
            assert StepAnswer.objects.filter(attempt=attempt).count() == before
            assert 'class="input-error" role="alert"' in html, html[:500]
            seen["rejected"] += 1
        else:
            assert stored.verdict in VERDICTS and 0 <= stored.credit <= 1
            assert math.isfinite(stored.value)
            seen["graded"] += 1

    case()
    print(f"step view fuzz: {seen}")
    assert seen["cases"] >= VIEW_CASES and seen["graded"] > 20 and seen["rejected"] > 20
