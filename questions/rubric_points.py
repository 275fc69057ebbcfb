"""Rubric point metadata as plain data: a question's fixed variables, number specs
("320 KiB ±10%" or {expr, unit, tol, label}), a point's resolved form and its version.

The one place that turns a point's `expects` and `check.number` into numbers: the bank
loader validates with it, `RubricPoint.as_point()` and follow-up points resolve with it, and
the grader reads the result. No Django; the evaluator is questions.expressions.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import Any

from questions import problems
from questions.expressions import (
    ExpressionError,
    Quantity,
    describe_dimension,
    evaluate,
    parse_unit,
    same_dimension,
)

DEFAULT_TOL = 0.10  # a number a point expects may be off by 10% unless the author says
POINT_FIELDS = (
    "text",
    "weight",
    "penalty",
    "concepts",
    "claims",
    "contradictions",
    "key_terms",
    "expects",
    "check",
)
_PLUS_MINUS_RE = re.compile(r"\s*(?:±|\+/-|\+-)\s*")
_LEADING_NUMBER_RE = re.compile(r"^\s*([-+]?(?:\d[\d_]*)?\.?\d+(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")


def variables_scope(variables: Mapping[str, Mapping[str, Any]]) -> dict[str, object]:
    """The expression variables of a question's `variables:` (each fixed to one value),
    named as in problems: `model` gives `model_layers`, `tp: {value: 4}` gives `tp`."""
    scope: dict[str, object] = {}
    for name, spec in (variables or {}).items():
        values = problems.parameter_values(name, spec)
        if len(values) != 1:
            raise ExpressionError(
                f"variable {name!r} takes {len(values)} values; a question's variables are "
                "fixed: give one choice or a `value`"
            )
        scope.update(problems.parameter_variables(name, spec, values[0]))
    return scope


def parse_tol(tol: object) -> float:
    """A tolerance as a fraction: "5%" -> 0.05, 0.05 -> 0.05."""
    if isinstance(tol, str):
        text = tol.strip()
        if not text.endswith("%"):
            raise ExpressionError(f"tolerance {tol!r} needs a % sign, e.g. '5%'")
        try:
            value = float(text[:-1]) / 100
        except ValueError:
            raise ExpressionError(f"tolerance {tol!r} is not a percentage, e.g. '5%'") from None
    elif isinstance(tol, int | float) and not isinstance(tol, bool):
        value = float(tol)
        if value >= 1:
            raise ExpressionError(
                f"tolerance {tol:g} reads as {value:.0%}; write a percentage ('{tol:g}%') or "
                "a fraction below 1 (0.05)"
            )
    else:
        raise ExpressionError(f"tolerance {tol!r} must be a percentage such as '5%'")
    if not 0 <= value < 1:
        raise ExpressionError(f"tolerance {tol!r} must be between 0% and 100%")
    return value


def _literal(text: str, scope: Mapping[str, object]) -> tuple[Quantity, str, object]:
    """ "320 KiB ±10%" -> (320 KiB, "KiB", "10%"); the left part may be an expression."""
    parts = _PLUS_MINUS_RE.split(text.strip(), maxsplit=1)
    tol: object = parts[1] if len(parts) == 2 else DEFAULT_TOL
    match = _LEADING_NUMBER_RE.match(parts[0])
    if match and not match.group(2).startswith(("*", "/", "+", "-", "(")):
        unit = match.group(2)
        parse_unit(unit)  # an unknown unit is named with a suggestion
        return evaluate(parts[0], scope), unit, tol
    value = evaluate(parts[0], scope)
    return value, f"{value.units:~P}", tol


def assumptions(spec: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A number spec's `assume:` as [{"name", "value", "low", "high", "unit", "what"}]: each a
    figure the prompt leaves open, with the question's own value and the range a reasonable
    candidate may take. Raises ExpressionError naming what to fix."""
    out = []
    for name, item in (spec.get("assume") or {}).items():
        if not isinstance(item, Mapping):
            raise ExpressionError(
                f"assume {name!r}: give {{value, range: [low, high], what}}, got {item!r}"
            )
        try:
            low, high = (float(v) for v in item["range"])
            value = float(item.get("value", (low + high) / 2))
        except (KeyError, TypeError, ValueError):
            raise ExpressionError(
                f"assume {name!r}: `range` must be [low, high] numbers and `value` a number"
            ) from None
        if not low <= value <= high:
            raise ExpressionError(
                f"assume {name!r}: the value {value:g} lies outside its range [{low:g}, {high:g}]"
            )
        unit = str(item.get("unit") or "")
        if unit:
            parse_unit(unit)
        out.append(
            {
                "name": str(name),
                "value": value,
                "low": low,
                "high": high,
                "unit": unit,
                "what": str(item.get("what") or name),
            }
        )
    return out


def _with(scope: Mapping[str, object], assumed: list[dict[str, Any]], pick) -> dict:
    values = dict(scope)
    for a in assumed:
        v = pick(a)
        values[a["name"]] = v * parse_unit(a["unit"]) if a["unit"] else v
    return values


def resolve_number(spec: str | Mapping[str, Any], scope: Mapping[str, object]) -> dict[str, Any]:
    """`{"value", "unit", "tol" (fraction), "label", "low", "high", "assume"}` of a number
    spec, the values in the spec's unit: `value` under the question's own assumptions, `low`
    and `high` the least and most any assumption in its range gives (only when the spec
    assumes something). Raises ExpressionError naming what to fix."""
    assumed: list[dict[str, Any]] = []
    if isinstance(spec, str):
        value, unit, tol = _literal(spec, scope)
        label = ""
        corners = [value]
    elif isinstance(spec, Mapping):
        assumed = assumptions(spec)
        value = evaluate(str(spec["expr"]), _with(scope, assumed, lambda a: a["value"]))
        unit = spec.get("unit") or f"{value.units:~P}"
        tol, label = spec.get("tol", DEFAULT_TOL), spec.get("label", "") or ""
        corners = [
            evaluate(str(spec["expr"]), _with(scope, assumed, lambda a, c=c: c[a["name"]]))
            for c in _corners(assumed)
        ]
    else:
        raise ExpressionError(f"{spec!r} is neither 'value unit ±tol' nor {{expr, unit}}")
    if not same_dimension(value, unit):
        units = f"{value.units:~P}"
        got = f"{units} ({describe_dimension(value)})" if units else "a plain number"
        raise ExpressionError(
            f"the unit is {unit!r} ({describe_dimension(unit)}) but the expression yields {got}"
        )
    magnitude = float(value.to(parse_unit(unit)).magnitude)
    ends = [float(c.to(parse_unit(unit)).magnitude) for c in corners]
    if not all(math.isfinite(v) for v in [magnitude, *ends]):
        raise ExpressionError(f"{spec!r} is not a finite number")
    out = {"value": magnitude, "unit": unit, "tol": parse_tol(tol), "label": label}
    if assumed:
        out |= {"low": min([magnitude, *ends]), "high": max([magnitude, *ends]), "assume": assumed}
    return out


def _corners(assumed: list[dict[str, Any]]) -> list[dict[str, float]]:
    """Every combination of the assumptions' ends (the expressions are monotone in each
    assumption, so the extremes lie at corners; 2^n with n small)."""
    out: list[dict[str, float]] = [{}]
    for a in assumed:
        out = [c | {a["name"]: end} for c in out for end in (a["low"], a["high"])]
    return out


def resolve_check(
    check: Mapping[str, Any] | None, contradictions: list[str], scope: Mapping[str, object]
) -> dict[str, Any] | None:
    """A check with its kind and its number evaluated, or its distractors filled in (the
    point's contradictions when it gives no `options`). None when the point has no check."""
    if not check:
        return None
    if check.get("number") is not None:
        return {
            "kind": "number",
            "ask": check["ask"],
            "number": resolve_number(check["number"], scope),
        }
    options = check.get("options")
    return {
        "kind": "choice",
        "ask": check["ask"],
        "answer": check["answer"],
        "options": list(options if options is not None else contradictions),
    }


def normalise_point(point: Mapping[str, Any]) -> dict[str, Any]:
    """A point dict (bank YAML or database row) with every field present."""
    return {
        "text": point["text"],
        "weight": float(point.get("weight", 1.0)),
        "penalty": bool(point.get("penalty", False)),
        "concepts": list(point.get("concepts") or []),
        "claims": list(point.get("claims") or []),
        "contradictions": list(point.get("contradictions") or []),
        "key_terms": list(point.get("key_terms") or []),
        "expects": list(point.get("expects") or []),
        "check": dict(point.get("check") or {}),
    }


def resolve_point(point: Mapping[str, Any], scope: Mapping[str, object]) -> dict[str, Any]:
    """The grader's plain dict of a point: `expects` evaluated to number dicts, `check`
    resolved (or None), and `rubric_version` (point_version() of the point as authored).
    `scope` is `variables_scope(question.variables)`."""
    data = normalise_point(point)
    version = point_version(data)
    data["expects"] = [resolve_number(e, scope) for e in data["expects"]]
    data["check"] = resolve_check(data["check"], data["contradictions"], scope)
    data["rubric_version"] = version  # the grader stores it with each point's verdict
    return data


def point_version(point: Mapping[str, Any]) -> str:
    """12 hex digits of the sha256 of the point's canonical JSON (text, weight, penalty,
    concepts and metadata as authored): changes whenever what the grader is given changes."""
    canonical = json.dumps(
        normalise_point(point), sort_keys=True, separators=(",", ":"), ensure_ascii=False
    )
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:12]


def normalise_follow_up(item: str | Mapping[str, Any]) -> dict[str, Any]:
    """`{"prompt": str, "rubric": [full point dicts]}` of a stored follow-up (old rows and
    hand-edited JSON may still hold a plain string)."""
    if isinstance(item, str):
        return {"prompt": item, "rubric": []}
    return {
        "prompt": str(item.get("prompt", "")),
        "rubric": [normalise_point(p) for p in item.get("rubric") or []],
    }
