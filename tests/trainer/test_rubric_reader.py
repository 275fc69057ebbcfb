"""The point reader (trainer/grading/rubric/reader.py): what it reads, how its reading gates
"verified", that it never says "contradicted", and that what ships is what was trained."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from trainer.grading.rubric import Point, params, reader, retrieve, verify
from trainer.grading.rubric.grader import evaluate

PHASES = Point(
    "Contrasts the phases: prefill is compute-bound, decode is memory-bound",
    3,
    claims=(
        "Prefill is compute-bound because it does many FLOP per weight byte loaded.",
        "Decode is memory-bound because it does only about 2 x batch FLOP per byte loaded.",
    ),
    key_terms=("prefill | decode", "compute-bound | compute bound | FLOP | memory-bound"),
)
FLAG = Point("Claims that streaming lowers the end-to-end latency of a request", 1, penalty=True)
RIGHT = "Prefill is compute-bound since it does thousands of FLOP per weight byte."


class FixedReader:
    """A reader whose every reading is `probs` (other, states, wrong), recording its pairs."""

    def __init__(self, probs):
        self.probs, self.pairs = probs, []

    def probabilities(self, pairs):
        self.pairs += list(pairs)
        return np.tile(np.asarray(self.probs, dtype=np.float32), (len(pairs), 1))


@pytest.fixture
def fixed():
    def use(probs):
        fake = FixedReader(probs)
        reader.use(fake)
        return fake

    yield use
    reader.use(None)


def graded(answer, floor, points=(PHASES, FLAG)):
    t = dataclasses.replace(params.TUNED.thresholds, reader_floor=floor)
    r = retrieve.retrieve(answer, list(points))
    return r, evaluate(r, list(points), params.Params(t, params.TUNED.calibration))


def test_the_premise_is_the_point_and_one_claim():
    assert reader.premise(PHASES) == f"{PHASES.text} {PHASES.claims[0]}"
    assert reader.premise(PHASES, 1).endswith(PHASES.claims[1])
    assert reader.premise(PHASES, -1).endswith(PHASES.claims[-1])  # claim index 0 - 1
    assert reader.premise(FLAG) == FLAG.text


def test_only_ordinary_points_closest_units_are_read(fixed):
    fake = fixed((0.1, 0.8, 0.1))
    r, _ = graded(
        RIGHT
        + " Streaming lowers end-to-end latency. The office coffee machine broke again on Monday morning.",
        0.0,
    )
    assert r.reading and all(i == 0 for i, _ in r.reading)  # the red flag is not read
    assert len(r.reading) <= reader.READ_TOP
    assert all(r.pos[0][k] >= reader.READ_FLOOR for _, k in r.reading)
    read = {r.units[k].text for _, k in r.reading}
    off = "The office coffee machine broke again on Monday morning."
    assert off in {u.text for u in r.units} and off not in read
    assert all(p[0].startswith(PHASES.text) for p in fake.pairs)


def test_a_sentence_read_as_stating_the_point_verifies_it(fixed):
    fixed((0.1, 0.8, 0.1))
    _, result = graded(RIGHT, 0.5)
    assert result.points[0].verdict == "hit"


def test_below_the_floor_it_is_not_verified_and_the_reason_says_so(fixed):
    fixed((0.6, 0.3, 0.1))
    _, result = graded(RIGHT, 0.5)
    point = result.points[0]
    assert point.verdict == "unclear" and point.reason == verify.READER_REASON
    _, off = graded(RIGHT, 0.0)  # the floor at 0 switches the gate off
    assert off.points[0].verdict == "hit"


def test_a_reading_of_wrong_never_contradicts(fixed):
    # a learned reading is no proof (issue 29): it lowers the estimate, it never says wrong
    fixed((0.0, 0.01, 0.99))
    _, result = graded(RIGHT, 0.5)
    assert result.points[0].verdict == "unclear"
    assert all(p.verdict != "contradicted" for p in result.points)


def test_with_the_floor_off_an_unread_unit_still_verifies(fixed):
    # only the closest units are read; with the floor at 0 the rest verify as before
    fixed((0.9, 0.05, 0.05))
    r, _ = graded(RIGHT + " The office coffee machine broke again on Monday morning.", 0.0)
    cats = int(r.pos[0].argmin())  # the unit farthest from the point
    assert "coffee" in r.units[cats].text
    r.reading.clear()
    r.reading[(0, cats)] = (0.9, 0.05, 0.05)  # the answer was read, its right sentence not
    off = params.Params(
        dataclasses.replace(params.TUNED.thresholds, reader_floor=0.0), params.TUNED.calibration
    )
    assert evaluate(r, [PHASES, FLAG], off).points[0].verdict == "hit"
    on = params.Params(
        dataclasses.replace(params.TUNED.thresholds, reader_floor=0.5), params.TUNED.calibration
    )
    assert evaluate(r, [PHASES, FLAG], on).points[0].verdict == "unclear"


def test_without_a_reader_nothing_is_read(fixed):
    reader.use(False)
    r, result = graded(RIGHT, 0.5)
    assert r.reading == {} and result.points[0].verdict == "hit"


def test_what_ships_is_the_trained_layers_and_head_and_loads_back(tmp_path):
    import torch

    bert, tokenizer, head = reader.base()
    torch.manual_seed(0)
    with torch.no_grad():
        for p in bert.encoder.layer[5].parameters():
            p.add_(torch.randn_like(p) * 0.01)  # "trained"
    bert.eval()
    state = reader.trained_state(bert, head, 5)
    assert state and all(k.startswith(("bert.encoder.layer.5.", "head.")) for k in state)
    path = tmp_path / "r.safetensors"
    reader.save(bert, head, 5, {"n": 1}, path)
    assert reader.meta(path) == {"n": 1}
    pairs = [(PHASES.text, RIGHT), (PHASES.text, "Decode is compute-bound.")]
    before = reader.Reader(bert, tokenizer, head, 5).probabilities(pairs)
    after = reader.load(path, quantize=False).probabilities(pairs)
    assert np.allclose(before, after, atol=5e-3)  # fp16 on disk


@pytest.mark.skipif(not reader.available(), reason="no reader ships")
def test_the_shipped_reader_tells_a_right_sentence_from_a_reversed_one():
    r = reader.model()
    right, wrong = r.probabilities(
        [
            (reader.premise(PHASES), "Decode is memory-bound: each step reads all the weights."),
            (reader.premise(PHASES), "Decode is compute-bound: each step is limited by FLOPs."),
        ]
    )
    assert right[1] > wrong[1]
