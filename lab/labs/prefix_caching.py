"""Prefix caching in a multi-turn chat: TTFT per turn with the cache on, off, and silently
defeated by a timestamp at the top of the system prompt.

Every turn's prompt is the whole conversation so far plus a new user message; the engine
answers with a few greedy tokens. With prefix caching on, the KV of the previous turn (its
prompt and all but the last answer token, whose KV is never computed) is found again, but
only in *full* blocks: the predicted hit is floor(shared / block_size) * block_size tokens,
capped so the prompt's last token is always computed. A timestamp that changes every turn
sits in the first block, so every later block hashes differently: the cache is on and
misses anyway.

TTFT is modelled as a + b * computed tokens + c * attended (query, key) pairs: a fixed step
cost, a cost per prompt token the step computes, and a cost per pair its attention reads
(a cache hit still attends to the cached keys). a, b and c are fitted by least squares on
prefills of a separate cache-off engine at 5 lengths spanning the chat's computed tokens,
each the median of >= 3 timings after a discarded warm-up; b is bound-checked as a FLOP rate
(calibration.fitted_rate) and a must be positive. The chats are then a prediction, not a fit.
"""

from __future__ import annotations

import statistics
from collections.abc import Iterator
from dataclasses import dataclass

import torch

from lab.engine.config import EngineConfig
from lab.engine.engine import LLMEngine
from lab.engine.sampler import SamplingParams
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.calibration import CalibrationError, fitted_rate, positive_cost
from lab.labs.common import bundled_shape, random_model, tokenizer
from lab.labs.formulas import prefix_hit_tokens
from lab.labs.two_phase import step_flops

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {
    "cache-on-predicted": 0.25,
    "cache-off-predicted": 0.25,
    "silent-miss-predicted": 0.25,
    "hit-tokens-predicted": 0,
}

CONDITIONS = ("cache-on", "cache-off", "silent-miss")
# A careless app stamps the time into the system prompt; one simulated turn every 37 s.
TIMESTAMP = "[2025-03-14 09:{:02d}:{:02d}] "
TURN_SECONDS = 37
FIRST_TOKEN_ID = 3  # ids 0..2 are <|bos|>, <|eos|>, <|pad|>


def timestamp_ids(turn: int) -> list[int]:
    """Token ids of the timestamp shown at `turn` (1-based), without <|bos|>."""
    seconds = 26 * 60 + 7 + turn * TURN_SECONDS
    text = TIMESTAMP.format(seconds // 60 % 60, seconds % 60)
    return tokenizer().encode(text, add_special_tokens=False).ids


@dataclass(frozen=True)
class ChatPlan:
    """The token ids every condition shares (answers come from the engine at run time)."""

    system: list[int]
    users: list[list[int]]
    answer_tokens: int

    def prefix(self, condition: str, turn: int) -> list[int]:
        return timestamp_ids(turn) if condition == "silent-miss" else []

    def prompt_len(self, condition: str, turn: int) -> int:
        """Prompt tokens of `turn` (1-based): prefix + system + earlier turns + new message."""
        earlier = sum(len(u) + self.answer_tokens for u in self.users[: turn - 1])
        return (
            len(self.prefix(condition, turn))
            + len(self.system)
            + earlier
            + len(self.users[turn - 1])
        )


def chat_plan(params: dict) -> ChatPlan:
    """Seeded random system prompt and user messages (a random model: content is moot)."""
    vocab = bundled_shape("target")["vocab_size"]
    gen = torch.Generator().manual_seed(0)

    def ids(n: int) -> list[int]:
        return torch.randint(FIRST_TOKEN_ID, vocab, (n,), generator=gen).tolist()

    users = [ids(params["user_tokens"]) for _ in range(params["turns"])]
    return ChatPlan(ids(params["system_tokens"]), users, params["answer_tokens"])


def common_prefix(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def predicted_hits(plan: ChatPlan, condition: str, block_size: int) -> list[int]:
    """Predicted prefix-hit tokens per turn. The cache holds, from each earlier turn j, its
    prompt + all answer tokens but the last; `shared` is the longest run of leading tokens
    turn t has in common with any of them (answers are unknown here, but a prompt that
    matches an earlier prompt to its end continues with that turn's answer by construction
    of the chat)."""
    if condition == "cache-off":
        return [0] * len(plan.users)
    prompts = [_skeleton(plan, condition, t) for t in range(1, len(plan.users) + 1)]
    hits = []
    for t, prompt in enumerate(prompts):
        shared = 0
        for earlier in prompts[:t]:
            same = common_prefix(prompt, earlier)
            cached = len(earlier) + plan.answer_tokens - 1
            shared = max(shared, cached if same == len(earlier) else same)
        hits.append(prefix_hit_tokens(shared, len(prompt), block_size))
    return hits


def _skeleton(plan: ChatPlan, condition: str, turn: int) -> list[int]:
    """Turn's prompt with each earlier answer as placeholders (-1): lengths and prefixes
    are exact, answer contents are not needed for the prediction."""
    tokens = plan.prefix(condition, turn) + list(plan.system)
    for user in plan.users[: turn - 1]:
        tokens += user + [-1] * plan.answer_tokens
    return tokens + plan.users[turn - 1]


class PrefixCaching(Lab):
    slug = "prefix-caching"
    title = "Prefix caching: TTFT of a multi-turn chat, and the silent miss"
    summary = (
        "A chat where each turn sends the whole conversation so far plus a new message. "
        "With prefix caching on, the previous turns' KV is reused in full blocks, so TTFT "
        "stays flat while the prompt grows; off, TTFT grows with the conversation. The third "
        "curve has caching on but a timestamp at the top of the system prompt that changes "
        "every turn: the first block differs, so every block after it misses (the fix: keep "
        "the start of the prompt stable and put what changes after it). Predicted hits "
        "are floor(shared / block size) × block size; predicted TTFT = a + b × uncached "
        "tokens + c × attended pairs (a hit still attends to the cached keys), with a (one "
        "step's fixed cost), b (per computed token) and c (per query-key pair) fitted first "
        "on cache-off prefills at 5 lengths, each the median of the repeats after a "
        "discarded warm-up."
    )
    topics = ("prompt-caching", "paged-attention", "prefill-decode")
    params = (
        Param("turns", "Turns", "int", 8, min=2, max=16),
        Param("system_tokens", "System prompt", "int", 128, min=1, max=256, unit="tokens"),
        Param("user_tokens", "User message", "int", 24, min=1, max=128, unit="tokens"),
        Param("answer_tokens", "Answer", "int", 8, min=1, max=64, unit="tokens",
              help="greedy tokens generated per turn"),
        Param("block_size", "Block size", "int", 16, min=1, max=64, unit="tokens"),
        Param("repeats", "Chats per condition", "int", 3, min=3, max=5,
              help="each on a fresh engine; the median TTFT per turn is plotted, the "
                   "spread drawn; also the timings per calibration length"),
    )  # fmt: skip
    series = (
        Series("cache-on", "TTFT, caching on"),
        Series("cache-on-predicted", "TTFT on, predicted", "predicted", predicts="cache-on",
               mode="lines", claim="estimate", band=BANDS["cache-on-predicted"]),
        Series("cache-off", "TTFT, caching off"),
        Series("cache-off-predicted", "TTFT off, predicted", "predicted",
               predicts="cache-off", mode="lines",
               claim="estimate", band=BANDS["cache-off-predicted"]),
        Series("silent-miss", "TTFT, on + timestamp (silent miss)"),
        Series("silent-miss-predicted", "TTFT silent miss, predicted", "predicted",
               predicts="silent-miss", mode="lines",
               claim="estimate", band=BANDS["silent-miss-predicted"]),
        Series("hit-tokens", "prefix-hit tokens, caching on", axis="y2"),
        Series("hit-tokens-predicted", "prefix-hit tokens, predicted", "predicted",
               predicts="hit-tokens", axis="y2", mode="lines",
               claim="exact", band=BANDS["hit-tokens-predicted"]),
        Series("silent-hit-tokens", "prefix-hit tokens, silent miss", axis="y2"),
    )  # fmt: skip
    chart = Chart("turn", "TTFT (ms)", y2_title="prefix-hit tokens")
    time_limit_s = 120

    def check(self, params: dict) -> dict[str, str]:
        limit = bundled_shape("target")["max_position_embeddings"]
        plan = chat_plan(params)
        longest = max(plan.prompt_len("silent-miss", params["turns"]),
                      plan.prompt_len("cache-on", params["turns"]))  # fmt: skip
        if longest + params["answer_tokens"] > limit:
            return {
                "turns": f"the last turn needs {longest + params['answer_tokens']} tokens, "
                f"more than the model's {limit}-token context; use fewer turns or "
                "shorter messages"
            }
        return {}

    def predict(self, params: dict) -> list[Point]:
        plan = chat_plan(params)
        return [
            Point("hit-tokens-predicted", turn, hits)
            for turn, hits in enumerate(predicted_hits(plan, "cache-on", params["block_size"]), 1)
        ]

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        plan = chat_plan(p)
        model = random_model(bundled_shape("target"), ctx.device)
        hits_pred = {c: predicted_hits(plan, c, p["block_size"]) for c in CONDITIONS}
        computed = [plan.prompt_len(c, t) - hits_pred[c][t - 1]
                    for c in CONDITIONS for t in range(1, p["turns"] + 1)]  # fmt: skip
        longest = max(plan.prompt_len(c, p["turns"]) for c in CONDITIONS)
        design = calibration_design(computed, longest, p["block_size"])
        fit = calibrate(model, design, p, ctx)
        ctx.summary.update({
            "step_ms": fit.step_ms, "per_token_ms": fit.per_token_ms,
            "per_pair_ms": fit.per_pair_ms,
            "calibration": fit.describe(model),
            "warmup": "discarded, not plotted: the first round of calibration prefills; "
                      f"each chat point is the median of "
                      f"{p['repeats']} chats, min … max drawn as error bars",
        })  # fmt: skip
        chats = {c: [_Chat(model, plan, c, p) for _ in range(p["repeats"])]
                 for c in CONDITIONS}  # fmt: skip
        for turn in range(1, p["turns"] + 1):
            results = {}
            for condition in CONDITIONS:  # interleaved, so load changes hit all alike
                runs = []
                for chat in chats[condition]:
                    ctx.check_cancel()
                    runs.append(chat.turn(turn))
                results[condition] = runs
            yield from self._points(turn, plan, results, hits_pred, fit, ctx)

    def _points(self, turn, plan, results, hits_pred, fit, ctx) -> Iterator[Point]:
        for condition, runs in results.items():
            hits = runs[0].hit_tokens
            predicted_hit = hits_pred[condition][turn - 1]
            prompt_len = plan.prompt_len(condition, turn)
            predicted_ms = fit.ttft_ms(prompt_len - predicted_hit,
                                       attended_pairs(predicted_hit, prompt_len))  # fmt: skip
            ttfts = [r.ttft_ms for r in runs]
            ttft = statistics.median(ttfts)
            extra = {
                "predicted": predicted_ms,
                "lo": min(ttfts), "hi": max(ttfts), "repeats": len(ttfts),
                "prompt_tokens": prompt_len,
                "prefix_hit_tokens": hits,
                "predicted_hit_tokens": predicted_hit,
                "computed_tokens": runs[0].computed_tokens,
                "block_hits": runs[0].block_hits,
                "block_misses": runs[0].block_misses,
            }  # fmt: skip
            yield Point(condition, turn, ttft, extra)
            yield Point(f"{condition}-predicted", turn, predicted_ms)
            if condition == "cache-on":
                yield Point("hit-tokens", turn, hits, {"predicted": predicted_hit})
            elif condition == "silent-miss":
                yield Point("silent-hit-tokens", turn, hits, {"predicted": predicted_hit})
            key = condition.replace("-", "_")
            ctx.summary[f"{key}_ttft_ms_last_turn"] = ttft
            ctx.summary[f"{key}_hit_tokens_total"] = (
                ctx.summary.get(f"{key}_hit_tokens_total", 0) + hits
            )
        on, off = (ctx.summary[f"{c}_ttft_ms_last_turn"] for c in ("cache_on", "cache_off"))
        ctx.summary["on_over_off_last_turn"] = on / off if off else None


def attended_pairs(hit_tokens: int, prompt_tokens: int) -> float:
    """(query, key) pairs a prefill attends when it computes tokens hit+1 … prompt, each
    over itself and every token before it (cached ones included)."""
    computed = prompt_tokens - hit_tokens
    return computed * (hit_tokens + prompt_tokens + 1) / 2


def calibration_design(computed: list[int], max_prompt: int, block_size: int,
                       count: int = 4) -> list[tuple[int, int]]:  # fmt: skip
    """(cached prefix, prompt) pairs the calibration times: `count` cache-off prompts spread
    over the computed tokens the chats need (from a quarter of the longest when they barely
    vary), and two short suffixes over a long cached prefix, so the per-token and per-pair
    costs are told apart (on cache-off prompts alone pairs grow as tokens², near-collinear)."""
    hi = max(max(computed), 2)
    lo = min(computed) if hi - min(computed) >= count else max(1, hi // 4)
    design = {(0, round(lo + (hi - lo) * i / (count - 1))) for i in range(count)}
    for suffix in (lo, max(lo, (hi - lo) // 2)):  # no longer than the chat's longest prompt
        prefix = (max_prompt - suffix) // block_size * block_size
        if prefix >= block_size:
            design.add((prefix, prefix + suffix))
    return sorted(design)


@dataclass(frozen=True)
class PrefillFit:
    """TTFT = step_ms + per_token_ms × computed tokens + per_pair_ms × attended pairs."""

    step_ms: float
    per_token_ms: float
    per_pair_ms: float  # 0 when the timings showed no cost per pair
    design: list[tuple[int, int]]  # (cached prefix, prompt) timed
    median_ms: list[float]

    def ttft_ms(self, computed_tokens: int, pairs: float) -> float:
        return self.step_ms + self.per_token_ms * computed_tokens + self.per_pair_ms * pairs

    def describe(self, model) -> str:
        pair = (f"{self.per_pair_ms * 1e6:.0f} ns per attended pair" if self.per_pair_ms
                else "no per-pair term (the fit found none)")  # fmt: skip
        rows = zip(self.design, self.median_ms, strict=True)
        timed = ", ".join(f"{p - h}{f'+{h} cached' if h else ''}: {m:.2f} ms"
                          for (h, p), m in rows)  # fmt: skip
        return (
            f"prefill timed at (computed tokens: median TTFT) {timed}; fitted "
            f"{self.step_ms:.2f} ms per step + {self.per_token_ms * 1000:.1f} µs per computed "
            f"token ({token_flop_s(model, self.per_token_ms) / 1e9:.1f} GFLOP/s) + {pair}"
        )


def token_flop_s(model, per_token_ms: float) -> float:
    """The FLOP rate a per-token cost implies, bound-checked like a measured one."""
    flops = step_flops(model, 1, 0, 0)  # the layers' matmuls for one token
    return fitted_rate(per_token_ms / 1000 / flops, "cpu", "prefill cost per token (FLOP/s)")


def fit_prefill(design: list[tuple[int, int]], median_ms: list[float]) -> tuple[float, ...]:
    """Least-squares (a, b, c) of ms = a + b × computed + c × pairs over the timed
    (cached, prompt) pairs, on relative residuals (a 5 ms prefill fitted as closely as a
    100 ms one: the chat's cache hits are short); without the pair term when it comes out
    negative (noise, or no cost per pair to see)."""
    ms = torch.tensor(median_ms, dtype=torch.float64).unsqueeze(1)
    cols = torch.tensor([[1.0, p - h, attended_pairs(h, p)] for h, p in design],
                        dtype=torch.float64)  # fmt: skip
    weight = 1 / ms.clamp(min=1e-6)  # relative residuals: a short prefill counts as much
    for k in (3, 2):
        if len(design) < k:
            continue
        coef = torch.linalg.lstsq(cols[:, :k] * weight, ms * weight).solution
        coef = coef.squeeze(1).tolist()
        if k == 2 or coef[2] >= 0:
            return coef[0], coef[1], coef[2] if k == 3 else 0.0
    raise CalibrationError("Prefill was timed at fewer than 2 lengths; nothing to fit.")


def calibrate(model, design: list[tuple[int, int]], p: dict, ctx: RunContext) -> PrefillFit:
    """Time prefills (TTFT, as the chats measure it) of every (cached prefix, prompt) in
    `design` on one prefix-caching engine, round-robin so a burst of load hits all alike:
    one discarded warm-up round, then at least 5 (and p["repeats"]) timed; fit and check."""
    max_len, bs = model.config.max_position_embeddings, p["block_size"]
    engine = LLMEngine(model, EngineConfig(
        block_size=bs, num_blocks=4 * (-(-max_len // bs) + 1), max_model_len=max_len,
        max_num_seqs=1, max_num_batched_tokens=max_len, enable_prefix_caching=True))  # fmt: skip
    params = SamplingParams(temperature=0, max_tokens=1, ignore_eos=True)
    gen = torch.Generator().manual_seed(3)
    vocab = model.config.vocab_size
    prefix = torch.randint(FIRST_TOKEN_ID, vocab, (max_len,), generator=gen).tolist()

    def ttft(cached: int, prompt: int) -> float:
        # fresh random tokens after the shared prefix: only the prefix can hit
        fresh = torch.randint(FIRST_TOKEN_ID, vocab, (prompt - cached,), generator=gen)
        rid = engine.add_request(prefix[:cached] + fresh.tolist(), params)
        while engine.has_unfinished():
            engine.step()
        return engine.metrics(rid)["ttft_ms"]

    rounds: list[list[float]] = []
    for _ in range(1 + max(5, p["repeats"])):
        ctx.check_cancel()
        rounds.append([ttft(h, n) for h, n in design])
    medians = [statistics.median(col) for col in zip(*rounds[1:], strict=True)]
    return checked_fit(model, design, medians)


def checked_fit(model, design: list[tuple[int, int]], median_ms: list[float]) -> PrefillFit:
    """PrefillFit of the timings, or CalibrationError when a cost is not physical: a fixed
    step cost ≤ 0 or a per-token cost outside the FLOP-rate bounds (never clamped)."""
    a, b, c = fit_prefill(design, median_ms)
    positive_cost(a, "fixed cost per prefill step",
                  "the short prompts did not take their share of the time")  # fmt: skip
    token_flop_s(model, b)  # refuses a non-physical per-token cost
    return PrefillFit(a, b, c, design, median_ms)


@dataclass
class TurnResult:
    ttft_ms: float
    hit_tokens: int
    block_hits: int
    block_misses: int
    computed_tokens: int  # prompt tokens the first step really computed


class _Chat:
    """One conversation on its own fresh engine (caching per condition)."""

    def __init__(self, model, plan: ChatPlan, condition: str, p: dict):
        max_len, bs = model.config.max_position_embeddings, p["block_size"]
        if condition == "silent-miss":  # every turn leaves its own chain: keep them all
            turns = range(1, p["turns"] + 1)
            num_blocks = sum(-(-(plan.prompt_len(condition, t) + plan.answer_tokens) // bs)
                             for t in turns)  # fmt: skip
        else:  # each prompt extends the last: one conversation's blocks (+ a partial one)
            num_blocks = -(-max_len // bs) + 1
        config = EngineConfig(
            block_size=bs,
            num_blocks=num_blocks,  # no eviction: hits depend on the prompts alone
            max_model_len=max_len,
            max_num_seqs=1,
            max_num_batched_tokens=max_len,  # the whole prompt in one step
            enable_prefix_caching=condition != "cache-off",
        )
        self.engine = LLMEngine(model, config)
        self.plan, self.condition = plan, condition
        self.history = list(plan.system)  # system + (user, answer) pairs so far
        self.params = SamplingParams(temperature=0, max_tokens=plan.answer_tokens,
                                     ignore_eos=True)  # fmt: skip

    def turn(self, turn: int) -> TurnResult:
        user = self.plan.users[turn - 1]
        prompt = self.plan.prefix(self.condition, turn) + self.history + user
        before = self.engine.manager.stats()
        steps_before = len(self.engine.step_log)
        rid = self.engine.add_request(prompt, self.params)
        while self.engine.has_unfinished():
            self.engine.step()
        after = self.engine.manager.stats()
        metrics = self.engine.metrics(rid)
        self.history += user + self.engine.requests[rid].seq.generated_token_ids
        return TurnResult(
            ttft_ms=metrics["ttft_ms"],
            hit_tokens=after["prefix_hit_tokens"] - before["prefix_hit_tokens"],
            block_hits=after["prefix_hits"] - before["prefix_hits"],
            block_misses=after["prefix_misses"] - before["prefix_misses"],
            computed_tokens=self.engine.step_log[steps_before]["prefill_tokens"],
        )


LAB = PrefixCaching()
