"""The point reader's training sentences (tests/data/rubric_reader/) stay on the tuning side:
no held-out question is in them, every point they name is an ordinary point of its bank
question, each has its 6 right, 6 wrong and 3 off-point sentences, and the trainer turns
them into labelled pairs (right -> states, wrong -> wrong, off-point -> other)."""

from __future__ import annotations

import random

import pytest
import yaml

from bench.rubric_calibration import fold, held_out
from bench.rubric_reader import SENTENCES, answer_pairs, written_pairs


@pytest.fixture(scope="module")
def rubrics():
    from questions.bank import read_bank

    return {q.slug: q for q in read_bank().questions}


def _files():
    return [(p.name, yaml.safe_load(p.read_text())) for p in sorted(SENTENCES.glob("*.yaml"))]


def test_no_held_out_question_and_every_point_is_an_ordinary_rubric_point(rubrics):
    seen = set()
    for name, data in _files():
        for q in data["questions"]:
            slug = q["slug"]
            assert not held_out(slug), f"{name}: {slug} is a held-out question"
            assert slug in rubrics, f"{name}: {slug} is not a bank question"
            rubric = rubrics[slug].rubric
            for p in q["points"]:
                assert 0 <= p["index"] < len(rubric), f"{name}: {slug} point {p['index']}"
                assert not rubric[p["index"]].penalty, f"{name}: {slug} {p['index']} is a flag"
                # YAML reads the bare keys true/false as booleans
                assert len(p[True]) == 6 and len(p[False]) == 6 and len(p["other"]) == 3
                seen.add((slug, p["index"]))
    assert len(seen) >= 200
    assert {fold(s) for s, _ in seen} == {0, 1}  # both cross-fitting folds have sentences


def test_written_pairs_carry_the_labels_of_their_lists():
    from bench.rubric_calibration import bank_points

    points, _ = bank_points()
    _, data = _files()[0]
    q = data["questions"][0]
    pairs = written_pairs(points, {q["slug"]}, random.Random(0))
    first = q["points"][0]
    text = points[q["slug"]][first["index"]].text
    # its own point's pairs (another point's pairs use its right sentences as "other")
    labelled = {s: y for a, s, y in pairs if a.startswith(text)}
    assert all(labelled[s] == 1 for s in first[True])
    assert all(labelled[s] == 2 for s in first[False])
    assert all(labelled[s] == 0 for s in first["other"])
    assert written_pairs(points, {"no-such-question"}, random.Random(0)) == []


def test_answer_pairs_label_the_closest_sentence_from_the_expert():
    from types import SimpleNamespace

    from trainer.grading.rubric import Point, retrieve

    point = Point("Decode is memory-bound at small batch", 1, claims=("Decode reads all weights.",))
    r = retrieve.retrieve("Decode is memory-bound at batch one. Cats purr.", [point])
    case = SimpleNamespace(slug="q", expert=set(), contradicts={0})
    [(_, sentence, label)] = answer_pairs([case], {"q": [point]}, [r])
    assert sentence == "Decode is memory-bound at batch one." and label == 2
    case.expert = {0}
    assert answer_pairs([case], {"q": [point]}, [r])[0][2] == 1
