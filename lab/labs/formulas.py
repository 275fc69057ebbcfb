"""The arithmetic behind the labs' predicted curves, evaluated by the same evaluator
(`questions.expressions`, pint) and, where the bank has one, the same expression text
that grades a learner's whiteboard answer. tests/lab/test_lab_formulas.py holds each
expression equal to the bank's."""

from __future__ import annotations

from questions.expressions import evaluate

# kv-cache-arithmetic.yaml, step "kv bytes per token" (all layers, K and V).
KV_BYTES_PER_TOKEN = "2 * model_layers * model_kv_heads * model_head_dim * kvdtype_bytes"
# latency-levers / speculative decoding: expected tokens per target step (Leviathan et al.).
SPEC_TOKENS_PER_STEP = "(1 - alpha ** (k + 1)) / (1 - alpha)"


def kv_bytes_per_token(layers: int, kv_heads: int, head_dim: int, dtype_bytes: int) -> float:
    return evaluate(
        KV_BYTES_PER_TOKEN,
        {
            "model_layers": layers,
            "model_kv_heads": kv_heads,
            "model_head_dim": head_dim,
            "kvdtype_bytes": dtype_bytes,
        },
    ).magnitude


def spec_tokens_per_step(alpha: float, k: int) -> float:
    if alpha >= 1.0:
        return float(k + 1)
    return evaluate(SPEC_TOKENS_PER_STEP, {"alpha": alpha, "k": k}).magnitude
