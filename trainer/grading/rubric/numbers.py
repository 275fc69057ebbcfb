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
class Expect:
    """A number a point needs: value in unit, relative tolerance (0.1 = ±10%), label."""

    value: float
    unit: str = ""
    tol: float = DEFAULT_TOL
    label: str = ""

    def text(self) -> str:
        return f"≈{format_number(self.value)} {self.unit}".strip()


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
        out.append(Stated(span, q, value * base if full is not None else None))
    return out


def _in(q: expressions.Quantity, expect: Expect) -> float | None:
    """q in the expectation's unit, or None when the dimensions differ."""
    try:
        target = expressions.parse_unit(expect.unit)
        if q.dimensionality != target.dimensionality:
            return None
        return float(q.to(target).magnitude)
    except Exception:  # pint's conversion errors have no common base
        return None


def _has_unit(expect: Expect) -> bool:
    unit = _unit(expect.unit) if expect.unit else None
    return unit is not None


def check_each(stated: Sequence[Stated], expects: Sequence[Expect]) -> list[tuple[Status, str]]:
    """Per expectation: whether the stated numbers match it, miss it (with the reason:
    "You said 512 KiB per token; this point expects ≈320 KiB."), or say nothing about it."""
    out = []
    for expect in expects:
        closest: tuple[float, Stated] | None = None
        matched = False
        for s in stated:
            for q in (s.quantity, s.base):
                value = None if q is None else _in(q, expect)
                if value is None:
                    continue
                if abs(value - expect.value) <= expect.tol * abs(expect.value):
                    matched = True
                elif expect.value and 1 / WINDOW <= value / expect.value <= WINDOW:
                    off = abs(math.log(value / expect.value))
                    if closest is None or off < closest[0]:
                        closest = (off, s)
        if matched:
            out.append((Status.OK, ""))
        elif closest is not None and _has_unit(expect):  # plain counts are too common
            label = f" for {expect.label}" if expect.label else ""
            out.append(
                (
                    Status.WRONG,
                    f"You said {closest[1].text}; this point expects {expect.text()}{label}.",
                )
            )
        else:
            out.append((Status.NONE, ""))
    return out


def check(stated: Sequence[Stated], expects: Sequence[Expect]) -> tuple[Status, str]:
    """All expectations at once: WRONG (with its reason) if any is missed, OK if any
    matches, NONE otherwise."""
    each = check_each(stated, expects)
    for status, reason in each:
        if status is Status.WRONG:
            return status, reason
    return (Status.OK if any(s is Status.OK for s, _ in each) else Status.NONE), ""
