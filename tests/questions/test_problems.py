"""Variants, the step chain (with learner overrides) and prompt filling."""

from __future__ import annotations

from bankfiles import topic_data

from questions import problems
from questions.expressions import UREG


def sample_problem() -> problems.Problem:
    return problems.from_dict(topic_data()["questions"][1]["problem"])


def test_the_same_seed_draws_the_same_variant():
    problem = sample_problem()
    assert problems.draw_variant(problem, 7).choices == problems.draw_variant(problem, 7).choices
    seen = {tuple(problems.draw_variant(problem, s).choices.values()) for s in range(40)}
    assert len(seen) == 4  # 2 models x 1 dtype x 2 contexts


def test_only_variants_meeting_the_condition_are_served():
    data = topic_data()["questions"][1]["problem"]
    data["condition"] = "context >= 8192 token"
    problem = problems.from_dict(data)
    assert {problems.draw_variant(problem, s).choices["context"] for s in range(30)} == {8192}


def test_solve_gives_the_catalog_figures():
    problem = sample_problem()
    variables = problems.variables_for(
        problem, {"model": "llama-3-70b", "dtype": "bf16", "context": 8192}
    )
    values = problems.solve(problem, variables)
    assert values["kv_per_token"].to("B").magnitude == 327_680
    assert values["kv_per_seq"].to("GiB").magnitude == 2.5


def test_overrides_recompute_every_later_step():
    problem = sample_problem()
    variables = problems.variables_for(
        problem, {"model": "llama-3-70b", "dtype": "bf16", "context": 4096}
    )
    wrong_step_1 = UREG.Quantity(160, "KiB")  # a learner who forgot the x2
    values = problems.solve(problem, variables, overrides={"kv_per_token": wrong_step_1})
    assert values["kv_per_token"] == wrong_step_1
    assert values["kv_per_seq"].to("GiB").magnitude == 0.625


def test_prompts_read_naturally():
    c = UREG.Quantity(8192, "token")
    scope = {"model_name": "Llama-3-70B", "context": c, "kv": UREG.Quantity(327680, "B")}
    assert (
        problems.render_text("{model_name} at {context}.", scope) == "Llama-3-70B at 8,192 tokens."
    )
    assert problems.render_text("{context} tokens", scope) == "8,192 tokens"
    assert problems.render_text("{context} requests", scope) == "8,192-token requests"
    assert problems.render_text("a {context}-token prompt", scope) == "a 8,192-token prompt"
    assert (
        problems.render_text("{kv} per token, {unknown}", scope) == "327,680 B per token, {unknown}"
    )
    rates = {"rate": UREG.Quantity(10, "request/s"), "one": UREG.Quantity(1, "request/s")}
    assert problems.render_text("**{rate}** at peak", rates) == "**10 requests/s** at peak"
    assert problems.render_text("{one}", rates) == "1 request/s"


# --- integer steps (issue 18) ------------------------------------------------------------


def count_problem(integer: str) -> problems.Problem:
    return problems.from_dict(
        {
            "parameters": {
                "pool": {"value": 527, "unit": "GB"},
                "per": {"value": 10, "unit": "GB"},
            },
            "steps": [
                {
                    "name": "fits",
                    "prompt": "How many?",
                    "expression": "pool / per",
                    "unit": "",
                    "integer": integer,
                    "misconceptions": [{"expression": "pool / (per / 2)", "feedback": "K or V"}],
                },
                {"name": "spare", "prompt": "p", "expression": "pool - fits * per", "unit": "GB"},
            ],
        }
    )


def test_an_integer_step_rounds_its_reference_and_later_steps_use_the_rounded_value():
    variables = {"pool": UREG.Quantity(527, "GB"), "per": UREG.Quantity(10, "GB")}
    floor = problems.solve(count_problem("floor"), variables)
    assert floor["fits"].magnitude == 52 and floor["spare"].to("GB").magnitude == 7
    assert problems.solve(count_problem("ceil"), variables)["fits"].magnitude == 53
    assert problems.solve(count_problem("round"), variables)["fits"].magnitude == 53
    plain = problems.from_dict(
        {
            "parameters": dict(count_problem("floor").parameters),
            "steps": [{"name": "fits", "prompt": "p", "expression": "pool / per", "unit": ""}],
        }
    )
    assert problems.solve(plain, variables)["fits"].magnitude == 52.7


def test_misconception_values_are_rounded_like_the_step():
    step = count_problem("floor").steps[0]
    scope = {"pool": UREG.Quantity(527, "GB"), "per": UREG.Quantity(10, "GB")}
    [(_, wrong)] = problems.misconception_values(step, scope)
    assert wrong.magnitude == 105  # floor(105.4): the learner who halves also rounds down


def test_round_whole_forgives_float_noise_and_rounds_halves_up():
    assert problems.round_whole(51.99999999997, "floor") == 52
    assert problems.round_whole(52.00000000003, "ceil") == 52
    assert problems.round_whole(52.5, "round") == 53
    assert problems.round_whole(-1.5, "round") == -1
    assert problems.round_whole(52.7, "floor") == 52 and problems.round_whole(52.1, "ceil") == 53


def test_from_dict_reads_integer_and_defaults_to_none():
    assert count_problem("ceil").steps[0].integer == "ceil"
    assert sample_problem().steps[0].integer == ""
