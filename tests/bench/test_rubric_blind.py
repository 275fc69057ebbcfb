"""The blind evaluation set (tests/data/rubric_blind/, issue 29) is whole and consistent:
every answer file has the four answers per question, every label file labels all four
against indices its question's rubric has (answers and labels come from different helpers:
README.md), and the
loader and metrics count what the files say (a hand-made case whose figures are known)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import yaml

from bench import rubric_blind
from bench.rubric_blind import BLIND, LEVELS, BlindCase


def _files(kind: str) -> list[tuple[str, dict]]:
    return [(p.name, yaml.safe_load(p.read_text())) for p in sorted((BLIND / kind).glob("*.yaml"))]


@pytest.fixture(scope="module")
def rubrics():
    from questions.bank import read_bank

    return {q.slug: q for q in read_bank().questions}


def test_every_answer_file_has_four_answers_per_published_question(rubrics):
    seen: dict[str, str] = {}
    for name, data in _files("answers"):
        assert str(data.get("writer", "")).startswith("writer-"), name
        for q in data["questions"]:
            slug = q["slug"]
            assert slug not in seen, f"{slug} answered in {seen.get(slug)} and {name}"
            seen[slug] = name
            assert slug in rubrics, f"{name}: {slug} is not a bank question"
            assert rubrics[slug].kind in ("scenario", "design"), slug
            assert rubrics[slug].status == "published", slug
            assert [a["label"] for a in q["answers"]] == list(LEVELS), f"{name}: {slug}"
            for a in q["answers"]:
                assert len(a["text"].split()) >= 40, f"{name}: {slug} {a['label']} is too short"
            wrong = q["answers"][-1]
            assert 3 <= len(wrong.get("errors") or []) <= 4, f"{name}: {slug} wrong errors"
    assert len(seen) >= 40


def test_every_label_file_labels_all_four_answers_within_its_rubric(rubrics):
    writers = {
        q["slug"]: data["writer"] for _, data in _files("answers") for q in data["questions"]
    }
    labelled = 0
    for name, data in _files("labels"):
        labeller = str(data.get("labeller", ""))
        assert labeller.startswith("labeller-"), name
        for q in data["questions"]:
            slug = q["slug"]
            assert slug in writers, f"{name}: {slug} has no answers"
            rubric = rubrics[slug].rubric
            penalty = {i for i, p in enumerate(rubric) if p.penalty}
            assert sorted(a["label"] for a in q["answers"]) == sorted(LEVELS), f"{name}: {slug}"
            for a in q["answers"]:
                covered, contra = set(a.get("covered") or []), set(a.get("contradicted") or [])
                flags = set(a.get("red_flags") or [])
                where = f"{name}: {slug} {a['label']}"
                assert covered | contra | flags <= set(range(len(rubric))), where
                assert not covered & contra, where
                assert not (covered | contra) & penalty, where
                assert flags <= penalty, where
                assert 0.0 <= float(a["score"]) <= 1.0, where
                for e in a.get("errors") or []:
                    assert e["point"] is None or 0 <= e["point"] < len(rubric), where
            labelled += 1
    assert labelled >= 28


def test_the_loader_pairs_each_label_with_its_answer_text():
    cases = rubric_blind.load()
    answers = {
        (q["slug"], a["label"]): a["text"]
        for _, data in _files("answers")
        for q in data["questions"]
        for a in q["answers"]
    }
    labels = [
        (q["slug"], a["label"]) for _, data in _files("labels") for q in data["questions"]
        for a in q["answers"]
    ]  # fmt: skip
    assert len(cases) == len(labels)
    for c in cases:
        assert c.text == answers[(c.slug, c.label)]
        assert c.writer.startswith("writer-") and c.labeller.startswith("labeller-")


def _point(index, verdict, penalty=False, estimate=0.0, check=None):
    return SimpleNamespace(
        index=index, verdict=verdict, penalty=penalty, estimate=estimate, check=check,
        reason="", weight=1.0,
    )  # fmt: skip


def test_metrics_count_what_the_labels_and_verdicts_say():
    pts = [SimpleNamespace(weight=1.0, penalty=False) for _ in range(3)]
    pts.append(SimpleNamespace(weight=1.0, penalty=True))
    points = {"q": pts}

    def case(label, covered, errors=()):
        return BlindCase("q", label, "", "writer-x", "labeller-y", set(covered), set(), set(),
                         0.0, list(errors))  # fmt: skip

    cases = [
        case("strong", {0, 1, 2}),
        case("terse", {0, 1}),
        case("partial", {0}),
        case(
            "wrong",
            set(),
            [{"error": 1, "point": 1, "real": True}, {"error": 2, "point": 2, "real": False}],
        ),
    ]

    def result(verdicts, score):
        return SimpleNamespace(points=[_point(i, v) for i, v in enumerate(verdicts)] +
                               [_point(3, "missed", penalty=True)], score=score)  # fmt: skip

    results = [
        result(["hit", "hit", "hit"], 1.0),  # agrees on 4/4
        result(["hit", "missed", "missed"], 1 / 3),  # 3/4 (point 1 missed)
        result(["hit", "missed", "missed"], 1 / 3),  # 4/4; partial == terse: not ordered
        result(["missed", "contradicted", "missed"], 0.0),  # 4/4; its real error surfaced
    ]
    m = rubric_blind.metrics(cases, points, results)
    assert m["agreement"] == pytest.approx(15 / 16)
    assert m["ordered"] == 0 and m["ordered_of"] == 1
    assert m["errors"] == 1 and m["surfaced"] == 1  # the unreal error is not counted
    assert m["wrong_contradicted"] == 1 and m["wrong_contradicted_right"] == 1
    assert m["strong_points"] == 6 and m["strong_contradicted"] == 0
    assert m["labeller"]["strong"] == pytest.approx(1.0)
    assert m["gap"]["terse"] == pytest.approx(1 / 3 - 2 / 3)
