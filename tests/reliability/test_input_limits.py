"""Every free-text box a person types into carries, as `maxlength`, the length its service
stores: the browser stops typing at the limit instead of the tail being dropped silently
on save (nothing a learner or an interviewer typed may be lost without them seeing it)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from mock import services as mock_services
from trainer import services as practice

TEMPLATES = Path(__file__).resolve().parents[2] / "templates"
TAG = re.compile(r"<(textarea|input)\b([^>]*)>", re.S)

# template -> (name attribute pattern, limit the service keeps)
BOXES = [
    ("trainer/scenario.html", r'name="answer"', practice.ANSWER_MAX_CHARS),
    ("mock/run.html", r'id="answer" name="answer"', practice.ANSWER_MAX_CHARS),
    ("mock/run.html", r'id="follow-up-answer" name="answer"', practice.ANSWER_MAX_CHARS),
    ("mock/run.html", r'name="step:', mock_services.STEP_DRAFT_MAX_CHARS),
    ("mock/interviewer.html", r'name="notes"', mock_services.NOTES_MAX_CHARS),
]


@pytest.mark.parametrize(("template", "marker", "limit"), BOXES)
def test_the_box_stops_where_the_service_cuts(template, marker, limit):
    source = (TEMPLATES / template).read_text()
    tags = [attrs for _, attrs in TAG.findall(source) if re.search(marker, attrs)]
    assert tags, f"no box matching {marker!r} in {template}"
    for attrs in tags:
        found = re.search(r'maxlength="(\d+)"', attrs)
        assert found, f"{template}: box {marker!r} has no maxlength"
        assert int(found.group(1)) == limit


def test_every_text_box_in_the_learner_pages_is_covered():
    """A new free-text box must get a row above (and a maxlength)."""
    covered = {(t, m) for t, m, _ in BOXES}
    for template in ("trainer/scenario.html", "mock/run.html", "mock/interviewer.html"):
        source = (TEMPLATES / template).read_text()
        for kind, attrs in TAG.findall(source):
            if kind == "input" and 'type="text"' not in attrs:
                continue
            if 'name="' not in attrs or "readonly" in attrs:
                continue
            assert any(t == template and re.search(m, attrs) for t, m in covered), (
                f"{template}: a {kind} without a limit row: {attrs.strip()[:80]}"
            )
