"""Grade many answers from JSON lines: `manage grade_answers` and the admin's "try this
rubric on sample answers" share this.

A line is either {"question": "<slug>", "answer": "..."} (the bank question's rubric) or
{"question_text": "...", "rubric": [{"text": ..., "claims": [...], ...}], "answer": "..."}
(an ad-hoc rubric; metadata optional, literal `expects` such as "320 KiB ±10%"). Each line
gives one result dict; a line that cannot be graded gives {"error": "..."} instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from trainer.grading.rubric.grader import grade, points_of
from trainer.grading.rubric.point import Point


class LineError(ValueError):
    """A line that cannot be graded; the message says what to fix."""


def _question(slug: str):
    from questions.models import Question

    question = Question.objects.filter(slug=slug).first()
    if question is None:
        raise LineError(f"no question with slug {slug!r}; load the bank or check the slug")
    return question


def _ad_hoc_points(rubric: Any) -> list[Point]:
    if not isinstance(rubric, list) or not rubric:
        raise LineError('"rubric" must be a non-empty list of points ({"text": ...})')
    points = []
    for i, item in enumerate(rubric):
        if not isinstance(item, Mapping) or not str(item.get("text") or "").strip():
            raise LineError(f'rubric point {i} needs a "text"')
        try:
            points.append(Point.from_dict(item))
        except (TypeError, ValueError, KeyError) as exc:
            raise LineError(f"rubric point {i}: {exc}") from None
    return points


def grade_record(record: Any) -> dict[str, Any]:
    """One parsed line -> its result dict (raises LineError)."""
    if not isinstance(record, Mapping):
        raise LineError("a line must be a JSON object")
    answer = record.get("answer")
    if not isinstance(answer, str):
        raise LineError('the line needs "answer" (a string)')
    if "question" in record:
        question = _question(str(record["question"]))
        label, points, prompt = question.slug, points_of(question), question.prompt
    elif "question_text" in record:
        label, prompt = str(record["question_text"]), str(record["question_text"])
        points = _ad_hoc_points(record.get("rubric"))
    else:
        raise LineError('the line needs "question" (a slug) or "question_text" and "rubric"')
    result = grade(answer, points, prompt=prompt)
    return {
        "question": label,
        "score": result.score,
        "points": [
            {
                "index": p.index,
                "text": p.text,
                "verdict": p.verdict,
                "estimate": p.estimate,
                "evidence": p.evidence,
                "reason": p.reason,
            }
            for p in result.points
        ],
        "red_flags": [p.text for p in result.points if p.penalty and p.verdict == "hit"],
    }


def grade_lines(lines: Iterable[str]) -> list[dict[str, Any]]:
    """One result (or {"error": ...}) per non-blank line, in order."""
    out = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(grade_record(json.loads(line)))
        except json.JSONDecodeError as exc:
            out.append({"error": f"line {number}: not JSON ({exc.msg})"})
        except LineError as exc:
            out.append({"error": f"line {number}: {exc}"})
    return out
