"""Numbers that respect assumptions (issue 29): an `expects` names the figures the prompt
leaves open (`assume:` with a range), and a stated value is right when some assumption in
range gives it. The reason names the assumption; a number outside every allowed value is
wrong with the range in its reason; GB and GiB stay apart; the bank loader refuses an
expected value that depends on a figure neither stated nor ranged."""

from __future__ import annotations

import pytest

from questions import rubric_points
from questions.bank_rubric import RubricPointIn, prompt_figures, unstated_figures
from trainer.grading.rubric import Point, grade, numbers
from trainer.grading.rubric.numbers import Status

SCOPE = {"ngpu": 8, "gpu_memory": rubric_points.evaluate("80 GB", {}), "model_params": 70.55e9}
HEADROOM = {"headroom": {"value": 0.9, "range": [0.85, 1.0], "what": "usable share of GPU memory"}}
KV_BUDGET = {
    "expr": "headroom * ngpu * gpu_memory - model_params * 2 B",
    "unit": "GB",
    "tol": "5%",
    "label": "KV budget",
    "assume": HEADROOM,
}


def expect(spec, scope=SCOPE):
    return numbers.parse_expect(rubric_points.resolve_number(spec, scope))


def check(text, e):
    return numbers.check(numbers.stated_numbers(text), [e])


def test_a_range_resolves_to_its_lowest_and_highest_value():
    r = rubric_points.resolve_number(KV_BUDGET, SCOPE)
    assert r["value"] == pytest.approx(0.9 * 640e9 / 1e9 - 141.1)  # the question's own
    assert r["low"] == pytest.approx(0.85 * 640 - 141.1) and r["high"] == pytest.approx(640 - 141.1)
    assert r["assume"][0]["what"] == "usable share of GPU memory"


@pytest.mark.parametrize(
    "text",
    [
        "KV budget: 640 GB minus 141 GB of weights is 499 GB",  # all memory usable
        "with 10% headroom, 576 - 141 = 435 GB for KV",  # the question's own
        "at gpu_memory_utilization 0.95: 608 - 141 = 467 GB for KV",  # vLLM users' choice
        "keeping 15% back, about 403 GB of KV",
    ],
)
def test_every_headroom_in_range_is_accepted(text):
    assert check(text, expect(KV_BUDGET))[0] is Status.OK


def test_the_reason_names_the_assumption_when_another_value_was_used():
    status, reason = check("all 640 GB usable leaves 499 GB for KV", expect(KV_BUDGET))
    assert status is Status.OK
    assert "usable share of GPU memory 0.85–1" in reason and "435 GB" in reason


def test_a_value_no_assumption_gives_is_wrong_and_the_reason_gives_the_range():
    status, reason = check("that leaves 250 GB for the KV cache", expect(KV_BUDGET))
    assert status is Status.WRONG
    assert "403–499 GB" in reason and "usable share of GPU memory 0.85–1" in reason


MFU = {"mfu": {"value": 0.5, "range": [0.35, 0.6], "what": "MFU"}}
PREFILL = {
    "expr": "2 * 70.55e9 * 100000 FLOP / (mfu * 4 * 989e12 FLOP/s)",
    "unit": "s",
    "tol": "10%",
    "assume": MFU,
}


@pytest.mark.parametrize("seconds,ok", [(6.0, True), (7.1, True), (10.0, True), (3.0, False)])
def test_mfu_in_range(seconds, ok):
    status, _ = check(f"the prefill takes about {seconds} s", expect(PREFILL, {}))
    assert (status is Status.OK) is ok


PCIE = {
    "expr": "(810 GB - 576 GB) / pcie",
    "unit": "s",
    "tol": "10%",
    "assume": {"pcie": {"value": 55, "range": [25, 64], "unit": "GB/s", "what": "achieved PCIe"}},
}


def test_achieved_bandwidth_in_range_with_its_unit():
    e = expect(PCIE, {})
    assert e.low == pytest.approx(234 / 64) and e.high == pytest.approx(234 / 25)
    assert check("at ~50 GB/s achieved PCIe that is ~4.7 s per token", e)[0] is Status.OK
    assert check("about 2.2 s per token over PCIe", e)[0] is Status.WRONG


def test_gb_and_gib_stay_apart_at_the_ends_of_a_range():
    spec = {
        "expr": "share * 10 GiB",
        "unit": "GiB",
        "tol": "2%",
        "assume": {"share": {"value": 1.0, "range": [0.95, 1.0], "what": "share"}},
    }
    e = expect(spec, {})
    assert check("10 GiB per sequence", e)[0] is Status.OK
    assert check("10.7 GB per sequence", e)[0] is Status.OK  # the same bytes
    assert check("11.5 GB per sequence", e)[0] is Status.WRONG  # 10.7 GiB: above the range


def test_a_figure_the_question_gives_is_never_a_wrong_value():
    # "3.35 TB/s" restates the prompt: it names the GPU's bandwidth, not a wrong achieved one
    e = numbers.Expect(2.0, "TB/s", 0.1, "achieved bandwidth")
    given = numbers.stated_numbers("An H100 SXM has 3.35 TB/s of HBM bandwidth.")
    stated = numbers.stated_numbers("The H100's 3.35 TB/s is the ceiling here.")
    assert numbers.check(stated, [e], given)[0] is Status.NONE
    assert numbers.check(stated, [e])[0] is Status.WRONG


def test_the_grader_accepts_a_right_number_under_another_assumption_and_says_why():
    point = Point(
        "Subtracts the weights and a headroom from the node's memory to get the KV budget.",
        2,
        claims=("640 GB less headroom less 141 GB of weights leaves about 435 GB for KV.",),
        key_terms=("KV | budget", "weights | 141"),
        expects=(rubric_points.resolve_number(KV_BUDGET, SCOPE),),
    )
    result = grade("With all 640 GB usable, 640 - 141 GB of weights leaves 499 GB of KV.", [point])
    p = result.points[0]
    assert p.verdict == "hit" and "is accepted" in p.reason
    wrong = grade("That leaves about 250 GB for the KV budget after the weights.", [point])
    assert wrong.points[0].verdict == "contradicted" and "403–499 GB" in wrong.points[0].reason


def test_the_check_accepts_any_value_in_range():
    from trainer.check_specs import CheckSpec

    r = rubric_points.resolve_number(KV_BUDGET, SCOPE)
    spec = CheckSpec(
        "number",
        "KV budget?",
        value=r["value"],
        unit="GB",
        tol=r["tol"],
        low=r["low"],
        high=r["high"],
    )
    assert spec.accepts(499) and spec.accepts(435) and spec.accepts(403) and not spec.accepts(300)
    assert spec.expected_text == "402.9–498.9 GB ±5%"


def test_an_assumption_outside_its_own_range_is_refused():
    bad = dict(KV_BUDGET, assume={"headroom": {"value": 1.2, "range": [0.85, 1.0], "what": "x"}})
    with pytest.raises(Exception, match="outside its range"):
        rubric_points.resolve_number(bad, SCOPE)
    with pytest.raises(ValueError, match="outside its range"):
        RubricPointIn(text="t", expects=[bad])


def test_prompt_figures_read_as_authors_write_them():
    figures = prompt_figures("8K-token prompts, 10% headroom, 1 in 8 users, 20,000 req/day")
    assert {8000, 8192, 0.1, 0.9, 0.125, 20000} <= figures
    # a figure's reciprocal is not stated: "2 TB of DRAM" says nothing of an MFU of 0.5
    assert 0.5 not in prompt_figures("Each node has 2 TB of DRAM.")


def test_a_formula_constant_with_a_unit_is_a_figure():
    # 6 is the training FLOP factor in "6 * params", but "(6 ms)" is a step time
    spec = {"expr": "model_params * 2 B / (6 ms)", "unit": "TB/s"}
    errors = unstated_figures(point_in([spec]), "Eight H100s.", {})
    assert [m for _, m in errors if "depends on 6," in m]
    assert not [m for _, m in errors if "depends on 2," in m]  # 2 B: a BF16 value


def point_in(expects, check=None):
    return RubricPointIn(text="Computes the KV budget.", claims=["x"], expects=expects, check=check)


def test_the_loader_refuses_an_unranged_figure_and_accepts_it_stated_or_ranged():
    unranged = {"expr": "0.9 * ngpu * gpu_memory - model_params * 2 B", "unit": "GB"}
    errors = unstated_figures(point_in([unranged]), "Eight H100s serve Llama-3-70B.", {})
    assert len(errors) == 1
    path, message = errors[0]
    assert path == "expects[0]" and "depends on 0.9" in message and "assume:" in message
    # stated in the prompt (as 10% headroom): fine
    assert unstated_figures(point_in([unranged]), "Keep 10% headroom on each GPU.", {}) == []
    # given a range: fine
    ranged = {"expr": KV_BUDGET["expr"], "unit": "GB", "assume": HEADROOM}
    assert unstated_figures(point_in([ranged]), "Eight H100s serve Llama-3-70B.", {}) == []


def test_the_loader_refuses_a_fixed_variable_the_prompt_does_not_state():
    from questions.bank import ParameterIn

    variables = {"pcie": ParameterIn(value=63, unit="GB/s")}
    spec = {"expr": "model_params * 2 B / pcie", "unit": "s"}
    assert unstated_figures(point_in([spec]), "Offload to CPU memory.", variables)
    assert unstated_figures(point_in([spec]), "PCIe Gen5 gives about 63 GB/s.", variables) == []


def test_a_check_that_states_its_figure_is_exact():
    spec = {"expr": "0.9 * ngpu * gpu_memory", "unit": "GB"}
    check = {"ask": "With 10% headroom, how much memory is usable?", "number": spec}
    assert unstated_figures(point_in([], check), "Eight H100s.", {}) == []


def test_the_bank_loads_with_every_figure_stated_or_ranged():
    from questions.bank import read_bank

    errors = [str(e) for e in read_bank().errors]
    assert errors == []
