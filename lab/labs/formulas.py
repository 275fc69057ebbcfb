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


# prompt-caching: only full blocks are cached, and the prompt's last token is always computed.
PREFIX_HIT_TOKENS = (
    "min(floor(shared_tokens / block_size), floor((prompt_tokens - 1) / block_size)) * block_size"
)


def prefix_hit_tokens(shared_tokens: int, prompt_tokens: int, block_size: int) -> int:
    """Prompt tokens served from the prefix cache when `shared_tokens` leading tokens of the
    prompt have their KV cached (in blocks of `block_size` tokens)."""
    values = {"shared_tokens": shared_tokens, "prompt_tokens": prompt_tokens,
              "block_size": block_size}  # fmt: skip
    return round(evaluate(PREFIX_HIT_TOKENS, values).magnitude)


# quantization.yaml "quant_weights_gb" (model_params * quant_bytes) plus what a real format
# adds: the scales (and zeros) and the layers left in the float dtype (embeddings, lm_head).
QUANT_WEIGHT_BYTES = (
    "quant_params * quant_bits / 8 + scale_values * base_bytes + other_params * base_bytes"
)


def quant_weight_bytes(
    quant_params: int, quant_bits: int, scale_values: int, other_params: int, base_bytes: int
) -> float:
    values = {"quant_params": quant_params, "quant_bits": quant_bits,
              "scale_values": scale_values, "other_params": other_params,
              "base_bytes": base_bytes}  # fmt: skip
    return evaluate(QUANT_WEIGHT_BYTES, values).magnitude


# speculative-decoding.yaml "speedup": expected tokens / (draft_len * cost_ratio + 1).
SPEC_SPEEDUP = "(1 - alpha ** (k + 1)) / (1 - alpha) / (k * cost_ratio + 1)"


def spec_speedup(alpha: float, k: int, cost_ratio: float) -> float:
    """Speedup over target-only decoding when a draft step costs `cost_ratio` target steps
    and verifying k + 1 tokens costs one target step."""
    return spec_tokens_per_step(alpha, k) / evaluate("k * cost_ratio + 1",
                                                     {"k": k, "cost_ratio": cost_ratio}).magnitude
