"""KV-cache growth: bytes the engine has written into its KV pool vs tokens, MHA vs GQA.

Measured without the formula: the pool is filled with a marker before the run, and after
every step the lab counts the pool's head vectors that no longer hold it (x their bytes):
the KV the model really stored. The prediction is the bank's whiteboard expression
2 × layers × kv_heads × head_dim × dtype_bytes per token; the two must agree exactly.
"""

from __future__ import annotations

from collections.abc import Iterator

import torch

from lab.engine.config import EngineConfig
from lab.engine.engine import LLMEngine
from lab.engine.sampler import SamplingParams
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.common import (
    bundled_shape,
    mark_unwritten,
    random_model,
    torch_dtype,
    written_bytes,
)
from lab.labs.formulas import kv_bytes_per_token

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"mha-predicted": 0, "gqa-predicted": 0}

VARIANTS = ("mha", "gqa")


def variant_shape(variant: str) -> dict:
    """The bundled target's shape; MHA gives every query head its own KV head."""
    shape = bundled_shape("target")
    if variant == "mha":
        shape["num_key_value_heads"] = shape["num_attention_heads"]
    return shape


def _dims(shape: dict) -> tuple[int, int, int]:
    head_dim = shape.get("head_dim") or shape["hidden_size"] // shape["num_attention_heads"]
    return shape["num_hidden_layers"], shape["num_key_value_heads"], head_dim


class KVCacheGrowth(Lab):
    slug = "kv-cache-growth"
    title = "KV-cache growth: bytes per token, MHA vs GQA"
    summary = (
        "One sequence is prefilled and then decoded on the engine's paged KV pool. After "
        "every step the lab counts the bytes actually written into the pool and the bytes "
        "of the blocks reserved for it, and compares them with 2 × layers × KV heads × "
        "head_dim × dtype bytes per token. GQA (8 query heads sharing 2 KV heads) stores a "
        "quarter of what MHA does. The whole prompt's blocks are reserved when it is admitted; "
        "during decode, reserved bytes run ahead of written ones by less than one block."
    )
    topics = ("kv-cache-basics", "kv-cache-arithmetic")
    params = (
        Param(
            "tokens",
            "Tokens to cache",
            "int",
            384,
            min=16,
            max=512,
            unit="tokens",
            help="prompt + generated tokens (the bundled model's context is 512)",
        ),
        Param("prompt_tokens", "Prompt tokens", "int", 128, min=1, max=496, unit="tokens"),
        Param("block_size", "Block size", "int", 16, min=1, max=128, unit="tokens"),
        Param("dtype", "KV dtype", "choice", "fp32", choices=("fp32", "bf16", "fp16")),
        Param("every", "Point every", "int", 16, min=1, max=128, unit="tokens"),
    )
    series = (
        Series("mha", "MHA measured (written)"),
        Series(
            "mha-predicted",
            "MHA predicted",
            "predicted",
            predicts="mha",
            mode="lines",
            claim="exact",
            band=BANDS["mha-predicted"],
        ),
        Series("gqa", "GQA measured (written)"),
        Series(
            "gqa-predicted",
            "GQA predicted",
            "predicted",
            predicts="gqa",
            mode="lines",
            claim="exact",
            band=BANDS["gqa-predicted"],
        ),
        Series("mha-reserved", "MHA reserved (blocks)", mode="lines"),
        Series("gqa-reserved", "GQA reserved (blocks)", mode="lines"),
    )
    chart = Chart("tokens cached", "KV bytes")
    time_limit_s = 120

    def check(self, params: dict) -> dict[str, str]:
        if params["prompt_tokens"] >= params["tokens"]:
            return {"prompt_tokens": "must be smaller than the tokens to cache"}
        return {}

    def predict(self, params: dict) -> list[Point]:
        dtype_bytes = torch.empty(0, dtype=torch_dtype(params["dtype"])).element_size()
        points = []
        for variant in VARIANTS:
            per_token = kv_bytes_per_token(*_dims(variant_shape(variant)), dtype_bytes)
            points += [
                Point(f"{variant}-predicted", n, n * per_token, {"bytes_per_token": per_token})
                for n in (0, params["tokens"])
            ]
        return points

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        dtype = torch_dtype(p["dtype"])
        for variant in VARIANTS:
            shape = variant_shape(variant)
            model = random_model(shape, ctx.device, dtype)
            engine = LLMEngine(
                model,
                EngineConfig(
                    block_size=p["block_size"],
                    max_model_len=p["tokens"] + 2,
                    max_num_seqs=1,
                    max_num_batched_tokens=p["every"],  # prefill in chunks: points en route
                    enable_prefix_caching=False,
                ),
            )
            pool = engine.pool.kv
            mark_unwritten(pool)
            block_bytes = pool[:, :, 0].numel() * pool.element_size()
            per_token = kv_bytes_per_token(*_dims(shape), pool.element_size())
            gen = torch.Generator().manual_seed(0)
            prompt = torch.randint(3, shape["vocab_size"], (p["prompt_tokens"],), generator=gen)
            # One token more than needed: the run is stopped (aborted) once `tokens` are
            # cached, so the last point still sees the sequence's blocks reserved.
            params = SamplingParams(
                max_tokens=p["tokens"] - p["prompt_tokens"] + 2, ignore_eos=True
            )
            request = engine.add_request(prompt.tolist(), params)
            seq = engine.requests[request].seq
            last = -1
            while engine.has_unfinished():
                engine.step()
                ctx.check_cancel()
                cached = seq.num_computed_tokens  # tokens whose K and V are in the pool
                if cached - last < p["every"] and cached < p["tokens"]:
                    continue
                last = cached
                written = written_bytes(pool)
                reserved = len(seq.block_table) * block_bytes
                extra = {
                    "predicted": cached * per_token,
                    "reserved_bytes": reserved,
                    "blocks": len(seq.block_table),
                }
                yield Point(variant, cached, written, extra)
                yield Point(f"{variant}-reserved", cached, reserved)
                if cached >= p["tokens"]:
                    engine.abort(request)
                    break
            ctx.summary[f"{variant}_bytes_per_token"] = per_token


LAB = KVCacheGrowth()
