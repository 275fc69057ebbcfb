"""`python -m manage grade_answers`: JSON lines in, one JSON line out each; bad lines get
an error line and a non-zero exit at the end, the others are still graded."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from trainer.grading.rubric.batch import grade_lines

AD_HOC = {
    "question_text": "How much KV cache does one token of Llama-3.1-70B take in BF16?",
    "rubric": [
        {
            "text": "Computes about 320 KiB of KV cache per token",
            "claims": ["KV per token is 2 x 80 layers x 8 KV heads x 128 x 2 bytes = 320 KiB."],
            "key_terms": ["KV"],
            "expects": ["320 KiB ±10%"],
        },
        {"text": "Uses all 64 attention heads instead of the 8 KV heads", "penalty": True},
    ],
    "answer": "The KV cache takes 512 KiB per token for this model.",
}


def run(lines: list[str], tmp_path) -> tuple[list[dict], CommandError | None]:
    path = tmp_path / "answers.jsonl"
    path.write_text("\n".join(lines) + "\n")
    out = io.StringIO()
    error = None
    try:
        call_command("grade_answers", str(path), stdout=out)
    except CommandError as exc:
        error = exc
    return [json.loads(line) for line in out.getvalue().splitlines()], error


@pytest.mark.django_db
def test_a_bank_question_and_an_ad_hoc_rubric_are_graded(tmp_path):
    call_command("load_bank", verbosity=0)
    from questions.models import Question

    question = Question.objects.filter(kind="scenario", status="published").first()
    lines = [
        json.dumps({"question": question.slug, "answer": question.model_answer}),
        json.dumps(AD_HOC),
    ]
    results, error = run(lines, tmp_path)
    assert error is None
    bank, ad_hoc = results
    assert bank["question"] == question.slug and bank["score"] > 0.4
    assert [p["index"] for p in bank["points"]] == list(range(question.rubric.count()))
    assert set(bank["points"][0]) == {"index", "text", "verdict", "estimate", "evidence", "reason"}
    kv = ad_hoc["points"][0]
    assert kv["verdict"] == "contradicted"
    assert kv["reason"] == "You said 512 KiB per token; this point expects ≈320 KiB."
    assert ad_hoc["red_flags"] == []


@pytest.mark.django_db
def test_bad_lines_get_an_error_line_and_a_nonzero_exit_after_the_rest(tmp_path):
    good = json.dumps(AD_HOC | {"answer": "Each token's KV cache is 320 KiB in BF16."})
    lines = [
        "{not json",
        json.dumps({"question": "no-such-question", "answer": "x"}),
        good,
        json.dumps({"question_text": "q", "rubric": [{"weight": 1}], "answer": "x"}),
        json.dumps(["a", "list"]),
        json.dumps({"question_text": "q", "rubric": AD_HOC["rubric"]}),
    ]
    results, error = run(lines, tmp_path)
    assert error is not None and "5 of 6 lines" in str(error)
    assert [("error" in r) for r in results] == [True, True, False, True, True, True]
    assert results[0]["error"].startswith("line 1: not JSON")
    assert "no-such-question" in results[1]["error"]
    assert results[2]["points"][0]["verdict"] == "hit"
    assert 'needs a "text"' in results[3]["error"]
    assert '"answer"' in results[5]["error"]


def test_stdin_is_read_with_a_dash(monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO(json.dumps(AD_HOC) + "\n\n"))
    out = io.StringIO()
    call_command("grade_answers", "-", stdout=out)
    (line,) = out.getvalue().splitlines()
    assert json.loads(line)["points"][0]["verdict"] == "contradicted"


def test_grade_lines_is_the_shared_function():
    (result,) = grade_lines([json.dumps(AD_HOC)])
    assert result["question"] == AD_HOC["question_text"] and 0.0 <= result["score"] <= 1.0
