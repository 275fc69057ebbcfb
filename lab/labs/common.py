"""Helpers the labs share: the bundled models (loaded once per worker process), random
models of the bundled shape, held-out text, timers that respect CUDA, the device name."""

from __future__ import annotations

import functools
import hashlib
import math
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from lab.engine.attention import DenseAttention
from lab.engine.config import ModelConfig
from lab.engine.dtypes import CACHE_NAME, DTYPES, cpu_name, layer_weight_bytes
from lab.engine.model import LlamaModel, load_model
from lab.engine.model import random_model as engine_random_model
from lab.labs.base import Param

WEIGHTS = Path(__file__).resolve().parent.parent / "engine" / "weights"


DTYPE_CHOICES = ("auto", "fp32", "bf16", "fp16")  # "auto": the measured choice (issue 31)
# The timing labs' model: width (lab_shape) and dtype ("auto": lab.engine.dtypes' choice)
WIDTH_PARAM = Param("width", "Model width ×", "int", 4, min=1, max=4,
                    help="multiplies hidden size, MLP size and heads of the bundled shape "
                         "(weights ~width²); past 1, layers are added until the weights are "
                         "4× this CPU's last-level cache, so a decode step streams them from "
                         "memory")  # fmt: skip
DTYPE_PARAM = Param("dtype", "Weights dtype", "choice", "auto", choices=DTYPE_CHOICES,
                    help="auto: the fastest dtype that passes the logits check, measured "
                         "once on this machine for this shape")  # fmt: skip


def torch_dtype(name: str) -> torch.dtype:
    return DTYPES[name]


def run_dtype(name: str, device: str, shape: dict, var_file: Path | None = None):
    """(torch dtype, why) for a lab's `dtype` param: an explicit name as it is; "auto" the
    fastest correct dtype for a model of `shape` on this machine, measured once and kept in
    `var_file` (lab.engine.dtypes)."""
    from lab.engine import dtypes

    choice = dtypes.choose(device, name, shape=shape, path=var_file)
    return choice.torch_dtype, choice.describe()


def dtype_file(calibration_path: Path | None) -> Path | None:
    """The engine-dtype cache beside the device-constants cache (both under VAR_DIR)."""
    return calibration_path.with_name(CACHE_NAME) if calibration_path else None


@functools.lru_cache(maxsize=8)
def _bundled(name: str, dtype: torch.dtype, device: str) -> LlamaModel:
    return load_model(WEIGHTS / name, dtype=dtype, device=device).requires_grad_(False).eval()


def bundled_model(
    name: str = "target", dtype: torch.dtype = torch.float32, device: str = "cpu"
) -> LlamaModel:
    """The bundled trained `target` (~5M params) or `draft` (~1M); cached per process:
    callers must not modify it (quantize a copy: `copy.deepcopy`)."""
    return _bundled(name, dtype, device)


@functools.lru_cache(maxsize=1)
def tokenizer():
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(WEIGHTS / "tokenizer.json"))


def bundled_shape(name: str = "target") -> dict:
    """The bundled model's HF config.json as a dict (edit it for a variant shape)."""
    return ModelConfig.from_hf(WEIGHTS / name / "config.json").to_hf()


LLC_MULTIPLE = 4  # a regime-true model's weights are at least this many times the LLC


def widened_shape(width: int) -> dict:
    """The bundled target's shape with hidden, MLP and head counts multiplied by `width`
    (head_dim kept), so weights grow ~width² and can be pushed out of the CPU's caches."""
    shape = bundled_shape("target")
    for key in ("hidden_size", "intermediate_size", "num_attention_heads",
                "num_key_value_heads"):  # fmt: skip
        shape[key] *= width
    return shape


def regime_shape(
    width: int, dtype_bytes: float, llc_bytes: int, max_layers: int | None = None
) -> dict:
    """widened_shape with enough layers that the matmul weights, stored at `dtype_bytes`
    per weight, are LLC_MULTIPLE x the last-level cache: a decode step then streams them
    from DRAM, the regime the labs teach, instead of re-reading a cache-resident toy (whose
    steps are overhead). `max_layers` (default 3x the bundled count) keeps a narrow model
    a small demo: past it the layer count is left as bundled."""
    shape = widened_shape(width)
    per_layer = layer_weight_bytes(shape, dtype_bytes)
    head = shape["hidden_size"] * shape["vocab_size"] * dtype_bytes
    need = max(0, LLC_MULTIPLE * llc_bytes - head)
    layers = max(shape["num_hidden_layers"], math.ceil(need / per_layer))
    if layers <= (max_layers or 3 * shape["num_hidden_layers"]):
        shape["num_hidden_layers"] = layers
    return shape


def matmul_params(model: nn.Module) -> int:
    """Weights that multiply activations (every Linear, LM head included; not embeddings)."""
    return sum(m.weight.numel() for m in model.modules() if isinstance(m, nn.Linear))


def lab_shape(width: int, dtype_bytes: float, llc_bytes: int) -> dict:
    """A timing lab's model shape: the bundled target's at width 1; wider, the regime-true
    random model (weights LLC_MULTIPLE x the last-level cache, regime_shape)."""
    return bundled_shape("target") if width == 1 else regime_shape(width, dtype_bytes, llc_bytes)


def width_model(ctx, width: int, dtype_name: str) -> tuple[LlamaModel, int]:
    """(random model, its matmul weight bytes) of lab_shape(width) in the run's dtype ("auto":
    measured for this shape, lab.engine.dtypes); the run page's summary says which dtype
    ran and why, that the weights are random, and how they compare with the LLC."""
    from lab.engine.dtypes import last_level_cache_bytes

    llc = last_level_cache_bytes()
    dtype, why = run_dtype(dtype_name, ctx.device, lab_shape(width, 4, llc),
                           dtype_file(ctx.calibration_path))  # fmt: skip
    dtype_bytes = torch.empty(0, dtype=dtype).element_size()
    shape = lab_shape(width, dtype_bytes, llc)
    model = random_model(shape, ctx.device, dtype)
    weight_bytes = matmul_params(model) * dtype_bytes
    ctx.summary.update({
        "dtype": why, "model": random_weights_note(shape), "weight_mb": weight_bytes / 1e6,
        "last_level_cache_mb": llc / 1e6, "weights_over_llc": weight_bytes / llc,
    })  # fmt: skip
    return model, weight_bytes


def random_weights_note(shape: dict) -> str:
    """What a run page says about a random-weight model of a real shape."""
    return (
        f"random weights, {shape['num_hidden_layers']} layers of hidden "
        f"{shape['hidden_size']}: the timing depends on the shapes and the bytes moved, "
        "not on the weights' values, so a random model of a real shape times like a "
        "trained one"
    )


def random_model(
    shape: dict, device: str = "cpu", dtype: torch.dtype = torch.float32, seed: int = 0
) -> LlamaModel:
    """Our model with HF-style random init (normal(0, 0.02) matrices, unit norms)."""
    return engine_random_model(shape, device, dtype, seed)


def sync(device: str | torch.device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize()


def timed(fn: Callable[[], object], device: str | torch.device) -> tuple[float, object]:
    """(seconds, result) of one call, synchronising CUDA around it."""
    sync(device)
    start = time.perf_counter()
    result = fn()
    sync(device)
    return time.perf_counter() - start, result


def device_name(device: str) -> str:
    """CUDA device name, or the CPU model from /proc/cpuinfo (what the run was measured on)."""
    if torch.device(device).type == "cuda":
        return torch.cuda.get_device_name()
    return f"CPU: {cpu_name()} ({torch.get_num_threads()} torch threads)"


@functools.lru_cache(maxsize=1)
def heldout_ids() -> torch.Tensor | None:
    manifest, tokenizer_file = WEIGHTS / "corpus_manifest.txt", WEIGHTS / "tokenizer.json"
    if not (manifest.exists() and tokenizer_file.exists()):
        return None
    from lab.engine.training.corpus import clean_source, read_manifest, stdlib_dir
    from lab.engine.training.tokenizer import token_stream

    texts = []
    for f in read_manifest(manifest)[1]:
        path = stdlib_dir() / f.rel_path
        if f.split == "heldout" and path.exists():
            data = path.read_bytes()
            if hashlib.sha256(data).hexdigest() == f.sha256:
                texts.append(clean_source(data.decode("utf-8")))  # as in training
    return token_stream(tokenizer(), texts) if texts else None


def heldout_windows(num_windows: int, length: int) -> list[torch.Tensor]:
    """`num_windows` consecutive windows of `length` held-out tokens (manifest files whose
    sha256 matches this Python's stdlib, tokenised as in training). RuntimeError when this
    machine's stdlib does not hold enough of them."""
    ids = heldout_ids()
    needed = num_windows * length
    if ids is None or len(ids) < needed:
        have = 0 if ids is None else len(ids)
        raise RuntimeError(
            f"Held-out text unavailable: need {needed} tokens, this machine's Python stdlib "
            f"matches the training manifest for {have}."
        )
    return [ids[i * length : (i + 1) * length] for i in range(num_windows)]


def window_nll(model: LlamaModel, window: torch.Tensor) -> tuple[float, int]:
    """(summed next-token cross-entropy in nats, tokens scored) of one window, no cache."""
    w = window.to(model.device)
    with torch.inference_mode():
        hidden = model(w, torch.arange(len(w), device=w.device), DenseAttention([len(w)]))
        logits = model.logits(hidden).float()
        return F.cross_entropy(logits[:-1], w[1:], reduction="sum").item(), len(w) - 1


def perplexity(nll_and_counts: list[tuple[float, int]]) -> float:
    return math.exp(sum(n for n, _ in nll_and_counts) / sum(c for _, c in nll_and_counts))


# Marks KV-pool slots the engine has not written. Finite, because batched decode attention
# reads padding slots with weight 0 (NaN x 0 is NaN); no real K or V head vector is ever
# exactly all 7.0, which is exact in fp32, bf16 and fp16.
UNWRITTEN = 7.0


def mark_unwritten(pool: torch.Tensor) -> None:
    """Fill a KV pool [layers, 2, blocks, block, kv_heads, dim] with the UNWRITTEN marker."""
    pool.fill_(UNWRITTEN)


def written_bytes(pool: torch.Tensor) -> int:
    """Bytes of the pool the engine has written since mark_unwritten: every head vector
    (dim values) that is no longer all UNWRITTEN, times its bytes. Measured, no formula."""
    written_vectors = int((pool != UNWRITTEN).any(dim=-1).sum())
    return written_vectors * pool.shape[-1] * pool.element_size()
