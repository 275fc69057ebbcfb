"""The labs' predictions use the bank's own expressions (verbatim), so the curve a lab
predicts is the arithmetic a learner is graded against; and they evaluate correctly."""

from __future__ import annotations

import math

import pytest

from lab.labs import formulas
from questions.bank import BANK_DIR

FROM_BANK = {
    "KV_BYTES_PER_TOKEN": "kv-cache-arithmetic.yaml",
    "SPEC_TOKENS_PER_STEP": "speculative-decoding.yaml",
    "SPEC_CYCLE_COST": "speculative-decoding.yaml",
    "SPEC_SPEEDUP": "speculative-decoding.yaml",
    "SLOT_UTILISATION": "continuous-batching.yaml",
    "STEP_ROOFLINE": "prefill-decode.yaml",
    "ATTN_SCORES_PER_HEAD": "flash-attention.yaml",
    "ATTN_SCORES_PER_LAYER": "flash-attention.yaml",
    "CONTIGUOUS_WASTE": "paged-attention.yaml",
    "PAGED_WASTE": "paged-attention.yaml",
}
# Lab-only formulas (the bank has no such step); each is checked numerically below.
LAB_ONLY = {
    "ATTN_TILE_PER_LAYER",
    "DECODE_STEP_FLOPS",
    "STEP_LOWER_BOUND",
    "PREFIX_HIT_TOKENS",
    "QUANT_WEIGHT_BYTES",
    "SPEC_CYCLE_COST_MEASURED",
}


def test_every_formula_is_accounted_for():
    names = {n for n in dir(formulas) if n.isupper() and isinstance(getattr(formulas, n), str)}
    assert names == set(FROM_BANK) | LAB_ONLY


@pytest.mark.parametrize("name", sorted(FROM_BANK))
def test_the_formula_is_the_banks_expression_verbatim(name):
    text = (BANK_DIR / FROM_BANK[name]).read_text()
    assert f"expression: {getattr(formulas, name)}\n" in text


def test_values():
    # Llama-3-8B: 32 layers, 8 KV heads, head_dim 128, bf16 -> 131,072 B per token.
    assert formulas.kv_bytes_per_token(32, 8, 128, 2) == 131_072
    assert formulas.spec_tokens_per_step(0.8, 4) == pytest.approx((1 - 0.8**5) / 0.2)
    assert formulas.spec_tokens_per_step(1.0, 4) == 5
    assert formulas.spec_speedup(0.8, 4, 0.05) == pytest.approx((1 - 0.8**5) / 0.2 / 1.2)
    # the measured verify pass: the bank's cycle with its "+ 1" replaced by the pass's cost
    assert formulas.SPEC_CYCLE_COST_MEASURED.replace("verify_cost", "1") == formulas.SPEC_CYCLE_COST
    assert formulas.spec_speedup(0.8, 4, 0.05, 1.6) == pytest.approx((1 - 0.8**5) / 0.2 / 1.8)
    assert formulas.prefix_hit_tokens(100, 300, 16) == 96
    assert formulas.prefix_hit_tokens(100, 100, 16) == 96  # the last token is recomputed
    assert formulas.prefix_hit_tokens(96, 97, 16) == 96
    assert formulas.attention_scores_bytes(4096, 32, 2) == 4096**2 * 2 * 32
    assert formulas.attention_tile_bytes(4096, 128, 32, 2) == 4096 * 128 * 2 * 32
    assert formulas.quant_weight_bytes(1000, 4, 1000 // 64 * 2, 10, 2) == pytest.approx(
        500 + 30 * 2 + 20
    )
    assert formulas.slot_utilisation(300, 4, 100) == 0.75
    assert formulas.paged_waste(90, 96) == pytest.approx(1 / 16)
    assert formulas.contiguous_waste(128, 512) == 0.75
    roof = formulas.step_roofline_ms(1_000_000, 4, 40e9, 50e9, 1)
    assert roof == pytest.approx(max(4e6 / 40e9, 2e6 / 50e9) * 1e3)
    assert formulas.step_roofline_ms(1_000_000, 4, 40e9, 50e9, 64) == pytest.approx(
        2e6 * 64 / 50e9 * 1e3
    )
    flops = formulas.decode_step_flops(100, 10, 2, 4, 8, 3, 50)
    assert math.isclose(flops, 2 * 100 * 3 + 2 * 10 + 4 * 2 * 4 * 8 * 50)
    rows = formulas.decode_step_flops(100, 10, 2, 4, 8, 3, 50, sampled_rows=3)
    assert math.isclose(rows, flops + 2 * 10 * 2)  # the LM head once per sampled row
    assert formulas.step_lower_bound_ms(4e6, 40e9, 1e9, 50e9) == pytest.approx(20.0)
    assert formulas.step_lower_bound_ms(4e6, 40e9, 1e3, 50e9) == pytest.approx(0.1)
