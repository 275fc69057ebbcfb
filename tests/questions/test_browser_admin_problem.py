"""In Chromium: an author edits a problem's steps in wide monospace inputs, and the live
preview works a variant step by step from the form as typed."""

from __future__ import annotations

import pytest
from bankfiles import write_topic
from playwright.sync_api import Page, expect

from questions import authoring, problems
from questions.bank import read_bank
from questions.expressions import format_quantity
from questions.models import Question
from questions.services import bank_load
from trainer.demo import DEMO_AUTHOR, demo_users_ensure
from trainer.grading.arithmetic import Chain

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def problem(tmp_path):
    """The saved problem's pk and its spec (read before Playwright starts its loop)."""
    bank_load(read_bank([write_topic(tmp_path)]))
    demo_users_ensure()
    problem = Question.objects.get(slug="kv-70b").problem
    return problem.pk, problems.from_dict(authoring.problem_data(problem))


def reference(spec: problems.Problem, seed: int) -> dict[str, str]:
    """The grader's answers for variant `seed`, as the preview formats them."""
    variant = problems.draw_variant(spec, seed)
    values = Chain(problem=spec, variables=dict(variant.variables)).reference()
    return {s.name: format_quantity(values[s.name], s.unit) for s in spec.steps}


def test_the_problem_page_has_wide_formula_inputs_and_a_worked_variant(
    live_server, problem, page: Page
):
    pk, spec = problem
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{live_server.url}/admin/login/?next=/admin/questions/problem/{pk}/change/")
    page.fill("#id_username", DEMO_AUTHOR.username)
    page.fill("#id_password", DEMO_AUTHOR.password)
    page.click("input[type=submit]")

    expression = page.locator("#id_steps-1-expression")
    font = expression.evaluate("e => getComputedStyle(e).fontFamily")
    assert "mono" in font.lower(), font
    row = page.locator("#steps-1 .form-row.field-expression").bounding_box()
    unit = page.locator("#id_steps-1-unit").bounding_box()
    box = expression.bounding_box()
    assert row and unit and box
    assert box["width"] > 0.7 * row["width"], (box, row)  # spans the row beside its label
    assert box["width"] > 2 * unit["width"]

    preview = page.locator("#preview")
    steps = preview.locator(".worked-step")
    expect(steps).to_have_count(2)
    seed = int(preview.locator("input[name=preview_seed]").get_attribute("value") or "")
    answers = reference(spec, seed)
    expect(steps.nth(0).locator(".worked-value")).to_have_text(answers["kv_per_token"])
    expect(steps.nth(1).locator(".worked-value")).to_have_text(answers["kv_per_seq"])
    numbers = steps.nth(0).locator(".worked-line").nth(1)  # the names replaced by numbers
    expect(numbers).to_contain_text("= 2 * ")
    expect(numbers).not_to_contain_text("model_layers")

    # Unsaved edits: the same variant, worked again from the form as typed.
    expression.fill("kv_per_token * context / token * 2")
    expect(steps.nth(1)).to_contain_text("kv_per_seq = kv_per_token * context / token * 2")
    assert preview.locator("input[name=preview_seed]").get_attribute("value") == str(seed)
    expression.fill("kv_per_token * context /")
    expect(steps.nth(1).locator(".errornote")).to_contain_text("does not parse")
    expect(preview).to_contain_text("Saving will refuse this problem")
