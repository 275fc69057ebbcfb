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
