"""Read and validate the question bank (questions/bank/*.yaml) before anything is loaded.

Every error names the file, the path to the field and what is wrong, e.g.
`kv-cache-arithmetic.yaml: questions[1] (kv-70b-capacity) > problem > steps[2] (kv_per_seq)
> unit: ...`. Plain Python (no Django): `python -m questions.bank check [FILES...]`.
"""

from __future__ import annotations

import datetime as dt
import difflib
import sys
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_serializer,
    field_validator,
    model_validator,
)

from questions import catalog, problems, rubric_points
from questions.bank_rubric import (
    CheckIn,  # noqa: F401 - re-exported: bank.CheckIn etc. stay importable
    FollowUpIn,
    NumberIn,  # noqa: F401
    RubricPointIn,
    assumption_errors,
    follow_up_objects,
    point_number_errors,
    publication_errors,
)
from questions.expressions import (
    ExpressionError,
    check_name,
    describe_dimension,
    evaluate,
    names_used,
    parse_unit,
    same_dimension,
)

BANK_DIR = Path(__file__).resolve().parent / "bank"
LOOPS_FILE = "loops.yaml"
COMPETENCIES = ("latency", "memory", "throughput", "cost", "reliability", "safety", "quality")
CHECK_VARIANTS = 24  # random variants each problem is evaluated on


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", coerce_numbers_to_str=True)


class MisconceptionIn(_Strict):
    expression: str | int | float
    feedback: str = Field(min_length=1)


class StepIn(_Strict):  # lengths as the database's columns (questions.models)
    name: str = Field(max_length=64)
    prompt: str = Field(min_length=1)
    expression: str | int | float
    unit: str = Field(max_length=64)
    rtol: float = Field(default=0.01, ge=0)
    atol: float = Field(default=0.0, ge=0)
    hints: list[str] = []
    misconceptions: list[MisconceptionIn] = []
    explanation: str = ""
    # A count (GPUs, sequences, replicas): the reference is rounded this way and the answer
    # must be a whole number; the learner is told how to round beside the answer box.
    integer: Literal["floor", "ceil", "round"] | None = None


class ParameterIn(_Strict):
    catalog: Literal["models", "gpus", "dtypes"] | None = None
    choices: list[Any] | None = Field(default=None, min_length=1)
    range: tuple[float, float] | None = None
    step: float | None = Field(default=None, gt=0)
    value: float | None = None
    unit: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> ParameterIn:
        kinds = [k for k in ("choices", "range", "value") if getattr(self, k) is not None]
        if len(kinds) != 1:
            raise ValueError("give exactly one of choices, range or value")
        if self.catalog and not self.choices:
            raise ValueError("a catalog parameter needs `choices` (catalog slugs)")
        if self.catalog and not all(isinstance(c, str) for c in self.choices or ()):
            raise ValueError("catalog choices must be catalog slugs (text), e.g. [llama-3-70b]")
        if self.catalog and self.unit:
            raise ValueError("a catalog parameter takes its units from the catalog; drop `unit`")
        if (
            not self.catalog
            and self.choices
            and not all(
                isinstance(c, int | float) and not isinstance(c, bool) for c in self.choices
            )
        ):
            raise ValueError("numeric choices must all be numbers")
        if self.range is not None and self.range[0] > self.range[1]:
            raise ValueError(f"range {list(self.range)} runs backwards")
        return self

    def spec(self) -> dict[str, Any]:
        return self.model_dump(exclude_none=True)


class ProblemIn(_Strict):
    parameters: dict[str, ParameterIn] = Field(min_length=1)
    condition: str = Field(default="", max_length=500)
    steps: list[StepIn] = Field(min_length=1)


class SourceIn(_Strict):
    """Where a prose claim comes from: the reference, the sentence relied on, when checked."""

    ref: str = Field(max_length=300)
    url: str = Field(default="", max_length=500)
    quote: str = Field(max_length=2000)
    checked: dt.date

    @field_validator("ref", "quote")
    @classmethod
    def _not_blank(cls, value: str, info) -> str:
        if not value.strip():
            what = {
                "ref": "name the source (paper and section, docs page, release notes)",
                "quote": "give the sentence relied on (or a close paraphrase marked as such)",
            }[info.field_name]
            raise ValueError(f"is empty: {what}")
        return value

    @field_validator("url")
    @classmethod
    def _web_address(cls, value: str) -> str:
        if value and not value.startswith(("https://", "http://")):
            raise ValueError(f"{value!r} is not a web address; start it with https://")
        return value

    @field_validator("checked", mode="before")
    @classmethod
    def _iso_date(cls, value: Any) -> Any:
        if isinstance(value, dt.datetime):
            value = value.date()
        if isinstance(value, dt.date):
            return value
        try:
            return dt.date.fromisoformat(str(value))
        except ValueError:
            raise ValueError(
                f"{value!r} is not a date; write the day you checked the source as "
                "YYYY-MM-DD, e.g. 2026-12-03"
            ) from None

    @field_validator("checked")
    @classmethod
    def _not_in_future(cls, value: dt.date) -> dt.date:
        if value > dt.date.today() + dt.timedelta(days=1):  # a day's slack for time zones
            raise ValueError(f"{value} is in the future; give the day you checked the source")
        return value


SOURCES = TypeAdapter(list[SourceIn])  # the admin checks typed-in sources with this


class QuestionIn(_Strict):
    slug: str = Field(pattern=r"^[a-z0-9]+(?:[-.][a-z0-9]+)*$", max_length=120)
    kind: Literal["scenario", "arithmetic", "design"]
    title: str = Field(min_length=1, max_length=200)
    difficulty: int = Field(default=2, ge=1, le=3)
    competencies: list[Literal[COMPETENCIES]] = []  # type: ignore[valid-type]
    status: Literal["published", "draft"] = "draft"
    prompt: str = Field(min_length=1)
    model_answer: str = ""
    follow_ups: list[FollowUpIn] = []
    related_labs: list[str] = []
    rubric: list[RubricPointIn] = []
    sources: list[SourceIn] = []
    problem: ProblemIn | None = None
    # Fixed values the rubric's `expects`/`check.number` expressions use (one value each).
    variables: dict[str, ParameterIn] = {}

    @field_validator("follow_ups", mode="before")
    @classmethod
    def _plain_follow_ups(cls, value: Any) -> Any:
        return follow_up_objects(value)

    @field_serializer("follow_ups")
    def _compact_follow_ups(self, follow_ups: list[FollowUpIn]) -> list:
        """A follow-up without a rubric is written back as the plain string it was."""
        return [
            f.prompt if not f.rubric else f.model_dump(mode="json", exclude_defaults=True)
            for f in follow_ups
        ]

    @model_validator(mode="after")
    def _problem_matches_kind(self) -> QuestionIn:
        if self.kind == "arithmetic" and self.problem is None:
            raise ValueError("an arithmetic question needs a `problem`")
        if self.kind != "arithmetic" and self.problem is not None:
            raise ValueError(f"a {self.kind} question has no `problem`; use kind: arithmetic")
        return self


class TopicIn(_Strict):
    slug: str = Field(pattern=r"^[a-z0-9]+(?:[-.][a-z0-9]+)*$", max_length=80)
    title: str = Field(min_length=1, max_length=200)
    summary: str = ""
    order: int = Field(default=0, ge=0, le=2**31 - 1)  # the column is a 32-bit integer


class TopicFileIn(_Strict):
    topic: TopicIn
    questions: list[QuestionIn] = []


class LoopItemIn(_Strict):
    question: str
    minutes: int = Field(ge=1, le=120)


class LoopIn(_Strict):
    slug: str = Field(pattern=r"^[a-z0-9]+(?:-[a-z0-9]+)*$", max_length=80)
    title: str = Field(min_length=1, max_length=200)
    description: str = ""
    items: list[LoopItemIn] = Field(min_length=1)


class LoopsFileIn(_Strict):
    loops: list[LoopIn]


@dataclass(frozen=True)
class BankError:
    file: str
    path: str
    message: str

    def __str__(self) -> str:
        text = (
            f"{self.file}: {self.path}: {self.message}"
            if self.path
            else f"{self.file}: {self.message}"
        )
        # One error, one line: a key like "\x1e" would otherwise split it (str.splitlines).
        return "".join(c if c.isprintable() else ascii(c)[1:-1] for c in text)


@dataclass
class Bank:
    topics: list[TopicFileIn] = field(default_factory=list)
    loops: list[LoopIn] = field(default_factory=list)
    errors: list[BankError] = field(default_factory=list)

    @property
    def questions(self) -> list[QuestionIn]:
        return [q for t in self.topics for q in t.questions]


# --- reading ---------------------------------------------------------------------------------


def _pydantic_path(loc: tuple, data: Any) -> str:
    """Turn ('questions', 2, 'problem', 'steps', 1, 'unit') into a readable path with slugs."""
    parts, node = [], data
    for key in loc:
        if isinstance(key, int) and isinstance(node, list) and 0 <= key < len(node):
            node = node[key]
            label = node.get("slug") or node.get("name") if isinstance(node, dict) else None
            parts[-1] = f"{parts[-1]}[{key}]" + (f" ({label})" if label else "")
            continue
        parts.append(str(key))
        node = node.get(key) if isinstance(node, dict) else None
    return " > ".join(parts)


def _read_yaml(path: Path, errors: list[BankError]) -> Any:
    try:
        return yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line
        errors.append(BankError(path.name, where, f"is not valid YAML: {reason}"))
    except OSError as exc:
        errors.append(BankError(path.name, "", f"cannot be read: {exc}"))
    return None


def _nul_paths(node: Any, loc: tuple = ()) -> Iterable[tuple]:
    """Where a string (a key or a value) holds a NUL character: PostgreSQL text and JSON
    columns cannot store one, so the bank refuses it whatever the database."""
    if isinstance(node, str):
        if "\x00" in node:
            yield loc
    elif isinstance(node, dict):
        for key, value in node.items():
            if isinstance(key, str) and "\x00" in key:
                yield (*loc, key)
            yield from _nul_paths(value, (*loc, key))
    elif isinstance(node, list):
        for i, item in enumerate(node):
            yield from _nul_paths(item, (*loc, i))


def _parse(model: type[BaseModel], data: Any, file: str, errors: list[BankError]):
    if not isinstance(data, dict):
        top = "`loops:`" if model is LoopsFileIn else "`topic:` and `questions:`"
        kind = type(data).__name__
        errors.append(BankError(file, "", f"must be a mapping with {top} at the top, not {kind}"))
        return None
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        for err in exc.errors():
            message = err["msg"].removeprefix("Value error, ")
            if err["type"] == "extra_forbidden":
                message = "is not a known field (see docs/BANK_FORMAT.md)"
            errors.append(BankError(file, _pydantic_path(err["loc"], data), message))
        return None


def read_bank(paths: Iterable[Path] | None = None) -> Bank:
    """Parse and validate bank files (default: every file in questions/bank/)."""
    paths = sorted(paths) if paths is not None else sorted(BANK_DIR.glob("*.yaml"))
    bank = Bank()
    for path in paths:
        data = _read_yaml(path, bank.errors)
        if data is None:
            if not any(e.file == path.name for e in bank.errors):
                bank.errors.append(BankError(path.name, "", "is empty"))
            continue
        nul_locs = _nul_paths(data) if isinstance(data, dict) else ()
        nul = [_pydantic_path(loc, data) for loc in nul_locs]
        for where in nul:
            message = "contains a NUL character (\\0), which no database column can hold"
            bank.errors.append(BankError(path.name, where, message))
        if nul:
            continue
        if path.name == LOOPS_FILE:
            parsed = _parse(LoopsFileIn, data, path.name, bank.errors)
            if parsed:
                bank.loops.extend(parsed.loops)
            continue
        parsed = _parse(TopicFileIn, data, path.name, bank.errors)
        if parsed is None:
            continue
        if parsed.topic.slug != path.stem:
            bank.errors.append(
                BankError(
                    path.name,
                    "topic > slug",
                    f"is {parsed.topic.slug!r} but the file is {path.name}; they must match",
                )
            )
        for i, question in enumerate(parsed.questions):
            where = f"questions[{i}] ({question.slug})"
            for msg_path, message in check_question(question):
                bank.errors.append(
                    BankError(path.name, f"{where} > {msg_path}".rstrip(" >"), message)
                )
            for index, message in publication_errors(question):
                point = f"question {question.slug}, rubric point {index}"
                bank.errors.append(BankError(path.name, point, message))
            for msg_path, message in assumption_errors(question):
                bank.errors.append(BankError(path.name, f"{where} > {msg_path}", message))
        bank.topics.append(parsed)
    _check_cross_file(bank, {p.name for p in paths})
    return bank


def _check_cross_file(bank: Bank, files: set[str]) -> None:
    seen: dict[str, str] = {}
    for topic_file in bank.topics:
        file = f"{topic_file.topic.slug}.yaml"
        for i, q in enumerate(topic_file.questions):
            if q.slug in seen:
                bank.errors.append(
                    BankError(
                        file,
                        f"questions[{i}] ({q.slug}) > slug",
                        f"duplicate slug {q.slug!r}: already used in {seen[q.slug]}",
                    )
                )
            seen.setdefault(q.slug, file)
    loop_slugs: set[str] = set()
    for i, loop in enumerate(bank.loops):
        if loop.slug in loop_slugs:
            bank.errors.append(
                BankError(LOOPS_FILE, f"loops[{i}] ({loop.slug}) > slug", "duplicate loop slug")
            )
        loop_slugs.add(loop.slug)
        for j, item in enumerate(loop.items):
            if item.question not in seen and len(files) > 1:
                bank.errors.append(
                    BankError(
                        LOOPS_FILE,
                        f"loops[{i}] ({loop.slug}) > items[{j}] > question",
                        f"no question with slug {item.question!r} in the bank",
                    )
                )


# --- semantic checks of one question ---------------------------------------------------------


def check_question(question: QuestionIn) -> list[tuple[str, str]]:
    """(path, message) for everything wrong with a schema-valid question."""
    errors = []
    weights = [p for p in question.rubric if not p.penalty]
    if question.rubric and not weights:
        errors.append(("rubric", "has only penalty points; add at least one point to earn"))
    errors.extend(check_rubric_numbers(question))
    if question.problem is not None:
        errors.extend(
            (f"problem > {p}" if p else "problem", m) for p, m in check_problem(question.problem)
        )
    return errors


def check_rubric_numbers(question: QuestionIn) -> list[tuple[str, str]]:
    """The question's variables are fixed and every `expects`/`check.number` of its points
    and its follow-ups' points evaluates against them, in a unit of the right dimension."""
    try:
        scope = variables_scope(question.variables)
    except (ExpressionError, problems.ProblemError, catalog.CatalogError) as exc:
        return [("variables", str(exc))]
    groups = [("rubric", question.rubric)] + [
        (f"follow_ups[{i}] > rubric", f.rubric) for i, f in enumerate(question.follow_ups)
    ]
    return [
        (f"{where}[{i}] > {path}", message)
        for where, points in groups
        for i, point in enumerate(points)
        for path, message in point_number_errors(point, scope)
    ]


def variables_scope(variables: dict[str, ParameterIn]) -> dict[str, object]:
    """Expression variables of a question's `variables:`; raises (ExpressionError,
    ProblemError, CatalogError) for a bad name, a catalog miss or a variable not fixed."""
    for name in variables:
        check_name(name)
    return rubric_points.variables_scope({n: p.spec() for n, p in variables.items()})


def check_problem(problem_in: ProblemIn) -> list[tuple[str, str]]:
    """Names, catalog references, step order, units, condition and misconceptions."""
    errors: list[tuple[str, str]] = []
    known: set[str] = set()
    for name, param in problem_in.parameters.items():
        path = f"parameters > {name}"
        try:
            check_name(name)
            if param.unit:
                parse_unit(param.unit)
            for value in problems.parameter_values(name, param.spec()):
                known.update(problems.parameter_variables(name, param.spec(), value))
        except (ExpressionError, problems.ProblemError, catalog.CatalogError) as exc:
            errors.append((path, str(exc)))
    if errors:
        return errors
    step_index = {s.name: i for i, s in enumerate(problem_in.steps)}
    for i, step in enumerate(problem_in.steps):
        errors.extend(_check_step_static(i, step, known, step_index))
        known.add(step.name)
    if errors:
        return errors
    return _check_numbers(problems.from_dict(_problem_dict(problem_in)))


def _problem_dict(problem_in: ProblemIn) -> dict[str, Any]:
    data = problem_in.model_dump()
    data["parameters"] = {n: p.spec() for n, p in problem_in.parameters.items()}
    return data


def _check_step_static(i: int, step: StepIn, known: set[str], step_index: dict[str, int]):
    path = f"steps[{i}] ({step.name})"
    errors = []
    try:
        check_name(step.name)
    except ExpressionError as exc:
        errors.append((f"{path} > name", str(exc)))
    if step_index.get(step.name) != i:
        errors.append((f"{path} > name", f"step name {step.name!r} is used by more than one step"))
    if step.name in known:
        errors.append((f"{path} > name", f"{step.name!r} is already a parameter variable"))
    try:
        parse_unit(step.unit)
    except ExpressionError as exc:
        errors.append((f"{path} > unit", str(exc)))
    exprs = [("expression", str(step.expression))] + [
        (f"misconceptions[{j}] > expression", str(m.expression))
        for j, m in enumerate(step.misconceptions)
    ]
    for where, expr in exprs:
        try:
            used = names_used(expr)
        except ExpressionError as exc:
            errors.append((f"{path} > {where}", str(exc)))
            continue
        for name in sorted(used - known):
            later = step_index.get(name)
            if later is not None and later >= i:
                msg = (
                    f"uses {name!r}, which step {later} computes; a step may only use "
                    "parameters and earlier steps"
                )
            else:
                msg = f"uses {name!r}, which is neither a parameter variable nor an earlier step"
                close = difflib.get_close_matches(name, sorted(known), n=1)
                msg = f"{msg} — did you mean {close[0]!r}?" if close else msg
            errors.append((f"{path} > {where}", msg))
    return errors


def _check_numbers(problem: problems.Problem) -> list[tuple[str, str]]:
    """Evaluate the chain on random variants: dimensions, finiteness, misconceptions differ.

    Reports the first failure only: later steps of a broken chain would only repeat it.
    """
    try:
        variants = [problems.draw_variant(problem, seed) for seed in range(CHECK_VARIANTS)]
    except (problems.ProblemError, ExpressionError) as exc:
        return [("condition", str(exc))]
    for variant in variants:
        scope = dict(variant.variables)
        for i, step in enumerate(problem.steps):
            error = _check_step_values(step, scope, variant)
            if error:
                where, message = error
                return [(f"steps[{i}] ({step.name}){where}", message)]
    return []


def _check_step_values(
    step: problems.Step, scope: dict[str, object], variant: problems.Variant
) -> tuple[str, str] | None:
    """Evaluate one step (adding it to `scope`) and its misconceptions for one variant."""
    try:
        value = evaluate(step.expression, scope)
    except ExpressionError as exc:
        return " > expression", f"{exc} (variant {variant.choices})"
    if not same_dimension(value, step.unit):
        return " > unit", (
            f"the unit is {step.unit!r} ({describe_dimension(step.unit)}) but the expression "
            f"yields {value.units:~P} ({describe_dimension(value)})"
        )
    value = problems.rounded(step, value.to(parse_unit(step.unit)))
    scope[step.name] = value
    for j, m in enumerate(step.misconceptions):
        where = f" > misconceptions[{j}] > expression"
        try:
            wrong = evaluate(m.expression, scope)
        except ExpressionError as exc:
            return where, str(exc)
        if not same_dimension(wrong, step.unit):
            return where, (
                f"yields {wrong.units:~P} ({describe_dimension(wrong)}); "
                f"the step's unit is {step.unit!r}"
            )
        wrong = problems.rounded(step, wrong.to(value.units))
        if not problems.differs(value, wrong.to(value.units), step.rtol, step.atol):
            return where, (
                f"gives the correct answer ({value:~P}) for variant {variant.choices}; "
                "a misconception must differ beyond the step's tolerance"
            )
    return None


# --- command line ----------------------------------------------------------------------------


def main(argv: list[str]) -> int:
    if not argv or argv[0] != "check":
        print("usage: python -m questions.bank check [FILE.yaml ...]")
        return 2
    paths = [Path(a) for a in argv[1:]] or None
    bank = read_bank(paths)
    for error in bank.errors:
        print(error)
    count = len(bank.questions)
    print(
        f"{len(bank.topics)} topic file(s), {count} question(s), {len(bank.loops)} loop(s): "
        f"{len(bank.errors)} error(s)"
    )
    return 1 if bank.errors else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
