"""The one unit-aware expression evaluator of the trainer (see docs/BANK_FORMAT.md).

Expressions are parsed by pint's own tokenizer and ``build_eval_tree``; user text is
never handed to Python's ``eval``/``exec``/``ast``. Function calls (``ceil(x)``,
``min(a, b)``...) are evaluated by a pre-pass that replaces each innermost call with a
placeholder variable bound to its value. Implicit multiplication binds tighter than ``*``
and ``/`` ("10 GB / 2 GiB" divides by 2 GiB), variables shadow unit names, and every
number is a float. Plain Python: no Django imports.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from collections.abc import Callable, Mapping
from itertools import accumulate
from tokenize import ENDMARKER, NAME, NEWLINE, NUMBER, OP, TokenInfo

import pint
from pint import pint_eval

Quantity = pint.Quantity
Unit = pint.Unit

_DEFINITIONS = (
    "bit = [information] = b",  # pint's default makes bit dimensionless and `b` a barn
    "Gb = 1e9 * bit",  # by default `Gb` is the gilbert
    "Kb = 1e3 * bit",
    "KB = 1e3 * byte",  # pint only knows kB; KB is decimal too
    "token = [token] = _ = tok",  # so Mtok (1e6 tokens) and ktok/s parse too
    "FLOP = [flop]",
    "FLOPS = FLOP / second",
    "OPS = FLOP / second",  # TOPS = 1e12 OPS, the datasheet unit for int8
    "USD = [currency] = _ = dollar",  # `$` is rewritten to USD before parsing
    "request = [request] = _ = req",
    # Counts people write after a number ("52 GPUs", "40 sequences", "30 tok/s/seq"): plain
    # numbers, like pint's own `count`. Case-sensitive, so the parameter `gpu` stays free.
    "GPU = 1",
    "sequence = 1 = _ = seq",
    # Number words: "$1.2 per million tokens", "1.5 million tokens".
    "thousand = 1e3",
    "million = 1e6",
    "billion = 1e9",
)


def _build_registry() -> pint.UnitRegistry:
    registry = pint.UnitRegistry(on_redefinition="ignore")
    for line in _DEFINITIONS:
        registry.define(line)
    registry._build_cache()  # bit was redefined: recompute the cached dimensionalities
    registry.formatter.default_format = "~P"
    return registry


UREG: pint.UnitRegistry = _build_registry()
pint.set_application_registry(UREG)

MAX_LENGTH = 500
MAX_EXPONENT = 100
_ALLOWED_OPS = {"+", "-", "*", "/", "**", "(", ")"}
_ALLOWED_TOKENS = {OP, NAME, NUMBER, NEWLINE, ENDMARKER}
_BAD_CHAR_RE = re.compile(r"[^\w\s.+\-*/^(),$]")
_CALL_RE = re.compile(r"(?<![\w.])([^\W\d]\w*)\s*\(")
_NAME_RE = re.compile(r"[A-Za-z][A-Za-z0-9_]*")
_COMPARISON_RE = re.compile(r"<=|>=|==|!=|<|>|=")
# pint's priorities, except that implicit multiplication binds tighter than * and /, so
# "10 GB / 2 GiB" is (10 GB) / (2 GiB); pint's own string_preprocessor would make it
# ((10 GB) / 2) GiB.
_OP_PRIORITY = {"**": 3, "unary": 2, "": 2, "*": 1, "/": 1, "+": 0, "-": 0}
_COMMON_UNITS = (  # noqa: SIM905 (suggestions for misspelt units)
    "B KB MB GB TB KiB MiB GiB TiB bit Gb s ms us ns minute hour h day token FLOP FLOPS "
    "TFLOPS PFLOPS TOPS USD dollar W kW request GPU sequence"
).split()


class ExpressionError(ValueError):
    """An expression, condition, unit or name a bank author has to fix."""


def _quantity(value: object) -> Quantity:
    """Coerce a number or Quantity (of any registry) to a float UREG Quantity."""
    if isinstance(value, UREG.Quantity) and isinstance(value.magnitude, float):
        return value  # already ours: quantities are immutable in use, no copy needed
    if isinstance(value, pint.Quantity):
        return UREG.Quantity(float(value.magnitude), value.units)
    return UREG.Quantity(float(value))


def _lookup_unit(name: str) -> str | None:
    """The canonical unit name for ``name``, or None when it is not a unit."""
    try:
        return UREG.get_name(name) or None
    except Exception:
        return None


def _finite(q: Quantity, what: str) -> Quantity:
    magnitude = q.magnitude
    if isinstance(magnitude, complex) or not math.isfinite(magnitude):
        raise ExpressionError(f"{what} is not a finite real number")
    return q


def _dimensionless(fn: str, q: Quantity) -> float:
    if not q.dimensionless:
        raise ExpressionError(f"{fn}() needs a dimensionless argument, got {format_quantity(q)}")
    return float(q.to(UREG.dimensionless).magnitude)


def _same_kind(fn: str, args: list[Quantity]) -> list[float]:
    first = args[0]
    try:
        return [float(a.to(first.units).magnitude) for a in args]
    except pint.DimensionalityError:
        kinds = " and ".join(f"{format_quantity(a)} ({describe_dimension(a)})" for a in args)
        raise ExpressionError(f"{fn}() needs arguments of the same kind, got {kinds}") from None


def _sqrt(args: list[Quantity]) -> Quantity:
    if args[0].magnitude < 0:
        raise ExpressionError(
            f"sqrt() needs a non-negative argument, got {format_quantity(args[0])}"
        )
    return args[0] ** 0.5


def _log2(args: list[Quantity]) -> Quantity:
    value = _dimensionless("log2", args[0])
    if value <= 0:
        raise ExpressionError(f"log2() needs a positive argument, got {format_quantity(args[0])}")
    return UREG.Quantity(math.log2(value))


def _rounding(fn: str, op: Callable[[float], float]) -> Callable[[list[Quantity]], Quantity]:
    def apply(args: list[Quantity]) -> Quantity:
        return UREG.Quantity(float(op(_dimensionless(fn, args[0]))))

    return apply


def _extreme(fn: str, op: Callable[[list[float]], float]) -> Callable[[list[Quantity]], Quantity]:
    def apply(args: list[Quantity]) -> Quantity:
        return UREG.Quantity(op(_same_kind(fn, args)), args[0].units)

    return apply


# name -> (minimum arguments, maximum arguments or None, implementation)
_FUNCTIONS: dict[str, tuple[int, int | None, Callable[[list[Quantity]], Quantity]]] = {
    "ceil": (1, 1, _rounding("ceil", math.ceil)),
    "floor": (1, 1, _rounding("floor", math.floor)),
    "round": (1, 1, _rounding("round", lambda x: math.floor(x + 0.5))),
    "sqrt": (1, 1, _sqrt),
    "log2": (1, 1, _log2),
    "min": (1, None, _extreme("min", min)),
    "max": (1, None, _extreme("max", max)),
}
FUNCTION_NAMES = frozenset(_FUNCTIONS)


def _prepare(expression: object) -> str:
    """Normalise whitespace, enforce the length and character rules, rewrite ``$``."""
    if not isinstance(expression, str):
        raise ExpressionError(f"an expression must be text, got {type(expression).__name__}")
    text = " ".join(expression.split())
    if not text:
        raise ExpressionError("the expression is empty")
    if len(text) > MAX_LENGTH:
        raise ExpressionError(
            f"expression is {len(text)} characters long; the limit is {MAX_LENGTH}"
        )
    depths = list(accumulate({"(": 1, ")": -1}.get(char, 0) for char in text))
    if min(depths) < 0 or depths[-1]:
        raise ExpressionError(f"expression {text!r} does not parse: parentheses do not balance")
    bad = _BAD_CHAR_RE.search(text)
    if bad:
        raise ExpressionError(
            f"expression {text!r} contains {bad.group()!r}, which is not allowed: use numbers, "
            "variables, units, + - * / ** ^, parentheses and ceil/floor/min/max/sqrt/log2/round"
        )
    if re.search(r"(?<!\w)__", text):
        raise ExpressionError(f"expression {text!r} uses a name starting with '__'; none exist")
    return text.replace("$", " USD ")


def _tokens(text: str) -> list[TokenInfo]:
    """pint's tokens for ``text``, keeping only numbers, names and arithmetic operators."""
    try:
        tokens = list(pint_eval.tokenizer(text.replace("^", "**")))
    except Exception as exc:
        raise ExpressionError(f"expression {text!r} does not parse: {exc}") from None
    for previous, token in zip([None, *tokens], tokens, strict=False):
        bad_op = token.type == OP and token.string not in _ALLOWED_OPS
        if bad_op or token.type not in _ALLOWED_TOKENS:
            raise ExpressionError(
                f"expression {text!r} does not parse: unexpected {token.string!r}"
            )
        if token.type == NUMBER and previous and previous.type == NUMBER:
            raise ExpressionError(f"expression {text!r} does not parse: two numbers in a row")
    return tokens


def _unknown_name(name: str, values: Mapping[str, Quantity], texts: set[str]) -> ExpressionError:
    if name in texts:
        return ExpressionError(f"variable {name!r} is text for prompts; it cannot be calculated")
    variables = [v for v in values if not v.startswith("__")]
    close = difflib.get_close_matches(name, variables, n=1)
    if close:
        return ExpressionError(f"unknown variable {name!r} — did you mean {close[0]!r}?")
    close = difflib.get_close_matches(name, _COMMON_UNITS, n=1)
    if close:
        return ExpressionError(f"unknown unit or variable {name!r} — did you mean {close[0]!r}?")
    known = f" (variables: {', '.join(sorted(variables))})" if variables else ""
    return ExpressionError(f"unknown name {name!r}: it is neither a variable nor a unit{known}")


def _power(base: Quantity, exponent: Quantity) -> Quantity:
    if not exponent.dimensionless:
        raise ExpressionError(
            f"an exponent must be a plain number, got {format_quantity(exponent)}"
        )
    value = float(exponent.to(UREG.dimensionless).magnitude)
    if not abs(value) <= MAX_EXPONENT:
        raise ExpressionError(f"exponent {value:g} is too large (the limit is {MAX_EXPONENT})")
    return _finite(base**value, "a power in the expression")


def _additive(op: Callable[[Quantity, Quantity], Quantity], word: str) -> Callable:
    def apply(left: Quantity, right: Quantity) -> Quantity:
        try:
            return op(left, right)
        except pint.DimensionalityError:
            raise ExpressionError(
                f"cannot {word} {format_quantity(left)} ({describe_dimension(left)}) and "
                f"{format_quantity(right)} ({describe_dimension(right)}): the units do not match"
            ) from None

    return apply


_BINARY = {
    "**": _power,
    "*": lambda a, b: a * b,
    "": lambda a, b: a * b,
    "/": lambda a, b: a / b,
    "+": _additive(lambda a, b: a + b, "add"),
    "-": _additive(lambda a, b: a - b, "subtract"),
}
_UNARY = {"+": lambda a: a, "-": lambda a: -a}


_SYNTAX_BINARY = {op: lambda a, b: 1.0 for op in _BINARY}
_SYNTAX_UNARY = {op: lambda a: 1.0 for op in _UNARY}


def _syntax_tree(text: str, tokens: list[TokenInfo]) -> pint_eval.EvalTreeNode:
    """pint's evaluation tree, checked for syntax before any name is looked up."""
    try:
        tree = pint_eval.build_eval_tree(tokens, _OP_PRIORITY)
        tree.evaluate(lambda token: 1.0, _SYNTAX_BINARY, _SYNTAX_UNARY)
    except Exception as exc:
        reason = str(exc) or "an operator is missing an operand"
        raise ExpressionError(f"expression {text!r} does not parse: {reason}") from None
    return tree


def _eval_plain(text: str, values: Mapping[str, Quantity], texts: set[str]) -> Quantity:
    """Evaluate call-free ``text`` with pint's evaluation tree."""
    if not text.strip():
        raise ExpressionError("an expression or function argument is empty")
    if "," in text:
        raise ExpressionError(f"in {text!r}: commas may only separate arguments, as in min(a, b)")
    text = text.strip()
    tokens = _tokens(text)
    tree = _syntax_tree(text, tokens)

    def define(token: TokenInfo) -> Quantity:
        if token.type == NUMBER:
            try:
                return UREG.Quantity(float(token.string))
            except ValueError:
                raise ExpressionError(f"{token.string!r} is not a number") from None
        if token.string in values:
            return values[token.string]
        unit = _lookup_unit(token.string)
        if unit is None:
            raise _unknown_name(token.string, values, texts)
        return UREG.Quantity(1.0, unit)

    try:
        result = tree.evaluate(define, _BINARY, _UNARY)
    except ZeroDivisionError:
        raise ExpressionError(f"expression {text!r} divides by zero") from None
    if not isinstance(result, pint.Quantity):
        raise ExpressionError(f"expression {text!r} does not parse")
    return _finite(result, f"the value of {text!r}")


def _call_args(text: str, start: int) -> tuple[list[str], int]:
    """Split the call whose '(' is at ``start`` at its top-level commas; also its ')'."""
    args, depth, begin = [], 0, start + 1
    for index in range(start, len(text)):
        depth += {"(": 1, ")": -1}.get(text[index], 0)
        if depth == 1 and text[index] == ",":
            args.append(text[begin:index])
            begin = index + 1
        elif depth == 0:
            args.append(text[begin:index])
            return ([] if args == [""] or not "".join(args).strip() else args), index
    raise ExpressionError(f"expression {text!r} does not parse: a '(' is never closed")


def _last_call(text: str, values: Mapping[str, Quantity]) -> re.Match[str] | None:
    """The last-opened known function call (so it contains no other call)."""
    last = None
    for match in _CALL_RE.finditer(text):
        name = match.group(1)
        if name in _FUNCTIONS:
            last = match
        elif name not in values and _lookup_unit(name) is None:
            close = difflib.get_close_matches(name, list(_FUNCTIONS), n=1)
            hint = f" — did you mean {close[0]!r}?" if close else ""
            known = ", ".join(_FUNCTIONS)
            raise ExpressionError(f"unknown function {name!r}{hint} (functions: {known})")
    return last


def _apply_call(name: str, args: list[str], values: Mapping[str, Quantity], texts: set[str]):
    low, high, impl = _FUNCTIONS[name]
    if len(args) < low or (high is not None and len(args) > high):
        wanted = "exactly one argument" if high == low else "at least one argument"
        raise ExpressionError(f"{name}() takes {wanted}, got {len(args)}")
    return impl([_eval_plain(arg, values, texts) for arg in args])


def _evaluate_text(text: str, values: dict[str, Quantity], texts: set[str]) -> Quantity:
    counter = 0
    while (call := _last_call(text, values)) is not None:
        args, close = _call_args(text, call.end() - 1)
        result = _apply_call(call.group(1), args, values, texts)
        placeholder = f"__call{counter}__"
        counter += 1
        values[placeholder] = result
        text = f"{text[: call.start()]} {placeholder} {text[close + 1 :]}"
    return _eval_plain(text, values, texts)


def _split_variables(variables: Mapping[str, object]) -> tuple[dict[str, Quantity], set[str]]:
    values: dict[str, Quantity] = {}
    texts: set[str] = set()
    for name, value in variables.items():
        if isinstance(value, str):
            texts.add(name)
        elif isinstance(value, int | float | pint.Quantity) and not isinstance(value, bool):
            values[name] = _quantity(value)
    return values, texts


def evaluate(expression: str, variables: Mapping[str, object]) -> Quantity:
    """Evaluate ``expression`` with ``variables`` (numbers or Quantities; text is ignored).

    Variables shadow unit names. Always returns a float Quantity with reduced units
    (dimensionless for plain numbers); raises ExpressionError for anything wrong.
    """
    text = _prepare(expression)
    values, texts = _split_variables(variables)
    try:
        return _evaluate_text(text, values, texts).to_reduced_units()
    except ExpressionError:
        raise
    except ZeroDivisionError:
        raise ExpressionError(f"expression {expression!r} divides by zero") from None
    except Exception as exc:
        raise ExpressionError(f"expression {expression!r} could not be evaluated: {exc}") from None


def names_used(expression: str) -> set[str]:
    """The variable-like identifiers ``expression`` references (no units, no functions)."""
    tokens = _tokens(_prepare(expression).replace(",", " "))
    return {
        t.string
        for t in tokens
        if t.type == NAME and t.string not in _FUNCTIONS and _lookup_unit(t.string) is None
    }


def check_name(name: str) -> None:
    """Reject a parameter/step name that is not an identifier or collides with a unit."""
    if not isinstance(name, str) or not _NAME_RE.fullmatch(name):
        raise ExpressionError(
            f"{name!r} is not a valid name: use letters, digits and underscores, starting "
            "with a letter"
        )
    if name in _FUNCTIONS:
        raise ExpressionError(f"the name {name!r} is reserved in expressions; choose another")
    unit = _lookup_unit(name)
    if unit is not None:
        raise ExpressionError(
            f"the name {name!r} is already a unit ({unit}); choose another, e.g. '{name}_value'"
        )


def evaluate_condition(condition: str, variables: Mapping[str, object]) -> bool:
    """Evaluate ``"<expr> <op> <expr>"`` with exactly one of ``<, <=, >, >=``."""
    if not isinstance(condition, str):
        raise ExpressionError(f"a condition must be text, got {type(condition).__name__}")
    found = list(_COMPARISON_RE.finditer(condition))
    if len(found) != 1 or found[0].group() not in ("<", "<=", ">", ">="):
        ops = ", ".join(m.group() for m in found) or "none"
        raise ExpressionError(
            f"condition {condition!r} needs exactly one of <, <=, >, >= (found: {ops})"
        )
    op = found[0].group()
    left = evaluate(condition[: found[0].start()], variables)
    right = evaluate(condition[found[0].end() :], variables)
    try:
        a, b = float(left.magnitude), float(right.to(left.units).magnitude)
    except pint.DimensionalityError:
        raise ExpressionError(
            f"condition {condition!r} compares {format_quantity(left)} "
            f"({describe_dimension(left)}, unit {left.units:~P}) with {format_quantity(right)} "
            f"({describe_dimension(right)}, unit {right.units:~P}); the units are incompatible"
        ) from None
    if math.isclose(a, b, rel_tol=1e-12, abs_tol=0.0):
        return op in ("<=", ">=")
    return a < b if op in ("<", "<=") else a > b


def parse_unit(text: str | Unit) -> Unit:
    """Parse a unit such as ``"GiB"``, ``"token/s"`` or ``"USD/hour"`` ("" = dimensionless)."""
    if isinstance(text, pint.Unit):
        return UREG.Unit(text)
    if not isinstance(text, str):
        raise ExpressionError(f"a unit must be text, got {type(text).__name__}")
    return _parse_unit_text(text)


@functools.lru_cache(maxsize=1024)
def _parse_unit_text(text: str) -> Unit:
    cleaned = " ".join(text.replace("$", " USD ").split())
    if cleaned in ("", "1", "dimensionless"):
        return UREG.dimensionless
    if _BAD_CHAR_RE.search(cleaned) or "," in cleaned or len(cleaned) > MAX_LENGTH:
        raise ExpressionError(f"unit {text!r} does not parse")
    try:
        return UREG.parse_units(cleaned)
    except pint.UndefinedUnitError as exc:
        name = exc.unit_names if isinstance(exc.unit_names, str) else exc.unit_names[0]
        close = difflib.get_close_matches(name, _COMMON_UNITS, n=1)
        hint = f" — did you mean {close[0]!r}?" if close else ""
        raise ExpressionError(f"unknown unit {name!r} in {text!r}{hint}") from None
    except Exception as exc:
        raise ExpressionError(f"unit {text!r} does not parse: {exc}") from None


def _dimensionality(thing: Quantity | Unit | str) -> object:
    if isinstance(thing, str):
        thing = parse_unit(thing)
    return thing.dimensionality


_DIMENSION_WORDS = [
    (_dimensionality(UREG.parse_units(unit)), word)
    for unit, word in (
        ("B", "a memory size"),
        ("B/s", "a rate of data (bandwidth)"),
        ("s", "a duration"),
        ("token/s", "a token rate"),
        ("token", "a number of tokens"),
        ("FLOP/s", "a compute rate"),
        ("FLOP", "an amount of compute"),
        ("USD", "a price"),
        ("USD/s", "a cost rate"),
        ("USD/token", "a price per token"),
        ("B/token", "a memory size per token"),
        ("FLOP/token", "an amount of compute per token"),
        ("W", "a power"),
        ("request", "a number of requests"),
        ("request/s", "a request rate"),
    )
] + [(UREG.dimensionless.dimensionality, "a plain number")]


def describe_dimension(unit_or_quantity: Quantity | Unit | str) -> str:
    """A human phrase for the dimension, e.g. "a memory size" or "a token rate"."""
    dims = _dimensionality(unit_or_quantity)
    for known, word in _DIMENSION_WORDS:
        if dims == known:
            return word
    return str(dims)


def same_dimension(q: Quantity | Unit, unit: str | Unit) -> bool:
    """Whether ``q`` can be expressed in ``unit``."""
    return _dimensionality(q) == _dimensionality(parse_unit(unit))


def to_magnitude(q: Quantity, unit: str) -> float:
    """The magnitude of ``q`` in ``unit`` (the step's answer unit)."""
    target = parse_unit(unit)
    try:
        return float(_quantity(q).to(target).magnitude)
    except pint.DimensionalityError:
        raise ExpressionError(
            f"this step asks for {describe_dimension(target)} ({unit}); "
            f"{format_quantity(q)} is {describe_dimension(q)}"
        ) from None


def _format_number(value: float, sig: int) -> str:
    if value == 0 or not math.isfinite(value):
        return "0" if value == 0 else str(value)
    size = abs(value)
    if 1e-4 <= size < 1e15:
        if size >= 10 ** (sig - 1):
            return f"{round(value):,}"
        return f"{value:.{sig}g}"
    mantissa, exponent = f"{value:.{sig - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def format_quantity(q: Quantity | float, unit: str | Unit | None = None, sig: int = 4) -> str:
    """Human text such as "327,680 B", "0.3125 MiB", "989 TFLOPS" or "3.2 USD/h"."""
    q = _quantity(q)
    if unit is not None:
        q = UREG.Quantity(to_magnitude(q, unit), parse_unit(unit))
    units = f"{q.units:~P}"
    number = _format_number(float(q.magnitude), max(1, sig))
    return f"{number} {units}" if units else number
