"""Rubric metadata typed in the admin gets the bank file's checks (questions.bank_rubric):
a question's variables, its follow-ups, and each rubric point's claims, expects and check.

Each function returns what to store (the bank's canonical form) or raises ValidationError
with sentences naming the field, so a bad check is a form error, never a 500.
"""

from __future__ import annotations

from typing import Any

import pydantic
from django.core.exceptions import ValidationError

from questions import bank as bank_files
from questions import catalog, problems
from questions.bank_rubric import FollowUpIn, RubricPointIn, follow_up_objects, point_number_errors
from questions.expressions import ExpressionError

VARIABLES = pydantic.TypeAdapter(dict[str, bank_files.ParameterIn])
FOLLOW_UPS = pydantic.TypeAdapter(list[FollowUpIn])
SCOPE_ERRORS = (ExpressionError, problems.ProblemError, catalog.CatalogError)


def _messages(exc: pydantic.ValidationError, prefix: str = "") -> list[str]:
    out = []
    for err in exc.errors():
        loc = "".join(f"[{p}]" if isinstance(p, int) else f" > {p}" for p in err["loc"])
        where = f"{prefix}{loc}".strip(" >")
        message = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            message = "is not a known field (see docs/BANK_FORMAT.md)"
        out.append(f"{where}: {message}" if where else message)
    return out


def variables_clean(value: Any) -> dict[str, Any]:
    """A question's variables, each fixed to one value, as stored."""
    try:
        variables = VARIABLES.validate_python(value or {})
    except pydantic.ValidationError as exc:
        raise ValidationError(_messages(exc, "variables")) from None
    try:
        bank_files.variables_scope(variables)
    except SCOPE_ERRORS as exc:
        raise ValidationError(f"variables: {exc}") from None
    return {name: p.spec() for name, p in variables.items()}


def scope_of(variables: dict[str, Any]) -> dict[str, object] | None:
    """The expression variables of stored variables; None when they do not resolve (the
    question's own form reports why)."""
    try:
        return bank_files.variables_scope(VARIABLES.validate_python(variables or {}))
    except (pydantic.ValidationError, *SCOPE_ERRORS):
        return None


def follow_ups_clean(value: Any, scope: dict[str, object] | None) -> list[dict[str, Any]]:
    """Follow-ups as {"prompt", "rubric"} objects (plain strings accepted), numbers checked."""
    value = [] if value is None else value
    if not isinstance(value, list):
        raise ValidationError('follow_ups: give a list of strings or {"prompt", "rubric"} objects')
    try:
        items = FOLLOW_UPS.validate_python(follow_up_objects(value))
    except pydantic.ValidationError as exc:
        raise ValidationError(_messages(exc, "follow_ups")) from None
    errors = [
        f"follow_ups[{i}] > rubric[{j}] > {path}: {message}"
        for i, item in enumerate(items)
        for j, point in enumerate(item.rubric)
        for path, message in (point_number_errors(point, scope) if scope is not None else [])
    ]
    if errors:
        raise ValidationError(errors)
    return [
        {
            "prompt": f.prompt,
            "rubric": [p.model_dump(mode="json", exclude_defaults=True) for p in f.rubric],
        }
        for f in items
    ]


# The model's field for each bank field of a point (Model.check() is Django's own).
POINT_FORM_FIELDS = {"check": "check_spec"}


def rubric_point_errors(data: dict[str, Any], scope: dict[str, object] | None) -> dict[str, list]:
    """Form field -> messages for a point as typed in the admin (empty when it is valid)."""
    point_data = {k: v for k, v in data.items() if v not in (None, "")}
    point_data["check"] = point_data.get("check") or None
    errors: dict[str, list] = {}
    try:
        point = RubricPointIn.model_validate(point_data)
    except pydantic.ValidationError as exc:
        for err, message in zip(exc.errors(), _messages(exc), strict=True):
            name = str(err["loc"][0]) if err["loc"] else "check"
            if name not in data:  # a whole-point rule (multiple-choice options): the check
                name = "check"
            errors.setdefault(POINT_FORM_FIELDS.get(name, name), []).append(message)
        return errors
    for path, message in point_number_errors(point, scope) if scope is not None else []:
        name = path.split(" ")[0].split("[")[0]
        errors.setdefault(POINT_FORM_FIELDS.get(name, name), []).append(f"{path}: {message}")
    return errors
