"""Cancellation: the decode work and KV a departed client keeps burning.

Several requests decode together; one client (the "departed" one, asking for max_tokens)
stops reading after k tokens. The naive server never tells the scheduler, so the engine
decodes that sequence to max_tokens for nobody. The aborting server calls engine.abort(id)
as soon as it learns of the disconnect, which frees the sequence's slot and KV blocks at
once. Two ways to learn of it: "next-token" (the server notices when writing the next token
fails, as an ASGI server does: one token is wasted) or "immediate" (a disconnect callback
fires before the next step: none is).

Measured per step after the disconnect: the departed sequence's tokens (counted from the
engine), the KV blocks it holds (its block table), the engine's allocated blocks before and
after the abort (block manager stats) and the wall time of the steps that carried it.
Predicted: naive wastes max_tokens - k tokens; abort wastes 1 (next-token) or 0.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import torch

from lab.engine.config import EngineConfig
from lab.engine.engine import LLMEngine
from lab.engine.sampler import SamplingParams
from lab.labs.base import Chart, Lab, Param, Point, RunContext, Series
from lab.labs.common import bundled_shape, random_model, sync

# What each prediction claims (lab/labs/verdicts.py; docs/LABS.md): exact counts, or the
# band an estimate or a bound's noise allowance may use. One place, re-checked after
# engine work.
BANDS = {"naive-predicted": 0, "abort-predicted": 0}

MODES = ("naive", "abort")
LAG = {"next-token": 1, "immediate": 0}  # tokens the aborting server still lets through


def workload(params: dict) -> list[int]:
    """max_tokens per request: the departed client (first) asks for max_tokens; the others
    stay to the end and ask for a seeded random number in [k + 1, others_max_tokens]."""
    rng = random.Random(params["seed"])
    low, high = params["disconnect_after"] + 1, params["others_max_tokens"]
    return [params["max_tokens"]] + [rng.randint(low, high) for _ in range(params["requests"] - 1)]


def predicted_wasted(params: dict, mode: str) -> int:
    """Tokens generated for the departed client after it stopped reading."""
    if mode == "naive":
        return params["max_tokens"] - params["disconnect_after"]
    return LAG[params["detect"]]


def steps_after_disconnect(params: dict, mode: str) -> int:
    """Engine steps from the disconnect to the end of the run."""
    tokens = workload(params)
    last = max(tokens if mode == "naive" else tokens[1:] or [0])
    return max(last - params["disconnect_after"], predicted_wasted(params, mode))


class Cancellation(Lab):
    slug = "cancellation"
    title = "Cancellation: tokens and KV burned after a client leaves"
    summary = (
        "Several requests decode together on the engine; one client stops reading after "
        "k tokens. A naive server never tells the scheduler, so the engine decodes that "
        "sequence to max_tokens for nobody, holding its batch slot and a growing set of KV "
        "blocks. A server that aborts calls engine.abort(id) once it learns of the "
        "disconnect: the sequence leaves the next step and its blocks return to the free "
        "list at once. The chart counts the departed client's tokens after it left, step by "
        "step (right axis: the KV blocks it still holds). Predicted: the naive server wastes "
        "max_tokens − k tokens, the aborting one one token (the write that fails) or none."
    )
    topics = ("cancellation", "timeouts-retries")
    params = (
        Param("requests", "Concurrent requests", "int", 8, min=1, max=64),
        Param("max_tokens", "Departed client's max_tokens", "int", 256, min=2, max=480,
              unit="tokens"),
        Param("others_max_tokens", "Other clients' max_tokens (at most)", "int", 128, min=2,
              max=480, unit="tokens", help="each of the others asks for a random length "
              "between k + 1 and this"),
        Param("disconnect_after", "Client leaves after", "int", 32, min=1, max=479,
              unit="tokens"),
        Param("prompt_tokens", "Prompt length", "int", 32, min=1, max=256, unit="tokens"),
        Param("detect", "Server learns of it", "choice", "next-token",
              choices=tuple(LAG), help="next-token: when writing the next token fails; "
              "immediate: a disconnect callback before the next step"),
        Param("block_size", "KV block size", "int", 16, min=1, max=128, unit="tokens"),
        Param("seed", "Workload seed", "int", 0, min=0, max=2**31 - 1),
    )  # fmt: skip
    series = (
        Series("naive", "No cancellation: wasted tokens (measured)"),
        Series(
            "naive-predicted",
            "No cancellation predicted",
            "predicted",
            predicts="naive",
            mode="lines",
            claim="exact",
            band=BANDS["naive-predicted"],
        ),
        Series("abort", "engine.abort(): wasted tokens (measured)"),
        Series(
            "abort-predicted",
            "engine.abort() predicted",
            "predicted",
            predicts="abort",
            mode="lines",
            claim="exact",
            band=BANDS["abort-predicted"],
        ),
        Series("naive-blocks", "No cancellation: KV blocks held", axis="y2", mode="lines"),
        Series("abort-blocks", "engine.abort(): KV blocks held", axis="y2", mode="lines"),
    )
    chart = Chart("engine steps since the client left", "tokens generated for nobody",
                  y2_title="KV blocks the departed request holds")  # fmt: skip
    time_limit_s = 120

    def check(self, params: dict) -> dict[str, str]:
        errors = {}
        if params["disconnect_after"] >= params["max_tokens"]:
            errors["disconnect_after"] = "must be smaller than max_tokens"
        elif params["disconnect_after"] >= params["others_max_tokens"]:
            errors["disconnect_after"] = "must be smaller than the other clients' max_tokens"
        if params["others_max_tokens"] > params["max_tokens"]:
            errors["others_max_tokens"] = "must be at most the departed client's max_tokens"
        limit = bundled_shape()["max_position_embeddings"]
        if params["prompt_tokens"] + params["max_tokens"] > limit:
            errors["max_tokens"] = f"prompt + max_tokens must fit the context ({limit} tokens)"
        return errors

    def predict(self, params: dict) -> list[Point]:
        points = []
        for mode in MODES:
            wasted = predicted_wasted(params, mode)
            for x in sorted({0, wasted, steps_after_disconnect(params, mode)}):
                points.append(Point(f"{mode}-predicted", x, min(x, wasted)))
        return points

    def run(self, ctx: RunContext) -> Iterator[Point]:
        p = ctx.params
        shape = bundled_shape("target")
        model = random_model(shape, ctx.device)
        gen = torch.Generator().manual_seed(p["seed"])
        prompts = [
            torch.randint(3, shape["vocab_size"], (p["prompt_tokens"],), generator=gen).tolist()
            for _ in range(p["requests"])
        ]
        for mode in MODES:
            yield from self._serve(ctx, model, prompts, mode)
        s = ctx.summary
        s["tokens_saved"] = s["naive_wasted_tokens"] - s["abort_wasted_tokens"]
        s["seconds_saved"] = s["naive_total_s"] - s["abort_total_s"]

    def _serve(self, ctx: RunContext, model, prompts: list[list[int]], mode: str):
        """Serve every request to the end; the departed client's tokens counted after it left."""
        p = ctx.params
        engine = _engine(model, p, len(prompts))
        ids = [
            engine.add_request(prompt, SamplingParams(temperature=0, max_tokens=n, ignore_eos=True))
            for prompt, n in zip(prompts, workload(p), strict=True)
        ]
        departed = engine.requests[ids[0]].seq
        lag = LAG[p["detect"]] if mode == "abort" else None  # None: nobody tells the engine
        predicted = predicted_wasted(p, mode)
        start = time.perf_counter()
        left_at = left_time = None  # tokens generated / clock when the client left
        step = carried_steps = 0
        carried_s = alone_s = 0.0
        while engine.has_unfinished():
            due = lag is not None and left_at is not None and not departed.is_done
            if due and departed.num_generated_tokens - left_at >= lag:
                ctx.summary.update(_abort(engine, ids[0]))
                if not engine.has_unfinished():
                    break
            carried = left_at is not None and not departed.is_done
            alone = carried and len(engine.scheduler.running) == 1
            sync(ctx.device)
            t0 = time.perf_counter()
            engine.step()
            sync(ctx.device)
            ctx.check_cancel()
            took = time.perf_counter() - t0
            if carried:
                carried_steps += 1
                carried_s += took
                alone_s += took if alone else 0.0
            if left_at is None:
                if departed.num_generated_tokens >= p["disconnect_after"]:  # read k: gone
                    left_at, left_time = departed.num_generated_tokens, time.perf_counter()
                    yield from self._points(mode, 0, 0, departed, 0.0, 0)
                continue
            step += 1
            wasted = departed.num_generated_tokens - left_at
            since = time.perf_counter() - left_time
            yield from self._points(mode, step, wasted, departed, since, min(step, predicted))
        ctx.summary.update(
            {
                f"{mode}_wasted_tokens": departed.num_generated_tokens - left_at,
                f"{mode}_predicted_wasted_tokens": predicted,
                f"{mode}_steps_carrying_departed": carried_steps,
                f"{mode}_departed_step_s": carried_s,
                f"{mode}_departed_alone_s": alone_s,
                f"{mode}_total_s": time.perf_counter() - start,
                f"{mode}_steps_after_disconnect": step,
                "kv_bytes_per_block": engine.kv_bytes_per_token() * p["block_size"],
            }
        )

    @staticmethod
    def _points(
        mode: str, step: int, wasted: int, ghost, seconds: float, predicted: int
    ) -> Iterator[Point]:
        extra = {"seconds_since_disconnect": seconds, "status": ghost.status.value}
        yield Point(mode, step, wasted, {**extra, "predicted": predicted})
        yield Point(f"{mode}-blocks", step, len(ghost.block_table), extra)


def _engine(model, p: dict, num_requests: int) -> LLMEngine:
    return LLMEngine(
        model,
        EngineConfig(
            block_size=p["block_size"],
            max_model_len=p["prompt_tokens"] + p["max_tokens"],
            max_num_seqs=num_requests,
            max_num_batched_tokens=num_requests * (p["prompt_tokens"] + 1),
            enable_prefix_caching=False,
        ),
    )


def _abort(engine: LLMEngine, request_id: int) -> dict:
    """engine.abort(); the departed sequence's blocks and the engine's blocks in use around
    it, from the block manager."""
    held = len(engine.requests[request_id].seq.block_table)
    before = engine.manager.stats()["allocated_blocks"]
    engine.abort(request_id)
    after = engine.manager.stats()["allocated_blocks"]
    return {"abort_blocks_held": held, "blocks_before_abort": before,
            "blocks_after_abort": after}  # fmt: skip


LAB = Cancellation()
