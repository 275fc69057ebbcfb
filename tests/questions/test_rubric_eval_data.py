"""The expert-labelled evaluation answers (tests/data/rubric_eval/<topic>.yaml) fit the bank.

Each file holds `questions: [{slug, answers: [{label, kind?, text, points, contradicts?,
origin?}]}]` (issue 19, contract section 4). Indices refer to the question's rubric in
questions/bank, from 0, penalty points included.
"""

from __future__ import annotations

from collections import Counter
from functools import cache
from pathlib import Path

import pytest
import yaml

from questions.bank import QuestionIn, read_bank

EVAL_DIR = Path(__file__).resolve().parents[1] / "data" / "rubric_eval"
LABELS = {"strong", "partial", "on-topic-wrong", "off", "adversarial", "buzzword"}
KINDS = {"negation", "reversal", "wrong-number", "stuffing", "wrong-model"}
ANSWER_KEYS = {"label", "kind", "text", "points", "contradicts", "origin"}
REQUIRED_LABELS = {"strong", "partial", "on-topic-wrong", "off"}
FILES = sorted(EVAL_DIR.glob("*.yaml"))


@cache
def bank() -> dict[str, tuple[str, QuestionIn]]:
    """slug -> (topic slug, question) over the whole bank."""
    parsed = read_bank()
    assert not parsed.errors, [str(e) for e in parsed.errors]
    return {q.slug: (t.topic.slug, q) for t in parsed.topics for q in t.questions}


def load(path: Path) -> list[dict]:
    data = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert isinstance(data, dict) and set(data) == {"questions"}, f"{path.name}: top level"
    assert isinstance(data["questions"], list) and data["questions"], path.name
    return data["questions"]


def test_the_folder_has_files() -> None:
    assert FILES, f"no evaluation files in {EVAL_DIR}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_entries_name_questions_of_this_topic_once(path: Path) -> None:
    slugs = [entry["slug"] for entry in load(path)]
    assert len(slugs) == len(set(slugs)), f"{path.name}: a slug appears twice"
    for slug in slugs:
        assert slug in bank(), f"{path.name}: {slug} is not in questions/bank"
        topic, question = bank()[slug]
        assert topic == path.stem, f"{slug} belongs in {topic}.yaml, not {path.name}"
        assert question.kind in ("scenario", "design"), f"{slug} is {question.kind}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_answers_have_known_labels_and_kinds(path: Path) -> None:
    for entry in load(path):
        assert set(entry) == {"slug", "answers"}, f"{entry.get('slug')}: keys {set(entry)}"
        for i, answer in enumerate(entry["answers"]):
            where = f"{path.name}: {entry['slug']} answer {i}"
            assert set(answer) <= ANSWER_KEYS, f"{where}: unknown keys {set(answer) - ANSWER_KEYS}"
            # a bare `off` is YAML 1.1 false: it must be quoted
            assert answer.get("label") in LABELS, f"{where}: label {answer.get('label')!r}"
            if answer["label"] == "adversarial":
                assert answer.get("kind") in KINDS, f"{where}: kind {answer.get('kind')!r}"
            else:
                assert "kind" not in answer, f"{where}: only adversarial answers have a kind"
            assert isinstance(answer.get("text"), str) and len(answer["text"].split()) >= 20, (
                f"{where}: text too short"
            )
            assert answer.get("origin") in (None, "wave1"), f"{where}: origin"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_indices_are_in_the_rubric(path: Path) -> None:
    for entry in load(path):
        rubric = bank()[entry["slug"]][1].rubric
        for i, answer in enumerate(entry["answers"]):
            where = f"{path.name}: {entry['slug']} answer {i} ({answer['label']})"
            points = answer.get("points")
            contradicts = answer.get("contradicts", [])
            assert isinstance(points, list), f"{where}: points must be a list (may be empty)"
            assert isinstance(contradicts, list), f"{where}: contradicts must be a list"
            for index in points + contradicts:
                assert isinstance(index, int) and not isinstance(index, bool), where
                assert 0 <= index < len(rubric), f"{where}: index {index} of {len(rubric)}"
            assert len(set(points)) == len(points), f"{where}: duplicate points"
            assert not set(points) & set(contradicts), f"{where}: credited and contradicted"
            penalties = {j for j, point in enumerate(rubric) if point.penalty}
            assert not set(contradicts) & penalties, f"{where}: a red flag cannot be contradicted"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_labels_agree_with_the_points(path: Path) -> None:
    """Loose sanity: a strong answer commits no red flag; an off one earns almost nothing."""
    for entry in load(path):
        rubric = bank()[entry["slug"]][1].rubric
        total = sum(p.weight for p in rubric if not p.penalty)
        for i, answer in enumerate(entry["answers"]):
            where = f"{path.name}: {entry['slug']} answer {i} ({answer['label']})"
            earned = sum(rubric[j].weight for j in answer["points"] if not rubric[j].penalty)
            flags = [j for j in answer["points"] if rubric[j].penalty]
            if answer["label"] == "strong":
                assert not flags and earned >= 0.6 * total, where
            if answer["label"] in ("off", "on-topic-wrong", "buzzword"):
                assert earned <= 0.25 * total, where


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_published_questions_have_the_four_levels(path: Path) -> None:
    for entry in load(path):
        question = bank()[entry["slug"]][1]
        if question.status != "published":
            continue
        labels = Counter(answer["label"] for answer in entry["answers"])
        missing = REQUIRED_LABELS - set(labels)
        assert not missing, f"{path.name}: {entry['slug']} lacks {sorted(missing)}"
