"""The Problem page in the admin: errors on the step that has them, formula inputs, and a
live preview that works a variant step by step."""

from __future__ import annotations

import json

import pytest
from bankfiles import write_topic
from django.contrib.auth import get_user_model

from questions import authoring, problems
from questions.bank import read_bank
from questions.expressions import format_quantity
from questions.models import Problem, Question
from questions.services import bank_load
from trainer.demo import DEMO_AUTHOR, demo_users_ensure
from trainer.grading.arithmetic import Chain

pytestmark = pytest.mark.django_db


@pytest.fixture
def problem(tmp_path) -> Problem:
    bank = read_bank([write_topic(tmp_path)])
    assert not bank.errors, bank.errors
    bank_load(bank)
    return Question.objects.get(slug="kv-70b").problem


@pytest.fixture
def author_client(client):
    demo_users_ensure()
    assert client.login(username=DEMO_AUTHOR.username, password=DEMO_AUTHOR.password)
    return client


def change_data(problem: Problem, **step_changes: dict) -> dict:
    """The change form's POST as the admin would send it, with `step_changes` (by step name)
    applied to those steps' inline rows."""
    steps = list(problem.steps.all())
    data = {
        "question": problem.question_id,
        "parameters": json.dumps(problem.parameters),
        "condition": problem.condition,
        "steps-TOTAL_FORMS": str(len(steps)),
        "steps-INITIAL_FORMS": str(len(steps)),
        "steps-MIN_NUM_FORMS": "0",
        "steps-MAX_NUM_FORMS": "1000",
    }
    for i, s in enumerate(steps):
        row = {
            "id": s.pk,
            "problem": problem.pk,
            "order": s.order,
            "name": s.name,
            "prompt": s.prompt,
            "expression": s.expression,
            "unit": s.unit,
            "integer": s.integer,
            "rtol": s.rtol,
            "atol": s.atol,
            "hints": json.dumps(s.hints),
            "explanation": s.explanation,
            **step_changes.get(s.name, {}),
        }
        data.update({f"steps-{i}-{k}": v for k, v in row.items()})
    return data


def row_html(html: str, index: int) -> str:
    """The HTML of inline row `index` (a stacked inline's div id="steps-N")."""
    start = html.index(f'id="steps-{index}"')
    end = html.find('id="steps-', start + 1)
    return html[start:end]


def step_form(response, index: int):
    return response.context["inline_admin_formsets"][0].formset.forms[index]


def test_a_broken_expression_in_step_2_shows_on_step_2s_row(author_client, problem):
    data = change_data(problem, kv_per_seq={"expression": "kv_per_tokn * context / token"})
    response = author_client.post(f"/admin/questions/problem/{problem.pk}/change/", data)
    assert response.status_code == 200  # re-rendered with errors, not saved
    errors = step_form(response, 1).errors["expression"]
    assert len(errors) == 1
    assert "'kv_per_tokn'" in errors[0]  # names the problem: the unknown name
    assert "did you mean 'kv_per_token'?" in errors[0]
    assert not step_form(response, 0).errors
    html = response.content.decode()
    assert "kv_per_tokn&#x27;" in row_html(html, 1)
    assert "kv_per_tokn&#x27;" not in row_html(html, 0)
    assert problem.steps.get(name="kv_per_seq").expression == "kv_per_token * context / token"


def test_a_wrong_unit_shows_on_the_unit_field_of_its_step(author_client, problem):
    data = change_data(problem, kv_per_token={"unit": "GB/s"})
    response = author_client.post(f"/admin/questions/problem/{problem.pk}/change/", data)
    errors = step_form(response, 0).errors["unit"]
    assert "the unit is 'GB/s'" in errors[0]
    assert "unit" not in step_form(response, 1).errors


def test_an_unknown_unit_shows_on_the_unit_field(author_client, problem):
    data = change_data(problem, kv_per_seq={"unit": "GiBB"})
    response = author_client.post(f"/admin/questions/problem/{problem.pk}/change/", data)
    assert "GiBB" in step_form(response, 1).errors["unit"][0]


def test_a_step_change_that_breaks_a_misconception_says_so_on_that_row(author_client, problem):
    forgot_kv = "model_layers * model_kv_heads * model_head_dim * dtype_bytes"  # = misconception 0
    data = change_data(problem, kv_per_token={"expression": forgot_kv})
    response = author_client.post(f"/admin/questions/problem/{problem.pk}/change/", data)
    errors = step_form(response, 0).non_field_errors()
    assert "misconceptions[0] > expression: gives the correct answer" in errors[0]
    assert "follow its Change link" in errors[0]


def test_expressions_get_the_wide_monospace_formula_input(author_client, problem):
    html = author_client.get(f"/admin/questions/problem/{problem.pk}/change/").content.decode()
    assert "/static/css/admin-formula.css" in html
    assert 'class="formula-input"' in row_html(html, 1)
    for name in ("steps-0-expression", "steps-1-expression", "parameters", "condition"):
        tag = html[html.rindex("<", 0, html.index(f'name="{name}"')) :].split(">", 1)[0]
        assert 'class="formula-input"' in tag, tag
        assert 'spellcheck="false"' in tag, tag
    step = problem.steps.get(name="kv_per_token")
    html = author_client.get(f"/admin/questions/step/{step.pk}/change/").content.decode()
    assert html.count('class="formula-input"') >= 1 + step.misconceptions.count()


# --- the live preview ----------------------------------------------------------------------

PREVIEW = "/admin/questions/problem/preview/"


def grader_reference(problem: Problem, seed: int) -> tuple[problems.Problem, dict]:
    """The grader's own solution of variant `seed` of the saved problem."""
    spec = problems.from_dict(authoring.problem_data(problem))
    variant = problems.draw_variant(spec, seed)
    return spec, Chain(problem=spec, variables=dict(variant.variables)).reference()


@pytest.mark.parametrize("seed", [3, 11, 2024])
def test_the_preview_works_the_variant_as_the_grader_solves_it(author_client, problem, seed):
    data = {**change_data(problem), "object_id": problem.pk, "preview_seed": seed}
    response = author_client.post(PREVIEW, data)
    assert response.status_code == 200
    html = response.content.decode()
    spec, reference = grader_reference(problem, seed)
    worked = response.context["worked"]
    assert worked.seed == seed and not worked.error
    assert [s.name for s in worked.steps] == [s.name for s in spec.steps]
    for step, shown in zip(spec.steps, worked.steps, strict=True):
        expected = reference[step.name]
        assert shown.magnitude == pytest.approx(float(expected.to(step.unit).magnitude))
        assert f'<strong class="worked-value">{format_quantity(expected, step.unit)}' in html
    choices = problems.draw_variant(spec, seed).choices
    assert f"<code>model={choices['model']}</code>" in html
    # The names are replaced by this variant's numbers: "2 * 80 * 8 * 128 * (2 B)".
    variables = problems.draw_variant(spec, seed).variables
    first = worked.steps[0].substituted
    assert first.startswith(f"2 * {variables['model_layers']:g} * ")
    assert "model_layers" not in first and "(2 B)" in first
    assert f'<input type="hidden" name="preview_seed" value="{seed}">' in html


def test_the_preview_uses_the_unsaved_form_not_the_saved_problem(author_client, problem):
    data = change_data(problem, kv_per_seq={"expression": "2 * kv_per_token * context / token"})
    response = author_client.post(PREVIEW, {**data, "object_id": problem.pk, "preview_seed": 5})
    _, reference = grader_reference(problem, 5)
    worked = {s.name: s for s in response.context["worked"].steps}
    saved = float(reference["kv_per_seq"].to("GiB").magnitude)
    assert worked["kv_per_seq"].magnitude == pytest.approx(2 * saved)
    assert problem.steps.get(name="kv_per_seq").expression == "kv_per_token * context / token"


def test_an_invalid_expression_shows_its_error_in_the_preview_not_a_500(author_client, problem):
    data = change_data(problem, kv_per_token={"expression": "2 * model_layers *"})
    response = author_client.post(PREVIEW, {**data, "object_id": problem.pk, "preview_seed": 1})
    assert response.status_code == 200
    first, second = response.context["worked"].steps
    assert "does not parse" in first.error and first.value == ""
    assert "comes after 'kv_per_token'" in second.error
    html = response.content.decode()
    assert "does not parse" in html
    assert "Saving will refuse this problem" in html


def test_a_wrong_unit_and_broken_parameters_are_reported_in_the_preview(author_client, problem):
    data = change_data(problem, kv_per_seq={"unit": "GB/s"})
    response = author_client.post(PREVIEW, {**data, "object_id": problem.pk})
    assert "the unit is 'GB/s'" in response.context["worked"].steps[1].error
    response = author_client.post(PREVIEW, {**data, "parameters": '{"model": '})
    assert response.status_code == 200
    assert "parameters: not valid JSON" in response.content.decode()
    response = author_client.post(PREVIEW, {**data, "parameters": '{"tp": {"range": [4, 1]}}'})
    assert "runs backwards" in response.context["worked"].error


def test_the_problem_page_carries_the_live_preview(author_client, problem):
    html = author_client.get(f"/admin/questions/problem/{problem.pk}/change/").content.decode()
    assert f'hx-post="{PREVIEW}"' in html
    assert 'hx-include="#problem_form"' in html
    assert "/static/vendor/htmx.min.js" in html


def test_staff_without_author_permissions_gets_403_on_the_problem_preview(client, problem):
    get_user_model().objects.create_user("ops", password="decode-bound-7", is_staff=True)
    client.login(username="ops", password="decode-bound-7")
    assert client.post(PREVIEW, {"object_id": problem.pk}).status_code == 403


def test_a_misconception_equal_to_the_answer_is_refused_on_its_own_row(author_client, problem):
    step = problem.steps.get(name="kv_per_token")
    existing = list(step.misconceptions.all())
    rows = [(m.pk, m.expression, m.feedback) for m in existing]
    rows.append(("", "dtype_bytes * 2 * model_layers * model_kv_heads * model_head_dim", "Same."))
    data = {
        "misconceptions-TOTAL_FORMS": str(len(rows)),
        "misconceptions-INITIAL_FORMS": str(len(existing)),
        "misconceptions-MIN_NUM_FORMS": "0",
        "misconceptions-MAX_NUM_FORMS": "1000",
        **{name: getattr(step, name) for name in ("order", "name", "prompt", "expression")},
        **{name: getattr(step, name) for name in ("unit", "rtol", "atol", "explanation")},
        "problem": problem.pk,
        "hints": json.dumps(step.hints),
    }
    for i, (pk, expression, feedback) in enumerate(rows):
        data.update(
            {
                f"misconceptions-{i}-id": pk,
                f"misconceptions-{i}-step": step.pk,
                f"misconceptions-{i}-order": i,
                f"misconceptions-{i}-expression": expression,
                f"misconceptions-{i}-feedback": feedback,
            }
        )
    response = author_client.post(f"/admin/questions/step/{step.pk}/change/", data)
    forms = response.context["inline_admin_formsets"][0].formset.forms
    assert "gives the correct answer" in forms[len(existing)].errors["expression"][0]
    assert not any(f.errors for f in forms[: len(existing)])
    assert step.misconceptions.count() == len(existing)
