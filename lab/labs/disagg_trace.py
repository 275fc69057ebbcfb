"""The disaggregation lab's load and arithmetic: the seeded trace both modes run, the KV
bytes a handoff carries, the stall fit, and what a mode's replies measured (TTFT, TPOT, the
stalls prefills cause and the transfers). Plain Python over the workers' JSON replies."""

from __future__ import annotations

import bisect
import itertools
import math
import statistics
from dataclasses import dataclass

import torch

from lab.labs.calibration import CalibrationError, fitted_rate
from lab.labs.common import bundled_shape
from lab.labs.formulas import kv_bytes_per_token

FIRST_TOKEN_ID = 3  # ids 0..2 are <|bos|>, <|eos|>, <|pad|>
LEAD_S = 0.3
DTYPE_BYTES = 4  # the workers load the bundled weights in fp32


@dataclass(frozen=True)
class Request:
    id: int  # arrival order
    kind: str  # long | decode
    arrival_s: float  # after the trace starts
    prompt: list[int]
    max_tokens: int

    def as_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind, "arrival_s": self.arrival_s,
                "prompt": self.prompt, "max_tokens": self.max_tokens}  # fmt: skip


def trace(p: dict) -> list[Request]:
    """Long prompts (lengths uniform in [long_min, long_max]) and steady decodes (short
    prompt, long output), each a Poisson stream at its rate; seeded, the same in both modes."""
    gen = torch.Generator().manual_seed(p["seed"])
    vocab = bundled_shape("target")["vocab_size"]

    def arrivals(n: int, rate: float) -> list[float]:
        gaps = torch.empty(n).exponential_(rate, generator=gen).tolist()
        return [sum(gaps[: i + 1]) - gaps[0] for i in range(n)]  # the first at 0

    def ids(n: int) -> list[int]:
        return torch.randint(FIRST_TOKEN_ID, vocab, (n,), generator=gen).tolist()

    longs = [("long", t, int(torch.randint(p["long_min"], p["long_max"] + 1, (1,),
                                            generator=gen)), p["long_output"])
             for t in arrivals(p["long_prompts"], p["long_rate"])]  # fmt: skip
    decodes = [("decode", t, p["decode_prompt"], p["decode_output"])
               for t in arrivals(p["decodes"], p["decode_rate"])]  # fmt: skip
    # long prompts start LEAD_S after the first decode, so that they find decodes running
    longs = [(k, t + LEAD_S, n, m) for k, t, n, m in longs]
    rows = sorted(longs + decodes, key=lambda r: (r[1], r[0]))
    return [Request(i, kind, round(t, 6), ids(n), m) for i, (kind, t, n, m) in enumerate(rows)]


def kv_bytes(tokens: int) -> int:
    """Bytes of K and V a handoff carries for `tokens` prompt tokens: 2 × layers ×
    kv_heads × head_dim × dtype bytes × tokens (the frame's KV part, header apart)."""
    s = bundled_shape("target")
    per_token = kv_bytes_per_token(s["num_hidden_layers"], s["num_key_value_heads"],
                                   s["head_dim"], DTYPE_BYTES)  # fmt: skip
    return int(per_token) * tokens


def percentile(values: list[float], q: float) -> float:
    """The q-th percentile (nearest rank on sorted values, as vLLM's benchmark reports)."""
    xs = sorted(values)
    return xs[min(len(xs) - 1, max(0, math.ceil(q / 100 * len(xs)) - 1))]


@dataclass(frozen=True)
class StallTable:
    """The stall (CPU ms) a prefill of n tokens adds to a decode step it joins: timed at a
    few lengths, linear between them (the cost is not a smooth curve on a CPU: attention's
    working set crosses cache sizes), summed over the prefills of one step."""

    lengths: list[int]
    median_ms: list[float]

    def one_ms(self, n: int) -> float:
        xs, ys = self.lengths, self.median_ms
        i = min(max(bisect.bisect_left(xs, n), 1), len(xs) - 1)  # the segment holding n
        return ys[i - 1] + (n - xs[i - 1]) * (ys[i] - ys[i - 1]) / (xs[i] - xs[i - 1])

    def stall_ms(self, prompts: list[int]) -> float:
        return sum(self.one_ms(n) for n in prompts)

    def describe(self) -> str:
        timed = ", ".join(f"{n}: {m:.1f} ms" for n, m in zip(self.lengths, self.median_ms,
                                                             strict=True))  # fmt: skip
        return ("stall (CPU ms) of a decode step a prefill joins, timed with both processes "
                f"busy at (prompt tokens: median) {timed}; linear between them")  # fmt: skip


def stall_table(lengths: list[int], rounds: list[list[list[float]]], flops_per_token: float,
                warmup: int = 1) -> StallTable:  # fmt: skip
    """Median (mixed − plain) step CPU ms per length (rounds of [plain ms, mixed ms, plain
    CPU ms, mixed CPU ms] per length), warm-up rounds dropped. Each segment's
    cost per token is bound-checked as a FLOP rate (a longer prefill that stalled less
    means disturbed timings): CalibrationError, never clamped."""
    kept = rounds[warmup:]
    medians = [statistics.median(r[i][3] - r[i][2] for r in kept) for i in range(len(lengths))]
    if len(set(lengths)) != len(lengths) or len(lengths) < 2 or lengths != sorted(lengths):
        raise CalibrationError("The stall was timed at fewer than 2 distinct lengths.")
    if medians[0] <= 0:
        raise CalibrationError(
            f"A {lengths[0]}-token prefill did not slow the decode step it joined "
            f"({medians[0]:.2f} ms): the timings were disturbed. No prediction is drawn; run "
            "again on a quieter machine.")  # fmt: skip
    for (n0, m0), (n1, m1) in itertools.pairwise(zip(lengths, medians, strict=True)):
        per_token_s = (m1 - m0) / (n1 - n0) / 1000
        fitted_rate(per_token_s / flops_per_token, "cpu",
                    f"prefill cost per token between {n0} and {n1} tokens (FLOP/s)")  # fmt: skip
    return StallTable(list(lengths), medians)


def latencies(requests: list[Request], t0: float, times: dict[int, list[float]]
              ) -> dict[int, tuple[float, float | None, list[float]]]:  # fmt: skip
    """{request id: (TTFT ms, TPOT ms, ITL ms list)} from each request's token times
    (perf_counter s); RuntimeError when a request did not produce all its tokens."""
    out = {}
    for r in requests:
        ts = times.get(r.id, [])
        if len(ts) != r.max_tokens:
            raise RuntimeError(f"Request {r.id} produced {len(ts)} of its {r.max_tokens} "
                               "tokens; the engine processes lost it.")  # fmt: skip
        ttft = (ts[0] - (t0 + r.arrival_s)) * 1000
        tpot = (ts[-1] - ts[0]) * 1000 / (len(ts) - 1) if len(ts) > 1 else None
        out[r.id] = (ttft, tpot, [(b - a) * 1000 for a, b in itertools.pairwise(ts)])
    return out


def plain_step_ms(steps: list[dict], key: str = "cpu_ms") -> dict[int, float]:
    """Median `key` (cpu_ms or ms) of the decode-only steps, by how many they decoded."""
    by: dict[int, list[float]] = {}
    for s in steps:
        if s["prefill_tokens"] == 0 and s["decodes"] > 0:
            by.setdefault(s["decodes"], []).append(s[key])
    return {k: statistics.median(v) for k, v in by.items()}


def stalls(steps: list[dict], prompt_len: dict[int, int]) -> list[dict]:
    """Each step where prefills joined running decodes: its CPU ms above a plain decode
    step's of the same batch (nearest batch measured when that one never ran alone) — the
    work the prefill added — and its wall ms above a plain step's (what the decodes waited,
    including any time the OS gave the core to another process)."""
    plain, plain_wall = plain_step_ms(steps), plain_step_ms(steps, "ms")
    out = []
    for s in steps:
        if not (s["prefilled"] and s["decodes"] and plain):
            continue
        batch = min(plain, key=lambda b: (abs(b - s["decodes"]), b))
        out.append({**s, "stall_ms": s["cpu_ms"] - plain[batch], "plain_ms": plain[batch],
                    "wall_stall_ms": s["ms"] - plain_wall[batch],
                    "prompts": [prompt_len[i] for i in s["prefilled"]]})  # fmt: skip
    return out


def off_cpu_pct(steps: list[dict]) -> float:
    """% of the steps' wall time their thread was not on a CPU (another process had it)."""
    wall = sum(s["ms"] for s in steps)
    return max(0.0, 100 * (1 - sum(s["cpu_ms"] for s in steps) / wall)) if wall else 0.0
