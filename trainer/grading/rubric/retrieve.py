"""Stage 2: embed the answer's units and find, per point, how close each unit is to what
makes the point true (its text, concepts and claims) and to what makes it wrong (its
contradictions, and for an ordinary point the text of the question's red flags).

Units are sentences, their clauses, and pairs of adjacent sentences (an idea is often
stated in one sentence and quantified in the next; a pair's vector is the normalised sum of
its sentences' vectors, so pairs cost no model call).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from trainer.grading.rubric import encoder, numbers, reader, split, terms
from trainer.grading.rubric.point import Point


@dataclass(frozen=True)
class Unit:
    text: str
    parts: tuple[str, ...]  # the answer's own sentences or clauses, for highlighting
    tagged: tuple[tuple[str, bool], ...]  # (word, negated)
    stated: tuple[numbers.Stated, ...]
    stuffing: float
    strict: tuple[tuple[str, bool], ...] = ()  # (word, under a negated verb)


@dataclass(frozen=True)
class Retrieval:
    units: list[Unit]
    pos: np.ndarray  # points x units: max cosine to the point's text and claims
    neg: np.ndarray  # points x units: max cosine to its contradictions (-1 without any)
    claim_index: np.ndarray  # points x units: which positive text is closest (0 = the text)
    flags: tuple[str, ...] = field(default=())
    # figures the question gives or its points expect: a number equal to one names that
    # quantity, never a wrong value of another
    given: tuple[numbers.Stated, ...] = field(default=())
    memo: dict = field(default_factory=dict, compare=False, repr=False)  # verify's raw facts
    # the point reader's (other, states, wrong) for each ordinary point's closest units
    reading: dict = field(default_factory=dict, compare=False, repr=False)


def point_text(point: Point) -> str:
    return point.text if not point.concepts else f"{point.text} ({', '.join(point.concepts)})"


_META_RE = re.compile(
    r"^(?:says|claims|states|assumes|believes|thinks|suggests|proposes|uses|reads|treats|"
    r"presents|accepts|argues|insists|recommends)(?:\s+that)?\s+",
    re.IGNORECASE,
)
_FIRST_SENTENCE_RE = re.compile(r"(?<=[.!?])\s+")
_OR_RE = re.compile(r",?\s+or\s+(?:that\s+)?", re.IGNORECASE)


def red_flag_statements(text: str) -> list[str]:
    """What a learner would say to commit a red flag: "Claims X, or that Y. (why)" ->
    ["X, or that Y", "X", "Y"] (the description's first sentence, without the verb)."""
    first = _FIRST_SENTENCE_RE.split(text.strip())[0].rstrip(".")
    stated = _META_RE.sub("", first)
    stated = stated[:1].upper() + stated[1:]
    parts = [p for p in _OR_RE.split(stated) if len(split.words(p)) >= 3]
    return list(dict.fromkeys([stated, *(parts if len(parts) > 1 else [])]))


def positives(point: Point) -> list[str]:
    """The texts that make a point true (for a red flag: the statements that commit it)."""
    if point.penalty:
        return [point_text(point), *red_flag_statements(point.text), *point.claims]
    return [point_text(point), *point.claims]


def negatives(point: Point, points: Sequence[Point]) -> list[str]:
    """A point's contradictions; the red flags of the question join an ordinary point's."""
    red_flags = (
        []
        if point.penalty
        else [
            s for p in points if p.penalty and p is not point for s in red_flag_statements(p.text)
        ]
    )
    return [*point.contradictions, *red_flags]


def stuffing(text: str, all_terms: Sequence[str] = ()) -> float:
    """0..1: how much a unit is a list of terms rather than a statement: separators per
    word, discounted by its function words ("is", "so", "because", "the" ...). A list of
    rubric terms scores ~0.5; dense but real sentences mostly stay under 0.2."""
    words = split.words(text)
    if not words:
        return 1.0
    separators = text.count(",") + text.count(";") + text.count("/")
    function = sum(w in terms.FUNCTION_WORDS for w in words) / len(words)
    return min(1.0, separators / len(words) * (1.0 - function))


def _members(parts: list[tuple[str, ...]]) -> list[list[int]]:
    """Per unit, the other units inside it: a pair's sentences, a sentence's clauses."""
    index = {p: k for k, p in enumerate(parts) if len(p) == 1}
    out = []
    for part in parts:
        inside = [k for q, k in index.items() if q != part and q[0] in " ".join(part)]
        out.append(inside)
    return out


def units_of(answer: str) -> tuple[list[tuple[str, ...]], list[tuple[int, int]]]:
    """The units' parts (sentences, then clauses) and the adjacent sentence pairs."""
    sentences = split.split_sentences(answer)
    parts: list[tuple[str, ...]] = [(s,) for s in sentences]
    for s in sentences:
        parts += [(c,) for c in split.split_clauses(s)]
    pairs = [(i, i + 1) for i in range(len(sentences) - 1)]
    return parts, pairs


def retrieve(answer: str, points: Sequence[Point], prompt: str = "") -> Retrieval:
    """Embed the answer once and compare every unit with every point's texts."""
    n = len(points)
    empty = np.zeros((n, 0))
    parts, pairs = units_of(answer)
    if not parts:
        return Retrieval([], empty, empty, empty.astype(int), ("empty",))
    if prompt and split.restates(answer, prompt):
        return Retrieval([], empty, empty, empty.astype(int), ("restates the question",))
    vectors = encoder.embed([p[0] for p in parts])
    if pairs:
        summed = np.stack([vectors[i] + vectors[j] for i, j in pairs])
        vectors = np.vstack([vectors, summed / np.linalg.norm(summed, axis=1, keepdims=True)])
        parts += [parts[i] + parts[j] for i, j in pairs]
    units = []
    for p in parts:
        text = " ".join(p)
        units.append(
            Unit(
                text,
                p,
                tuple(terms.tagged_words(text)),
                tuple(numbers.stated_numbers(text)),
                stuffing(text),
                tuple(terms.predicate_tags(text)),
            )
        )
    pos = np.zeros((n, len(units)))
    neg = np.full((n, len(units)), -1.0)
    best = np.zeros((n, len(units)), dtype=int)
    texts = [[t for t in positives(p)] for p in points]
    wrong = [negatives(p, points) for p in points]
    flat = list(dict.fromkeys(t for group in texts + wrong for t in group))
    known = dict(zip(flat, encoder.embed_cached(flat), strict=True))
    for i in range(n):
        sims = np.stack([known[t] for t in texts[i]]) @ vectors.T
        pos[i], best[i] = sims.max(axis=0), sims.argmax(axis=0)
        if wrong[i]:
            neg[i] = (np.stack([known[t] for t in wrong[i]]) @ vectors.T).max(axis=0)
    for k, members in enumerate(_members(parts)):  # as wrong as its wrongest clause
        if members:
            neg[:, k] = np.maximum(neg[:, k], neg[:, members].max(axis=1))
    reading = reader.read(points, [u.text for u in units], pos, best)
    return Retrieval(
        units, pos, neg, best, given=given_figures(tuple(points), prompt), reading=reading
    )


@functools.lru_cache(maxsize=1024)
def given_figures(points: tuple[Point, ...], prompt: str) -> tuple[numbers.Stated, ...]:
    """The prompt's numbers with units and every value the points expect (both ends of a
    range), as stated quantities; once per question and rubric (a learner's answer does not
    change them)."""
    out = [s for s in numbers.stated_numbers(prompt) if not s.quantity.dimensionless]
    for p in points:
        for e in p.expects:
            unit = numbers.unit_of(e.unit)
            if unit is None:
                continue
            for v in dict.fromkeys((e.value, e.low, e.high)):
                out.append(numbers.Stated(f"{v:g} {e.unit}", v * unit))
    return tuple(out)
