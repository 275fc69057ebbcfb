"""Stage 3: verify each retrieved unit against a point.

A unit *verifies* a point when it carries the point's key terms (with the claims' polarity:
"not compute-bound" does not carry "compute-bound"), is closer to a claim than to every
contradiction by a margin, is not negated, and every number it gives for the point matches
`expects` (pint, GB != GiB, any value the point's assumptions allow).

A unit *contradicts* a point only with proof (issue 29): a number stated for the point's
quantity outside every value its assumptions allow, or the point's own term under a negated
verb ("decode is not memory-bound") in a sentence that otherwise states it. Closeness to an
authored contradiction or red flag is not proof: it keeps the point from being verified
(it reads "not verified" and offers the point's check) and lowers the estimate, nothing more.
Plain-text points (no metadata) use their content words as terms and the numbers in their
text as expects.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from trainer.grading.rubric import numbers, terms
from trainer.grading.rubric.params import Thresholds
from trainer.grading.rubric.point import Point
from trainer.grading.rubric.retrieve import (
    Retrieval,
    Unit,
    positives,
    red_flag_statements,
)


@dataclass(frozen=True)
class Facts:
    """What verification found in one unit for one point (the estimate's features)."""

    pos: float
    neg: float
    share: float  # share of the point's terms present (either polarity)
    negated: bool
    numbers: numbers.Status
    number_reason: str
    stuffing: float
    verified: bool
    contradicted: bool
    missing: tuple[str, ...] = ()  # terms not carried (for the reason)
    negated_any: bool = False  # some term is negated somewhere in the unit
    stuffed: bool = False  # the unit is a list of terms rather than a statement
    suspect: bool = False  # close to a known wrong version (not proof: unclear)
    denied: bool = False  # a term of the point under a negated verb (proof)
    states: float = -1.0  # the point reader's P(states the point); -1: not read


@dataclass(frozen=True)
class Decision:
    verdict: str  # hit | unclear | contradicted | missed
    unit: int | None  # the evidence unit
    facts: Facts | None
    reason: str
    attempted: bool
    best_pos: float


@dataclass(frozen=True)
class PointTerms:
    groups: tuple[tuple[tuple[str, ...], ...], ...]  # terms -> alternatives -> words
    labels: tuple[str, ...]
    expected: tuple[terms.Polarity, ...]  # how the claims mention each term
    keyed: bool
    expects: tuple[numbers.Expect, ...]
    deniable: tuple[bool, ...] = ()  # a negated verb on this term denies the point


@functools.lru_cache(maxsize=4096)
def point_terms(point: Point) -> PointTerms:
    """A point's terms with their polarity in its claims, and its expected numbers."""
    keyed = bool(point.key_terms)
    if keyed:
        groups = [terms.parse_term(t) for t in point.key_terms]
        labels = [t.split("|")[0].strip() for t in point.key_terms]
    else:
        text = red_flag_statements(point.text)[0] if point.penalty else point.text
        groups = terms.content_terms(" ".join([text, *point.claims[:1]]))
        labels = [g[0][0] for g in groups]
    claim_tags = [terms.tagged_words(t) for t in positives(point)]
    claim_verbs = [terms.predicate_tags(t) for t in positives(point)]
    expected, deniable = [], []
    for g in groups:
        seen = [terms.polarity(g, tags) for tags in claim_tags]
        neg_only = terms.Polarity.NEGATED in seen and terms.Polarity.POSITIVE not in seen
        expected.append(terms.Polarity.NEGATED if neg_only else terms.Polarity.POSITIVE)
        seen = [terms.polarity(g, tags) for tags in claim_verbs]
        # only a term the claims state outright, and not one that is itself a negative
        # notion ("unchanged", "never sees"): "doesn't change the completion time" agrees
        # with "completion time unchanged"
        deniable.append(
            terms.Polarity.POSITIVE in seen
            and not any(terms.negated_somewhere(g, tags) for tags in claim_verbs)
            and not terms.negative_notion(g)
            and not any(terms.denied_in(g, t) for t in positives(point))
        )
    expects = point.expects or tuple(
        numbers.Expect(float(s.quantity.magnitude), f"{s.quantity.units:~P}")
        for s in numbers.stated_numbers(point.text)
        if not s.quantity.dimensionless
    )
    return PointTerms(
        tuple(tuple(tuple(a) for a in g) for g in groups),
        tuple(labels),
        tuple(expected),
        keyed,
        tuple(expects),
        tuple(deniable),
    )


@dataclass(frozen=True)
class Raw:
    """What a unit says about a point before any threshold: terms, negation, numbers."""

    share: float
    opposite: int
    agree: int
    status: numbers.Status
    reason: str
    missing: tuple[str, ...]
    negated_any: bool
    each: tuple[tuple[numbers.Status, str], ...] = ()  # per expectation
    denied: bool = False  # a positive term of the claims under a negated verb


def raw_facts(pt: PointTerms, unit: Unit, given: Sequence[numbers.Stated] = ()) -> Raw:
    seen = [terms.polarity(g, unit.tagged) for g in pt.groups]
    present = [s is not terms.Polarity.ABSENT for s in seen]
    agree = sum(s is e for s, e in zip(seen, pt.expected, strict=True))
    opposite = sum(p and s is not e for p, s, e in zip(present, seen, pt.expected, strict=True))
    share = sum(present) / len(present) if present else 1.0
    each = numbers.check_each(unit.stated, pt.expects, given, unit.text)
    status, reason = numbers.combine(each)
    missing = tuple(lab for lab, p in zip(pt.labels, present, strict=True) if not p)
    negated_any = any(
        e is terms.Polarity.POSITIVE and terms.negated_somewhere(g, unit.tagged)
        for g, e in zip(pt.groups, pt.expected, strict=True)
    )
    denied = any(
        d and terms.predicate_negated(g, unit.strict)
        for g, d in zip(pt.groups, pt.deniable, strict=True)
    )
    return Raw(share, opposite, agree, status, reason, missing, negated_any, tuple(each), denied)


def facts(
    point: Point,
    pt: PointTerms,
    unit: Unit,
    pos: float,
    neg: float,
    t: Thresholds,
    raw: Raw | None = None,
    reading: tuple[float, float, float] | None = None,
    reader_on: bool = False,
) -> Facts:
    """`reading`: the point reader's (other, states, wrong) for this unit; `reader_on`: the
    answer was read (then, with the floor on, an unread unit or one read below the floor
    does not verify)."""
    raw = raw or raw_facts(pt, unit)
    states = reading[1] if reading else -1.0
    gated = reader_on and t.reader_floor > 0 and not point.penalty
    read_ok = not gated or states >= t.reader_floor
    share, status = raw.share, raw.status
    negated = raw.opposite > 0 and (pt.keyed or raw.opposite >= raw.agree)
    required = t.key_share if pt.keyed else t.plain_share
    stuffed = unit.stuffing >= t.stuffed
    limit = t.penalty_sim if point.penalty else t.verify_floor
    numbers_ok = status is not numbers.Status.WRONG and not (
        t.numbers_required and pt.expects and status is numbers.Status.NONE and not point.penalty
    )
    verified = (
        not stuffed
        and pos >= limit
        and pos - neg >= t.margin
        and share >= required - 1e-9
        and not negated
        and numbers_ok
        and read_ok
    )
    about = share >= required - 1e-9 and len(unit.parts) == 1
    wrong_number = status is numbers.Status.WRONG and about and pos >= t.verify_floor
    denied = raw.denied and about and pos >= t.verify_floor and not stuffed
    contradicted = not point.penalty and not verified and (wrong_number or denied)
    suspect = (
        not verified
        and not stuffed
        and neg >= t.contra_floor
        and neg - pos >= t.contra_margin
        and share >= required - 1e-9
    )
    return Facts(
        pos,
        neg,
        share,
        negated,
        status,
        raw.reason,
        unit.stuffing,
        bool(verified),
        bool(contradicted),
        raw.missing,
        raw.negated_any,
        stuffed,
        bool(suspect),
        bool(denied and not point.penalty and not verified),
        states,
    )


def _facts(i: int, k: int, point: Point, pt: PointTerms, r: Retrieval, t: Thresholds) -> Facts:
    raw = r.memo.get((i, k))
    if raw is None:
        raw = r.memo[(i, k)] = raw_facts(pt, r.units[k], r.given)
    return facts(
        point,
        pt,
        r.units[k],
        float(r.pos[i][k]),
        float(r.neg[i][k]),
        t,
        raw,
        r.reading.get((i, k)),
        bool(r.reading),
    )


def decide(
    i: int, point: Point, r: Retrieval, t: Thresholds, honest: frozenset[str] = frozenset()
) -> Decision:
    """The verdict on point `i`: hit if a unit verifies it, contradicted if one contradicts
    it, unclear if one is about it, missed otherwise. A red flag is not hit by a unit made
    of `honest` sentences (ones that verify an ordinary point: "if it were MHA, 2.5 MiB")."""
    if not r.units:
        return Decision("missed", None, None, "", False, 0.0)
    pt = point_terms(point)
    pos, neg = r.pos[i], r.neg[i]
    best_pos = float(pos.max())
    order = np.argsort(-pos)
    found = [
        (int(k), _facts(i, int(k), point, pt, r, t))
        for k in order
        if pos[k] >= t.retrieve or neg[k] >= t.contra_floor
    ]
    attempted = best_pos >= t.retrieve
    wrong = _wrong_number(i, point, pt, r, t, found)
    if wrong is not None:
        k, f, reason = wrong
        return Decision("contradicted", k, f, reason, True, best_pos)
    # a sentence that denies the point keeps its own clauses from verifying it ("the cache
    # does not hold the keys and values ..." splits at "and" into a clause without the "not")
    denying = [
        r.units[k].text for k, _ in found if r.memo[(i, k)].denied and len(r.units[k].parts) == 1
    ]
    for k, f in found:
        text = r.units[k].text
        if any(text in d or d in text for d in denying) and not f.denied:
            continue
        if f.verified and not point.penalty:
            return Decision("hit", k, f, f.number_reason, True, best_pos)
    for k, f in found:
        if f.contradicted and f.denied:
            return Decision(
                "contradicted", k, f, _contradiction_reason(point, f, r, i, k), True, best_pos
            )
    top = int(order[0])
    f = found[0][1] if found and found[0][0] == top else _facts(i, top, point, pt, r, t)
    if not attempted:
        return Decision("missed", None, f, "", False, best_pos)
    if point.penalty:
        # A red flag is raised only with proof (the judge); a close sentence says "possibly".
        said = [(k, g) for k, g in found if g.verified and not _inside(r.units[k].parts, honest)]
        if said:
            k, g = said[0]
            return Decision("unclear", k, g, FLAG_REASON, True, best_pos)
        return Decision("missed", top, f, "", True, best_pos)
    for k, g in found:  # the sentence closest to a known wrong version, for its reason
        if g.suspect and k == top:
            return Decision("unclear", k, g, SUSPECT_REASON, True, best_pos)
    return Decision("unclear", top, f, _unclear_reason(pt, f, t), True, best_pos)


FLAG_REASON = (
    "Not verified: a sentence reads close to this mistake, but closeness is no proof, so it "
    "costs nothing. Check that you did not mean it."
)


def _wrong_number(
    i: int,
    point: Point,
    pt: PointTerms,
    r: Retrieval,
    t: Thresholds,
    found: list[tuple[int, Facts]],
) -> tuple[int, Facts, str] | None:
    """A number the point expects, stated wrongly in a sentence about the point and stated
    rightly nowhere in the answer: that refutes the point even beside a right sentence."""
    if point.penalty or not pt.expects:
        return None
    required = t.key_share if pt.keyed else t.plain_share
    for j in range(len(pt.expects)):
        if any(r.memo[(i, k)].each[j][0] is numbers.Status.OK for k, _ in found):
            continue
        for k, f in found:
            status, reason = r.memo[(i, k)].each[j]
            if (
                status is numbers.Status.WRONG
                and len(r.units[k].parts) == 1
                and f.pos >= t.verify_floor
                and f.share >= required - 1e-9
            ):
                return k, f, reason
    return None


def _contradiction_reason(point: Point, f: Facts, r: Retrieval, i: int, k: int) -> str:
    if f.numbers is numbers.Status.WRONG:
        return f.number_reason
    claim = positives(point)[int(r.claim_index[i][k])]
    return DENIAL_REASON + claim


READER_REASON = (
    "Not verified: your sentence is about this point, but read beside it, it does not clearly "
    "state it. Answer the check to settle it."
)
DENIAL_REASON = "Your sentence denies what this point holds: "
SUSPECT_REASON = (
    "Not verified: your sentence reads close to a common wrong version of this point, "
    "and wording alone cannot tell which you mean. Answer the check to settle it."
)


def _unclear_reason(pt: PointTerms, f: Facts, t: Thresholds) -> str:
    if f.stuffed:
        return "Your sentence names the terms but does not say how they connect."
    if f.missing and pt.keyed:
        return "Not verified: your sentence does not mention " + ", ".join(f.missing) + "."
    if pt.expects and f.numbers is numbers.Status.NONE and t.numbers_required:
        wanted = ", ".join(e.text() for e in pt.expects)
        return f"Not verified: this point expects a number ({wanted})."
    if f.pos - f.neg < t.margin:
        return "Not verified: your sentence is as close to a known wrong version as to the point."
    if 0.0 <= f.states < t.reader_floor:
        return READER_REASON
    return "Not verified: your sentence is about this point but does not state it clearly."


def decide_all(points: Sequence[Point], r: Retrieval, t: Thresholds) -> list[Decision]:
    """Every point's decision; ordinary points first, so that red flags know which
    sentences verified one of them."""
    decisions: dict[int, Decision] = {}
    honest: set[str] = set()
    for i, p in enumerate(points):
        if not p.penalty:
            decisions[i] = decide(i, p, r, t)
            honest.update(_verifying_parts(i, p, r, t))
    for i, p in enumerate(points):
        if p.penalty:
            decisions[i] = decide(i, p, r, t, frozenset(honest))
    return [decisions[i] for i in range(len(points))]


def _inside(parts: Sequence[str], honest: frozenset[str]) -> bool:
    """Whether a unit shares a sentence (or a clause of one) with the honest sentences."""
    return any(part in h or h in part for part in parts for h in honest)


def _verifying_parts(i: int, point: Point, r: Retrieval, t: Thresholds) -> set[str]:
    pt = point_terms(point)
    out: set[str] = set()
    for k in np.flatnonzero(r.pos[i] >= t.verify_floor):
        if _facts(i, int(k), point, pt, r, t).verified:
            out.update(r.units[k].parts)
    return out
