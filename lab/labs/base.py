"""What a lab is: a parameter schema, a prediction, and a measurement that yields points.

A lab module defines one `Lab` subclass instance called `LAB`. The web side validates
parameters with `Lab.clean`, draws `Lab.predict(params)` before the first measurement
arrives, and the Celery worker iterates `Lab.run(ctx)`, saving and streaming each `Point`
as it comes. Nothing here imports Django: labs are plain Python over `lab.engine`, so they
run the same in a worker, a test or a shell.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar


class LabParamError(ValueError):
    """Bad lab parameters: `errors` maps each parameter name to what is wrong with it."""

    def __init__(self, errors: Mapping[str, str]):
        self.errors = dict(errors)
        super().__init__("; ".join(f"{k}: {v}" for k, v in self.errors.items()))


class LabCancelled(Exception):  # a control-flow signal, not an error
    """Raised by `RunContext.check_cancel()` when the user asked to stop the run."""


@dataclass(frozen=True)
class Param:
    """One parameter: kind int | float | choice | bool, a default and its bounds."""

    name: str
    label: str
    kind: str
    default: Any
    min: float | None = None
    max: float | None = None
    choices: tuple[str, ...] = ()
    unit: str = ""
    help: str = ""

    def clean(self, raw: Any) -> Any:
        """The value as its kind, within bounds; ValueError with a readable reason."""
        if raw is None or raw == "":
            return self.default
        if self.kind == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "on", "yes"):
                return True
            if text in ("0", "false", "off", "no"):
                return False
            raise ValueError(f"must be true or false, not {_show(raw)}")
        if self.kind == "choice":
            if str(raw) not in self.choices:
                raise ValueError(f"must be one of {', '.join(self.choices)}, not {_show(raw)}")
            return str(raw)
        value = self._number(raw)
        if self.min is not None and value < self.min:
            raise ValueError(f"must be at least {_fmt(self.min)}{self._unit}, not {_fmt(value)}")
        if self.max is not None and value > self.max:
            raise ValueError(f"must be at most {_fmt(self.max)}{self._unit}, not {_fmt(value)}")
        return value

    def _number(self, raw: Any) -> int | float:
        if isinstance(raw, bool):
            raise ValueError(f"must be a number, not {_show(raw)}")
        try:
            value = float(str(raw).strip()) if isinstance(raw, str) else float(raw)
        except OverflowError:  # a Python int beyond any float (10**400)
            raise ValueError("must be a finite number") from None
        except (TypeError, ValueError):
            raise ValueError(f"must be a number, not {_show(raw)}") from None
        if not math.isfinite(value):
            raise ValueError("must be a finite number")
        if self.kind == "int":
            if value != int(value):
                raise ValueError(f"must be a whole number, not {_fmt(value)}")
            return int(value)
        return value

    @property
    def _unit(self) -> str:
        return f" {self.unit}" if self.unit else ""

    @property
    def bounds(self) -> str:
        """Human-readable bounds, shown beside the form field."""
        if self.kind == "choice":
            return " / ".join(self.choices)
        if self.kind == "bool":
            return "on / off"
        return f"{_fmt(self.min)} – {_fmt(self.max)}{self._unit}"


def _show(raw: Any, limit: int = 40) -> str:
    """A bad value for an error message: its repr, cut short (a form field can be long)."""
    try:
        text = repr(raw)
    except ValueError:  # an int past Python's 4,300-digit str() limit
        text = "a number of over 4,300 digits"
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _fmt(value: float | None) -> str:
    if value is None:
        return "…"
    return f"{value:g}" if isinstance(value, float) else str(value)


@dataclass(frozen=True)
class Series:
    """A curve on the chart. `predicts` names the measured series a predicted one is for
    (the measured-vs-predicted table pairs them by x)."""

    name: str
    label: str
    kind: str = "measured"  # measured | predicted
    predicts: str = ""
    axis: str = "y"  # y | y2 (second y axis on the right) | y3 (a third, further right)
    mode: str = "lines+markers"  # a plotly scatter mode, or "bar" (bar series are stacked)
    # Predicted series only: what the prediction claims (lab/labs/verdicts.py) — "exact"
    # (counts: must match), "bound" (measured may not beat it by more than `band`) or
    # "estimate" (measured / predicted within ±band on the median point).
    claim: str = ""
    band: float = 0.0
    bound_side: str = "lower"  # bound: "lower" (measured ≥ it) or "upper" (measured ≤ it)
    # Drawn but switched off at first (a legend click shows it): for a chart of many series
    # whose secondary ones would crowd the lesson. Its verdict and points are unchanged.
    hidden: bool = False
    # Bound only: the lab promises it tight (its median point within verdicts.TIGHT x of the
    # bound). docs/LABS.md lists these; check_predictions fails one that comes out loose.
    tight: bool = False


@dataclass(frozen=True)
class Chart:
    x_title: str
    y_title: str
    y2_title: str = ""
    y3_title: str = ""  # a third y axis, right of y2 (a quantity in yet another unit)
    x_type: str = "linear"  # linear | log
    y_type: str = "linear"


@dataclass
class Point:
    series: str
    x: float
    y: float
    extra: dict[str, Any] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"series": self.series, "x": self.x, "y": self.y, "extra": self.extra}


@dataclass
class RunContext:
    """What `Lab.run` gets: validated params, the device, and ways to report liveness and
    honour a cancel request between measurements."""

    params: dict[str, Any]
    device: str = "cpu"
    is_cancelled: Callable[[], bool] = lambda: False
    beat: Callable[[], None] = lambda: None
    summary: dict[str, Any] = field(default_factory=dict)
    # Where measured device constants are cached (lab/labs/calibration.py); None: this
    # process only (tests, shells).
    calibration_path: Path | None = None

    def check_cancel(self) -> None:
        """Call between measurements: raises LabCancelled once the user asked to stop."""
        self.beat()
        if self.is_cancelled():
            raise LabCancelled


class Lab:
    """Subclass per lab; instances are stateless (safe to share across runs/threads)."""

    slug: ClassVar[str]
    title: ClassVar[str]
    summary: ClassVar[str]  # one paragraph: what is measured and what to look for
    topics: ClassVar[tuple[str, ...]]  # topic slugs in the question bank
    params: ClassVar[tuple[Param, ...]]
    series: ClassVar[tuple[Series, ...]]
    chart: ClassVar[Chart]
    needs_gpu: ClassVar[bool] = False
    time_limit_s: ClassVar[int] = 180  # per run; defaults are sized for ≤ 2 min on CPU

    def defaults(self) -> dict[str, Any]:
        return {p.name: p.default for p in self.params}

    def clean(self, raw: Mapping[str, Any]) -> dict[str, Any]:
        """Validated params (defaults filled in); LabParamError listing every problem."""
        known = {p.name for p in self.params}
        errors = {k: "is not a parameter of this lab" for k in raw if k not in known}
        cleaned: dict[str, Any] = {}
        for p in self.params:
            try:
                cleaned[p.name] = p.clean(raw.get(p.name))
            except ValueError as exc:
                errors[p.name] = str(exc)
        if not errors:
            errors.update(self.check(cleaned))
        if errors:
            raise LabParamError(errors)
        return cleaned

    def check(self, params: dict[str, Any]) -> dict[str, str]:
        """Cross-parameter rules; return {name: problem}. Override when needed."""
        return {}

    def predict(self, params: dict[str, Any]) -> list[Point]:
        """The curve the arithmetic predicts, drawn before any measurement arrives."""
        return []

    def run(self, ctx: RunContext) -> Iterator[Point]:
        raise NotImplementedError

    def miss_cause(self, series: str) -> str:
        """The likely cause a verdict names when `series`' prediction misses ("" = generic)."""
        return ""

    def loose_cause(self, series: str) -> str:
        """Why bound `series` sits far above its measurement, and what would tighten it,
        for a held-but-loose verdict ("" = generic)."""
        return ""

    def series_by_name(self) -> dict[str, Series]:
        return {s.name: s for s in self.series}

    def describe(self) -> dict[str, Any]:
        """JSON-able chart spec for the run page."""
        return {
            "slug": self.slug,
            "title": self.title,
            "chart": self.chart.__dict__,
            "series": [s.__dict__ for s in self.series],
        }
