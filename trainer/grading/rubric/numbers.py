"""Numbers with units: what an answer says, what a point expects, and whether they agree.

Quantities are parsed with the trainer's pint registry (questions/expressions.py), so
"10 GiB" and "10.7 GB" compare by value and GB != GiB. A stated number is compared with an
expectation of the same dimension; one within the tolerance matches, one off by up to
`WINDOW`x (512 vs 128 KiB is 4x) is a wrong value for that expectation (farther off, it is
some other quantity); for plain counts only a match counts (answers are full of counts).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from questions import expressions

WINDOW = 4.5  # a same-dimension number within 4.5x of the expectation is an attempt at it
DEFAULT_TOL = 0.10
# Proof that a number is wrong (issue 29): outside the tolerance by a further 25% (a figure
# just outside it is more likely a rounder or another honest assumption: "not verified"), and
# not a dtype multiple of it (x2, x0.5, x4, x0.25: the same quantity in FP8 or FP32, or another
# quantity altogether). Confusing GB with GiB is always wrong where the tolerance is tighter.
GRAY = 1.25
_DTYPE_MULTIPLES = (2.0, 0.5, 4.0, 0.25)
_GIB_PER_GB = (2**30 / 1e9, 1e9 / 2**30)
_ALLOWED_DIMS = {"[information]", "[time]", "[token]", "[flop]", "[currency]", "[request]"}
_MULTIPLIERS = {"k": 1e3, "K": 1e3, "M": 1e6, "B": 1e9, "bn": 1e9, "T": 1e12}
_NUMBER_RE = re.compile(
    r"(?<![\w.\-])(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?)"
    r"(?P<mult>k|K|M|B|bn|T)?(?![\w.])"
    r"(?:\s*(?P<word>thousand|million|billion|trillion)\b)?"
    r"(?:\s*(?P<unit>[A-Za-z$][A-Za-z]*(?:/[A-Za-z]+)*)"
    r"(?:\s*(?:/|per)\s*(?P<per>[A-Za-z]+))?)?"
)
_RANGE_RE = re.compile(r"^\s*(?:–|—|-|to)\s*$")
_WORDS = {"thousand": 1e3, "million": 1e6, "billion": 1e9, "trillion": 1e12}
_LITERAL_RE = re.compile(r"^\s*[~≈]?\s*([-\d.,eE+]+)\s*(.*?)\s*(?:±\s*([\d.]+)\s*(%?))?\s*$")


@dataclass(frozen=True)
class Assumption:
    """A figure the prompt leaves open: the question's value and the range allowed."""

    name: str
    value: float
    low: float
    high: float
    unit: str = ""
    what: str = ""

    def text(self) -> str:
        unit = f" {self.unit}" if self.unit else ""
        return f"{self.what or self.name} {self.low:g}–{self.high:g}{unit}"


@dataclass(frozen=True)
class Expect:
    """A number a point needs: value in unit, relative tolerance (0.1 = ±10%), label, and
    the range [low, high] its assumptions allow (low = high = value when none)."""

    value: float
    unit: str = ""
    tol: float = DEFAULT_TOL
    label: str = ""
    low: float | None = None
    high: float | None = None
    assume: tuple[Assumption, ...] = ()

    def __post_init__(self) -> None:
        if self.low is None:
            object.__setattr__(self, "low", self.value)
        if self.high is None:
            object.__setattr__(self, "high", self.value)

    @property
    def ranged(self) -> bool:
        return self.high > self.low

    def accepts(self, value: float) -> bool:
        """Whether `value` (in this unit) is what some assumption in range gives."""
        low = min(self.low * (1 - self.tol), self.low * (1 + self.tol))
        high = max(self.high * (1 - self.tol), self.high * (1 + self.tol))
        return low <= value <= high

    def text(self) -> str:
        if self.ranged:
            return f"{format_number(self.low)}–{format_number(self.high)} {self.unit}".strip()
        return f"≈{format_number(self.value)} {self.unit}".strip()

    def assumptions_text(self) -> str:
        return "; ".join(a.text() for a in self.assume)


@dataclass(frozen=True)
class Stated:
    """A number the answer states: its words, and its quantity (with and without /per)."""

    text: str
    quantity: expressions.Quantity
    base: expressions.Quantity | None = None  # "512 KiB per token" -> 512 KiB


class Status(Enum):
    NONE = "none"  # no number of the point's dimension
    OK = "ok"
    WRONG = "wrong"


def format_number(value: float) -> str:
    if value == 0 or not math.isfinite(value):
        return str(value)
    if abs(value) >= 100:
        return f"{round(value):,}"
    return f"{value:.3g}"


def parse_expect(item: object) -> Expect:
    """An expectation from a point dict: {"value", "unit", "tol", "label"} (tol a fraction,
    as RubricPoint.as_point() gives it) or a literal such as "320 KiB ±10%"."""
    if isinstance(item, Expect):
        return item
    if isinstance(item, Mapping):
        tol = item.get("tol", DEFAULT_TOL)
        if isinstance(tol, str):
            tol = float(tol.strip().rstrip("%")) / 100
        return Expect(
            float(item["value"]),
            str(item.get("unit") or ""),
            float(tol),
            str(item.get("label") or ""),
            float(item["low"]) if item.get("low") is not None else None,
            float(item["high"]) if item.get("high") is not None else None,
            tuple(
                a if isinstance(a, Assumption) else Assumption(**a)
                for a in item.get("assume") or ()
            ),
        )
    match = _LITERAL_RE.match(str(item))
    if not match:
        raise ValueError(f"expected a number with a unit such as '320 KiB ±10%', got {item!r}")
    value, unit, tol, percent = match.groups()
    tolerance = DEFAULT_TOL if tol is None else float(tol) / (100 if percent else 1)
    if tol is not None and not percent:  # "±32 KiB": absolute, as a fraction of the value
        tolerance = float(tol) / abs(float(value.replace(",", "")))
    return Expect(float(value.replace(",", "")), unit.strip(), tolerance)


def _unit(text: str) -> expressions.Unit | None:
    """A unit the grader compares (memory, time, tokens, FLOP, money, requests) or None."""
    try:
        unit = expressions.parse_unit(text)
    except (expressions.ExpressionError, Exception):  # pint raises several kinds
        return None
    dims = set(str(d) for d in unit.dimensionality)
    return unit if dims and dims <= _ALLOWED_DIMS else None


def stated_numbers(text: str) -> list[Stated]:
    """Every number in `text`, with its unit where one follows ("2.5 GiB", "8k tokens",
    "3.35 TB/s", "512 KiB per token"); a range's first number takes the unit of its second."""
    found: list[tuple[re.Match, float, expressions.Unit | None, expressions.Unit | None]] = []
    for m in _NUMBER_RE.finditer(text):
        value = float(m["num"].replace(",", ""))
        value *= _MULTIPLIERS.get(m["mult"] or "", 1.0) * _WORDS.get(m["word"] or "", 1.0)
        base = _unit(m["unit"]) if m["unit"] else None
        full = _unit(f"{m['unit']}/{m['per']}") if base is not None and m["per"] else None
        found.append((m, value, base, full))
    out = []
    for i, (m, value, base, full) in enumerate(found):
        if base is None and i + 1 < len(found):
            nxt = found[i + 1]
            if nxt[2] is not None and _RANGE_RE.match(text[m.end("num") : nxt[0].start()]):
                base, full = nxt[2], nxt[3]
        span = text[m.start() : m.end()].strip()
        if base is None:
            span = text[
                m.start() : m.end("word")
                if m["word"]
                else m.end("mult")
                if m["mult"]
                else m.end("num")
            ]
        q = value * (full or base or expressions.UREG.dimensionless)
        own = value * base if full is not None else _per_count(m["unit"] or "", value)
        out.append(Stated(span, q, own))
    return out


_TIME = expressions.UREG.second.dimensionality


def _per_count(unit: str, value: float) -> expressions.Quantity | None:
    """ "17 GB/req" -> 17 GB: a compound unit per a count (request, token, sequence...) also
    states the amount per one of them; per a time ("3.35 TB/s") it is a rate, and has none."""
    if "/" not in unit:
        return None
    top, _, bottom = unit.partition("/")
    numerator, denominator = _unit(top), _unit(bottom)
    if numerator is None or (denominator is not None and denominator.dimensionality == _TIME):
        return None
    return value * numerator


def _in(q: expressions.Quantity, expect: Expect) -> float | None:
    """q in the expectation's unit, or None when the dimensions differ."""
    try:
        target = expressions.parse_unit(expect.unit)
        if q.dimensionality != target.dimensionality:
            return None
        return float(q.to(target).magnitude)
    except Exception:  # pint's conversion errors have no common base
        return None


def unit_of(text: str) -> expressions.Unit | None:
    """The unit `text` names, if the grader compares its dimension."""
    return _unit(text) if text else None


def _has_unit(expect: Expect) -> bool:
    unit = _unit(expect.unit) if expect.unit else None
    return unit is not None


def _given(value: float, expect: Expect, given: Sequence[Stated]) -> bool:
    """Whether `value` (in the expectation's unit) is a figure the question itself gives or
    another of its expectations: then it names another quantity, not a wrong value here."""
    for g in given:
        for q in (g.quantity, g.base):
            other = None if q is None else _in(q, expect)
            if other is not None and other and abs(value - other) <= 0.02 * abs(other):
                return True
    return False


def _accepted_reason(s: Stated, expect: Expect, value: float) -> str:
    """Why a value under another assumption counts: names the range and the question's own."""
    if not expect.ranged or abs(value - expect.value) <= expect.tol * abs(expect.value):
        return ""
    label = f" {expect.label}" if expect.label else ""
    return (
        f"Your {s.text} is accepted: with {expect.assumptions_text()} the{label or ' value'} "
        f"comes to {expect.text()} (the question's own figures give "
        f"≈{format_number(expect.value)} {expect.unit})."
    )


def _provably_off(ratio: float, tol: float) -> bool:
    """Whether a stated value at `ratio` times the nearest allowed one is a wrong value of
    the same quantity, beyond doubt: see GRAY and _DTYPE_MULTIPLES."""
    if not 1 / WINDOW <= ratio <= WINDOW:
        return False  # some other quantity
    if tol < 0.07 and any(abs(ratio - g) <= 0.01 * g for g in _GIB_PER_GB):
        return True  # GB for GiB (or back)
    if any(abs(ratio - m) <= max(tol, 0.05) * m for m in _DTYPE_MULTIPLES):
        return False
    return abs(math.log(ratio)) > math.log(1 + tol) + math.log(GRAY)


_LABEL_WORD_RE = re.compile(r"[a-z][a-z0-9]*")
_LABEL_STOP = frozenset(
    {"a", "an", "the", "of", "in", "on", "at", "to", "for", "per", "with", "and", "or", "by",
     "from", "one", "two", "its", "after", "before", "over", "across", "into", "each", "all",
     "this", "that"}
)  # fmt: skip


def names_quantity(expect: Expect, text: str | None) -> bool:
    """Whether `text` names the expectation's quantity: a word of its label ("weight-read
    floor", "KV room in FP8") or a stem of one. None (no text given) and no label: yes."""
    if text is None or not expect.label:
        return True
    wanted = [w for w in _LABEL_WORD_RE.findall(expect.label.lower()) if w not in _LABEL_STOP]
    have = set(_LABEL_WORD_RE.findall(text.lower()))

    def stem_of(w: str, h: str) -> bool:  # "weights" names "weight", "reads" names "read"
        return len(h) >= 4 and h[:4] == w[:4] and (h.startswith(w) or w.startswith(h))

    return not wanted or any(w in have or any(stem_of(w, h) for h in have) for w in wanted)


def check_each(
    stated: Sequence[Stated],
    expects: Sequence[Expect],
    given: Sequence[Stated] = (),
    text: str | None = None,
) -> list[tuple[Status, str]]:
    """Per expectation: whether the stated numbers match it (a value some assumption in range
    gives, within the tolerance), miss it (with the reason: "You said 512 KiB per token; this
    point expects ≈320 KiB."), or say nothing about it. A number the question gives, or one
    another expectation of it accounts for (`given`), is never a wrong value; nor is one in a
    `text` that does not name the quantity (names_quantity): "17-22 ms of CPU time" says
    nothing about the weight-read floor."""
    # A figure one of the point's expectations accepts is that quantity, never a wrong value
    # of another ("150 GB for KV" on a TP=4 replica is not a wrong TP=8 pool).
    explained = {
        i
        for i, s in enumerate(stated)
        for e in expects
        for q in (s.quantity, s.base)
        if q is not None and (v := _in(q, e)) is not None and e.accepts(v)
    }
    out = []
    for expect in expects:
        matched: tuple[Stated, float] | None = None
        last: tuple[Stated, float, float] | None = None  # a figure of this kind, not matching
        kinds: set[float] = set()  # the distinct such figures
        others = 0  # figures of this kind the question gives or another expectation explains
        for n, s in enumerate(stated):
            for q in (s.quantity, s.base):
                value = None if q is None else _in(q, expect)
                if value is None:
                    continue
                if expect.accepts(value):
                    matched = matched or (s, value)
                    break
                ref = expect.low if abs(value) < abs(expect.low) else expect.high
                if ref and 1 / WINDOW <= value / ref <= WINDOW:
                    if n in explained or _given(value, expect, given):
                        others += 1
                    else:
                        last = (s, value, ref)
                        kinds.add(round(value, 9))
                    break
        # With two figures of this kind in the sentence ("576 - 141 = 250 GB", "usable 162 GB,
        # KV from 91 to 120 GB") nothing tells which one is meant for this quantity: no proof,
        # also when the other is a figure the question gives or another expectation explains
        # (120 GB there is the FP4 KV room). Only a sentence's single such figure, provably
        # off, is a wrong value.
        single = last is not None and len(kinds) == 1 and not others
        closest = last if single and _provably_off(last[1] / last[2], expect.tol) else None
        if matched:
            out.append((Status.OK, _accepted_reason(matched[0], expect, matched[1])))
        elif closest is not None and _has_unit(expect) and names_quantity(expect, text):
            # (plain counts are too common to be proof)
            label = f" for {expect.label}" if expect.label else ""
            assumed = f" (with {expect.assumptions_text()})" if expect.ranged else ""
            out.append(
                (
                    Status.WRONG,
                    f"You said {closest[0].text}; this point expects {expect.text()}"
                    f"{label}{assumed}.",
                )
            )
        else:
            out.append((Status.NONE, ""))
    return out


def check(
    stated: Sequence[Stated],
    expects: Sequence[Expect],
    given: Sequence[Stated] = (),
    text: str | None = None,
) -> tuple[Status, str]:
    """All expectations at once: WRONG (with its reason) if any is missed, OK if any
    matches (with the assumption that made it right, if one did), NONE otherwise."""
    return combine(check_each(stated, expects, given, text))


def combine(each: Sequence[tuple[Status, str]]) -> tuple[Status, str]:
    """check()'s verdict from check_each()'s, for a caller that already has them."""
    for status, reason in each:
        if status is Status.WRONG:
            return status, reason
    ok = [reason for status, reason in each if status is Status.OK]
    return (Status.OK, next((r for r in ok if r), "")) if ok else (Status.NONE, "")
