"""Tests for questions.expressions, the one unit-aware expression evaluator."""

from __future__ import annotations

import builtins
import contextlib
import math
import os
import time

import pint
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from questions.expressions import (
    UREG,
    ExpressionError,
    check_name,
    describe_dimension,
    evaluate,
    evaluate_condition,
    format_quantity,
    names_used,
    parse_unit,
    same_dimension,
    to_magnitude,
)

Q = UREG.Quantity

LLAMA_70B = {
    "layers": 80,
    "kv_heads": 8,
    "head_dim": 128,
    "bytes": Q(2, "B"),
    "model_name": "Llama-3-70B",
}


def ev(expression: str, **variables: object) -> pint.Quantity:
    variables.setdefault("x", 3)
    return evaluate(expression, variables)


def test_kv_cache_per_token_is_320_kib():
    q = evaluate("2 * layers * kv_heads * head_dim * bytes", LLAMA_70B)
    assert isinstance(q, pint.Quantity)
    assert q.units == UREG.Unit("B")
    assert q.magnitude == 327680
    assert to_magnitude(q, "KiB") == 320
    assert format_quantity(q) == "327,680 B"
    assert format_quantity(q, "MiB") == "0.3125 MiB"


def test_bandwidth_bound_decode_gives_tokens_per_second():
    variables = {"gpu_bw": Q(3350, "GB/s"), "weights": Q(140, "GB")}
    q = evaluate("gpu_bw / weights * token", variables)
    assert q.dimensionality == UREG.parse_units("token/s").dimensionality
    assert q.units == UREG.Unit("token/s")
    assert to_magnitude(q, "token/s") == pytest.approx(3350 / 140)


def test_mixed_units_are_reduced():
    q = ev("gpu_bw / weights * token", gpu_bw=Q(3.35, "TB/s"), weights=Q(130, "GiB"))
    assert q.units == UREG.Unit("token/s")
    assert q.magnitude == pytest.approx(3.35e12 / (130 * 2**30))


def test_plain_numbers_are_dimensionless_quantities():
    q = ev("2 + 3 * 4")
    assert isinstance(q, pint.Quantity)
    assert q.dimensionless
    assert q.magnitude == 14


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("1e3 * 2.5e-3", 2.5),
        ("2 ^ 10", 1024),
        ("2 ** 3 ** 2", 512),
        ("-(3 - 5)", 2),
        ("10 GB / 4 GB", 2.5),
        ("1 GB / 2 B / 5", 1e8),
        ("-2 B * 3", -6),
        ("2 ** 3 B", 8),
        ("2 B ** 2 / B", 2),
        ("x / 2 x", 0.5),
        ("(1 + 2) * (3 + 4)", 21),
        ("7 / 2", 3.5),
    ],
)
def test_arithmetic(expression, expected):
    assert ev(expression).magnitude == pytest.approx(expected)


@pytest.mark.parametrize(
    ("expression", "expected", "unit"),
    [
        ("ceil(7 / 2)", 4, ""),
        ("floor(7 / 2)", 3, ""),
        ("round(2.5)", 3, ""),
        ("round(2.4)", 2, ""),
        ("sqrt(16)", 4, ""),
        ("sqrt(4 GB ** 2)", 2, "GB"),
        ("log2(1024)", 10, ""),
        ("min(3, 1, 2)", 1, ""),
        ("max(3, 1, 2)", 3, ""),
        ("min(1 GiB, 1 GB)", 1e9 / 2**30, "GiB"),
        ("max(1 GB, 1 GiB)", 2**30 / 1e9, "GB"),
        ("ceil(10 GB / 3 GiB)", 4, ""),
        ("ceil(max(3, 4.5) * 2) + min(1, floor(2.7))", 10, ""),
        ("2 * ceil((1 + 2) / 2)", 4, ""),
        ("max(min(1 s, 2 s), 500 ms)", 1, "s"),
    ],
)
def test_functions(expression, expected, unit):
    q = ev(expression)
    assert q.units == parse_unit(unit)
    assert q.magnitude == pytest.approx(expected)


@pytest.mark.parametrize("fn", ["ceil", "floor", "round", "log2"])
def test_rounding_and_log_need_dimensionless_arguments(fn):
    with pytest.raises(
        ExpressionError, match=rf"{fn}\(\) needs a dimensionless argument, got 3 GB"
    ):
        ev(f"{fn}(3 GB)")


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("min(1 GB, 2 s)", r"min\(\) needs arguments of the same kind.*memory size.*duration"),
        ("max(1 token, 2 B)", r"max\(\) needs arguments of the same kind"),
        ("sqrt(-4)", r"sqrt\(\) needs a non-negative argument"),
        ("log2(0)", r"log2\(\) needs a positive argument"),
        ("ceil(1, 2)", r"ceil\(\) takes exactly one argument, got 2"),
        ("ceil()", r"ceil\(\) takes exactly one argument, got 0"),
        ("min()", r"min\(\) takes at least one argument, got 0"),
        ("min(1, )", r"empty"),
        ("cel(3)", r"unknown function 'cel' — did you mean 'ceil'\?"),
        ("1, 2", r"commas may only separate arguments"),
        ("2 B + 3 s", r"cannot add 2 B \(a memory size\) and 3 s \(a duration\)"),
        ("1 GB - 1", r"cannot subtract"),
        ("2 ** (3 s)", r"exponent must be a plain number"),
        ("1 / 0", r"divides by zero"),
        ("10 ** 10 ** 10", r"too large"),
        ("1e308 * 10", r"not a finite"),
    ],
)
def test_evaluation_errors(expression, message):
    with pytest.raises(ExpressionError, match=message):
        ev(expression)


def test_unknown_variable_suggests_the_closest_name():
    with pytest.raises(ExpressionError) as info:
        evaluate("2 * model_kv_head", {"model_kv_heads": 8, "model_layers": 80})
    assert str(info.value) == "unknown variable 'model_kv_head' — did you mean 'model_kv_heads'?"


def test_unknown_name_without_a_close_match_lists_the_variables():
    with pytest.raises(ExpressionError, match=r"unknown name 'zzz'.*variables: layers"):
        evaluate("zzz * 2", {"layers": 80})


def test_text_variables_are_for_prompts_only():
    with pytest.raises(ExpressionError, match="'model_name' is text"):
        evaluate("model_name * 2", LLAMA_70B)


@pytest.mark.parametrize("expression", ["x +* 2", "2 +", "* 3", "(1 + 2", "1 + 2)", "2..3"])
def test_malformed_expression_says_it_does_not_parse(expression):
    with pytest.raises(ExpressionError, match="does not parse") as info:
        evaluate(expression, {"x": 1})
    assert repr(expression.strip()) in str(info.value) or "parentheses" in str(info.value)


def test_malformed_expression_names_the_expression():
    with pytest.raises(ExpressionError, match=r"expression 'x \+\* 2' does not parse: "):
        evaluate("x +* 2", {"x": 1})


def test_placeholder_names_cannot_be_referenced():
    with pytest.raises(ExpressionError, match="starting with '__'"):
        ev("ceil(2) + __call0__")


def test_implicit_multiplication_binds_tighter_than_division():
    assert ev("10 GB / 2 GiB").to("").magnitude == pytest.approx(10e9 / (2 * 2**30))
    assert ev("gpu_bw / 2 B", gpu_bw=Q(4, "GB/s")).to("1/s").magnitude == pytest.approx(2e9)


def test_empty_and_non_text_expressions():
    for bad in ("", "   ", None, 3):
        with pytest.raises(ExpressionError):
            evaluate(bad, {})  # type: ignore[arg-type]


def test_condition_true_false_and_boundaries():
    v = {"params": 7.055e10, "dtype_bytes": Q(2, "B"), "gpu_memory": Q(80, "GB"), "tp": 2}
    assert evaluate_condition("params * dtype_bytes <= gpu_memory * tp", v) is True
    assert evaluate_condition("params * dtype_bytes <= gpu_memory", v) is False
    assert evaluate_condition("params * dtype_bytes > gpu_memory", v) is True
    assert evaluate_condition("1 GB >= 1e9 B", {}) is True
    assert evaluate_condition("1 GB <= 1e9 B", {}) is True
    assert evaluate_condition("1 GB < 1e9 B", {}) is False
    assert evaluate_condition("1 GiB > 1 GB", {}) is True


def test_condition_with_incompatible_dimensions_names_both_units():
    with pytest.raises(ExpressionError) as info:
        evaluate_condition("weights < 2 s", {"weights": Q(140, "GB")})
    message = str(info.value)
    assert "GB" in message and "s" in message
    assert "a memory size" in message and "a duration" in message


@pytest.mark.parametrize("condition", ["1 < 2 < 3", "1 == 1", "1 = 1", "1 != 2", "1 + 2", ""])
def test_condition_needs_exactly_one_comparison(condition):
    with pytest.raises(ExpressionError, match="exactly one of"):
        evaluate_condition(condition, {})


def test_names_used():
    expression = "ceil(2 * model_layers * x) / GB + min(kv_bytes, step_one) * token / s"
    assert names_used(expression) == {"model_layers", "x", "kv_bytes", "step_one"}
    assert names_used("2 * 3 GiB + 1e5") == set()
    with pytest.raises(ExpressionError):
        names_used("a ? b")


@pytest.mark.parametrize("name", ["s", "B", "h", "bytes", "token", "GB", "ms", "k", "min", "max"])
def test_check_name_rejects_units_and_reserved_words(name):
    with pytest.raises(ExpressionError, match=repr(name)):
        check_name(name)


def test_check_name_explains_a_unit_clash():
    with pytest.raises(ExpressionError, match=r"'s' is already a unit \(second\)"):
        check_name("s")


@pytest.mark.parametrize("name", ["1x", "kv-bytes", "", "__import__", "a b", "µ"])
def test_check_name_rejects_non_identifiers(name):
    with pytest.raises(ExpressionError, match="not a valid name"):
        check_name(name)


@pytest.mark.parametrize("name", ["model_kv_heads", "kv_per_token", "batch", "tp", "weights_bytes"])
def test_check_name_accepts_ordinary_names(name):
    check_name(name)


def test_gb_and_gib_differ_by_7_4_percent():
    ratio = ev("1 GiB / 1 GB").to("").magnitude
    assert ratio == pytest.approx(1.0737, abs=1e-4)
    assert (ratio - 1) * 100 == pytest.approx(7.37, abs=0.01)


@pytest.mark.parametrize(
    ("unit", "base_bits"),
    [
        ("B", 8),
        ("byte", 8),
        ("bytes", 8),
        ("KB", 8e3),
        ("kB", 8e3),
        ("MB", 8e6),
        ("GB", 8e9),
        ("TB", 8e12),
        ("KiB", 8 * 2**10),
        ("MiB", 8 * 2**20),
        ("GiB", 8 * 2**30),
        ("TiB", 8 * 2**40),
        ("b", 1),
        ("bit", 1),
        ("Gb", 1e9),
    ],
)
def test_information_units(unit, base_bits):
    q = Q(1, parse_unit(unit))
    assert describe_dimension(q) == "a memory size"
    assert q.to("bit").magnitude == pytest.approx(base_bits)


def test_b_is_byte_not_bel_and_gb_per_s_is_not_gilbert():
    assert UREG.get_name("B") == "byte"
    assert ev("100 Gb/s").to("GB/s").magnitude == pytest.approx(12.5)
    assert describe_dimension("Gb/s") == "a rate of data (bandwidth)"
    assert describe_dimension("TB/s") == "a rate of data (bandwidth)"


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("ms", 1e-3), ("us", 1e-6), ("µs", 1e-6), ("hour", 3600), ("h", 3600), ("s", 1)],
)
def test_time_units(text, seconds):
    assert ev(f"1 {text}").to("s").magnitude == pytest.approx(seconds)


def test_power_units():
    assert ev("2 kW").to("W").magnitude == pytest.approx(2000)
    assert describe_dimension("kW") == "a power"


def test_compute_units():
    assert ev("1 TFLOPS").to("FLOP/s").magnitude == pytest.approx(1e12)
    assert ev("1 PFLOPS").to("TFLOPS").magnitude == pytest.approx(1e3)
    assert ev("1 TOPS").to("FLOP/s").magnitude == pytest.approx(1e12)
    assert ev("989 TFLOPS * 1 s").to("FLOP").magnitude == pytest.approx(989e12)
    assert format_quantity(Q(989e12, "FLOP/s"), "TFLOPS") == "989 TFLOPS"


def test_dollars():
    assert ev("$3/hour * 2 hour") == Q(6, "USD")
    assert ev("3 USD/hour * 2 hour").to("USD").magnitude == pytest.approx(6)
    assert ev("price * hour", price=Q(2.5, "USD/hour")).to("USD").magnitude == pytest.approx(2.5)
    assert ev("2 dollars").to("USD").magnitude == 2
    assert parse_unit("$/h") == parse_unit("USD/hour")
    assert describe_dimension("USD") == "a price"
    assert describe_dimension("USD/hour") == "a cost rate"
    assert format_quantity(Q(3.2, "USD/hour")) == "3.2 USD/h"


def test_tokens_and_requests():
    assert ev("2 tokens") == Q(2, "token")
    assert ev("3 requests / s").to("request/s").magnitude == 3


@pytest.mark.parametrize(
    ("unit", "word"),
    [
        ("GiB", "a memory size"),
        ("GB/s", "a rate of data (bandwidth)"),
        ("ms", "a duration"),
        ("token/s", "a token rate"),
        ("token", "a number of tokens"),
        ("TFLOPS", "a compute rate"),
        ("FLOP", "an amount of compute"),
        ("USD", "a price"),
        ("USD/hour", "a cost rate"),
        ("W", "a power"),
        ("KiB/token", "a memory size per token"),
        ("", "a plain number"),
    ],
)
def test_describe_dimension(unit, word):
    assert describe_dimension(unit) == word
    assert describe_dimension(parse_unit(unit)) == word
    assert describe_dimension(Q(3, parse_unit(unit))) == word


def test_describe_dimension_falls_back_to_pint():
    assert describe_dimension("m**2") == "[length] ** 2"


def test_parse_unit_and_same_dimension():
    assert parse_unit("token/s") == UREG.Unit("token") / UREG.Unit("second")
    assert parse_unit("dimensionless") == UREG.dimensionless
    assert same_dimension(Q(1, "GB"), "GiB")
    assert same_dimension(Q(1, "GB/s"), parse_unit("TB/s"))
    assert not same_dimension(Q(1, "GB"), "GB/s")
    assert not same_dimension(Q(2), "B")


@pytest.mark.parametrize(
    ("text", "message"),
    [("GBs", r"unknown unit 'GBs'.*did you mean 'GB'"), ("2 B", "does not parse"), ("x(", ".")],
)
def test_parse_unit_errors(text, message):
    with pytest.raises(ExpressionError, match=message):
        parse_unit(text)


def test_to_magnitude_explains_a_dimension_mismatch():
    assert to_magnitude(Q(1, "GiB"), "MiB") == 1024
    with pytest.raises(ExpressionError) as info:
        to_magnitude(Q(5, "GB/s"), "GB")
    assert str(info.value) == (
        "this step asks for a memory size (GB); 5 GB/s is a rate of data (bandwidth)"
    )


@pytest.mark.parametrize(
    ("q", "unit", "text"),
    [
        (Q(327680, "B"), None, "327,680 B"),
        (Q(327680, "B"), "MiB", "0.3125 MiB"),
        (Q(1.25, "GiB"), None, "1.25 GiB"),
        (Q(0.045, "s"), "ms", "45 ms"),
        (Q(3.2, "USD/hour"), None, "3.2 USD/h"),
        (Q(7.055e10), None, "70,550,000,000"),
        (Q(1 / 3, "s"), None, "0.3333 s"),
        (Q(12345.678, "token"), None, "12,346 token"),
        (Q(2.5e-7, "s"), None, "2.5e-7 s"),
        (Q(1.5e18, "FLOP"), None, "1.5e18 FLOP"),
        (Q(0), None, "0"),
        (80, None, "80"),
        (Q(327680.00000001, "B"), None, "327,680 B"),
    ],
)
def test_format_quantity(q, unit, text):
    assert format_quantity(q, unit) == text


def test_format_quantity_significant_digits():
    assert format_quantity(Q(1 / 3, "s"), sig=2) == "0.33 s"


def test_variables_from_another_registry_and_non_numeric_values_are_handled():
    other = pint.UnitRegistry()
    q = evaluate("x * 2", {"x": other.Quantity(3, "second"), "flag": None, "name": "text"})
    assert q == Q(6, "s")


INJECTIONS = [
    "__import__('os').system('x')",
    "__import__(os).system(x)",
    "().__class__",
    "().__class__.__bases__[0].__subclasses__()",
    "open('f')",
    "open(f)",
    "exec(x)",
    "eval(1)",
    "os.system(x)",
    "1; import os",
    "lambda: 1",
    "[x for x in ()]",
    "x.__dict__",
    "__builtins__",
    "getattr(1, real)",
    "1 if 1 else 2",
    "'a' * 10",
    "b'\\x00'",
    '"""x"""',
    "f'{1}'",
    "# comment",
    "x\n  y",
]


@pytest.mark.parametrize("expression", INJECTIONS)
def test_injection_attempts_raise_and_never_execute(expression, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(os, "system", lambda *a: calls.append("system"))
    monkeypatch.setattr(builtins, "eval", lambda *a, **k: calls.append("eval"))
    monkeypatch.setattr(builtins, "exec", lambda *a, **k: calls.append("exec"))
    monkeypatch.setattr(builtins, "open", lambda *a, **k: calls.append("open"))
    for run in (
        lambda: evaluate(expression, {"x": 1}),
        lambda: names_used(expression),
        lambda: evaluate_condition(f"{expression} < 1", {"x": 1}),
        lambda: parse_unit(expression),
    ):
        with contextlib.suppress(ExpressionError):
            run()
    assert calls == []
    with pytest.raises(ExpressionError):
        evaluate(expression, {"x": 1})


def test_pathological_inputs_are_fast():
    slow = [
        "layers ** layers ** layers",
        "(" * 200 + "1" + ")" * 200,
        "B " * 240,
        "9" * 400,
        "ceil(" * 80 + "1" + ")" * 80,
        "x" * 499,
        "1" + " * 2 ** 99" * 40,
    ]
    for expression in slow:
        start = time.perf_counter()
        with contextlib.suppress(ExpressionError):
            evaluate(expression, {"layers": 80})
        assert time.perf_counter() - start < 2, expression
    with pytest.raises(ExpressionError, match="limit is 500"):
        evaluate("1 + " * 200, {})


EXPRESSION_ALPHABET = "0123456789.+-*/^(),$ eE_xyzabBGKMiTsmhnWtokenceilfrdmaxqptlog2µ<=>"
JUNK = st.one_of(
    st.text(max_size=80),
    st.text(alphabet=EXPRESSION_ALPHABET, max_size=60),
    st.lists(
        st.sampled_from(
            [
                "ceil(",
                "min(",
                "max(",
                "sqrt(",
                "log2(",
                "round(",
                "floor(",
                ")",
                "(",
                ",",
                "x",
                "GB",
                "GiB",
                "s",
                "token",
                "2",
                "1e3",
                "-",
                "+",
                "*",
                "/",
                "**",
                "^",
                " ",
                "$",
                "USD",
                "hour",
                "TFLOPS",
                "0",
                "B",
                "__call0__",
                ".",
            ]
        ),
        max_size=25,
    ).map("".join),
)
HYPOTHESIS_SETTINGS = settings(
    max_examples=400, deadline=2000, suppress_health_check=[HealthCheck.too_slow]
)


@HYPOTHESIS_SETTINGS
@given(JUNK)
def test_junk_raises_only_expression_error(text):
    try:
        q = evaluate(text, {"x": 3, "y": Q(2, "GB")})
    except ExpressionError:
        return
    assert isinstance(q, pint.Quantity)
    assert math.isfinite(q.magnitude)


@HYPOTHESIS_SETTINGS
@given(JUNK)
def test_junk_in_the_other_entry_points_raises_only_expression_error(text):
    for run in (
        lambda: names_used(text),
        lambda: evaluate_condition(text, {"x": 3}),
        lambda: parse_unit(text),
        lambda: check_name(text),
    ):
        with contextlib.suppress(ExpressionError):
            run()


@settings(max_examples=200, deadline=2000)
@given(
    st.integers(min_value=1, max_value=200),
    st.integers(min_value=1, max_value=128),
    st.integers(min_value=16, max_value=256),
    st.sampled_from([0.5, 1, 2, 4]),
)
def test_kv_cache_matches_plain_arithmetic(layers, kv_heads, head_dim, nbytes):
    variables = {"layers": layers, "kv_heads": kv_heads, "head_dim": head_dim}
    variables["dtype_bytes"] = Q(nbytes, "B")
    q = evaluate("2 * layers * kv_heads * head_dim * dtype_bytes", variables)
    assert to_magnitude(q, "B") == pytest.approx(2 * layers * kv_heads * head_dim * nbytes)
    assert to_magnitude(q, "KiB") == pytest.approx(2 * layers * kv_heads * head_dim * nbytes / 1024)


@settings(max_examples=200, deadline=2000)
@given(st.floats(min_value=-1e6, max_value=1e6, allow_nan=False), st.floats(1e-3, 1e6))
def test_functions_agree_with_math(a, b):
    v = {"a": a, "b": b}
    assert evaluate("ceil(a)", v).magnitude == math.ceil(a)
    assert evaluate("floor(a)", v).magnitude == math.floor(a)
    assert evaluate("min(a, b)", v).magnitude == min(a, b)
    assert evaluate("max(a, b)", v).magnitude == max(a, b)
    assert evaluate("sqrt(b)", v).magnitude == pytest.approx(math.sqrt(b))
    assert evaluate("log2(b)", v).magnitude == pytest.approx(math.log2(b))


# --- the words people type (issue 18): defined as pint units, not as a learner-only pass ---


@pytest.mark.parametrize(
    ("text", "unit", "expected"),
    [
        ("1200 tok/s", "token/s", 1200),  # tok is an alias of token
        ("1.2 ktok/s", "token/s", 1200),  # ... and takes SI prefixes
        ("1.2 USD/Mtok", "USD/token", 1.2e-6),
        ("1.2 USD/Mtoken", "USD/token", 1.2e-6),
        ("150 req/s", "request/s", 150),
        ("52 reqs", "request", 52),
        ("52 GPU", "", 52),  # counts are plain numbers, like pint's own `count`
        ("2.5 USD / GPU / hour", "USD/hour", 2.5),
        ("40 sequence", "", 40),
        ("30 token/s/seq", "token/s", 30),
        ("1.2 USD / million token", "USD/token", 1.2e-6),
        ("1.5 thousand", "", 1500),
        ("2 billion", "", 2e9),
    ],
)
def test_count_rate_and_price_words_are_units(text, unit, expected):
    assert to_magnitude(evaluate(text, {}), unit) == pytest.approx(expected)


def test_step_units_may_use_the_new_words():
    assert same_dimension(Q(1, "USD/token"), "USD/Mtok")
    assert to_magnitude(Q(1.2e-6, "USD/token"), "USD/Mtok") == pytest.approx(1.2)
    assert parse_unit("req/s") == parse_unit("request/s")


def test_x_is_not_a_unit_so_expressions_keep_using_it_as_a_variable():
    # A ratio's "x" ("3.5x") is read by the learner-input pass (trainer.grading.arithmetic),
    # never by the registry: a bank variable called x keeps working and is still a name used.
    with pytest.raises(ExpressionError, match="unknown name 'x'"):
        evaluate("3.5 x", {})
    assert evaluate("2 x", {"x": 3}).magnitude == 6
    assert names_used("x * GPU") == {"x"}
    check_name("x")


@pytest.mark.parametrize("name", ["GPU", "GPUs", "seq", "sequences", "tok", "req", "million"])
def test_the_new_words_are_reserved_as_names(name):
    with pytest.raises(ExpressionError, match="already a unit"):
        check_name(name)


@pytest.mark.parametrize("name", ["gpu", "gpus", "replicas", "pods", "users", "streams", "batch"])
def test_names_the_bank_uses_stay_free(name):
    check_name(name)  # case-sensitive GPU; count nouns such as replicas are not units


def test_no_name_the_bank_or_catalog_defines_reads_as_a_unit():
    from questions import catalog, problems
    from questions.bank import _problem_dict, read_bank

    for question in read_bank().questions:
        if question.problem is None:
            continue
        spec = problems.from_dict(_problem_dict(question.problem))
        names = {s.name for s in spec.steps} | set(spec.parameters)
        variant = problems.draw_variant(spec, 0)
        names |= set(variant.variables)
        for name in names:
            check_name(name)
    for kind in ("models", "gpus", "dtypes"):
        for slug in getattr(catalog.load_catalog(), kind):
            for name in catalog.variables(kind, slug, "p"):
                check_name(name)
