"""Which dtype the engine runs in on this machine: the fastest one that is still correct,
found by measuring, not by reading CPU flags (issue 31).

CPU flags mislead: a CPU with native bf16 dot products (avx512_bf16) can still run a whole
bf16 step slower than fp32, because the norms, RoPE, softmax and the small GEMMs around the
big ones are not all bf16-native. So each candidate dtype is tried on a probe model once per
machine, and the choice is cached in a JSON file (the callers keep it under var/):

1. the logits check: the probe's prefill logits in the candidate dtype against fp32 on the
   same weights; a dtype that disagrees (top-1 on fewer than LOGITS_TOP1 of the positions, or
   any non-finite value) is never chosen;
2. the time each dtype that passes takes to serve a request of 128 prompt and 128 generated
   tokens, alone and as one of 8 in a batch (a 128-token prefill and the median decode step at
   1 and at 8 sequences, measured), on a random-weight model of the shape that will run
   (timing depends on shapes and bytes, not on the weights' values). The ranking depends on
   the shape and the phase: on a 2-core AMD EPYC (avx512_bf16, no AMX) bf16 prefills faster
   (native bf16 dot products) but decodes the 20 MB bundled target ~2x slower (its small ops
   are not bf16-native), so fp32 serves it faster; for a model four times the 32 MiB L3,
   whose decode steps stream the weights from DRAM, bf16 wins. So the choice is cached per
   machine and shape. The time also counts one prefill of a long prompt, as long as a
   default step's token budget (512, or the model's context less 8): on another EPYC host
   fp16 came out 5% ahead of fp32 on the request alone, a tie inside the probe's noise, and
   then served the engine bench's mixed workload (512-token prefill chunks) 2.6x slower,
   since CPU fp16 GEMMs fall behind at many rows.

An explicit dtype always wins; on CUDA the rule is the usual one (bf16 where supported).
`Choice.describe()` is the sentence the run page and /metrics show.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from lab.engine import jsonfile

CACHE_NAME = "engine_dtype.json"
DTYPES: dict[str, torch.dtype] = {
    "fp32": torch.float32,
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
}
CANDIDATES = ("fp32", "bf16", "fp16")
LOGITS_TOP1 = 0.9  # share of positions whose argmax must match fp32's
MAX_AGE_S = 30 * 24 * 3600.0  # a machine's choice is measured again after a month
FLAGS = ("avx512f", "avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_tile")


@dataclass(frozen=True)
class Choice:
    dtype: str
    why: str  # explicit | measured | cached | cuda
    machine: str
    step_ms: dict[str, float] = field(default_factory=dict)  # per dtype that passed
    failed: dict[str, str] = field(default_factory=dict)  # dtype -> why it was refused
    measured_at: float = 0.0

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def describe(self) -> str:
        """One sentence: which dtype ran and why."""
        if self.why == "explicit":
            return f"{self.dtype}: set explicitly"
        if self.why == "cuda":
            return f"{self.dtype}: CUDA rule (bf16 where the GPU supports it, else fp32)"
        times = ", ".join(f"{d} {ms:.1f} ms" for d, ms in sorted(self.step_ms.items(),
                                                                 key=lambda kv: kv[1]))  # fmt: skip
        refused = "; ".join(f"{d} refused: {why}" for d, why in self.failed.items())
        when = "cached measurement" if self.why == "cached" else "measured now"
        text = (f"{self.dtype}: fastest correct dtype on {self.machine} ({when}; ms per "
                f"128+128-token request, alone and in a batch of 8, plus a long prefill, this "
                f"model's shape with "
                f"random weights: {times})")  # fmt: skip
        return text + (f"; {refused}" if refused else "")

    def as_dict(self) -> dict:
        return asdict(self)


def cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
    return set(line.partition(":")[2].split())


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def machine_key(threads: int | None = None) -> str:
    """What the measurement depends on: CPU model, its relevant flags, threads, torch."""
    flags = sorted(cpu_flags() & set(FLAGS))
    threads = threads or torch.get_num_threads()
    return (f"{cpu_name()} [{' '.join(flags) or 'no bf16/fp16 flags'}], {threads} threads, "
            f"torch {torch.__version__}")  # fmt: skip


CACHES = Path("/sys/devices/system/cpu/cpu0/cache")


def last_level_cache_bytes(root: Path = CACHES) -> int:
    """The largest CPU cache, from /sys (index3 is the L3 on x86); 32 MiB if unknown."""
    best = 0
    for size in root.glob("index*/size"):
        text = size.read_text().strip().upper()
        try:
            value = int(text.rstrip("KMG"))
        except ValueError:
            continue
        best = max(best, value * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(text[-1:], 1))
    return best or 32 << 20


def layer_weight_bytes(shape: dict, dtype_bytes: int) -> int:
    """Bytes of one decoder layer's matmul weights (q, k, v, o, gate, up, down)."""
    h, i = shape["hidden_size"], shape["intermediate_size"]
    head_dim = shape.get("head_dim") or h // shape["num_attention_heads"]
    q, kv = shape["num_attention_heads"] * head_dim, shape["num_key_value_heads"] * head_dim
    return (2 * h * q + 2 * h * kv + 3 * h * i) * dtype_bytes


def probe_shape(llc_bytes: int | None = None) -> dict:
    """A Llama-shaped config whose fp32 matmul weights are about 4x the last-level cache."""
    llc = llc_bytes or last_level_cache_bytes()
    shape = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 3072,
        "hidden_size": 1024, "intermediate_size": 2816, "num_hidden_layers": 2,
        "num_attention_heads": 32, "num_key_value_heads": 8, "head_dim": 32,
        "hidden_act": "silu", "rms_norm_eps": 1e-6, "rope_theta": 10000.0,
        "rope_scaling": None, "tie_word_embeddings": False, "max_position_embeddings": 512,
        "bos_token_id": 0, "eos_token_id": 1,
    }  # fmt: skip
    shape["num_hidden_layers"] = max(2, math.ceil(4 * llc / layer_weight_bytes(shape, 4)))
    return shape


def _probe(shape: dict, dtype: torch.dtype, seed: int = 0):
    from lab.engine.model import random_model

    return random_model(shape, "cpu", dtype, seed)


def logits_check(name: str, shape: dict | None = None) -> str:
    """'' when `name` agrees with fp32 on a probe's prefill logits, else why not."""
    if name == "fp32":
        return ""
    from lab.engine.attention import DenseAttention

    shape = dict(shape or probe_shape(), num_hidden_layers=2)  # numerics, not speed
    n = 64
    ids = torch.randint(3, shape["vocab_size"], (n,), generator=torch.Generator().manual_seed(0))

    def logits(model) -> torch.Tensor:
        with torch.no_grad():
            return model.logits(model(ids, torch.arange(n), DenseAttention([n]))).float()

    key = shape_key(shape)
    if key not in _REFERENCE:  # the fp32 reference, once per shape
        _REFERENCE[key] = logits(_probe(shape, torch.float32))
    ref = _REFERENCE[key]
    try:
        got = logits(_probe(shape, DTYPES[name]))
    except (RuntimeError, NotImplementedError) as exc:  # a kernel missing for this dtype
        return f"{type(exc).__name__}: {exc}"[:200]
    if not torch.isfinite(got).all():
        return "non-finite logits"
    top1 = (got.argmax(-1) == ref.argmax(-1)).float().mean().item()
    if top1 < LOGITS_TOP1:
        return f"top-1 agrees with fp32 on {top1:.0%} of positions (< {LOGITS_TOP1:.0%})"
    return ""


def shape_key(shape: dict) -> str:
    keys = ("hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
            "num_key_value_heads", "vocab_size")  # fmt: skip
    return "shape " + "x".join(str(shape.get(k)) for k in keys)


REQUEST_TOKENS = 128  # prompt and generated tokens of the timed request
LONG_PROMPT = 512  # the long prefill timed too: EngineConfig's default token budget per step
PROBE = "probe 2"  # in the cache key: choices timed without the long prefill are re-measured


def step_ms(name: str, shape: dict | None = None, repeats: int = 6) -> float:
    """ms to serve a request of REQUEST_TOKENS prompt and REQUEST_TOKENS generated tokens,
    alone plus as one of 8 (prefill + n x decode step at 1, prefill + n x step at 8 / 8),
    plus one prefill of a LONG_PROMPT-token prompt (the median of 2 after a warm-up)."""
    from lab.engine.config import EngineConfig
    from lab.engine.engine import LLMEngine
    from lab.engine.sampler import SamplingParams

    model = _probe(shape or probe_shape(), DTYPES[name])
    gen = torch.Generator().manual_seed(1)
    vocab = model.config.vocab_size
    n = REQUEST_TOKENS
    one = SamplingParams(max_tokens=1, temperature=0, ignore_eos=True)

    def prefill_ms(tokens: int, times: int) -> float:
        """The median of `times` prefills of `tokens` tokens, after one warm-up."""
        engine = LLMEngine(model, EngineConfig(
            max_model_len=tokens + 8, max_num_seqs=1, max_num_batched_tokens=tokens,
            enable_prefix_caching=False))  # fmt: skip
        steps = []
        for _ in range(times + 1):
            engine.add_request(torch.randint(3, vocab, (tokens,), generator=gen).tolist(), one)
            engine.step()
            steps.append(engine.step_log[-1]["ms"])
        return statistics.median(steps[1:])

    # a 128-token prefill per request (alone and in the batch), one long prefill, then the
    # decode steps
    total = 2 * prefill_ms(n, repeats)
    total += prefill_ms(min(LONG_PROMPT, model.config.max_position_embeddings - 8), 2)
    for batch in (1, 8):
        engine = LLMEngine(model, EngineConfig(
            max_model_len=8 + repeats + 4, max_num_seqs=batch,
            max_num_batched_tokens=8 * batch, enable_prefix_caching=False))  # fmt: skip
        params = SamplingParams(max_tokens=repeats + 2, temperature=0, ignore_eos=True)
        for _ in range(batch):
            engine.add_request(torch.randint(3, vocab, (8,), generator=gen).tolist(), params)
        while engine.has_unfinished():
            engine.step()
        decode = [s["ms"] for s in engine.step_log if s["prefill_tokens"] == 0][1:]  # warm-up
        total += n * statistics.median(decode) / batch
    return total


def cache_path(var_dir: Path | str | None = None) -> Path:
    """Where the measured choice is kept: `var_dir`, else VAR_DIR (the project's, when set),
    else ./var."""
    return Path(var_dir or os.environ.get("VAR_DIR") or "var") / CACHE_NAME


def choose(
    device: str = "cpu",
    explicit: str | None = None,
    *,
    path: Path | None = None,
    shape: dict | None = None,
    measure: Callable[[str, dict], float] = step_ms,
    check: Callable[[str, dict], str] = logits_check,
    candidates: tuple[str, ...] = CANDIDATES,
    now: float | None = None,
) -> Choice:
    """The dtype to run a model of `shape` (an HF config dict; default: probe_shape()) in:
    `explicit` when given (not "auto"), the CUDA rule on a GPU, else the fastest candidate
    that passes the logits check, measured once per machine and shape and kept in `path`
    (and in this process). fp32 is the reference."""
    if explicit and explicit != "auto":
        if explicit not in DTYPES:
            raise ValueError(f"Unknown dtype {explicit!r}; choose one of auto, "
                             f"{', '.join(DTYPES)}.")  # fmt: skip
        return Choice(explicit, "explicit", machine_key())
    if torch.device(device).type == "cuda":
        name = "bf16" if torch.cuda.is_bf16_supported() else "fp32"
        return Choice(name, "cuda", torch.cuda.get_device_name(device))
    shape = shape or probe_shape()
    key, now = f"{machine_key()} | {shape_key(shape)} | {PROBE}", now or time.time()
    cached = (jsonfile.read(path) if path is not None else _MEMO).get(key)
    if cached:
        try:
            choice = Choice(**cached)
        except TypeError:
            choice = None
        if (choice and choice.dtype in DTYPES and choice.dtype not in choice.failed
                and now - choice.measured_at <= MAX_AGE_S):  # fmt: skip
            return Choice(**{**asdict(choice), "why": "cached"})
    times: dict[str, float] = {}
    failed: dict[str, str] = {}
    for name in candidates:
        problem = check(name, shape)
        if problem:
            failed[name] = problem
            continue
        times[name] = round(measure(name, shape), 3)
    if not times:
        times["fp32"] = round(measure("fp32", shape), 3)
        failed.pop("fp32", None)
    best = min((t, n) for n, t in times.items())[1]
    choice = Choice(best, "measured", key, times, failed, now)
    _MEMO[key] = asdict(choice)
    if path is not None:
        jsonfile.write(path, {**jsonfile.read(path), key: asdict(choice)})
    return choice


_MEMO: dict[str, dict] = {}  # this process's choices, by machine and shape
_REFERENCE: dict[str, torch.Tensor] = {}  # the logits check's fp32 logits, by shape
