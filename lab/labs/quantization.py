"""Weight-only quantization of the bundled target: bf16 vs int8 (per channel) vs int4
(group-wise). Weight bytes, decode ms/token at batch 1, and held-out perplexity overall and
on the hardest tenth of the held-out windows.

Bytes are measured from the tensors the quantized model holds and predicted from the shape
alone: quantized params * bits / 8 + scales (and zeros) + the float layers left alone
(embeddings, lm_head, norms), all in bf16. They must agree exactly. Perplexity is where the
formats differ; it is reported on all windows and on the hardest tenth (ranked by the bf16
model's own loss), since an average can hide a tail.

Decode speed is a bandwidth lesson, so it is timed on a model that has to stream its
weights: at the default width a random model of the bundled shape widened 4x, with layers
added until even its int4 weights are 4x the CPU's last-level cache, quantized the same
three ways. Its ms/token is drawn against a lower bound, the format's weight bytes over the
checked read bandwidth (lab/labs/calibration.py). At width 1 the bundled model itself is
timed: it fits in the cache, so its decode is per-step overhead, not bytes.
"""

from __future__ import annotations

import copy
import statistics
from collections.abc import Iterator

import torch
from torch import nn

from lab.engine.config import EngineConfig, ModelConfig
from lab.engine.dtypes import last_level_cache_bytes
from lab.engine.engine import LLMEngine
from lab.engine.model import LlamaModel, weight_bytes
from lab.engine.quant import quantize_model
from lab.engine.sampler import SamplingParams
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.calibration import constants_for
from lab.labs.common import (
    bundled_model,
    bundled_shape,
    heldout_windows,
    perplexity,
    random_model,
    random_weights_note,
    regime_shape,
    sync,
    window_nll,
)
from lab.labs.formulas import quant_weight_bytes

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"weight-mb-predicted": 0, "ms-floor": 0.2}

FORMATS = (("bf16", 16), ("int8", 8), ("int4", 4))
SKIP = frozenset({"lm_head"})  # quantize_model's default: the logits layer stays bf16
BASE_BYTES = 2  # bf16
HARD_FRACTION = 0.1
PROMPT_TOKENS = 32
SMALLEST_BITS = 4  # the speed model is sized so even its int4 weights leave the LLC
MAX_SPEED_LAYERS = 48


def speed_shape(width: int, llc_bytes: int) -> dict:
    """The decode-speed model's shape: the bundled target's at width 1; wider, enough
    layers that the int4-quantized matmul weights are LLC_MULTIPLE x the last-level cache
    (so every format is read from memory, not from the cache)."""
    if width == 1:
        return bundled_shape("target")
    return regime_shape(width, SMALLEST_BITS / 8, llc_bytes, max_layers=MAX_SPEED_LAYERS)


def _linears(model: nn.Module) -> list[tuple[str, nn.Linear]]:
    """(attribute name, layer) of every plain nn.Linear quantize_model would replace."""
    return [
        (name.rsplit(".", 1)[-1], m)
        for name, m in model.named_modules()
        if type(m) is nn.Linear and name not in SKIP and name.rsplit(".", 1)[-1] not in SKIP
    ]


def predicted_bytes(shape: dict, bits: int, group_size: int) -> float:
    """Weight bytes of the target quantized to `bits` (16: left in bf16), from its shape:
    the model is built on the meta device, so nothing is allocated."""
    with torch.device("meta"):
        skeleton = LlamaModel(ModelConfig.from_hf(shape))
    total = sum(p.numel() for p in skeleton.parameters())
    layers = [m for _, m in _linears(skeleton)]
    quant = sum(m.weight.numel() for m in layers) if bits < 16 else 0
    if bits == 8:
        scales = sum(m.out_features for m in layers)  # one per output channel
    elif bits == 4:
        scales = sum(2 * m.out_features * (m.in_features // group_size) for m in layers)
    else:
        scales = 0
    return quant_weight_bytes(quant, bits, scales, total - quant, BASE_BYTES)


def decode_ms_per_token(model: LlamaModel, prompt: list[int], new_tokens: int) -> float:
    """Median gap between tokens of one greedy request (batch 1) on the paged engine."""
    engine = LLMEngine(model, EngineConfig(max_num_seqs=1, max_model_len=512,
                                           enable_prefix_caching=False))  # fmt: skip
    params = SamplingParams(temperature=0, max_tokens=new_tokens, ignore_eos=True)
    engine.generate([prompt], SamplingParams(temperature=0, max_tokens=4, ignore_eos=True))
    rid = engine.add_request(prompt, params)
    while engine.has_unfinished():
        engine.step()
    sync(model.device)
    return statistics.median(engine.metrics(rid)["itl_ms"])


class Quantization(Lab):
    slug = "quantization"
    title = "Weight-only quantization: bytes, speed and the hardest text"
    summary = (
        "The bundled trained target in bf16, int8 (one scale per output channel) and int4 "
        "(a scale and zero per group of inputs). For each: weight bytes measured from the "
        "tensors against params × bits / 8 + scales + the layers kept in bf16 (embeddings, "
        "lm_head); decode ms/token at batch 1; perplexity on held-out code, overall and on "
        "the hardest 10% of windows (ranked by the bf16 model's loss). Compare each "
        "format's loss on the hard tenth with its loss on average (an average can hide a "
        "tail). Decode speed is timed apart, on a model large enough to stream its weights "
        "from memory: random weights of the bundled shape widened 4× with layers added "
        "until even the int4 copy is four times this CPU's last-level cache, quantized the "
        "same three ways (random weights time like trained ones: the work is the shapes and "
        "the bytes). Its ms/token is drawn against its floor, the format's weight bytes over "
        "the checked read bandwidth; how close each format gets says whether its kernel "
        "streams bytes or does other work (unpacking int4) at batch 1."
    )
    topics = ("quantization", "model-compression")
    params = (
        Param("group_size", "int4 group size", "choice", "64", choices=("32", "64", "128"),
              help="inputs sharing one int4 scale and zero"),
        Param("windows", "Held-out windows", "int", 100, min=10, max=400,
              help="the hardest 10% of them are scored separately"),
        Param("window_tokens", "Window length", "int", 128, min=16, max=512, unit="tokens"),
        Param("decode_tokens", "Decode tokens", "int", 32, min=4, max=256, unit="tokens",
              help="greedy tokens timed for ms/token at batch 1"),
        Param("width", "Speed model width ×", "int", 4, min=1, max=4,
              help="the model decode speed is timed on: the bundled shape with hidden, MLP "
                   "and heads multiplied by this, layers added until its int4 weights are "
                   "4× this CPU's last-level cache; 1 times the bundled model (cache "
                   "resident)"),
    )  # fmt: skip
    series = (
        Series("ppl", "perplexity, all held-out windows"),
        Series("ppl-hard", "perplexity, hardest 10% of windows"),
        Series("weight-mb", "weight MB (measured)", axis="y2"),
        Series("weight-mb-predicted", "weight MB (predicted)", "predicted",
               predicts="weight-mb", axis="y2", mode="lines",
               claim="exact", band=BANDS["weight-mb-predicted"]),
        Series("ms-per-token", "decode ms/token at batch 1 (speed model, measured)",
               axis="y3"),
        Series("ms-floor", "decode floor: weight bytes / read bandwidth", "predicted",
               predicts="ms-per-token", axis="y3", mode="lines", claim="bound",
               band=BANDS["ms-floor"]),
    )  # fmt: skip
    chart = Chart("bits per weight", "perplexity", y2_title="weight MB",
                  y3_title="decode ms/token")  # fmt: skip

    def loose_cause(self, series: str) -> str:
        return ("the floor reads the weights at the plain read rate; at batch 1 a matmul "
                "kernel streams them slower (one core's matrix-vector rate, see "
                "achieved GB/s in the point details), and an int4 kernel also unpacks and "
                "rescales every weight. At width 1 the model fits in the cache and a step "
                "is per-step overhead; the default width 4 tightens that part")  # fmt: skip

    def miss_cause(self, series: str) -> str:
        if series == "ms-floor":
            return (
                "the read bandwidth was measured slower than this run's decode (under "
                "load, see its line)"
            )
        return ""

    time_limit_s = 150

    def check(self, params: dict) -> dict[str, str]:
        group = int(params["group_size"])
        with torch.device("meta"):
            skeleton = LlamaModel(ModelConfig.from_hf(bundled_shape("target")))
        for name, layer in _linears(skeleton):
            if layer.in_features % group:
                fits = [g for g in (32, 64, 128) if layer.in_features % g == 0]
                return {
                    "group_size": f"{group} does not divide the {layer.in_features} inputs of "
                    f"the model's {name} layers; use {' or '.join(map(str, fits))}"
                }
        limit = bundled_shape("target")["max_position_embeddings"]
        if params["window_tokens"] > limit:
            return {"window_tokens": f"must be at most the model's context, {limit}"}
        if PROMPT_TOKENS + params["decode_tokens"] > limit:
            return {"decode_tokens": f"must be at most {limit - PROMPT_TOKENS}"}
        return {}

    def predict(self, params: dict) -> list[Point]:
        shape, group = bundled_shape("target"), int(params["group_size"])
        return [
            Point("weight-mb-predicted", bits, predicted_bytes(shape, bits, group) / 1e6)
            for _, bits in FORMATS
        ]

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        group = int(p["group_size"])
        base = bundled_model("target", torch.bfloat16, ctx.device)
        shape = bundled_shape("target")
        windows = heldout_windows(p["windows"], p["window_tokens"])  # RuntimeError if absent
        prompt = windows[0][:PROMPT_TOKENS].tolist()
        ctx.summary["warmup"] = (
            "discarded: a 4-token generation on each format's engine before its decode is "
            "timed; ms per token is the median gap over the decode tokens")  # fmt: skip
        yield from self._speed(ctx, prompt, group)
        num_hard = max(1, round(HARD_FRACTION * len(windows)))
        hard: list[int] = []
        baseline: dict[str, float] = {}
        for name, bits in FORMATS:
            ctx.check_cancel()
            model = base if bits == 16 else copy.deepcopy(base)  # base is cached and shared
            if bits < 16:
                quantize_model(model, bits, group_size=group, skip=SKIP)
            size = weight_bytes(model)
            predicted = predicted_bytes(shape, bits, group)
            yield Point("weight-mb", bits, size / 1e6, {
                "format": name, "predicted": predicted / 1e6, "bytes": size,
                "group_size": group if bits == 4 else None,
            })  # fmt: skip
            nlls = []
            for window in windows:
                ctx.check_cancel()
                nlls.append(window_nll(model, window))
            if not hard:  # bf16 runs first: its loss per window ranks them
                ranked = sorted(range(len(nlls)), key=lambda i: nlls[i][0] / nlls[i][1])
                hard = ranked[-num_hard:]
            ppl, ppl_hard = perplexity(nlls), perplexity([nlls[i] for i in hard])
            baseline = baseline or {"ppl": ppl, "ppl-hard": ppl_hard}
            for series, value in (("ppl", ppl), ("ppl-hard", ppl_hard)):
                yield Point(series, bits, value, {
                    "format": name, "windows": len(nlls), "hard_windows": len(hard),
                    "vs_bf16_pct": (value / baseline[series] - 1) * 100,
                })  # fmt: skip
            ctx.summary.update({
                f"{name}_weight_mb": size / 1e6,
                f"{name}_ppl": ppl, f"{name}_ppl_hard": ppl_hard,
                f"{name}_ppl_vs_bf16_pct": (ppl / baseline["ppl"] - 1) * 100,
                f"{name}_ppl_hard_vs_bf16_pct": (ppl_hard / baseline["ppl-hard"] - 1) * 100,
            })  # fmt: skip

    def _speed(self, ctx: RunContext, prompt: list[int], group: int) -> Iterator[Point]:
        """Decode ms/token at batch 1 of each format on the speed model, against its floor
        (weight bytes / the checked read bandwidth on a buffer that size)."""
        p = ctx.params
        llc = last_level_cache_bytes()
        shape = speed_shape(p["width"], llc)
        if p["width"] == 1:
            base = bundled_model("target", torch.bfloat16, ctx.device)
            ctx.summary["speed_model"] = "the bundled trained target (fits in the cache)"
        else:
            base = random_model(shape, ctx.device, torch.bfloat16, seed=31)
            ctx.summary["speed_model"] = random_weights_note(shape)
        constants = constants_for(ctx.device, torch.bfloat16, weight_bytes(base),
                                  path=ctx.calibration_path)  # fmt: skip
        bandwidth = constants.bandwidth_bytes_s
        ctx.summary.update({
            "constants": constants.describe(uses=("bandwidth",)),
            "read_bandwidth_gb_s": bandwidth / 1e9, "last_level_cache_mb": llc / 1e6,
        })  # fmt: skip
        for name, bits in FORMATS:
            ctx.check_cancel()
            model = base
            if bits < 16:
                model = copy.deepcopy(base)  # the bundled base is cached and shared
                quantize_model(model, bits, group_size=group, skip=SKIP)
            size = weight_bytes(model)
            ms = decode_ms_per_token(model, prompt, p["decode_tokens"])
            floor_ms = size / bandwidth * 1000
            yield Point("ms-floor", bits, floor_ms)
            yield Point("ms-per-token", bits, ms, {
                "format": name, "weight_mb": size / 1e6, "weights_over_llc": size / llc,
                "achieved_gb_s": size / ms / 1e6, "predicted": floor_ms,
            })  # fmt: skip
            ctx.summary.update({
                f"{name}_ms_per_token": ms, f"{name}_bandwidth_floor_ms": floor_ms,
                f"{name}_speed_model_mb": size / 1e6,
            })  # fmt: skip
            del model  # a quantized copy: freed before the next is made


LAB = Quantization()
