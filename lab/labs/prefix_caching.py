"""Prefix caching in a multi-turn chat: TTFT per turn with the cache on, off, and silently
defeated by a timestamp at the top of the system prompt.

Every turn's prompt is the whole conversation so far plus a new user message; the engine
answers with a few greedy tokens. With prefix caching on, the KV of the previous turn (its
prompt and all but the last answer token, whose KV is never computed) is found again, but
only in *full* blocks: the predicted hit is floor(shared / block_size) * block_size tokens,
capped so the prompt's last token is always computed. A timestamp that changes every turn
sits in the first block, so every later block hashes differently: the cache is on and
misses anyway. TTFT is modelled as a + b * uncached tokens, calibrated on turn 1.
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
from lab.labs.common import bundled_shape, random_model, tokenizer
from lab.labs.formulas import prefix_hit_tokens

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
        "tokens, with a (one step's fixed cost) and b (ms per prompt token) calibrated on the "
        "first turn of the cache-off chat."
    )
    topics = ("prompt-caching", "paged-attention", "prefill-decode")
    params = (
        Param("turns", "Turns", "int", 8, min=2, max=16),
        Param("system_tokens", "System prompt", "int", 128, min=1, max=256, unit="tokens"),
        Param("user_tokens", "User message", "int", 24, min=1, max=128, unit="tokens"),
        Param("answer_tokens", "Answer", "int", 8, min=1, max=64, unit="tokens",
              help="greedy tokens generated per turn"),
        Param("block_size", "Block size", "int", 16, min=1, max=64, unit="tokens"),
        Param("repeats", "Chats per condition", "int", 3, min=1, max=5,
              help="each on a fresh engine; the median TTFT per turn is plotted"),
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
        chats = {c: [_Chat(model, plan, c, p) for _ in range(p["repeats"])]
                 for c in CONDITIONS}  # fmt: skip
        _Chat(model, plan, "cache-off", p).turn(1)  # warm-up, discarded
        hits_pred = {c: predicted_hits(plan, c, p["block_size"]) for c in CONDITIONS}
        fit: tuple[float, float] | None = None
        for turn in range(1, p["turns"] + 1):
            results = {}
            for condition in CONDITIONS:  # interleaved, so load changes hit all alike
                runs = []
                for chat in chats[condition]:
                    ctx.check_cancel()
                    runs.append(chat.turn(turn))
                results[condition] = runs
            if fit is None:  # calibrate on turn 1 of the cache-off chats
                off = results["cache-off"]
                step_ms = statistics.median(r.decode_step_ms for r in off)
                per_token = (statistics.median(r.ttft_ms for r in off) - step_ms) / max(
                    off[0].computed_tokens, 1
                )
                fit = (step_ms, max(per_token, 0.0))
                ctx.summary["step_ms"] = step_ms
                ctx.summary["ms_per_token"] = fit[1]
            yield from self._points(turn, plan, results, hits_pred, fit, ctx)

    def _points(self, turn, plan, results, hits_pred, fit, ctx) -> Iterator[Point]:
        step_ms, per_token = fit
        for condition, runs in results.items():
            hits = runs[0].hit_tokens
            predicted_hit = hits_pred[condition][turn - 1]
            prompt_len = plan.prompt_len(condition, turn)
            predicted_ms = step_ms + per_token * (prompt_len - predicted_hit)
            ttft = statistics.median(r.ttft_ms for r in runs)
            extra = {
                "predicted": predicted_ms,
                "prompt_tokens": prompt_len,
                "prefix_hit_tokens": hits,
                "predicted_hit_tokens": predicted_hit,
                "computed_tokens": runs[0].computed_tokens,
                "block_hits": runs[0].block_hits,
                "block_misses": runs[0].block_misses,
            }
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


@dataclass
class TurnResult:
    ttft_ms: float
    decode_step_ms: float
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
        decode = [s["ms"] for s in self.engine.step_log[steps_before + 1 :]]
        return TurnResult(
            ttft_ms=metrics["ttft_ms"],
            decode_step_ms=statistics.median(decode) if decode else 0.0,
            hit_tokens=after["prefix_hit_tokens"] - before["prefix_hit_tokens"],
            block_hits=after["prefix_hits"] - before["prefix_hits"],
            block_misses=after["prefix_misses"] - before["prefix_misses"],
            computed_tokens=self.engine.step_log[steps_before]["prefill_tokens"],
        )


LAB = PrefixCaching()
