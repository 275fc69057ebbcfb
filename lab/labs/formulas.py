"""The arithmetic behind the labs' predicted curves, evaluated by the same evaluator
(`questions.expressions`, pint) and, where the bank has one, the same expression text
that grades a learner's whiteboard answer; tests/lab/test_lab_formulas.py checks that each
of those is the bank's text verbatim. The few with no bank counterpart say so."""

from __future__ import annotations

from questions.expressions import UREG, evaluate

# kv-cache-arithmetic.yaml, step "kv bytes per token" (all layers, K and V).
KV_BYTES_PER_TOKEN = "2 * model_layers * model_kv_heads * model_head_dim * kvdtype_bytes"
# speculative-decoding.yaml "expected_tokens": tokens per target step (Leviathan et al.).
SPEC_TOKENS_PER_STEP = "(1 - accept_rate ** (draft_len + 1)) / (1 - accept_rate) * token"


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
    values = {"accept_rate": alpha, "draft_len": k}
    return evaluate(SPEC_TOKENS_PER_STEP, values).to("token").magnitude


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


# speculative-decoding.yaml "cycle_cost" and "speedup" (in target-step units). The bank's
# cycle cost assumes the verify pass over k + 1 tokens costs one target step (memory-bound);
# the lab's (lab-only) puts in `verify_cost`, that pass measured in target steps: 1 when it
# is memory-bound, more on a CPU whose ridge is a few tokens.
SPEC_CYCLE_COST = "draft_len * cost_ratio + 1"
SPEC_CYCLE_COST_MEASURED = "draft_len * cost_ratio + verify_cost"
SPEC_SPEEDUP = "expected_tokens / token / cycle_cost"


def spec_speedup(alpha: float, k: int, cost_ratio: float, verify_cost: float = 1.0) -> float:
    """Speedup over target-only decoding when a draft step costs `cost_ratio` target steps
    and verifying k + 1 tokens costs `verify_cost` target steps (1: a memory-bound pass)."""
    if alpha >= 1.0:  # the expression divides by 1 - alpha
        alpha = 1.0 - 1e-12
    cycle = evaluate(SPEC_CYCLE_COST_MEASURED, {"draft_len": k, "cost_ratio": cost_ratio,
                                                "verify_cost": verify_cost})  # fmt: skip
    expected = evaluate(SPEC_TOKENS_PER_STEP, {"accept_rate": alpha, "draft_len": k})
    values = {"expected_tokens": expected, "cycle_cost": cycle}
    return evaluate(SPEC_SPEEDUP, values).magnitude


# continuous-batching.yaml "static_util": tokens produced / (slots x steps the batch ran).
SLOT_UTILISATION = "useful_tokens / (batch * long_tokens)"


def slot_utilisation(useful_tokens: int, batch: int, steps: int) -> float:
    """Share of batch x steps slot-steps that produced a token (long_tokens = steps run)."""
    values = {"useful_tokens": useful_tokens, "batch": batch, "long_tokens": steps}
    return evaluate(SLOT_UTILISATION, values).magnitude


# prefill-decode.yaml "tpot_ms": roofline time of one forward step over `batch` tokens, the
# larger of streaming the weights once and doing 2 FLOPs per weight per token.
STEP_ROOFLINE = (
    "max(model_params * dtype_bytes / gpu_bandwidth, "
    "2 * model_params * batch * FLOP / gpu_bf16_tflops)"
)


def step_roofline_ms(
    params: int, dtype_bytes: int, bandwidth_bytes_s: float, flop_s: float, tokens: int
) -> float:
    """Roofline ms of a step computing `tokens` tokens (measured bandwidth and FLOP/s)."""
    values = {"model_params": params, "dtype_bytes": UREG.Quantity(dtype_bytes, "B"),
              "gpu_bandwidth": UREG.Quantity(bandwidth_bytes_s, "B/s"), "batch": tokens,
              "gpu_bf16_tflops": UREG.Quantity(flop_s, "FLOP/s")}  # fmt: skip
    return evaluate(STEP_ROOFLINE, values).to("ms").magnitude


# flash-attention.yaml "scores_per_head" and "scores_per_layer": the N x N score matrix that
# unfused attention writes, once per query head.
ATTN_SCORES_PER_HEAD = "seq_len ** 2 * dtype_bytes"
ATTN_SCORES_PER_LAYER = "scores_per_head * model_heads"
# Tiled (FlashAttention-style) attention keeps only a score tile: every query x one key block.
ATTN_TILE_PER_LAYER = "seq_len * kv_block * dtype_bytes * model_heads"


def attention_scores_bytes(seq_len: int, heads: int, dtype_bytes: int) -> float:
    per_head = evaluate(ATTN_SCORES_PER_HEAD, {"seq_len": seq_len, "dtype_bytes": dtype_bytes})
    return evaluate(ATTN_SCORES_PER_LAYER, {"scores_per_head": per_head,
                                            "model_heads": heads}).magnitude  # fmt: skip


def attention_tile_bytes(seq_len: int, kv_block: int, heads: int, dtype_bytes: int) -> float:
    values = {"seq_len": seq_len, "kv_block": kv_block, "dtype_bytes": dtype_bytes,
              "model_heads": heads}  # fmt: skip
    return evaluate(ATTN_TILE_PER_LAYER, values).magnitude


# FLOPs of one forward step: 2 per decoder weight per token computed, the LM head once per
# sampled row (one per sequence: a prefill samples only its last position), and QK^T + PV
# (4 x head_dim per query head) for every (query, key) pair attended.
DECODE_STEP_FLOPS = (
    "2 * layer_params * new_tokens * FLOP + 2 * lm_head_params * sampled_rows * FLOP"
    " + 4 * model_layers * model_heads * model_head_dim * attended_pairs * FLOP"
)


def decode_step_flops(
    layer_params: int, lm_head_params: int, layers: int, heads: int, head_dim: int,
    new_tokens: int, attended_pairs: int, sampled_rows: int = 1,
) -> float:  # fmt: skip
    values = {"layer_params": layer_params, "lm_head_params": lm_head_params,
              "model_layers": layers, "model_heads": heads, "model_head_dim": head_dim,
              "new_tokens": new_tokens, "attended_pairs": attended_pairs,
              "sampled_rows": sampled_rows}  # fmt: skip
    return evaluate(DECODE_STEP_FLOPS, values).to("FLOP").magnitude


# A lower bound on one step's time, refining the bank's tpot_ms roofline (STEP_ROOFLINE) for
# a measured engine: the compute term counts the step's real FLOPs (DECODE_STEP_FLOPS: the
# LM head only for sampled rows, attention pairs included) instead of 2 x all params x tokens,
# which overstates a prefill by the LM head on every prompt token and made the measured
# prefill "beat" the bound.
STEP_LOWER_BOUND = "max(weight_bytes / read_bandwidth, step_flops / flop_rate)"


def step_lower_bound_ms(
    weight_bytes: float, bandwidth_bytes_s: float, step_flops: float, flop_s: float
) -> float:
    """Lower bound in ms of a step that streams `weight_bytes` and computes `step_flops`."""
    values = {"weight_bytes": UREG.Quantity(weight_bytes, "B"),
              "read_bandwidth": UREG.Quantity(bandwidth_bytes_s, "B/s"),
              "step_flops": UREG.Quantity(step_flops, "FLOP"),
              "flop_rate": UREG.Quantity(flop_s, "FLOP/s")}  # fmt: skip
    return evaluate(STEP_LOWER_BOUND, values).to("ms").magnitude


# paged-attention.yaml "contiguous_waste" and "paged_waste": the reserved share never used.
CONTIGUOUS_WASTE = "1 - mean_len / max_len"
PAGED_WASTE = "1 - mean_len / paged_tokens"


def contiguous_waste(mean_len: float, max_len: int) -> float:
    """Waste when every sequence reserves max_len slots (lengths in tokens)."""
    return evaluate(CONTIGUOUS_WASTE, {"mean_len": mean_len, "max_len": max_len}).magnitude


def paged_waste(mean_len: float, paged_tokens: float) -> float:
    """Waste when each sequence holds paged_tokens slots on average: the mean over
    sequences of ceil(len / block_size) x block_size."""
    values = {"mean_len": mean_len, "paged_tokens": paged_tokens}
    return evaluate(PAGED_WASTE, values).magnitude
